/*
 * spec_harness.h - helpers for the speculative-decoding tests (test_spec.c,
 * test_spec_long.c): the default model (rapid-tiny, with its MTP layer) and its
 * draft sibling loaded once, chat-format prompts, engine configurations (off,
 * each method pinned, auto), and runs of requests alone or all at once whose
 * tokens, logprobs, finish reasons and draft counts are compared with the
 * same requests without speculation.
 */
#ifndef RP_SPEC_HARNESS_H
#define RP_SPEC_HARNESS_H

#include "test_model.h"
#include "test_util.h"

#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <pthread.h>

#define SH_GEN_MAX 2048     // most tokens one request generates in these tests
#define SH_READ_GUARD 300.0 // a read that sees nothing this long means the engine hangs

static rp_model *SH_M; // rapid-tiny (MTP), max_batch 64: long prompts take several chunks
static rp_model *SH_D; // rapid-tiny-draft
static rp_tokenizer *SH_TOK, *SH_DTOK;

typedef struct sh_prompt {
    int32_t *ids;
    int n;
} sh_prompt;

static inline int sh_setup(void)
{
    rp_model_params mp;
    rp_model_params_default(&mp);
    mp.max_batch = 64;
    mp.quiet = true;
    const char *dir = rp_test_source("models/rapid-tiny");
    if (rp_test_load(dir, 1, false, &mp, &SH_M) || rp_tok_load_file(dir, &SH_TOK)) {
        print_error("loading %s: %s\n", dir, rp_error_message());
        return -1;
    }
    mp.max_batch = 0;
    dir = rp_test_source("models/rapid-tiny-draft");
    if (rp_test_load(dir, 1, false, &mp, &SH_D) || rp_tok_load_file(dir, &SH_DTOK)) {
        print_error("loading %s: %s\n", dir, rp_error_message());
        return -1;
    }
    return 0;
}

static inline void sh_teardown(void)
{
    rp_tok_destroy(SH_TOK);
    rp_tok_destroy(SH_DTOK);
    rp_model_destroy(SH_M);
    rp_model_destroy(SH_D);
}

// One user turn in the model's chat format (thinking off), tokenized.
static inline sh_prompt sh_chat(const char *user)
{
    static const char pre[] = "<|im_start|>user\n",
                      post[] = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
    size_t len = strlen(pre) + strlen(user) + strlen(post);
    char *text = malloc(len + 1);
    assert_non_null(text);
    snprintf(text, len + 1, "%s%s%s", pre, user, post);
    sh_prompt p;
    size_t n;
    if (rp_tok_encode(SH_TOK, text, len, false, &p.ids, &n) || n == 0)
        fail_msg("encoding a prompt: %s", rp_error_message());
    p.n = (int)n;
    free(text);
    return p;
}

// An engine configuration.
typedef struct sh_config {
    const char *name;
    rp_engine_spec_method method;
    bool adaptive; // false: every decode step drafts the cap
    bool draft;    // with the draft model (a loaded handle)
} sh_config;

// The configurations compared: SH_CONFIGS[SH_OFF] is the reference. "auto"
// is pinned too (each step the first method that can draft: prompt lookup,
// MTP, the draft model), so all three take turns in one request
// deterministically; "adaptive" is the default engine (plus the draft model),
// whose choices follow measured time: it must give the same tokens, but
// whether it drafts is not asserted (that would be asserting timings).
enum { SH_OFF, SH_NGRAM, SH_MTP, SH_DRAFT, SH_AUTO, SH_ADAPTIVE, SH_N_CONFIGS };
static const sh_config SH_CONFIGS[SH_N_CONFIGS] = {
    {"off", RP_ENGINE_SPEC_OFF, true, false},   {"ngram", RP_ENGINE_SPEC_NGRAM, false, false},
    {"mtp", RP_ENGINE_SPEC_MTP, false, false},  {"draft", RP_ENGINE_SPEC_DRAFT, false, true},
    {"auto", RP_ENGINE_SPEC_AUTO, false, true}, {"adaptive", RP_ENGINE_SPEC_AUTO, true, true},
};

static rp_engine *sh_engine(const sh_config *c, int k_max, int max_running, int kv_tokens, int kv_block)
{
    rp_engine_params ep;
    rp_engine_params_default(&ep);
    ep.n_ctx = kv_tokens > 0 && kv_tokens < 4096 ? kv_tokens
                                                 : 4096; // not the model's 32k: a pool that size is mostly page faults
    ep.max_running = max_running;
    ep.kv_tokens = kv_tokens;
    ep.kv_block = kv_block;
    ep.spec.method = c->method;
    ep.spec.adaptive = c->adaptive;
    ep.spec.k_max = k_max;
    if (c->draft) {
        ep.spec.draft = SH_D;
        ep.spec.draft_tok = SH_DTOK;
    }
    rp_engine *e = NULL;
    if (rp_engine_create(SH_M, SH_TOK, &ep, &e))
        fail_msg("rp_engine_create (%s): %s", c->name, rp_error_message());
    return e;
}

// What one request gave.
typedef struct sh_result {
    rp_engine *e;
    rp_gen_params gp;
    int32_t ids[SH_GEN_MAX];
    rp_gen_token toks[SH_GEN_MAX];
    int n, finish;
    rp_gen_stats stats;
} sh_result;

static inline rp_gen_params sh_greedy(const sh_prompt *p, int max_tokens)
{
    rp_gen_params gp;
    rp_gen_params_default(&gp);
    gp.prompt = p->ids;
    gp.n_prompt = p->n;
    gp.max_tokens = max_tokens;
    gp.sample.temperature = 0;
    return gp;
}

// Reads r's request to the end (no cmocka calls: reader threads use it): finish or -1 on a hang.
static inline int sh_read_all(rp_gen *g, sh_result *r)
{
    r->n = 0;
    rp_gen_token buf[5]; // odd on purpose: reads end mid-outbox
    for (;;) {
        int k;
        rp_gen_finish f = rp_gen_read(g, SH_READ_GUARD, buf, 5, &k);
        if (f == RP_GEN_RUNNING && k == 0)
            return -1;
        for (int i = 0; i < k; i++) {
            if (r->n == SH_GEN_MAX)
                return -1;
            r->toks[r->n] = buf[i];
            r->ids[r->n++] = buf[i].id;
        }
        if (f != RP_GEN_RUNNING)
            return (int)f;
    }
}

static void *sh_job(void *arg)
{
    sh_result *r = arg;
    rp_gen *g = NULL;
    r->finish = -2;
    r->n = 0;
    if (rp_engine_submit(r->e, &r->gp, &g))
        return NULL;
    r->finish = sh_read_all(g, r);
    rp_gen_get_stats(g, &r->stats);
    rp_gen_release(g);
    return NULL;
}

// Runs the requests on e: one after the other (at_once false) or each from its own thread, all at once.
static inline void sh_run(rp_engine *e, sh_result *rs, int n, bool at_once)
{
    pthread_t th[64];
    assert_true(n <= 64);
    for (int i = 0; i < n; i++) {
        rs[i].e = e;
        if (!at_once)
            sh_job(&rs[i]);
        else
            assert_int_equal(pthread_create(&th[i], NULL, sh_job, &rs[i]), 0);
    }
    for (int i = 0; at_once && i < n; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < n; i++)
        if (rs[i].finish < 0)
            fail_msg("request %d: %s", i, rs[i].finish == -2 ? "submit failed" : "no progress, or too many tokens");
}

// The same tokens, finish, tokens sampled and (when asked) logprobs, bit for bit.
static inline void sh_same(const sh_result *got, const sh_result *want, const char *what, int i)
{
    if (got->finish != want->finish || got->n != want->n)
        fail_msg("%s, request %d: finish %d after %d tokens, without speculation %d after %d", what, i, got->finish,
                 got->n, want->finish, want->n);
    for (int t = 0; t < got->n; t++)
        if (got->ids[t] != want->ids[t])
            fail_msg("%s, request %d: token %d is %d, without speculation %d", what, i, t, got->ids[t], want->ids[t]);
    assert_int_equal(got->stats.n_generated, want->stats.n_generated);
    if (want->gp.n_logprobs < 0)
        return;
    for (int t = 0; t < got->n; t++) {
        const rp_gen_token *a = &got->toks[t], *b = &want->toks[t];
        if (memcmp(&a->logprob, &b->logprob, sizeof(float)) || a->n_top != b->n_top ||
            memcmp(a->top_ids, b->top_ids, (size_t)a->n_top * sizeof(int32_t)) ||
            memcmp(a->top_logprobs, b->top_logprobs, (size_t)a->n_top * sizeof(float)))
            fail_msg("%s, request %d: token %d's logprobs differ (%.9g vs %.9g)", what, i, t, (double)a->logprob,
                     (double)b->logprob);
    }
}

// Draft tokens verified and accepted over the results, for one method.
static inline void sh_counts(const sh_result *rs, int n, rp_spec_method m, long *drafted, long *accepted)
{
    *drafted = *accepted = 0;
    for (int i = 0; i < n; i++) {
        *drafted += rs[i].stats.spec_drafted[m];
        *accepted += rs[i].stats.spec_accepted[m];
    }
}

// Every method's counts stay 0 except those the configuration may use; the pinned one drafted and had some accepted.
static inline void sh_drafted(const sh_result *rs, int n, const sh_config *c)
{
    long all_d = 0, all_a = 0;
    for (int m = 0; m < RP_SPEC_N_METHODS; m++) {
        long d, a;
        sh_counts(rs, n, (rp_spec_method)m, &d, &a);
        print_message("  %s: %s accepted %ld of %ld drafted\n", c->name, rp_spec_method_name((rp_spec_method)m), a, d);
        assert_true(a <= d);
        all_d += d;
        all_a += a;
        bool pinned = (c->method == RP_ENGINE_SPEC_NGRAM && m == RP_SPEC_NGRAM) ||
                      (c->method == RP_ENGINE_SPEC_MTP && m == RP_SPEC_MTP) ||
                      (c->method == RP_ENGINE_SPEC_DRAFT && m == RP_SPEC_DRAFT);
        bool allowed = pinned || c->method == RP_ENGINE_SPEC_AUTO;
        if (!allowed)
            assert_int_equal(d, 0);
        if (pinned && !(d > 0 && a > 0))
            fail_msg("%s: %s drafted %ld and had %ld accepted: the test proves nothing", c->name,
                     rp_spec_method_name((rp_spec_method)m), d, a);
    }
    if (c->method == RP_ENGINE_SPEC_OFF)
        assert_int_equal(all_d, 0);
    else if (!c->adaptive && !(all_d > 0 && all_a > 0))
        fail_msg("%s: %ld drafted, %ld accepted: the test proves nothing", c->name, all_d, all_a);
}

#endif
