/*
 * test_prefix_long.c - the prefix cache under a storm: 8 client threads send
 * 96 requests drawn from prompts that share system prefixes, into a KV pool
 * far too small for them (preemption, memory evictions written to disk while
 * requests run), then a restarted engine replays every prompt at once from
 * the disk tier. Every output must equal the plain greedy loop's, and the
 * cache must actually have served (hits counted, blocks read from disk).
 */
#define RP_TEST_TMP_PREFIX "rp-prefix-long"
#include "test_model.h"
#include "../model/model_harness.h"
#include "test_tmp.h"

#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

#include <pthread.h>

#define GEN 24
#define N_SYS 4
#define N_USER 6
#define N_PROMPTS (N_SYS * N_USER)
#define N_THREADS 8
#define PER_THREAD 12

static rp_model *M, *M_REF;
static rp_tokenizer *TOK;

typedef struct prompt {
    int32_t ids[512];
    int n;
    int32_t ref[GEN];
} prompt;

static prompt P[N_PROMPTS];

static int encode_append(prompt *p, const char *text)
{
    int32_t *ids;
    size_t n;
    if (rp_tok_encode(TOK, text, strlen(text), false, &ids, &n) || p->n + (int)n > 512)
        return -1;
    memcpy(p->ids + p->n, ids, n * sizeof(int32_t));
    p->n += (int)n;
    rp_free(ids);
    return 0;
}

static int setup(void **state)
{
    if (rp_test_tmp_setup(state))
        return -1;
    rp_log_set_level(RP_LOG_ERROR);
    rp_model_params mp;
    rp_model_params_default(&mp);
    mp.max_batch = 32;
    mp.quiet = true;
    const char *dir = rp_test_source("models/rapid-tiny-draft");
    if (rp_test_load(dir, 1, false, &mp, &M) || rp_tok_load_file(dir, &TOK))
        return -1;
    mp.max_batch = 0;
    if (rp_test_load(dir, 1, false, &mp, &M_REF))
        return -1;
    static const char *sys[N_SYS] = {
        "You are a terse assistant.",
        "You are a careful coding assistant. Show code in fenced blocks and explain it in one sentence.",
        "You review pull requests. Point out bugs first, then style, and never rewrite the whole file. Be kind "
        "but precise, and cite line numbers when you can.",
        "You translate between English and French. Keep the register of the original, and keep names and code "
        "unchanged. When a phrase has no direct equivalent, give the closest idiom and a literal gloss in "
        "brackets. Answer with the translation only, no commentary, unless asked.",
    };
    static const char *user[N_USER] = {
        "hi", "What is a hash table?", "def add(a, b):", "Translate: good morning",
        "Sort [3, 1, 2].", "List three prime numbers and say why each is prime.",
    };
    for (int s = 0; s < N_SYS; s++)
        for (int u = 0; u < N_USER; u++) {
            prompt *p = &P[s * N_USER + u];
            char a[1024], b[512];
            snprintf(a, sizeof(a), "<|im_start|>system\n%s<|im_end|>\n", sys[s]);
            snprintf(b, sizeof(b), "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n", user[u]);
            if (encode_append(p, a) || encode_append(p, b))
                return -1;
        }
    return 0;
}

static int teardown(void **state)
{
    rp_tok_destroy(TOK);
    rp_model_destroy(M);
    rp_model_destroy(M_REF);
    return rp_test_tmp_teardown(state);
}

typedef struct client {
    rp_engine *e;
    uint64_t seed;
    int n_requests;
    int bad;        // outputs that differed, or reads that hung
    long n_cached;  // summed over the client's requests
    char why[256];
} client;

static void *client_main(void *arg)
{
    client *c = arg;
    for (int r = 0; r < c->n_requests; r++) {
        size_t which = c->seed % N_PROMPTS; // one request: prompt `seed`
        if (c->n_requests > 1) {
            c->seed = c->seed * 6364136223846793005ull + 1442695040888963407ull;
            which = (c->seed >> 33) % N_PROMPTS;
        }
        const prompt *p = &P[which];
        rp_gen_params gp;
        rp_gen_params_default(&gp);
        gp.prompt = p->ids;
        gp.n_prompt = p->n;
        gp.max_tokens = GEN;
        gp.sample.temperature = 0;
        gp.ignore_eos = true;
        rp_gen *g = NULL;
        if (rp_engine_submit(c->e, &gp, &g)) {
            snprintf(c->why, sizeof(c->why), "submit: %s", rp_error_message());
            c->bad++;
            continue;
        }
        int32_t ids[GEN];
        int n = 0;
        rp_gen_finish f;
        for (;;) {
            rp_gen_token t[8];
            int k;
            f = rp_gen_read(g, 300, t, 8, &k);
            for (int i = 0; i < k && n < GEN; i++)
                ids[n++] = t[i].id;
            if (f != RP_GEN_RUNNING || k == 0)
                break;
        }
        rp_gen_stats st;
        rp_gen_get_stats(g, &st);
        c->n_cached += st.n_cached;
        if (f != RP_GEN_LENGTH || n != GEN || memcmp(ids, p->ref, sizeof(ids)) != 0) {
            snprintf(c->why, sizeof(c->why), "finish %d, %d tokens, %s", f, n,
                     f == RP_GEN_ERROR ? rp_gen_error(g) : "tokens differ from the reference");
            c->bad++;
        }
        rp_gen_release(g);
    }
    return NULL;
}

static void run_clients(rp_engine *e, int n_clients, int per_client, long *cached)
{
    client c[N_PROMPTS];
    pthread_t th[N_PROMPTS];
    for (int i = 0; i < n_clients; i++) {
        c[i] = (client){e, 1000 + (uint64_t)i, per_client, 0, 0, ""};
        if (per_client == 1)
            c[i].seed = (uint64_t)i; // one request each: prompt i
        assert_int_equal(pthread_create(&th[i], NULL, client_main, &c[i]), 0);
    }
    *cached = 0;
    for (int i = 0; i < n_clients; i++) {
        pthread_join(th[i], NULL);
        if (c[i].bad)
            fail_msg("client %d: %d bad requests (%s)", i, c[i].bad, c[i].why);
        *cached += c[i].n_cached;
    }
}

static void test_storm_then_restart(void **state)
{
    for (int i = 0; i < N_PROMPTS; i++)
        harness_greedy(M_REF, P[i].ids, P[i].n, GEN, P[i].ref, NULL);
    const char *dir = rp_test_tmp_path("cache");
    rp_engine_params ep;
    rp_engine_params_default(&ep);
    ep.cache_dir = dir;
    ep.kv_tokens = 24 * 16; // a handful of requests at a time
    ep.max_running = 8;
    rp_engine *e = NULL;
    assert_int_equal(rp_engine_create(M, TOK, &ep, &e), RP_OK);
    long cached;
    run_clients(e, N_THREADS, PER_THREAD, &cached);
    rp_engine_stats es;
    rp_engine_get_stats(e, &es);
    print_message("storm: %llu preemptions, %ld tokens cached, %llu memory evictions, %llu files written\n",
                  (unsigned long long)es.preemptions, cached, (unsigned long long)es.cache.mem_evictions,
                  (unsigned long long)es.cache.disk_writes);
    assert_true(cached > 0);
    assert_true(es.cache.mem_evictions > 0);
    assert_int_equal(es.kv_blocks_used, 0);
    assert_int_equal(es.running + es.queued, 0);
    assert_int_equal(es.cache.disk_rejects, 0);
    rp_engine_destroy(e);

    // Restarted with room for everything: every prompt at once, from the disk tier.
    ep.kv_tokens = 0;
    ep.max_running = 0;
    assert_int_equal(rp_engine_create(M, TOK, &ep, &e), RP_OK);
    rp_engine_get_stats(e, &es);
    assert_true(es.cache.disk_blocks > 0);
    run_clients(e, N_PROMPTS, 1, &cached);
    rp_engine_get_stats(e, &es);
    print_message("restart: %llu blocks read from disk, %ld tokens cached\n",
                  (unsigned long long)es.cache.disk_hit_blocks, cached);
    assert_true(es.cache.disk_hit_blocks > 0);
    assert_true(cached > 0);
    assert_int_equal(es.cache.disk_rejects, 0);
    assert_int_equal(es.kv_blocks_used, 0);
    rp_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_storm_then_restart),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
