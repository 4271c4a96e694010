/*
 * test_engine_long.c - the engine under load, on the bundled model (optimized
 * build only): 16 chat requests at once against their solo greedy text, and
 * a seeded storm of requests from eight threads over a small KV pool (so
 * requests are preempted and recomputed), with cancels and early releases
 * mixed in: every token any request emits is its solo reference's token.
 * And JSON mode on the bundled model: its answers parse.
 */
#include "test_model.h"
#include "../model/model_harness.h"

#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

#include <pthread.h>

#define REF_MAX 96
#define READ_GUARD_S 300.0

static rp_model *M, *M_REF;
static rp_tokenizer *TOK;

static const char *TEXTS[] = {
    "Who are you?",
    "Write a Python function that checks whether a string is a palindrome.",
    "Convert this JSON to a Python dict literal: {\"name\": \"Ada\", \"langs\": [\"en\", \"fr\"]}",
    "What's the weather in Paris, in celsius?",
    "Rename the function foo to bar: def foo(x): return x * 2",
    "Explain recursion to a child.",
    "Give me a JSON object with the keys city and country for Tokyo.",
    "Fix the bug: def add(a, b): return a - b",
};
#define N_TEXTS ((int)(sizeof(TEXTS) / sizeof(TEXTS[0])))

static int32_t *P[N_TEXTS];
static int NP[N_TEXTS];
static int32_t REF[N_TEXTS][REF_MAX]; // greedy continuation, ignoring end-of-generation

static bool eog(int32_t id)
{
    const rp_model_config *c = rp_model_get_config(M);
    bool stop = rp_tok_is_eog(TOK, id);
    for (int i = 0; i < c->n_eos; i++)
        stop = stop || c->eos_ids[i] == id;
    return stop;
}

static int setup(void **state)
{
    rp_model_params mp;
    rp_model_params_default(&mp);
    mp.max_batch = 64;
    mp.quiet = true;
    const char *dir = rp_test_source("models/rapid-tiny");
    if (rp_test_load(dir, 2, false, &mp, &M) || rp_tok_load_file(dir, &TOK))
        return -1;
    mp.max_batch = 0;
    if (rp_test_load(dir, 2, false, &mp, &M_REF))
        return -1;
    for (int i = 0; i < N_TEXTS; i++) {
        char text[1024];
        snprintf(text, sizeof(text), "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
                 TEXTS[i]);
        size_t n;
        if (rp_tok_encode(TOK, text, strlen(text), false, &P[i], &n))
            return -1;
        NP[i] = (int)n;
        harness_greedy(M_REF, P[i], NP[i], REF_MAX, REF[i], NULL);
    }
    return 0;
}

static int teardown(void **state)
{
    for (int i = 0; i < N_TEXTS; i++)
        rp_free(P[i]);
    rp_tok_destroy(TOK);
    rp_model_destroy(M);
    rp_model_destroy(M_REF);
    return 0;
}

// The tokens a greedy request must emit: the reference up to max_tokens, cut before an end of generation.
static int expected_len(int prompt, int max_tokens, bool ignore_eos, rp_gen_finish *finish)
{
    *finish = RP_GEN_LENGTH;
    for (int i = 0; i < max_tokens; i++)
        if (!ignore_eos && eog(REF[prompt][i])) {
            *finish = RP_GEN_STOP;
            return i;
        }
    return max_tokens;
}

typedef struct worker {
    rp_engine *e;
    uint64_t rng;
    int n_requests;
    // results
    int n_done;
    char failure[256];
} worker;

static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

// Submits n_requests one after the other; each is read to its end, cancelled
// after a few tokens, or released while running. Checks every token read.
static void *worker_main(void *arg)
{
    worker *w = arg;
    for (int r = 0; r < w->n_requests && !w->failure[0]; r++) {
        int prompt = (int)(next_rand(&w->rng) % N_TEXTS);
        int max_tokens = 8 + (int)(next_rand(&w->rng) % (REF_MAX - 8 + 1));
        bool ignore_eos = next_rand(&w->rng) % 2;
        int action = (int)(next_rand(&w->rng) % 6); // 0: cancel, 1: release early, else read to the end
        int stop_at = 1 + (int)(next_rand(&w->rng) % 8);
        rp_gen_params gp;
        rp_gen_params_default(&gp);
        gp.prompt = P[prompt];
        gp.n_prompt = NP[prompt];
        gp.max_tokens = max_tokens;
        gp.ignore_eos = ignore_eos;
        gp.sample.temperature = 0;
        rp_gen *g;
        if (rp_engine_submit(w->e, &gp, &g)) {
            snprintf(w->failure, sizeof(w->failure), "submit: %s", rp_error_message());
            break;
        }
        rp_gen_finish want_finish;
        int want = expected_len(prompt, max_tokens, ignore_eos, &want_finish);
        int n = 0;
        bool cancelled = false;
        for (;;) {
            rp_gen_token buf[5];
            int k;
            rp_gen_finish f = rp_gen_read(g, READ_GUARD_S, buf, 5, &k);
            if (f == RP_GEN_RUNNING && k == 0) {
                snprintf(w->failure, sizeof(w->failure), "no progress in %.0f s", READ_GUARD_S);
                break;
            }
            for (int i = 0; i < k; i++, n++)
                if (n >= want || buf[i].id != REF[prompt][n]) {
                    snprintf(w->failure, sizeof(w->failure), "prompt %d, token %d: %d, reference %d (of %d)", prompt, n,
                             buf[i].id, n < REF_MAX ? REF[prompt][n] : -1, want);
                    break;
                }
            if (w->failure[0])
                break;
            if (f != RP_GEN_RUNNING) {
                if (f != want_finish && !(cancelled && f == RP_GEN_CANCELLED))
                    snprintf(w->failure, sizeof(w->failure), "prompt %d: finish %d, expected %d (%s)", prompt, f,
                             want_finish, rp_gen_error(g));
                else if (f != RP_GEN_CANCELLED && n != want)
                    snprintf(w->failure, sizeof(w->failure), "prompt %d: %d tokens, expected %d", prompt, n, want);
                break;
            }
            if (n >= stop_at && action == 0 && !cancelled) {
                rp_gen_cancel(g);
                cancelled = true;
            }
            if (n >= stop_at && action == 1)
                break; // released while it runs
        }
        rp_gen_release(g);
        w->n_done++;
    }
    return NULL;
}

static void test_sixteen_at_once(void **state)
{
    enum { N = 16 };
    rp_engine_params ep;
    rp_engine_params_default(&ep);
    ep.max_running = N;
    rp_engine *e;
    assert_int_equal(rp_engine_create(M, TOK, &ep, &e), RP_OK);
    rp_gen *g[N];
    for (int i = 0; i < N; i++) {
        rp_gen_params gp;
        rp_gen_params_default(&gp);
        gp.prompt = P[i % N_TEXTS];
        gp.n_prompt = NP[i % N_TEXTS];
        gp.max_tokens = REF_MAX - (i / N_TEXTS) * 40;
        gp.ignore_eos = i % 3 == 0;
        gp.sample.temperature = 0;
        assert_int_equal(rp_engine_submit(e, &gp, &g[i]), RP_OK);
    }
    // Read them round-robin, a little at a time.
    int n[N] = {0};
    bool done[N] = {false};
    for (int left = N; left > 0;) {
        for (int i = 0; i < N; i++) {
            if (done[i])
                continue;
            rp_gen_token buf[3];
            int k;
            rp_gen_finish f = rp_gen_read(g[i], READ_GUARD_S, buf, 3, &k);
            assert_true(k > 0 || f != RP_GEN_RUNNING);
            for (int j = 0; j < k; j++, n[i]++) {
                assert_true(n[i] < REF_MAX);
                assert_int_equal(buf[j].id, REF[i % N_TEXTS][n[i]]);
            }
            if (f != RP_GEN_RUNNING) {
                rp_gen_finish want_f;
                int want = expected_len(i % N_TEXTS, REF_MAX - (i / N_TEXTS) * 40, i % 3 == 0, &want_f);
                assert_int_equal(f, want_f);
                assert_int_equal(n[i], want);
                done[i] = true;
                left--;
            }
        }
    }
    for (int i = 0; i < N; i++)
        rp_gen_release(g[i]);
    rp_engine_stats es;
    rp_engine_get_stats(e, &es);
    assert_int_equal(es.kv_blocks_used, 0);
    assert_int_equal(es.requests_done, N);
    rp_engine_destroy(e);
}

static void test_storm_with_preemption(void **state)
{
    enum { W = 8, PER = 12 };
    rp_engine_params ep;
    rp_engine_params_default(&ep);
    ep.max_running = 8;
    ep.kv_tokens = 256; // about two requests' worth: constant preemption
    ep.kv_block = 16;
    rp_engine *e;
    assert_int_equal(rp_engine_create(M, TOK, &ep, &e), RP_OK);
    static worker w[W];
    pthread_t th[W];
    for (int i = 0; i < W; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].e = e;
        w[i].rng = 0x9E3779B97F4A7C15ULL * (uint64_t)(i + 1);
        w[i].n_requests = PER;
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < W; i++)
        pthread_join(th[i], NULL);
    int done = 0;
    for (int i = 0; i < W; i++) {
        if (w[i].failure[0])
            fail_msg("worker %d: %s", i, w[i].failure);
        done += w[i].n_done;
    }
    assert_int_equal(done, W * PER);
    // Released requests are retired by the engine; a last request makes sure it has seen them all.
    rp_gen_params gp;
    rp_gen_params_default(&gp);
    gp.prompt = P[0];
    gp.n_prompt = NP[0];
    gp.max_tokens = 4;
    gp.sample.temperature = 0;
    rp_gen *g;
    assert_int_equal(rp_engine_submit(e, &gp, &g), RP_OK);
    int32_t ids[4];
    rp_gen_token buf[4];
    int n = 0, k;
    rp_gen_finish f;
    do {
        f = rp_gen_read(g, READ_GUARD_S, buf, 4, &k);
        for (int i = 0; i < k; i++)
            ids[n++] = buf[i].id;
    } while (f == RP_GEN_RUNNING && k > 0);
    assert_int_equal(f, RP_GEN_LENGTH);
    assert_memory_equal(ids, REF[0], 4 * sizeof(int32_t));
    rp_gen_release(g);
    rp_engine_stats es;
    rp_engine_get_stats(e, &es);
    print_message("storm: %llu steps, %llu preemptions, %llu cancelled, %llu tokens generated\n",
                  (unsigned long long)es.steps, (unsigned long long)es.preemptions,
                  (unsigned long long)es.requests_cancelled, (unsigned long long)es.tokens_generated);
    assert_true(es.preemptions > 0);
    assert_int_equal(es.requests_done, W * PER + 1);
    assert_int_equal(es.kv_blocks_used, 0);
    assert_int_equal(es.running + es.queued, 0);
    rp_engine_destroy(e);
}

// JSON mode on the bundled model: the replies it gives as fenced JSON come out
// as one bare object that parses. These are raw prompts (no chat template); the
// model closes the object on prompt 2 and runs on with repeated keys elsewhere,
// so at least one object must parse.
static void test_json_mode(void **state)
{
    rp_engine *e;
    assert_int_equal(rp_engine_create(M, TOK, NULL, &e), RP_OK);
    const int which[] = {2, 6, 0, 3};
    int parsed = 0;
    for (int c = 0; c < 4; c++) {
        rp_gen_params gp;
        rp_gen_params_default(&gp);
        gp.prompt = P[which[c]];
        gp.n_prompt = NP[which[c]];
        gp.max_tokens = 200;
        gp.sample.temperature = 0;
        gp.json = true;
        rp_gen *g;
        assert_int_equal(rp_engine_submit(e, &gp, &g), RP_OK);
        int32_t ids[200];
        int n = 0, k;
        rp_gen_token buf[8];
        rp_gen_finish f;
        do {
            f = rp_gen_read(g, READ_GUARD_S, buf, 8, &k);
            for (int i = 0; i < k; i++)
                ids[n++] = buf[i].id;
        } while (f == RP_GEN_RUNNING && k > 0);
        char *text;
        size_t len;
        assert_int_equal(rp_tok_decode(TOK, ids, (size_t)n, true, &text, &len), RP_OK);
        json_error_t jerr;
        json_t *obj = f == RP_GEN_STOP ? json_loads(text, 0, &jerr) : NULL;
        print_message("prompt %d (%s): %s\n", which[c], obj ? "an object" : "cut", text);
        parsed += json_is_object(obj);
        json_decref(obj);
        rp_free(text);
        rp_gen_release(g);
    }
    assert_true(parsed >= 1);
    rp_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sixteen_at_once),
        cmocka_unit_test(test_storm_with_preemption),
        cmocka_unit_test(test_json_mode),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
