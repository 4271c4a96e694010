/*
 * test_spec.c - speculative decoding in the engine changes nothing but speed.
 *
 * On the default model (models/rapid-tiny, with its MTP layer) and its draft
 * sibling: every request's tokens, finish reason, tokens sampled and logprobs
 * (bit for bit) with speculation - prompt lookup, MTP and the draft model each
 * pinned to draft the cap every step, and `auto` - are those of the same
 * request without speculation, alone and in a batch of 8; greedy and sampled
 * with a seed (the verification draws each token as plain sampling does, so
 * even sampled text is the same), with penalties, in JSON mode, at max_tokens
 * and context limits, through preemption and cancellation, from prefixes found
 * in the prefix cache. Each comparison
 * also checks that drafts were made and some accepted (and, where it matters,
 * some rejected: the rollback was exercised). Bad configurations fail engine
 * creation with a clear message. The 22-prompt matrix, every configuration in
 * every mode, is test_spec_long.c; this file keeps what the sanitizer builds can
 * afford.
 */
#include "spec_harness.h"

#include <jansson.h>

enum { N_P = 6, GEN = 32 };

// Drafts per step: prompt lookup and the adaptive engine at the default cap, the pinned
// others at 4 (pinned MTP and draft-model chains at 16 verify mostly rejected tokens:
// slow, and no more telling).
static int cap(int c)
{
    return c == SH_MTP || c == SH_DRAFT || c == SH_AUTO ? 4 : 0;
}
static sh_prompt P[N_P];

static const char CODE[] = "```python\n"
                           "def mean(values):\n"
                           "    total = 0\n"
                           "    for v in values:\n"
                           "        total += v\n"
                           "    return total / len(values)\n"
                           "\n"
                           "\n"
                           "def variance(values):\n"
                           "    m = mean(values)\n"
                           "    total = 0\n"
                           "    for v in values:\n"
                           "        total += (v - m) ** 2\n"
                           "    return total / len(values)\n"
                           "```";

static int setup(void **state)
{
    if (sh_setup())
        return -1;
    char buf[2048];
    snprintf(buf, sizeof(buf), "Rename `total` to `acc` everywhere in this file and return the whole file.\n\n%s",
             CODE);
    P[0] = sh_chat(buf);
    snprintf(buf, sizeof(buf), "Change the value 0 to 0.0 in this file and return the whole file.\n\n%s", CODE);
    P[1] = sh_chat(buf);
    P[2] = sh_chat("Rename the key `name` to `title` in every object.\n\n```json\n"
                   "[{\"id\": 1, \"name\": \"a\"}, {\"id\": 2, \"name\": \"b\"}, {\"id\": 3, \"name\": \"c\"}]\n```");
    P[3] = sh_chat("Extract the name and the age as a JSON object: \"Maria Lopez is 34 and lives in Porto.\"");
    P[4] = sh_chat("Write a short story about a robot who learns to paint.");
    P[5] = sh_chat("Explain what a hash table is, in two sentences.");
    return 0;
}

static int teardown(void **state)
{
    for (int i = 0; i < N_P; i++)
        rp_free(P[i].ids);
    sh_teardown();
    return 0;
}

static sh_result REF[N_P], GOT[8];

// The reference: each prompt alone without speculation.
static void reference(int max_tokens, void (*adjust)(rp_gen_params *, int))
{
    rp_engine *e = sh_engine(&SH_CONFIGS[SH_OFF], 0, 1, 0, 0);
    for (int i = 0; i < N_P; i++) {
        REF[i].gp = sh_greedy(&P[i], max_tokens);
        if (adjust)
            adjust(&REF[i].gp, i);
    }
    sh_run(e, REF, N_P, false);
    sh_drafted(REF, N_P, &SH_CONFIGS[SH_OFF]);
    rp_engine_destroy(e);
}

// Each prompt alone (when `alone`), then all of them (and two more copies) at once, under configuration c.
static void compare(const sh_config *c, int k_max, bool alone)
{
    rp_engine *e;
    rp_engine_stats es;
    if (alone) {
        e = sh_engine(c, k_max, 1, 0, 0);
        for (int i = 0; i < N_P; i++)
            GOT[i].gp = REF[i].gp;
        sh_run(e, GOT, N_P, false);
        for (int i = 0; i < N_P; i++)
            sh_same(&GOT[i], &REF[i], c->name, i);
        sh_drafted(GOT, N_P, c);
        rp_engine_get_stats(e, &es);
        assert_int_equal(es.kv_blocks_used, 0);
        rp_engine_destroy(e);
    }
    e = sh_engine(c, k_max, 8, 0, 0);
    for (int i = 0; i < 8; i++)
        GOT[i].gp = REF[i % N_P].gp;
    sh_run(e, GOT, 8, true);
    for (int i = 0; i < 8; i++)
        sh_same(&GOT[i], &REF[i % N_P], c->name, i);
    sh_drafted(GOT, 8, c);
    rp_engine_get_stats(e, &es);
    assert_int_equal(es.kv_blocks_used, 0);
    rp_engine_destroy(e);
}

/* ---- greedy ---------------------------------------------------------------------- */

static void test_greedy(void **state)
{
    reference(GEN, NULL);
    int stops = 0;
    for (int i = 0; i < N_P; i++)
        stops += REF[i].finish == RP_GEN_STOP;
    assert_true(stops > 0);                       // some end with an end-of-generation token: drafts ran into it
    for (int c = SH_NGRAM; c < SH_N_CONFIGS; c++) // one at a time: auto only (the rest: the long test)
        compare(&SH_CONFIGS[c], cap(c), c == SH_AUTO);
}

// Logprobs of every token, bit for bit: the rows verified after a rejection
// see a KV cache rolled back to exactly what plain decoding had.
static void with_logprobs(rp_gen_params *gp, int i)
{
    gp->n_logprobs = i % 2 ? 5 : RP_GEN_TOP_MAX;
    gp->ignore_eos = i == 4; // a long run of prose: MTP and the draft model get things wrong
}

static void test_logprobs_and_rollback(void **state)
{
    reference(GEN, with_logprobs);
    const int cs[] = {SH_NGRAM, SH_MTP, SH_DRAFT};
    for (int k = 0; k < 3; k++) {
        const sh_config *c = &SH_CONFIGS[cs[k]];
        rp_engine *e = sh_engine(c, cap(cs[k]), 4, 0, 0);
        for (int i = 0; i < N_P; i++)
            GOT[i].gp = REF[i].gp;
        sh_run(e, GOT, N_P, true);
        for (int i = 0; i < N_P; i++)
            sh_same(&GOT[i], &REF[i], c->name, i);
        sh_drafted(GOT, N_P, c);
        long d, a;
        sh_counts(GOT, N_P, (rp_spec_method)(cs[k] - SH_NGRAM), &d, &a);
        assert_true(a < d); // drafts were rejected: the KV was rolled back
        rp_engine_destroy(e);
    }
}

/* ---- sampling ----------------------------------------------------------------------- */

static void sampled(rp_gen_params *gp, int i)
{
    gp->sample.temperature = 0.8f;
    gp->sample.top_p = 0.95f;
    gp->sample.top_k = i % 2 ? 40 : 0;
    gp->sample.min_p = i == 3 ? 0.05f : 0.0f;
    gp->sample.repetition_penalty = i % 3 == 0 ? 1.1f : 1.0f;
    gp->sample.presence_penalty = i % 3 == 1 ? 0.4f : 0.0f;
    gp->sample.frequency_penalty = i % 3 == 2 ? 0.3f : 0.0f;
    gp->sample.seed = 1000 + (uint64_t)i;
    gp->n_logprobs = 3;
}

// With a seed, speculation gives the same text run to run - and the same as
// without it: each emitted token is drawn as plain sampling draws it.
static void test_sampling(void **state)
{
    reference(GEN, sampled);
    for (int c = SH_NGRAM; c <= SH_DRAFT; c++) // auto and adaptive: the long test
        compare(&SH_CONFIGS[c], cap(c), false);
    // Another seed, another text (the seed is used).
    rp_engine *e = sh_engine(&SH_CONFIGS[SH_AUTO], 0, 1, 0, 0);
    GOT[0].gp = REF[4].gp;
    GOT[0].gp.sample.seed = 77;
    sh_run(e, GOT, 1, false);
    assert_true(GOT[0].n != REF[4].n || memcmp(GOT[0].ids, REF[4].ids, (size_t)GOT[0].n * sizeof(int32_t)) != 0);
    rp_engine_destroy(e);
}

/* ---- JSON mode -------------------------------------------------------------------- */

static void json_mode(rp_gen_params *gp, int i)
{
    gp->json = true;
    gp->n_logprobs = 2;
    if (i >= 3) {
        gp->sample.temperature = 1.0f;
        gp->sample.seed = (uint64_t)i;
    }
}

static void test_json_mode(void **state)
{
    reference(GEN, json_mode);
    for (int c = SH_NGRAM; c <= SH_DRAFT; c++)
        compare(&SH_CONFIGS[c], cap(c), false);
}

// A JSON Schema (the grammar with keys in order, bounded integers, a union at the root):
// drafts run through the same matcher, so the text must not change either.
static rp_json_schema *SCHEMA;

static void schema_mode(rp_gen_params *gp, int i)
{
    json_mode(gp, i);
    if (!SCHEMA) {
        json_t *j = json_loads("{\"anyOf\":[{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":"
                               "{\"id\":{\"type\":\"integer\",\"minimum\":0},\"title\":{\"type\":\"string\"}},"
                               "\"required\":[\"id\",\"title\"],\"additionalProperties\":false}},"
                               "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"pattern\":"
                               "\"^[A-Z][a-z]+( [A-Z][a-z]+)*$\"},\"age\":{\"type\":\"integer\",\"minimum\":0,"
                               "\"maximum\":150}},\"required\":[\"name\",\"age\"]}]}",
                               0, NULL);
        assert_non_null(j);
        assert_int_equal(rp_json_schema_compile(j, NULL, &SCHEMA, NULL), RP_OK);
        json_decref(j);
    }
    gp->schema = SCHEMA;
}

static void test_schema_mode(void **state)
{
    reference(GEN, schema_mode);
    for (int c = SH_NGRAM; c <= SH_DRAFT; c++)
        compare(&SH_CONFIGS[c], cap(c), false);
    rp_json_schema_unref(SCHEMA);
    SCHEMA = NULL;
}

/* ---- limits ----------------------------------------------------------------------- */

// max_tokens cuts drafts: a request never goes past it, whatever it drafted.
static void test_max_tokens(void **state)
{
    const int limits[] = {1, 3};
    for (int l = 0; l < 2; l++) {
        reference(limits[l], NULL);
        for (int c = SH_NGRAM; c <= SH_MTP; c++) {
            rp_engine *e = sh_engine(&SH_CONFIGS[c], cap(c), 8, 0, 0);
            for (int i = 0; i < N_P; i++)
                GOT[i].gp = REF[i].gp;
            sh_run(e, GOT, N_P, true);
            for (int i = 0; i < N_P; i++) {
                sh_same(&GOT[i], &REF[i], SH_CONFIGS[c].name, i);
                assert_true(GOT[i].stats.n_generated <= limits[l]);
            }
            rp_engine_destroy(e);
        }
    }
}

// A context just past the prompt: LENGTH at the same token.
static void test_context_limit(void **state)
{
    for (int c = SH_OFF; c <= SH_AUTO; c++) {
        rp_engine_params ep;
        rp_engine_params_default(&ep);
        ep.n_ctx = P[0].n + 20;
        ep.spec.method = SH_CONFIGS[c].method;
        ep.spec.adaptive = SH_CONFIGS[c].adaptive;
        ep.spec.draft = SH_CONFIGS[c].draft ? SH_D : NULL;
        ep.spec.draft_tok = SH_CONFIGS[c].draft ? SH_DTOK : NULL;
        rp_engine *e;
        assert_int_equal(rp_engine_create(SH_M, SH_TOK, &ep, &e), RP_OK);
        GOT[c].gp = sh_greedy(&P[0], 0); // until the context is full
        sh_run(e, &GOT[c], 1, false);
        assert_int_equal(GOT[c].finish, RP_GEN_LENGTH);
        assert_int_equal(GOT[c].n, 20);
        if (c > SH_OFF)
            sh_same(&GOT[c], &GOT[SH_OFF], SH_CONFIGS[c].name, 0);
        rp_engine_destroy(e);
    }
}

/* ---- preemption and cancellation ---------------------------------------------------- */

// A pool for about two requests at a time: drafts never preempt anybody, and
// requests preempted while drafting give the same tokens. Whether the pool runs dry
// depends on when the engine admits the requests against how far the others got (and
// what their prompts share in the prefix cache), so a run without a preemption is tried
// again, up to three times; every run must give the same tokens.
static void test_preemption(void **state)
{
    reference(GEN, NULL);
    int need = 0;
    for (int i = 0; i < N_P; i++)
        need = P[i].n + GEN > need ? P[i].n + GEN : need;
    for (int c = SH_NGRAM; c <= SH_MTP; c++) {
        unsigned long long preemptions = 0;
        for (int run = 0; run < 3 && preemptions == 0; run++) {
            rp_engine *e = sh_engine(&SH_CONFIGS[c], cap(c), 16, need + need / 2, 4);
            for (int i = 0; i < 8; i++)
                GOT[i].gp = REF[i % N_P].gp;
            sh_run(e, GOT, 8, true);
            for (int i = 0; i < 8; i++)
                sh_same(&GOT[i], &REF[i % N_P], SH_CONFIGS[c].name, i);
            sh_drafted(GOT, 8, &SH_CONFIGS[c]);
            rp_engine_stats es;
            rp_engine_get_stats(e, &es);
            preemptions = es.preemptions;
            print_message("  %s, run %d: %llu preemptions\n", SH_CONFIGS[c].name, run + 1, preemptions);
            assert_int_equal(es.kv_blocks_used, 0);
            rp_engine_destroy(e);
        }
        assert_true(preemptions > 0);
    }
}

// Cancelled while drafting: no token after the cancel, every sampled token read, the KV back.
static void test_cancel(void **state)
{
    for (int c = SH_NGRAM; c <= SH_DRAFT; c++) {
        rp_engine *e = sh_engine(&SH_CONFIGS[c], cap(c), 2, 0, 0);
        rp_gen_params gp = sh_greedy(&P[0], 3000);
        gp.ignore_eos = true;
        rp_gen *g = NULL, *h = NULL;
        assert_int_equal(rp_engine_submit(e, &gp, &g), RP_OK);
        assert_int_equal(rp_engine_submit(e, &gp, &h), RP_OK);
        rp_gen_token buf[8];
        int n = 0, k;
        while (n < 30) {
            assert_int_equal(rp_gen_read(g, SH_READ_GUARD, buf, 8, &k), RP_GEN_RUNNING);
            assert_true(k > 0);
            n += k;
        }
        rp_gen_cancel(g);
        rp_gen_stats at;
        rp_gen_get_stats(g, &at);
        static sh_result rest;
        assert_int_equal(sh_read_all(g, &rest), RP_GEN_CANCELLED);
        rp_gen_stats after;
        rp_gen_get_stats(g, &after);
        assert_int_equal(after.n_generated, at.n_generated);
        assert_int_equal(n + rest.n, after.n_generated);
        rp_gen_release(g);
        rp_gen_release(h); // still running: cancelled by the release
        rp_engine_destroy(e);
    }
}

/* ---- the prefix cache ----------------------------------------------------------------- */

// A request whose prompt starts with cached blocks (the same prompt again, and a
// follow-up turn after the first reply) drafts from there - MTP from the MTP
// rows that came with the blocks - and gives the same tokens.
static void test_prefix_cache(void **state)
{
    reference(GEN, NULL);
    // The follow-up: prompt 0, its reply, and one more user turn.
    static int32_t follow[4096];
    int n = 0;
    memcpy(follow, P[0].ids, (size_t)P[0].n * sizeof(int32_t));
    n += P[0].n;
    memcpy(follow + n, REF[0].ids, (size_t)REF[0].n * sizeof(int32_t));
    n += REF[0].n;
    sh_prompt more = sh_chat("Now rename `values` to `xs` too.");
    memcpy(follow + n, more.ids, (size_t)more.n * sizeof(int32_t));
    n += more.n;
    rp_free(more.ids);
    sh_prompt fp = {follow, n};
    static sh_result want[2], got[3];
    rp_engine *e = sh_engine(&SH_CONFIGS[SH_OFF], 0, 1, 0, 0);
    want[0].gp = sh_greedy(&P[0], GEN);
    want[1].gp = sh_greedy(&fp, GEN);
    sh_run(e, want, 2, false);
    rp_engine_destroy(e);
    for (int c = SH_MTP; c <= SH_DRAFT; c++) {
        e = sh_engine(&SH_CONFIGS[c], cap(c), 1, 0, 0);
        got[0].gp = got[1].gp = want[0].gp;
        got[2].gp = want[1].gp;
        sh_run(e, got, 3, false);
        sh_same(&got[0], &want[0], SH_CONFIGS[c].name, 0);
        sh_same(&got[1], &want[0], SH_CONFIGS[c].name, 1);
        sh_same(&got[2], &want[1], SH_CONFIGS[c].name, 2);
        assert_true(got[1].stats.n_cached > 0 && got[2].stats.n_cached > P[0].n / 2);
        sh_drafted(got + 1, 2, &SH_CONFIGS[c]); // the cached runs drafted and had drafts accepted
        rp_engine_destroy(e);
    }
}

/* ---- configuration ------------------------------------------------------------------ */

// Default parameters with a small context (a pool of the model's 32k is slow to make).
static void params(rp_engine_params *ep)
{
    rp_engine_params_default(ep);
    ep->n_ctx = 1024;
}

static void test_bad_config(void **state)
{
    rp_engine_params ep;
    rp_engine *e = (rp_engine *)&e;
    // method mtp on a model without an MTP layer
    params(&ep);
    ep.spec.method = RP_ENGINE_SPEC_MTP;
    assert_int_equal(rp_engine_create(SH_D, SH_DTOK, &ep, &e), RP_ERR_INVALID);
    assert_null(e);
    assert_non_null(strstr(rp_error_message(), "no MTP layer"));
    // method draft without a draft model
    params(&ep);
    ep.spec.method = RP_ENGINE_SPEC_DRAFT;
    assert_int_equal(rp_engine_create(SH_M, SH_TOK, &ep, &e), RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "needs a draft model"));
    // out of range
    params(&ep);
    ep.spec.k_max = RP_SPEC_K_MAX + 1;
    assert_int_equal(rp_engine_create(SH_M, SH_TOK, &ep, &e), RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "num_speculative_tokens"));
    params(&ep);
    ep.spec.ngram_min = 5;
    ep.spec.ngram_max = 3;
    assert_int_equal(rp_engine_create(SH_M, SH_TOK, &ep, &e), RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "n-gram"));
    params(&ep);
    ep.spec.method = (rp_engine_spec_method)9;
    assert_int_equal(rp_engine_create(SH_M, SH_TOK, &ep, &e), RP_ERR_INVALID);
    // a draft model twice, or without its tokenizer
    params(&ep);
    ep.spec.draft = SH_D;
    assert_int_equal(rp_engine_create(SH_M, SH_TOK, &ep, &e), RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "tokenizer"));
    ep.spec.draft_tok = SH_DTOK;
    ep.spec.draft_path = "models/rapid-tiny-draft";
    assert_int_equal(rp_engine_create(SH_M, SH_TOK, &ep, &e), RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "twice"));
    // A draft model whose tokenizer is not the model's: the message names the difference.
    params(&ep);
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", rp_test_source("tests/data/models/qwen3"));
    ep.spec.draft_path = dir;
    assert_int_equal(rp_engine_create(SH_M, SH_TOK, &ep, &e), RP_ERR_INVALID);
    print_message("  %s\n", rp_error_message());
    assert_non_null(strstr(rp_error_message(), "draft model"));
    assert_non_null(strstr(rp_error_message(), "tokenizer"));
    // A draft model path that does not exist.
    ep.spec.draft_path = "/nonexistent/draft";
    assert_int_not_equal(rp_engine_create(SH_M, SH_TOK, &ep, &e), RP_OK);
    assert_non_null(strstr(rp_error_message(), "/nonexistent/draft"));
    // Loading by path works, and off means off.
    snprintf(dir, sizeof(dir), "%s", rp_test_source("models/rapid-tiny-draft"));
    ep.spec.draft_path = dir;
    assert_int_equal(rp_engine_create(SH_M, SH_TOK, &ep, &e), RP_OK);
    rp_engine_stats es;
    rp_engine_get_stats(e, &es);
    for (int m = 0; m < RP_SPEC_N_METHODS; m++)
        assert_true(es.spec_methods[m]);
    rp_engine_destroy(e);
    params(&ep);
    ep.spec.method = RP_ENGINE_SPEC_OFF;
    assert_int_equal(rp_engine_create(SH_M, SH_TOK, &ep, &e), RP_OK);
    rp_engine_get_stats(e, &es);
    for (int m = 0; m < RP_SPEC_N_METHODS; m++)
        assert_false(es.spec_methods[m]);
    rp_engine_destroy(e);
    // The default engine: prompt lookup and MTP (the model has it), no draft model.
    params(&ep);
    assert_int_equal(rp_engine_create(SH_M, SH_TOK, &ep, &e), RP_OK);
    rp_engine_get_stats(e, &es);
    assert_true(es.spec_methods[RP_SPEC_NGRAM] && es.spec_methods[RP_SPEC_MTP] && !es.spec_methods[RP_SPEC_DRAFT]);
    rp_engine_destroy(e);
}

// The engine's counters agree with the requests' and with themselves.
static void test_stats(void **state)
{
    reference(GEN, NULL);
    rp_engine *e = sh_engine(&SH_CONFIGS[SH_AUTO], 0, 8, 0, 0);
    for (int r = 0; r < 2; r++) { // pinned per method through two engines would do too; auto mixes them
        for (int i = 0; i < N_P; i++)
            GOT[i].gp = REF[i].gp;
        sh_run(e, GOT, N_P, true);
        for (int i = 0; i < N_P; i++)
            sh_same(&GOT[i], &REF[i], "auto", i);
    }
    rp_engine_stats es;
    rp_engine_get_stats(e, &es);
    rp_engine_destroy(e);
    uint64_t steps_min = 0;
    for (int m = 0; m < RP_SPEC_N_METHODS; m++) {
        uint64_t d = 0, a = 0;
        for (int p = 0; p < RP_SPEC_POS; p++) {
            d += es.spec_pos_drafted[m][p];
            a += es.spec_pos_accepted[m][p];
            assert_true(es.spec_pos_accepted[m][p] <= es.spec_pos_drafted[m][p]);
            if (p > 0 && p < RP_SPEC_POS - 1) // a position is only drafted after the one before it
                assert_true(es.spec_pos_drafted[m][p] <= es.spec_pos_drafted[m][p - 1]);
        }
        assert_int_equal(d, es.spec_drafted[m]);
        assert_int_equal(a, es.spec_accepted[m]);
        steps_min += es.spec_pos_drafted[m][0];
        long gd, ga; // the last run's requests: at most the engine's totals
        sh_counts(GOT, N_P, (rp_spec_method)m, &gd, &ga);
        assert_true((uint64_t)gd <= es.spec_drafted[m] && (uint64_t)ga <= es.spec_accepted[m]);
    }
    assert_int_equal(es.spec_steps, steps_min);
    assert_true(es.spec_steps > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_logprobs_and_rollback),
        cmocka_unit_test(test_sampling),
        cmocka_unit_test(test_json_mode),
        cmocka_unit_test(test_schema_mode),
        cmocka_unit_test(test_max_tokens),
        cmocka_unit_test(test_context_limit),
        cmocka_unit_test(test_preemption),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_prefix_cache),
        cmocka_unit_test(test_stats),
    };
    if (getenv("RP_TEST_FILTER"))
        cmocka_set_test_filter(getenv("RP_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
