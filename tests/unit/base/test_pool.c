/*
 * test_pool.c - the compute thread pool: every part of every run runs exactly
 * once, with its own index, whoever runs it (the worker or, when the worker has
 * not started, the calling thread), also when the pool has more threads than
 * the machine has cores (workers then often miss a run) and when runs are
 * tiny, and the pool's allocation failures are clean errors.
 */
#include "test_util.h"

#include "base/base.h"

#include <pthread.h>
#include <stdatomic.h>

#define MAX_T 8
#define RUNS 4000

typedef struct job {
    int run;
    int n;
    atomic_int count[MAX_T]; // times part i ran in this run
    atomic_int bad;          // a part saw the wrong n or an index out of range
    pthread_t caller;        // the thread that called rp_pool_run
    atomic_int on_caller;    // parts i > 0 the caller ran itself
    long long work[MAX_T];   // written by part i only: each part owns its slot
} job;

static void part(void *ctx, int ith, int nth)
{
    job *j = ctx;
    if (nth != j->n || ith < 0 || ith >= nth) {
        atomic_fetch_add(&j->bad, 1);
        return;
    }
    atomic_fetch_add(&j->count[ith], 1);
    if (ith > 0 && pthread_equal(pthread_self(), j->caller))
        atomic_fetch_add(&j->on_caller, 1);
    // Some runs do a little work, so parts overlap; most are tiny, so the caller
    // often finishes part 0 before a worker has even woken up.
    long long s = 0;
    int spin = j->run % 7 == 0 ? 20000 : 10;
    for (int k = 0; k < spin; k++)
        s += (long long)k * (ith + 1);
    j->work[ith] = s;
}

static void test_every_part_once(void **state)
{
    (void)state;
    for (int n = 1; n <= MAX_T; n++) {
        rp_pool *pool = NULL;
        assert_int_equal(rp_pool_create(n, &pool), RP_OK);
        assert_int_equal(rp_pool_size(pool), n);
        static job j;
        long taken = 0; // parts of workers run by the caller: both ways are exercised
        for (int r = 0; r < RUNS; r++) {
            memset(&j, 0, sizeof(j));
            j.run = r;
            j.n = n;
            j.caller = pthread_self();
            rp_pool_run(pool, part, &j);
            taken += atomic_load(&j.on_caller);
            assert_int_equal(atomic_load(&j.bad), 0);
            for (int i = 0; i < n; i++) {
                if (atomic_load(&j.count[i]) != 1)
                    fail_msg("%d threads, run %d: part %d ran %d times", n, r, i, atomic_load(&j.count[i]));
                int spin = r % 7 == 0 ? 20000 : 10;
                long long want = 0;
                for (int k = 0; k < spin; k++)
                    want += (long long)k * (i + 1);
                assert_true(j.work[i] == want); // finished before rp_pool_run returned
            }
        }
        print_message("%d threads: %ld of %ld worker parts run by the caller\n", n, taken, (long)RUNS * (n - 1));
        rp_pool_destroy(pool);
    }
    // No pool: one part on the caller.
    static job j1;
    memset(&j1, 0, sizeof(j1));
    j1.n = 1;
    rp_pool_run(NULL, part, &j1);
    assert_int_equal(atomic_load(&j1.count[0]), 1);
    assert_int_equal(rp_pool_size(NULL), 1);
    rp_pool_destroy(NULL);
}

static void test_create_failures(void **state)
{
    (void)state;
    // Every allocation of a 4-thread pool failing in turn: an error, nothing leaked
    // (ASan checks), and a pool made after works.
    for (long k = 0; k < 8; k++) {
        rp_pool *pool = NULL;
        rp_alloc_fail_after(k, false);
        rp_status st = rp_pool_create(4, &pool);
        rp_alloc_fail_after(-1, false);
        if (st == RP_OK) {
            static job j;
            memset(&j, 0, sizeof(j));
            j.n = 4;
            rp_pool_run(pool, part, &j);
            for (int i = 0; i < 4; i++)
                assert_int_equal(atomic_load(&j.count[i]), 1);
            rp_pool_destroy(pool);
        } else {
            assert_int_equal(st, RP_ERR_NOMEM);
            assert_null(pool);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_part_once),
        cmocka_unit_test(test_create_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
