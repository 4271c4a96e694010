/*
 * pool.c - a persistent thread pool for compute kernels.
 *
 * Workers sleep on a condition variable between runs and spin briefly first,
 * since a decode step issues hundreds of short runs; a run only takes the mutex
 * and broadcasts when some worker went to sleep. The caller is worker 0.
 * Each run bumps a generation counter. Part i of a run (fn(ctx, i, n)) is taken
 * by whoever claims it first: worker i when it sees the new generation, or the
 * caller, which after its own part 0 takes every part whose worker has not
 * started. So a run never waits for a worker the OS has not scheduled (a
 * shared or oversubscribed machine: another process, the server's connection
 * threads), only for parts already under way. Kernels split work by (ith, nth)
 * only, never by timing or by which thread runs a part (per-part scratch is
 * indexed by ith), so results do not depend on scheduling.
 */
#include "base.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

// Who took part i of a run: the generation of the last run whose part i was
// claimed. Every part of run g - 1 was claimed before run g starts, so a claim
// for run g is the compare-and-swap g - 1 -> g, which a worker that saw an older
// generation can never win. One cache line each: workers claim concurrently.
typedef struct part_claim {
    _Alignas(64) atomic_uint gen;
} part_claim;

// The run's announcement (gen, fn, ctx) and the workers' completion count live on
// separate cache lines: workers spin reading the first while others write the second.
struct rp_pool {
    _Alignas(64) atomic_uint gen; // bumped for each run
    atomic_bool stop;
    rp_pool_fn fn;
    void *ctx;
    int n;
    _Alignas(64) atomic_int done;     // parts finished by workers in the current run
    _Alignas(64) atomic_int sleepers; // workers blocked (or about to block) on cv
    part_claim *claim;                // (n) index 0 unused: the caller always runs part 0
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

typedef struct worker_arg {
    rp_pool *pool;
    int ith;
} worker_arg;

static void *worker_main(void *p)
{
    worker_arg *wa = p;
    rp_pool *pool = wa->pool;
    int ith = wa->ith;
    rp_free(wa);
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&pool->gen, memory_order_acquire)) == seen && !atomic_load(&pool->stop)) {
            if (++spins < 4096) {
                __builtin_ia32_pause();
                continue;
            }
            if (spins < 8192) { // let a thread that waits for this core (the caller?) run
                sched_yield();
                continue;
            }
            // Announce before the last check (both seq_cst): a run either sees this
            // sleeper and broadcasts under the mutex, or its gen bump is seen here.
            pthread_mutex_lock(&pool->mu);
            atomic_fetch_add(&pool->sleepers, 1);
            while (atomic_load(&pool->gen) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->cv, &pool->mu);
            atomic_fetch_sub(&pool->sleepers, 1);
            pthread_mutex_unlock(&pool->mu);
            spins = 0;
        }
        if (atomic_load(&pool->stop))
            return NULL;
        seen = g;
        unsigned prev = g - 1;
        if (!atomic_compare_exchange_strong(&pool->claim[ith].gen, &prev, g))
            continue; // the caller ran this part (or a newer run began: the loop sees it)
        pool->fn(pool->ctx, ith, pool->n);
        atomic_fetch_add_explicit(&pool->done, 1, memory_order_acq_rel);
    }
}

rp_status rp_pool_create(int n_threads, rp_pool **out)
{
    *out = NULL;
    if (n_threads < 1)
        n_threads = 1;
    rp_pool *pool = rp_malloc_aligned(sizeof(*pool)); // 64-byte aligned, as its fields are
    if (!pool)
        return RP_ERR(RP_ERR_NOMEM, "thread pool: out of memory");
    memset(pool, 0, sizeof(*pool));
    pool->n = n_threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
    if (n_threads > 1) {
        pool->threads = rp_calloc((size_t)n_threads, sizeof(pthread_t));
        pool->claim = rp_malloc_aligned((size_t)n_threads * sizeof(part_claim));
        if (!pool->threads || !pool->claim)
            goto nomem;
        for (int i = 0; i < n_threads; i++)
            atomic_init(&pool->claim[i].gen, 0);
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = rp_malloc(sizeof(*wa));
        if (!wa) { // workers [1, i) run already: stop and join them
            pool->n = i;
            rp_pool_destroy(pool);
            return RP_ERR(RP_ERR_NOMEM, "thread pool: out of memory");
        }
        wa->pool = pool;
        wa->ith = i;
        if (pthread_create(&pool->threads[i], NULL, worker_main, wa) != 0) {
            rp_free(wa);
            pool->n = i; // only workers [1, i) exist
            rp_pool_destroy(pool);
            return RP_ERR(RP_ERR_NOMEM, "thread pool: cannot start thread %d", i);
        }
    }
    *out = pool;
    return RP_OK;
nomem:
    rp_free(pool->threads);
    rp_free_aligned(pool->claim);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->cv);
    rp_free_aligned(pool);
    return RP_ERR(RP_ERR_NOMEM, "thread pool: out of memory");
}

void rp_pool_destroy(rp_pool *pool)
{
    if (!pool)
        return;
    pthread_mutex_lock(&pool->mu);
    atomic_store(&pool->stop, true);
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 1; i < pool->n; i++)
        pthread_join(pool->threads[i], NULL);
    rp_free(pool->threads);
    rp_free_aligned(pool->claim);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->cv);
    rp_free_aligned(pool);
}

int rp_pool_size(const rp_pool *pool)
{
    return pool ? pool->n : 1;
}

void rp_pool_run(rp_pool *pool, rp_pool_fn fn, void *ctx)
{
    if (!pool || pool->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    atomic_store_explicit(&pool->done, 0, memory_order_relaxed);
    unsigned g = atomic_fetch_add(&pool->gen, 1) + 1; // seq_cst: ordered before the sleepers check
    if (atomic_load(&pool->sleepers) > 0) {           // spinning workers need no system call
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->cv);
        pthread_mutex_unlock(&pool->mu);
    }
    fn(ctx, 0, pool->n);
    // The parts no worker has started yet are run here: their workers are not
    // running (descheduled, asleep) or late, and waiting for them costs more.
    int by_workers = pool->n - 1;
    for (int i = 1; i < pool->n; i++) {
        unsigned prev = g - 1;
        if (atomic_compare_exchange_strong(&pool->claim[i].gen, &prev, g)) {
            fn(ctx, i, pool->n);
            by_workers--;
        }
    }
    // A worker running its part may have been preempted, its core given to a
    // thread waiting for this one: after a short spin, give the core up.
    for (int spins = 0; atomic_load_explicit(&pool->done, memory_order_acquire) < by_workers;) {
        if (++spins < 4096)
            __builtin_ia32_pause();
        else
            sched_yield();
    }
}

int rp_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
