/*
 * test_engine.c - the engine thread: its tokens against a plain loop over
 * rp_model_forward, alone and in company (threads, queueing, KV preemption),
 * cancel / release / destroy with live handles, the limits and bad requests,
 * logprobs against an independent log-softmax, seeded sampling, JSON mode,
 * and allocation failures.
 *
 * The model is models/rapid-tiny-draft (2 layers, trained: it ends its chat
 * replies with an end-of-generation token), loaded with max_batch 32 so longer
 * prompts are prefilled in several chunks and steps mix chunks with decodes.
 * The references (harness_greedy, harness_prefill_all) run on a second
 * instance of the model with the default max_batch (one forward per prompt).
 */
#include "test_model.h"
#include "backend/cpu/cpu.h"
#include "../model/model_harness.h"

#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

#include <pthread.h>

#define MAX_BATCH 32
#define READ_GUARD_S 120.0 // a read that sees nothing this long means the engine hangs

static rp_model *M;     // the engines' (max_batch 32)
static rp_model *M_REF; // the references' (whole prompts in one forward)
static rp_tokenizer *TOK;
static int V;

static const char *TEXTS[] = {
    "Who are you?",
    "Write a Python function that returns the sum of a list.",
    "Convert {\"a\": 1, \"b\": [2, 3]} to YAML.",
    "hi",
    ("Explain what a hash table is, in two sentences, without using the words key or value, and then give a "
     "short example in Python that counts the words of a sentence."),
    "What's the weather in Paris?",
    "def fib(n):",
    "Rename the variable x to count in: for x in range(10): print(x)",
    "Tell me a joke about compilers.",
    "List three prime numbers.",
    "Return the JSON object {\"ok\": true} and nothing else.",
    "Sort [3, 1, 2] in descending order and explain each step of the algorithm you used in detail.",
    "Say nothing.",
    "Translate 'good morning' into French.",
};
#define N_TEXTS ((int)(sizeof(TEXTS) / sizeof(TEXTS[0])))

typedef struct prompt {
    int32_t *ids;
    int n;
} prompt;

static prompt P[N_TEXTS];

static int setup(void **state)
{
    rp_model_params mp;
    rp_model_params_default(&mp);
    mp.max_batch = MAX_BATCH;
    mp.quiet = true;
    const char *dir = rp_test_source("models/rapid-tiny-draft");
    if (rp_test_load(dir, 1, false, &mp, &M) || rp_tok_load_file(dir, &TOK)) {
        print_error("loading %s: %s\n", dir, rp_error_message());
        return -1;
    }
    mp.max_batch = 0;
    if (rp_test_load(dir, 1, false, &mp, &M_REF)) {
        print_error("loading %s: %s\n", dir, rp_error_message());
        return -1;
    }
    V = rp_model_get_config(M)->n_vocab;
    for (int i = 0; i < N_TEXTS; i++) {
        char text[1024];
        // The chat format, thinking off; every other prompt raw, so both kinds of text appear.
        if (i % 2 == 0)
            snprintf(text, sizeof(text),
                     "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n", TEXTS[i]);
        else
            snprintf(text, sizeof(text), "%s", TEXTS[i]);
        size_t n;
        if (rp_tok_encode(TOK, text, strlen(text), false, &P[i].ids, &n) || n == 0)
            return -1;
        P[i].n = (int)n;
        print_message("prompt %d: %d tokens\n", i, P[i].n);
    }
    return 0;
}

static int teardown(void **state)
{
    for (int i = 0; i < N_TEXTS; i++)
        rp_free(P[i].ids);
    rp_tok_destroy(TOK);
    rp_model_destroy(M);
    rp_model_destroy(M_REF);
    return 0;
}

static bool eog(int32_t id)
{
    const rp_model_config *c = rp_model_get_config(M);
    bool stop = rp_tok_is_eog(TOK, id);
    for (int i = 0; i < c->n_eos; i++)
        stop = stop || c->eos_ids[i] == id;
    return stop;
}

static rp_engine *make_engine(int max_running, int kv_tokens, int kv_block, int n_ctx)
{
    rp_engine_params ep;
    rp_engine_params_default(&ep);
    ep.max_running = max_running;
    ep.kv_tokens = kv_tokens;
    ep.kv_block = kv_block;
    ep.n_ctx = n_ctx;
    rp_engine *e = NULL;
    if (rp_engine_create(M, TOK, &ep, &e))
        fail_msg("rp_engine_create: %s", rp_error_message());
    return e;
}

static rp_gen_params greedy_params(const prompt *p, int max_tokens, bool ignore_eos)
{
    rp_gen_params gp;
    rp_gen_params_default(&gp);
    gp.prompt = p->ids;
    gp.n_prompt = p->n;
    gp.max_tokens = max_tokens;
    gp.sample.temperature = 0;
    gp.ignore_eos = ignore_eos;
    return gp;
}

static rp_gen *submit(rp_engine *e, const rp_gen_params *gp)
{
    rp_gen *g = NULL;
    if (rp_engine_submit(e, gp, &g))
        fail_msg("rp_engine_submit: %s", rp_error_message());
    assert_non_null(g);
    return g;
}

// Reads g to its end: ids (and the whole tokens, when toks) into the arrays. No cmocka calls
// (reader threads use it too): returns -1 on a hang or overflow.
static int read_all(rp_gen *g, int32_t *ids, rp_gen_token *toks, int cap, int *n)
{
    *n = 0;
    rp_gen_token buf[7]; // odd on purpose: reads end mid-outbox
    for (;;) {
        int k;
        rp_gen_finish f = rp_gen_read(g, READ_GUARD_S, buf, 7, &k);
        if (f == RP_GEN_RUNNING && k == 0)
            return -1;
        for (int i = 0; i < k; i++) {
            if (*n == cap)
                return -1;
            if (toks)
                toks[*n] = buf[i];
            ids[(*n)++] = buf[i].id;
        }
        if (f != RP_GEN_RUNNING)
            return (int)f;
    }
}

static rp_gen_finish read_all_ok(rp_gen *g, int32_t *ids, rp_gen_token *toks, int cap, int *n)
{
    int f = read_all(g, ids, toks, cap, n);
    if (f < 0)
        fail_msg("reading a request: no progress in %.0f s, or more than %d tokens", READ_GUARD_S, cap);
    return (rp_gen_finish)f;
}

// What a request must give, from the plain greedy loop: the reference's tokens,
// cut before the first end-of-generation token unless ignore_eos.
typedef struct expect {
    int32_t ids[256];
    int n;           // tokens emitted
    int n_generated; // tokens sampled
    rp_gen_finish finish;
} expect;

static void reference(const prompt *p, int max_tokens, bool ignore_eos, expect *x)
{
    assert_true(max_tokens <= 256);
    harness_greedy(M_REF, p->ids, p->n, max_tokens, x->ids, NULL);
    x->n = max_tokens;
    x->n_generated = max_tokens;
    x->finish = RP_GEN_LENGTH;
    for (int i = 0; i < max_tokens && !ignore_eos; i++)
        if (eog(x->ids[i])) {
            x->n = i;
            x->n_generated = i + 1;
            x->finish = RP_GEN_STOP;
            break;
        }
}

// n by address: the read that fills it is an argument too, evaluated in any order.
static void check(rp_gen *g, rp_gen_finish f, const int32_t *ids, const int *np, const expect *x, const char *what)
{
    int n = *np;
    if (f != x->finish)
        fail_msg("%s: finished %d, expected %d (%s)", what, f, x->finish, rp_gen_error(g));
    assert_int_equal(n, x->n);
    for (int i = 0; i < n; i++)
        if (ids[i] != x->ids[i])
            fail_msg("%s: token %d is %d, the reference has %d", what, i, ids[i], x->ids[i]);
    rp_gen_stats gs;
    rp_gen_get_stats(g, &gs);
    assert_int_equal(gs.n_generated, x->n_generated);
}

/* ---- greedy against the plain loop ----------------------------------------- */

static void test_greedy_matches_reference(void **state)
{
    const int which[] = {0, 1, 4, 3, 11};
    static expect x[5], xe[5];
    for (int i = 0; i < 5; i++) {
        reference(&P[which[i]], 40, true, &x[i]);
        reference(&P[which[i]], 60, false, &xe[i]);
    }
    assert_true(P[4].n > MAX_BATCH); // one prompt takes several chunks
    rp_engine *e = make_engine(0, 0, 0, 0);
    int stops = 0;
    for (int i = 0; i < 5; i++) {
        int32_t ids[256];
        int n;
        rp_gen_params gp = greedy_params(&P[which[i]], 40, true);
        rp_gen *g = submit(e, &gp);
        check(g, read_all_ok(g, ids, NULL, 256, &n), ids, &n, &x[i], "ignore_eos");
        rp_gen_stats gs;
        rp_gen_get_stats(g, &gs);
        assert_int_equal(gs.n_prompt, P[which[i]].n);
        assert_int_equal(gs.max_tokens, 40);
        assert_true(gs.t_submit > 0 && gs.t_admit >= gs.t_submit && gs.t_first >= gs.t_admit &&
                    gs.t_last >= gs.t_first);
        rp_gen_release(g);

        gp = greedy_params(&P[which[i]], 60, false);
        g = submit(e, &gp);
        check(g, read_all_ok(g, ids, NULL, 256, &n), ids, &n, &xe[i], "stop at end-of-generation");
        stops += xe[i].finish == RP_GEN_STOP;
        rp_gen_release(g);
    }
    assert_true(stops > 0); // the trained model ends some replies: STOP was exercised
    rp_engine_stats es;
    rp_engine_get_stats(e, &es);
    assert_int_equal(es.requests_done, 10);
    assert_int_equal(es.kv_blocks_used, 0);
    assert_int_equal(es.running + es.queued, 0);
    assert_true(es.steps > 0 && es.tokens_generated > 0);
    uint64_t prompt_tokens = 0;
    for (int i = 0; i < 5; i++)
        prompt_tokens += 2 * (uint64_t)P[which[i]].n;
    // The second run of each prompt finds most of it in the prefix cache.
    assert_true(es.prefix_cache && es.cache_hit_tokens > 0);
    assert_int_equal(es.tokens_prefilled + es.cache_hit_tokens, prompt_tokens);
    rp_engine_destroy(e);
}

/* ---- many requests at once, from many threads ------------------------------ */

typedef struct job {
    rp_engine *e;
    rp_gen_params gp;
    int32_t ids[256];
    int n, finish, n_generated;
} job;

static void *job_main(void *arg)
{
    job *j = arg;
    rp_gen *g = NULL;
    j->finish = -2;
    if (rp_engine_submit(j->e, &j->gp, &g))
        return NULL;
    j->finish = read_all(g, j->ids, NULL, 256, &j->n);
    rp_gen_stats gs;
    rp_gen_get_stats(g, &gs);
    j->n_generated = gs.n_generated;
    rp_gen_release(g);
    return NULL;
}

// Runs the jobs, each from its own thread, all at once.
static void run_jobs(job *jobs, int n)
{
    pthread_t th[N_TEXTS];
    for (int i = 0; i < n; i++)
        assert_int_equal(pthread_create(&th[i], NULL, job_main, &jobs[i]), 0);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
}

static void check_job(const job *j, const expect *x, int i)
{
    if (j->finish != (int)x->finish)
        fail_msg("request %d: finish %d, expected %d", i, j->finish, x->finish);
    assert_int_equal(j->n, x->n);
    assert_int_equal(j->n_generated, x->n_generated);
    for (int t = 0; t < j->n; t++)
        if (j->ids[t] != x->ids[t])
            fail_msg("request %d: token %d is %d, alone it is %d", i, t, j->ids[t], x->ids[t]);
}

static void test_concurrent_requests(void **state)
{
    enum { N = 14 };
    static expect x[N];
    static job jobs[N];
    for (int i = 0; i < N; i++)
        reference(&P[i], 8 + 3 * i, i % 3 == 0, &x[i]);
    // All running together (batches of decodes and chunks), then four at a time (a queue).
    const int running[] = {16, 4};
    for (int r = 0; r < 2; r++) {
        rp_engine *e = make_engine(running[r], 0, 0, 0);
        for (int i = 0; i < N; i++) {
            jobs[i].e = e;
            jobs[i].gp = greedy_params(&P[i], 8 + 3 * i, i % 3 == 0);
        }
        run_jobs(jobs, N);
        for (int i = 0; i < N; i++)
            check_job(&jobs[i], &x[i], i);
        rp_engine_stats es;
        rp_engine_get_stats(e, &es);
        assert_int_equal(es.requests_done, N);
        assert_int_equal(es.kv_blocks_used, 0);
        assert_int_equal(es.preemptions, 0);
        // Every step's forward pass is counted in the bucket of its batch size.
        uint64_t steps = 0, tokens = 0;
        for (int b = 0; b < RP_ENGINE_BATCH_BUCKETS; b++) {
            steps += es.forward_steps[b];
            tokens += es.forward_tokens[b];
            if (es.forward_steps[b]) {
                assert_true(es.forward_min_s[b] > 0 && es.forward_min_s[b] <= es.forward_bucket_s[b]);
                assert_true(es.forward_tokens[b] >= es.forward_steps[b] * (b == 0 ? 1u : (1u << (b - 1)) + 1));
                assert_true(es.forward_tokens[b] <= es.forward_steps[b] * (1u << b));
            }
        }
        assert_int_equal(steps, es.steps);
        assert_true(tokens >= es.tokens_prefilled + es.tokens_generated - N); // a request's last token is not fed
        assert_true(es.step_s >= es.forward_s && es.forward_s > 0 && es.step_max_s > 0);
        assert_true(es.prefill_chunk > 0 && es.prefill_chunk <= es.max_batch);
        rp_engine_destroy(e);
    }
}

static void test_batch_bucket(void **state)
{
    (void)state;
    const int n[] = {1, 2, 3, 4, 5, 8, 9, 16, 17, 512, 513, 1024, 1025, 1 << 20};
    const int b[] = {0, 1, 2, 2, 3, 3, 4, 4, 5, 9, 10, 10, 11, 11};
    for (size_t i = 0; i < sizeof(n) / sizeof(*n); i++)
        assert_int_equal(rp_engine_batch_bucket(n[i]), b[i]);
}

// A long prompt arriving while a request decodes is prefilled in chunks whose
// work (weights + attention over the positions before them) stays within that
// of the first chunk, so deep chunks take fewer tokens; alone, it takes whole
// chunks. Either way its output is the plain loop's.
static void test_prefill_chunks_bounded_while_decoding(void **state)
{
    enum { LONG = 500, CHUNK = 16 };
    static int32_t ids[LONG];
    for (int i = 0, k = 0; i < LONG; k++)
        for (int j = 0; j < P[k % N_TEXTS].n && i < LONG; j++)
            ids[i++] = P[k % N_TEXTS].ids[j];
    prompt lp = {ids, LONG};
    static expect xl, xa;
    reference(&lp, 4, true, &xl);
    reference(&P[0], 200, true, &xa);
    for (int busy = 0; busy < 2; busy++) {
        rp_engine_params ep;
        rp_engine_params_default(&ep);
        ep.max_running = 4;
        ep.prefill_chunk = CHUNK;
        ep.spec.method = RP_ENGINE_SPEC_OFF; // steps carry exactly one decode token and the chunk
        ep.no_prefix_cache = true;
        rp_engine *e = NULL;
        if (rp_engine_create(M, TOK, &ep, &e))
            fail_msg("rp_engine_create: %s", rp_error_message());
        rp_gen *a = NULL;
        rp_gen_token first;
        int k = 0;
        if (busy) { // a decoding request, running before the long prompt comes
            rp_gen_params ga = greedy_params(&P[0], 200, true);
            a = submit(e, &ga);
            assert_int_equal(rp_gen_read(a, READ_GUARD_S, &first, 1, &k), RP_GEN_RUNNING);
            assert_int_equal(k, 1);
        }
        rp_gen_params gl = greedy_params(&lp, 4, true);
        rp_gen *g = submit(e, &gl);
        static int32_t out[256];
        int n = 0;
        rp_gen_finish f = read_all_ok(g, out, NULL, 256, &n);
        check(g, f, out, &n, &xl, "the long prompt");
        rp_gen_release(g);
        if (a) {
            static int32_t aout[256];
            aout[0] = first.id;
            int m = 0;
            f = read_all_ok(a, aout + 1, NULL, 255, &m);
            m += 1;
            check(a, f, aout, &m, &xa, "the decoding request");
            rp_gen_release(a);
        }
        rp_engine_stats es;
        rp_engine_get_stats(e, &es);
        // Bucket 5 holds 17-32 tokens: a whole chunk plus a decode token. With the
        // draft model's attn_eq of 960 only the first chunk fits whole; the rest
        // (15 tokens down to ~10 at position 500, with the decode token 11-16)
        // land in bucket 4. Alone: 31 whole chunks (bucket 4) and one of 4 tokens.
        if (busy) {
            assert_true(es.forward_steps[5] <= 2);
            assert_true(es.forward_steps[4] >= 33);
        } else {
            assert_int_equal(es.forward_steps[5], 0);
            assert_int_equal(es.forward_steps[4], 31);
            assert_int_equal(es.forward_steps[2], 1);
        }
        assert_int_equal(es.tokens_prefilled, LONG + (busy ? P[0].n : 0));
        rp_engine_destroy(e);
    }
}

/* ---- KV pressure: preemption and recompute -------------------------------- */

static void test_preemption_keeps_outputs(void **state)
{
    enum { N = 8, GEN = 30 };
    static expect x[N];
    static job jobs[N], solo;
    const int which[N] = {0, 1, 3, 5, 6, 7, 9, 13};
    for (int i = 0; i < N; i++) {
        assert_true(P[which[i]].n + GEN <= 64); // each fits the pool alone
        reference(&P[which[i]], GEN, true, &x[i]);
    }
    // A sampled request too: its sampler must survive preemption. Its solo run first.
    rp_gen_params sp = greedy_params(&P[8], GEN, true);
    sp.sample.temperature = 0.9f;
    sp.sample.top_k = 40;
    sp.sample.seed = 77;
    {
        rp_engine *e = make_engine(1, 0, 0, 0);
        solo.e = e;
        solo.gp = sp;
        job_main(&solo);
        assert_int_equal(solo.finish, RP_GEN_LENGTH);
        rp_engine_destroy(e);
    }
    // 64 tokens of KV in blocks of 4: about one request and a half at a time.
    rp_engine *e = make_engine(16, 64, 4, 0);
    for (int i = 0; i < N; i++) {
        jobs[i].e = e;
        jobs[i].gp = greedy_params(&P[which[i]], GEN, true);
    }
    static job all[N + 1];
    memcpy(all, jobs, sizeof(jobs));
    all[N].e = e;
    all[N].gp = sp;
    run_jobs(all, N + 1);
    for (int i = 0; i < N; i++)
        check_job(&all[i], &x[i], i);
    assert_int_equal(all[N].finish, RP_GEN_LENGTH);
    assert_int_equal(all[N].n, GEN);
    assert_memory_equal(all[N].ids, solo.ids, GEN * sizeof(int32_t));
    rp_engine_stats es;
    rp_engine_get_stats(e, &es);
    assert_true(es.preemptions > 0);
    assert_int_equal(es.kv_blocks, 16);
    assert_int_equal(es.kv_blocks_used, 0);
    assert_int_equal(es.requests_done, N + 1);
    rp_engine_destroy(e);

    // A request that asks for more than the whole pool holds ends LENGTH when it has the
    // whole pool: the context is cut to the pool's 32 tokens (prompt + reply).
    e = make_engine(1, 32, 4, 0);
    assert_int_equal(rp_engine_n_ctx(e), 32);
    rp_gen_params gp = greedy_params(&P[3], 100, true);
    rp_gen *g = submit(e, &gp);
    int32_t ids[256];
    int n;
    assert_int_equal(read_all_ok(g, ids, NULL, 256, &n), RP_GEN_LENGTH);
    assert_int_equal(P[3].n + n, 32);
    rp_gen_release(g);
    rp_engine_destroy(e);
}

/* ---- cancel, release, destroy ---------------------------------------------- */

static void test_cancel(void **state)
{
    rp_engine *e = make_engine(1, 0, 0, 0);
    rp_gen_params gp = greedy_params(&P[1], 3000, true);
    rp_gen *g = submit(e, &gp);
    rp_gen *q = submit(e, &gp); // queued behind g (one running at a time)
    rp_gen_token buf[4];
    int n = 0, k;
    while (n < 3) {
        assert_int_equal(rp_gen_read(g, READ_GUARD_S, buf, 4, &k), RP_GEN_RUNNING);
        assert_true(k > 0);
        n += k;
    }
    rp_gen_cancel(q);
    rp_gen_cancel(g);
    rp_gen_stats at_cancel;
    rp_gen_get_stats(g, &at_cancel);
    assert_true(at_cancel.n_generated < 3000);
    static int32_t ids[4000];
    int rest;
    assert_int_equal(read_all_ok(g, ids, NULL, 4000, &rest), RP_GEN_CANCELLED);
    rp_gen_stats after;
    rp_gen_get_stats(g, &after);
    assert_int_equal(after.n_generated, at_cancel.n_generated); // nothing after the cancel
    assert_int_equal(n + rest, after.n_generated);              // every sampled token was read
    assert_int_equal(read_all_ok(q, ids, NULL, 4000, &rest), RP_GEN_CANCELLED);
    rp_gen_stats qs;
    rp_gen_get_stats(q, &qs);
    assert_int_equal(rest, qs.n_generated);
    assert_string_equal(rp_gen_error(g), "");
    rp_engine_stats es;
    rp_engine_get_stats(e, &es);
    assert_int_equal(es.kv_blocks_used, 0); // the blocks were back before the reader saw CANCELLED
    assert_int_equal(es.requests_cancelled, 2);
    assert_int_equal(es.running + es.queued, 0);
    // Reading a finished request again: its reason, no tokens; cancelling it: nothing.
    rp_gen_cancel(g);
    assert_int_equal(rp_gen_read(g, 0, NULL, 0, &k), RP_GEN_CANCELLED);
    assert_int_equal(k, 0);
    rp_gen_release(g);
    rp_gen_release(q);
    rp_engine_destroy(e);
}

static int fail_calls;
static void count_failure(void *ctx)
{
    (void)ctx;
    fail_calls++;
}

// A lost device (a GPU context gone after a kernel fault; here the CPU backend's test hook):
// the running and the queued request fail with the reason, later submits are refused, the
// failure hook runs once (also when set afterwards), and the engine still shuts down cleanly.
static void test_device_lost(void **state)
{
    rp_backend *be = NULL; // the CPU's own: the hook is the CPU backend's, whatever RP_TEST_DEVICE says
    assert_int_equal(rp_backend_open("cpu", &(rp_backend_params){.n_threads = 1}, &be), RP_OK);
    rp_model_params mp;
    rp_model_params_default(&mp);
    mp.quiet = true;
    rp_model *m = NULL;
    assert_int_equal(rp_model_load(rp_test_source("models/rapid-tiny-draft"), be, &mp, &m), RP_OK);
    rp_model_own_backend(m);
    rp_engine_params ep;
    rp_engine_params_default(&ep);
    ep.max_running = 1;
    rp_engine *e = NULL;
    assert_int_equal(rp_engine_create(m, TOK, &ep, &e), RP_OK);
    fail_calls = 0;
    rp_engine_on_failure(e, count_failure, NULL);
    assert_null(rp_engine_failed(e));
    rp_gen_params gp = greedy_params(&P[1], 3000, true);
    rp_gen *g = submit(e, &gp), *q = submit(e, &gp); // q waits behind g
    rp_gen_token buf[4];
    int k = 0;
    assert_int_equal(rp_gen_read(g, READ_GUARD_S, buf, 4, &k), RP_GEN_RUNNING); // g runs
    rp_cpu_test_lose(be, "the test lost it");
    static int32_t ids[4000];
    int n;
    assert_int_equal(read_all_ok(g, ids, NULL, 4000, &n), RP_GEN_ERROR);
    assert_int_equal(read_all_ok(q, ids, NULL, 4000, &n), RP_GEN_ERROR);
    assert_non_null(strstr(rp_gen_error(q), "the device failed: the test lost it"));
    const char *why = rp_engine_failed(e);
    assert_non_null(why);
    assert_non_null(strstr(why, "the test lost it"));
    assert_int_equal(fail_calls, 1);
    rp_gen *r = NULL;
    assert_int_equal(rp_engine_submit(e, &gp, &r), RP_ERR_DEVICE);
    assert_null(r);
    assert_non_null(strstr(rp_error_message(), "the device failed"));
    rp_engine_on_failure(e, count_failure, NULL); // set after the failure: called at once
    assert_int_equal(fail_calls, 2);
    rp_gen_release(g);
    rp_gen_release(q);
    rp_engine_destroy(e);
    rp_model_destroy(m);
}

static void test_release_running(void **state)
{
    static expect x;
    reference(&P[3], 5, true, &x);
    rp_engine *e = make_engine(0, 0, 0, 0);
    rp_gen_params gp = greedy_params(&P[1], 3000, true);
    rp_gen *g = submit(e, &gp), *q = submit(e, &gp);
    rp_gen_token buf[2];
    int k;
    assert_int_equal(rp_gen_read(g, READ_GUARD_S, buf, 2, &k), RP_GEN_RUNNING);
    assert_true(k > 0);
    rp_gen_release(g); // running
    rp_gen_release(q); // running or queued
    // A request submitted after the releases finishes after they were retired.
    gp = greedy_params(&P[3], 5, true);
    rp_gen *h = submit(e, &gp);
    int32_t ids[8];
    int n;
    check(h, read_all_ok(h, ids, NULL, 8, &n), ids, &n, &x, "after a release");
    rp_engine_stats es;
    rp_engine_get_stats(e, &es);
    assert_int_equal(es.requests_cancelled, 2);
    assert_int_equal(es.requests_done, 3);
    assert_int_equal(es.kv_blocks_used, 0);
    rp_gen_release(h);
    rp_gen_release(NULL);
    rp_engine_destroy(e);
}

static void test_destroy_with_live_handles(void **state)
{
    rp_engine *e = make_engine(2, 0, 0, 0);
    rp_gen *g[5];
    for (int i = 0; i < 5; i++) {
        rp_gen_params gp = greedy_params(&P[i], 3000, true);
        g[i] = submit(e, &gp);
    }
    rp_gen_token buf[1];
    int k;
    assert_int_equal(rp_gen_read(g[0], READ_GUARD_S, buf, 1, &k), RP_GEN_RUNNING);
    assert_int_equal(k, 1);
    rp_gen_release(g[4]); // released before the destroy: freed by the engine
    rp_engine_destroy(e);
    // The handles outlive the engine: every one reads to CANCELLED, its stats and error still answer.
    static int32_t ids[4000];
    for (int i = 0; i < 4; i++) {
        int n;
        assert_int_equal(read_all_ok(g[i], ids, NULL, 4000, &n), RP_GEN_CANCELLED);
        rp_gen_stats gs;
        rp_gen_get_stats(g[i], &gs);
        assert_int_equal(gs.n_generated, i == 0 ? n + 1 : n);
        assert_string_equal(rp_gen_error(g[i]), "");
        rp_gen_cancel(g[i]);
    }
    for (int i = 0; i < 4; i++)
        rp_gen_release(g[i]); // the last one frees what is left of the engine
    rp_engine_destroy(NULL);
}

/* ---- limits and bad requests ------------------------------------------------- */

static void test_limits(void **state)
{
    // Queue full: one long request at a time, two waiting. Long requests cannot
    // drain the queue while the submits run, so the limit comes within a few.
    rp_engine_params ep;
    rp_engine_params_default(&ep);
    ep.max_running = 1;
    ep.max_queue = 2;
    rp_engine *e;
    assert_int_equal(rp_engine_create(M, TOK, &ep, &e), RP_OK);
    rp_gen *g[16] = {0};
    rp_gen_params gp = greedy_params(&P[1], 0, true); // 0: until the context is full
    int n_ok = 0;
    rp_status st = RP_OK;
    while (n_ok < 16 && (st = rp_engine_submit(e, &gp, &g[n_ok])) == RP_OK)
        n_ok++;
    assert_int_equal(st, RP_ERR_LIMIT);
    assert_non_null(strstr(rp_error_message(), "queue is full"));
    assert_true(n_ok >= 2);
    rp_gen_stats gs;
    rp_gen_get_stats(g[0], &gs);
    assert_int_equal(gs.max_tokens, rp_engine_n_ctx(e) - P[1].n);
    assert_int_equal(rp_engine_n_ctx(e), rp_model_get_config(M)->max_ctx);
    for (int i = 0; i < n_ok; i++)
        rp_gen_release(g[i]);
    rp_engine_destroy(e);

    // The prompt does not fit the context: both numbers in the message.
    e = make_engine(0, 0, 0, 48);
    assert_int_equal(rp_engine_n_ctx(e), 48);
    assert_true(P[4].n > 48);
    rp_gen *h = (rp_gen *)&h;
    gp = greedy_params(&P[4], 10, false);
    assert_int_equal(rp_engine_submit(e, &gp, &h), RP_ERR_RANGE);
    assert_null(h);
    char want[128];
    snprintf(want, sizeof(want), "the prompt has %d tokens, the context is 48", P[4].n);
    if (!strstr(rp_error_message(), want))
        fail_msg("message [%s] lacks [%s]", rp_error_message(), want);
    // Exactly n_ctx tokens: no room to generate.
    prompt exact = {P[4].ids, 48};
    gp = greedy_params(&exact, 10, false);
    assert_int_equal(rp_engine_submit(e, &gp, &h), RP_ERR_RANGE);
    assert_non_null(strstr(rp_error_message(), "has 48 tokens, the context is 48"));

    // max_tokens past the context: clamped, LENGTH at the clamp.
    static expect x;
    rp_engine_destroy(e);
    int room = 48 - P[1].n;
    reference(&P[1], room, true, &x);
    e = make_engine(0, 0, 0, 48);
    gp = greedy_params(&P[1], 1000, true);
    h = submit(e, &gp);
    int32_t ids[256];
    int n;
    check(h, read_all_ok(h, ids, NULL, 256, &n), ids, &n, &x, "clamped max_tokens");
    rp_gen_get_stats(h, &gs);
    assert_int_equal(gs.max_tokens, room);
    assert_int_equal(gs.n_generated, room);
    rp_gen_release(h);
    rp_engine_destroy(e);

    // A prompt larger than the whole KV pool: the context is what the pool holds.
    e = make_engine(0, 32, 16, 0);
    assert_int_equal(rp_engine_n_ctx(e), 32);
    gp = greedy_params(&P[4], 10, false);
    assert_int_equal(rp_engine_submit(e, &gp, &h), RP_ERR_RANGE);
    snprintf(want, sizeof(want), "the prompt has %d tokens, the context is 32", P[4].n);
    if (!strstr(rp_error_message(), want))
        fail_msg("message [%s] lacks [%s]", rp_error_message(), want);
    rp_engine_stats es;
    rp_engine_get_stats(e, &es);
    assert_int_equal(es.kv_blocks, 2);
    assert_int_equal(es.kv_block_tokens, 16);
    rp_engine_destroy(e);
}

static void test_ignore_eos(void **state)
{
    // A prompt the model answers and ends: without ignore_eos it stops there;
    // with it, the end-of-generation token is emitted and generation goes on.
    static expect stop, full;
    reference(&P[0], 80, false, &stop);
    reference(&P[0], 80, true, &full);
    assert_int_equal(stop.finish, RP_GEN_STOP);
    assert_true(eog(full.ids[stop.n]));
    rp_engine *e = make_engine(0, 0, 0, 0);
    int32_t ids[256];
    int n;
    rp_gen_params gp = greedy_params(&P[0], 80, false);
    rp_gen *g = submit(e, &gp);
    check(g, read_all_ok(g, ids, NULL, 256, &n), ids, &n, &stop, "stop");
    rp_gen_release(g);
    gp.ignore_eos = true;
    g = submit(e, &gp);
    check(g, read_all_ok(g, ids, NULL, 256, &n), ids, &n, &full, "ignore_eos");
    assert_int_equal(ids[stop.n], full.ids[stop.n]);
    rp_gen_release(g);
    rp_engine_destroy(e);
}

static void test_bad_requests(void **state)
{
    rp_engine *e = make_engine(0, 0, 0, 0);
    rp_gen *g = NULL;
    rp_gen_params gp = greedy_params(&P[0], 10, false);
    // Empty prompt, no prompt.
    gp.n_prompt = 0;
    assert_int_equal(rp_engine_submit(e, &gp, &g), RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "empty"));
    gp = greedy_params(&P[0], 10, false);
    gp.prompt = NULL;
    assert_int_equal(rp_engine_submit(e, &gp, &g), RP_ERR_INVALID);
    // Token ids outside the vocabulary, both ends.
    int32_t bad[3] = {1, V, 2};
    gp = greedy_params(&P[0], 10, false);
    gp.prompt = bad;
    gp.n_prompt = 3;
    assert_int_equal(rp_engine_submit(e, &gp, &g), RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "outside the vocabulary"));
    bad[1] = -1;
    assert_int_equal(rp_engine_submit(e, &gp, &g), RP_ERR_INVALID);
    // Sampling parameters.
    gp = greedy_params(&P[0], 10, false);
    gp.sample.temperature = -1;
    assert_int_equal(rp_engine_submit(e, &gp, &g), RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "temperature"));
    gp.sample.temperature = NAN;
    assert_int_equal(rp_engine_submit(e, &gp, &g), RP_ERR_INVALID);
    gp = greedy_params(&P[0], 10, false);
    gp.sample.top_p = 0;
    assert_int_equal(rp_engine_submit(e, &gp, &g), RP_ERR_INVALID);
    // logprobs.
    gp = greedy_params(&P[0], 10, false);
    gp.n_logprobs = RP_GEN_TOP_MAX + 1;
    assert_int_equal(rp_engine_submit(e, &gp, &g), RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "logprobs"));
    gp.n_logprobs = -2;
    assert_int_equal(rp_engine_submit(e, &gp, &g), RP_ERR_INVALID);
    // No parameters, no handle.
    assert_int_equal(rp_engine_submit(e, NULL, &g), RP_ERR_INVALID);
    gp = greedy_params(&P[0], 10, false);
    assert_int_equal(rp_engine_submit(e, &gp, NULL), RP_ERR_INVALID);
    assert_null(g);
    rp_engine_stats es;
    rp_engine_get_stats(e, &es);
    assert_int_equal(es.queued + es.running, 0);
    assert_int_equal(es.requests_done, 0);
    rp_engine_destroy(e);

    // Engine parameters.
    rp_engine_params ep;
    const char *fields[] = {"n_ctx", "kv_tokens", "kv_block", "max_running", "max_queue"};
    for (int f = 0; f < 5; f++) {
        rp_engine_params_default(&ep);
        int *v[] = {&ep.n_ctx, &ep.kv_tokens, &ep.kv_block, &ep.max_running, &ep.max_queue};
        *v[f] = -1;
        e = (rp_engine *)&e;
        assert_int_equal(rp_engine_create(M, TOK, &ep, &e), RP_ERR_INVALID);
        assert_null(e);
        assert_non_null(strstr(rp_error_message(), fields[f]));
    }
    assert_int_equal(rp_engine_create(NULL, TOK, NULL, &e), RP_ERR_INVALID);
    // Defaults with no params at all.
    assert_int_equal(rp_engine_create(M, TOK, NULL, &e), RP_OK);
    rp_engine_get_stats(e, &es);
    assert_int_equal(es.kv_block_tokens, 16);
    assert_int_equal(es.kv_blocks * 16, rp_model_get_config(M)->max_ctx); // max(n_ctx, 4096)
    rp_engine_destroy(e);
}

/* ---- logprobs ---------------------------------------------------------------- */

// log-softmax of one row, in double.
static void log_softmax(const float *l, int n, double *out)
{
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++)
        mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < n; i++)
        sum += exp((double)l[i] - mx);
    for (int i = 0; i < n; i++)
        out[i] = (double)l[i] - mx - log(sum);
}

// Every token's logprob and top list against the logits of a plain prefill of
// prompt + tokens (logits are the same however the sequence was batched).
static void check_logprobs(const prompt *p, const rp_gen_token *toks, int n, int k)
{
    int total = p->n + n;
    int32_t *seq = malloc((size_t)total * sizeof(int32_t));
    float *logits = malloc((size_t)total * V * sizeof(float));
    double *ls = malloc((size_t)V * sizeof(double));
    memcpy(seq, p->ids, (size_t)p->n * sizeof(int32_t));
    for (int i = 0; i < n; i++)
        seq[p->n + i] = toks[i].id;
    harness_prefill_all(M_REF, seq, total, 16, logits);
    for (int t = 0; t < n; t++) {
        const float *row = logits + (size_t)(p->n - 1 + t) * V;
        log_softmax(row, V, ls);
        const rp_gen_token *g = &toks[t];
        if (fabs(g->logprob - ls[g->id]) > 1e-4)
            fail_msg("token %d (id %d): logprob %g, log-softmax %g", t, g->id, g->logprob, ls[g->id]);
        assert_true(g->logprob <= 0);
        assert_int_equal(g->n_top, k);
        for (int j = 0; j < g->n_top; j++) {
            if (fabs(g->top_logprobs[j] - ls[g->top_ids[j]]) > 1e-4)
                fail_msg("token %d, top %d (id %d): %g vs %g", t, j, g->top_ids[j], g->top_logprobs[j],
                         ls[g->top_ids[j]]);
            if (j > 0)
                assert_true(g->top_logprobs[j] <= g->top_logprobs[j - 1]);
        }
        if (k > 0) {
            assert_int_equal(g->top_ids[0], harness_argmax(row, V));
            // Nothing outside the list beats its last entry.
            for (int i = 0; i < V; i++) {
                bool in = false;
                for (int j = 0; j < k; j++)
                    in = in || g->top_ids[j] == i;
                if (!in && ls[i] > g->top_logprobs[k - 1] + 1e-4)
                    fail_msg("token %d: id %d (%g) is missing from the top %d", t, i, ls[i], k);
            }
        }
    }
    free(seq);
    free(logits);
    free(ls);
}

static void test_logprobs(void **state)
{
    enum { GEN = 12 };
    static rp_gen_token toks[3][GEN];
    int32_t ids[GEN];
    int n[3];
    const int ks[3] = {5, RP_GEN_TOP_MAX, 0};
    rp_engine *e = make_engine(0, 0, 0, 0);
    for (int c = 0; c < 3; c++) {
        rp_gen_params gp = greedy_params(&P[2], GEN, true);
        gp.n_logprobs = ks[c];
        if (c == 1) { // sampled: logprobs are the model's, whatever the temperature
            gp.sample.temperature = 1.3f;
            gp.sample.seed = 5;
        }
        rp_gen *g = submit(e, &gp);
        assert_int_equal(read_all_ok(g, ids, toks[c], GEN, &n[c]), RP_GEN_LENGTH);
        assert_int_equal(n[c], GEN);
        rp_gen_release(g);
    }
    // Greedy: the chosen token heads its own top list.
    for (int t = 0; t < GEN; t++) {
        assert_int_equal(toks[0][t].top_ids[0], toks[0][t].id);
        assert_true(toks[0][t].logprob == toks[0][t].top_logprobs[0]);
    }
    // Greedy with k = 0: the chosen logprob only, the same as with k = 5.
    for (int t = 0; t < GEN; t++) {
        assert_int_equal(toks[2][t].id, toks[0][t].id);
        assert_true(toks[2][t].logprob == toks[0][t].logprob);
    }
    // No logprobs asked: none given.
    rp_gen_params gp = greedy_params(&P[2], 3, true);
    rp_gen *g = submit(e, &gp);
    rp_gen_token plain[3];
    assert_int_equal(read_all_ok(g, ids, plain, 3, &n[0]), RP_GEN_LENGTH);
    for (int t = 0; t < 3; t++)
        assert_int_equal(plain[t].n_top, 0);
    rp_gen_release(g);
    rp_engine_destroy(e);
    for (int c = 0; c < 3; c++)
        check_logprobs(&P[2], toks[c], GEN, ks[c]);
}

/* ---- seeded sampling ----------------------------------------------------------- */

static void test_sampling_reproducible(void **state)
{
    enum { N = 8, GEN = 40 };
    static job jobs[N], solo[2], other;
    rp_gen_params sp = greedy_params(&P[2], GEN, true);
    sp.sample.temperature = 0.8f;
    sp.sample.top_p = 0.95f;
    sp.sample.repetition_penalty = 1.1f;
    sp.sample.seed = 1234;
    // Alone, twice.
    rp_engine *e = make_engine(1, 0, 0, 0);
    for (int r = 0; r < 2; r++) {
        solo[r].e = e;
        solo[r].gp = sp;
        job_main(&solo[r]);
        assert_int_equal(solo[r].finish, RP_GEN_LENGTH);
        assert_int_equal(solo[r].n, GEN);
    }
    assert_memory_equal(solo[0].ids, solo[1].ids, GEN * sizeof(int32_t));
    // Another seed: another text.
    other.e = e;
    other.gp = sp;
    other.gp.sample.seed = 4321;
    job_main(&other);
    assert_int_equal(other.n, GEN);
    assert_memory_not_equal(solo[0].ids, other.ids, GEN * sizeof(int32_t));
    rp_engine_destroy(e);
    // In company: seven other sampled requests, different prompts and seeds, the same one among them.
    e = make_engine(16, 0, 0, 0);
    for (int i = 0; i < N; i++) {
        jobs[i].e = e;
        jobs[i].gp = i == 3 ? sp : greedy_params(&P[i + 4], 10 + 5 * i, false);
        if (i != 3) {
            jobs[i].gp.sample.temperature = 1.0f;
            jobs[i].gp.sample.seed = (uint64_t)i;
        }
    }
    run_jobs(jobs, N);
    assert_int_equal(jobs[3].finish, RP_GEN_LENGTH);
    assert_memory_equal(jobs[3].ids, solo[0].ids, GEN * sizeof(int32_t));
    rp_engine_destroy(e);
}

/* ---- allocation failures --------------------------------------------------------- */

static void test_alloc_failures(void **state)
{
    static expect x;
    reference(&P[3], 6, true, &x);
    // create: every allocation in turn fails, cleanly.
    rp_engine *e = NULL;
    int n_fail = 0;
    for (long k = 0; k < 1000; k++) {
        rp_alloc_fail_after(k, false);
        rp_status st = rp_engine_create(M, TOK, NULL, &e);
        rp_alloc_fail_after(-1, false);
        if (st == RP_OK)
            break;
        assert_int_equal(st, RP_ERR_NOMEM);
        assert_null(e);
        n_fail++;
    }
    assert_non_null(e);
    assert_true(n_fail > 0);
    // submit: the same. The engine is idle, so the failures hit submit only; a
    // failure that reaches the engine thread's admission finishes ERROR instead.
    rp_gen_params gp = greedy_params(&P[3], 6, true);
    for (long k = 0; k < 100; k++) {
        rp_gen *g = NULL;
        rp_alloc_fail_after(k, false);
        rp_status st = rp_engine_submit(e, &gp, &g);
        rp_alloc_fail_after(-1, false);
        if (st) {
            assert_int_equal(st, RP_ERR_NOMEM);
            assert_null(g);
            continue;
        }
        int32_t ids[8];
        int n;
        rp_gen_finish f = read_all_ok(g, ids, NULL, 8, &n);
        if (f == RP_GEN_ERROR)
            assert_non_null(strstr(rp_gen_error(g), "out of memory"));
        else
            check(g, f, ids, &n, &x, "after failed allocations");
        rp_gen_release(g);
        if (f != RP_GEN_ERROR)
            break;
    }
    // Admission: every allocation from the first submit that succeeds on fails.
    // The request finishes ERROR with the reason, and the engine goes on.
    for (long k = 0;; k++) {
        rp_gen *g = NULL;
        rp_alloc_fail_after(k, true);
        rp_status st = rp_engine_submit(e, &gp, &g);
        if (st) {
            rp_alloc_fail_after(-1, false);
            assert_int_equal(st, RP_ERR_NOMEM);
            continue;
        }
        int32_t ids[8];
        int n;
        rp_gen_finish f = read_all_ok(g, ids, NULL, 8, &n);
        rp_alloc_fail_after(-1, false);
        assert_int_equal(f, RP_GEN_ERROR);
        assert_int_equal(n, 0);
        assert_non_null(strstr(rp_gen_error(g), "out of memory"));
        rp_gen_release(g);
        break;
    }
    rp_gen *g = submit(e, &gp);
    int32_t ids[8];
    int n;
    check(g, read_all_ok(g, ids, NULL, 8, &n), ids, &n, &x, "after an admission failure");
    rp_gen_release(g);
    rp_engine_stats es;
    rp_engine_get_stats(e, &es);
    assert_int_equal(es.kv_blocks_used, 0);
    rp_engine_destroy(e);
}

// One allocation fails somewhere in a run of two requests (submit, admission,
// the KV block table as it grows, the outbox): the request it hits finishes
// ERROR with the reason, the other one is untouched, the pool ends empty.
static void test_alloc_failure_mid_run(void **state)
{
    enum { GEN = 12 };
    static expect xa, xb;
    reference(&P[13], GEN, true, &xa);
    reference(&P[1], GEN, true, &xb);
    // Blocks of one token: the block tables grow (16 -> 32 entries) a few tokens in
    // (prompts of 14 and 13 tokens).
    rp_engine *e = make_engine(4, 256, 1, 0);
    int table_hits = 0;
    for (long k = 0; k < 48; k++) {
        rp_gen_params ga = greedy_params(&P[13], GEN, true), gb = greedy_params(&P[1], GEN, true);
        rp_gen *g[2] = {NULL, NULL};
        const expect *x[2] = {&xa, &xb};
        rp_alloc_fail_after(k, false);
        rp_status sa = rp_engine_submit(e, &ga, &g[0]);
        rp_status sb = rp_engine_submit(e, &gb, &g[1]);
        assert_true(sa == RP_OK || sa == RP_ERR_NOMEM);
        assert_true(sb == RP_OK || sb == RP_ERR_NOMEM);
        int errors = (sa != RP_OK) + (sb != RP_OK);
        for (int r = 0; r < 2; r++) {
            if (!g[r])
                continue;
            int32_t ids[GEN];
            int n;
            rp_gen_finish f = read_all_ok(g[r], ids, NULL, GEN, &n);
            if (f == RP_GEN_ERROR) {
                const char *why = rp_gen_error(g[r]);
                if (!strstr(why, "out of memory"))
                    fail_msg("k=%ld, request %d: %s", k, r, why);
                table_hits += strstr(why, "KV block table") != NULL;
                errors++;
            } else {
                check(g[r], f, ids, &n, x[r], "the request the failure missed");
            }
        }
        rp_alloc_fail_after(-1, false);
        assert_true(errors <= 1);
        rp_gen_release(g[0]);
        rp_gen_release(g[1]);
    }
    assert_true(table_hits > 0);
    rp_engine_stats es;
    rp_engine_get_stats(e, &es);
    assert_int_equal(es.kv_blocks_used, 0);
    rp_engine_destroy(e);
}

// rp_gen_read's waits: a request queued behind one that runs for a long time
// has nothing to read; a zero, short or NaN timeout returns at once with nothing.
static void test_read_timeouts(void **state)
{
    static expect x;
    reference(&P[3], 4, true, &x);
    rp_engine *e = make_engine(1, 0, 0, 0);
    rp_gen_params gp = greedy_params(&P[1], 0, true); // until the context (32768) is full
    rp_gen *a = submit(e, &gp);
    gp = greedy_params(&P[3], 4, true);
    rp_gen *b = submit(e, &gp);
    rp_gen_token buf[4];
    int k = -1;
    assert_int_equal(rp_gen_read(b, 0, buf, 4, &k), RP_GEN_RUNNING);
    assert_int_equal(k, 0);
    k = -1;
    assert_int_equal(rp_gen_read(b, 0.02, buf, 4, &k), RP_GEN_RUNNING);
    assert_int_equal(k, 0);
    k = -1;
    assert_int_equal(rp_gen_read(b, NAN, buf, 4, &k), RP_GEN_RUNNING);
    assert_int_equal(k, 0);
    rp_gen_stats gs;
    rp_gen_get_stats(b, &gs);
    assert_true(gs.t_admit == 0 && gs.n_generated == 0); // still queued
    rp_engine_stats es;
    rp_engine_get_stats(e, &es);
    assert_int_equal(es.running, 1);
    assert_int_equal(es.queued, 1);
    assert_true(es.kv_blocks_used > 0);
    // Once a is gone, b runs; a read with cap 0 only reports the state.
    rp_gen_release(a);
    int32_t ids[4];
    int n;
    check(b, read_all_ok(b, ids, NULL, 4, &n), ids, &n, &x, "after the long one");
    assert_int_equal(rp_gen_read(b, 1.0, NULL, 0, &k), RP_GEN_LENGTH);
    assert_int_equal(k, 0);
    rp_gen_release(b);
    rp_engine_destroy(e);
}

// The text of a request's tokens, as a client would see it.
static char *detok(const int32_t *ids, int n)
{
    char *text;
    size_t len;
    assert_int_equal(rp_tok_decode(TOK, ids, (size_t)n, true, &text, &len), RP_OK);
    return text;
}

// JSON mode: whatever the prompt or the sampler, a request that ends (STOP)
// has produced one JSON object; the mask is in the logprobs too; a JSON
// request's tokens are the same alone, in company and through preemption.
static void test_json_mode(void **state)
{
    enum { GEN = 160 };
    static int32_t ids[GEN];
    static rp_gen_token toks[GEN];
    rp_engine *e = make_engine(16, 0, 0, 0);
    // The first JSON submit builds the token table; its allocation failures are clean.
    rp_gen_params gp = greedy_params(&P[10], GEN, false);
    gp.json = true;
    rp_gen *g = NULL;
    int json_fails = 0;
    for (long k = 0;; k++) {
        rp_alloc_fail_after(k, false);
        rp_status st = rp_engine_submit(e, &gp, &g);
        rp_alloc_fail_after(-1, false);
        if (st == RP_OK)
            break;
        assert_int_equal(st, RP_ERR_NOMEM);
        assert_null(g);
        assert_non_null(strstr(rp_error_message(), "out of memory"));
        json_fails += strstr(rp_error_message(), "JSON mode") != NULL;
    }
    assert_true(json_fails > 0); // the table's own allocations were among those that failed
    rp_gen_release(g);
    // Greedy and sampled, JSON prompts and others: every STOP is an object.
    int parsed = 0;
    for (int c = 0; c < 8; c++) {
        int pi = (int[]){10, 2, 0, 6, 10, 12, 4, 8}[c];
        gp = greedy_params(&P[pi], GEN, false);
        gp.json = true;
        gp.n_logprobs = 3;
        if (c >= 4) {
            gp.sample.temperature = 1.0f;
            gp.sample.seed = (uint64_t)c;
        }
        g = submit(e, &gp);
        int n;
        rp_gen_finish f = read_all_ok(g, ids, toks, GEN, &n);
        assert_true(f == RP_GEN_STOP || f == RP_GEN_LENGTH);
        char *text = detok(ids, n);
        if (f == RP_GEN_STOP) {
            json_error_t jerr;
            json_t *obj = json_loads(text, 0, &jerr);
            if (!json_is_object(obj))
                fail_msg("prompt %d: [%s] is not a JSON object (%s)", pi, text, jerr.text);
            json_decref(obj);
            parsed++;
        } else {
            print_message("prompt %d: cut at %d tokens: %.80s...\n", pi, GEN, text);
        }
        // The alternatives offered are tokens the grammar allows (finite logprobs).
        for (int t = 0; t < n; t++) {
            assert_true(toks[t].n_top >= 1 && toks[t].n_top <= 3);
            assert_true(isfinite(toks[t].logprob));
            for (int j = 0; j < toks[t].n_top; j++)
                assert_true(isfinite(toks[t].top_logprobs[j]));
        }
        rp_free(text);
        rp_gen_release(g);
    }
    // The property is "every STOP is an object"; this guard makes sure some runs
    // stopped by themselves, so it was checked (with rapid-tiny of 2026-11-30, 3 of
    // the 8 raw prompts close their object within GEN tokens; the others pad).
    assert_true(parsed >= 2);
    rp_engine_destroy(e);

    // The same JSON request alone, among others, and through preemption.
    static job solo, jobs[6];
    rp_gen_params jp = greedy_params(&P[2], 40, true);
    jp.json = true;
    jp.sample.temperature = 0.7f;
    jp.sample.seed = 9;
    e = make_engine(1, 0, 0, 0);
    solo.e = e;
    solo.gp = jp;
    job_main(&solo);
    assert_true(solo.finish == RP_GEN_LENGTH || solo.finish == RP_GEN_STOP);
    rp_engine_destroy(e);
    for (int r = 0; r < 2; r++) {
        e = r == 0 ? make_engine(16, 0, 0, 0) : make_engine(16, 96, 4, 0);
        for (int i = 0; i < 6; i++) {
            jobs[i].e = e;
            jobs[i].gp = i == 0 ? jp : greedy_params(&P[i], 40, true);
        }
        run_jobs(jobs, 6);
        assert_int_equal(jobs[0].finish, solo.finish);
        assert_int_equal(jobs[0].n, solo.n);
        assert_memory_equal(jobs[0].ids, solo.ids, (size_t)solo.n * sizeof(int32_t));
        rp_engine_stats es;
        rp_engine_get_stats(e, &es);
        if (r == 1)
            assert_true(es.preemptions > 0);
        assert_int_equal(es.kv_blocks_used, 0);
        rp_engine_destroy(e);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_matches_reference),
        cmocka_unit_test(test_concurrent_requests),
        cmocka_unit_test(test_batch_bucket),
        cmocka_unit_test(test_prefill_chunks_bounded_while_decoding),
        cmocka_unit_test(test_preemption_keeps_outputs),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_device_lost),
        cmocka_unit_test(test_read_timeouts),
        cmocka_unit_test(test_release_running),
        cmocka_unit_test(test_destroy_with_live_handles),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_ignore_eos),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_sampling_reproducible),
        cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_alloc_failure_mid_run),
        cmocka_unit_test(test_json_mode),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
