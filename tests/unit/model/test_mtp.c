/*
 * test_mtp.c - the multi-token-prediction layer of the bundled model.
 *
 * tests/data/rapid-tiny/fixtures.json holds, for 3 prompts, the MTP layer's
 * float32 logits from tools/train/model.py (whose main logits agree with
 * transformers to ~2e-5): row t combines h[t] (after model.norm) and
 * embed(ids[t+1]); argmax and top-16 per row, all logits of the last row.
 * Rapid runs the main model over the prompt with rp_model_forward_ex, then
 * rp_model_forward_mtp over (ids[1..T), positions 0..T-2, h[0..T-2]).
 *
 * Also: a batch of several sequences gives each one's logits bit for bit; MTP
 * KV truncated after a draft chain and recomputed gives bit-identical logits; a
 * GGUF conversion carries the MTP layer (bit-identical in BF16); models without
 * one refuse rp_model_forward_mtp; bad batches are errors.
 */
#define RP_TEST_TMP_PREFIX "rp-test-mtp"
#include "test_model.h"
#include "model_harness.h"
#include "test_tmp.h"

#include "gguf/gguf.h"

#define CLEAR_MARGIN 1e-3
#define MAX_NORM_ERR 1e-3

static rp_model *tiny;

static int setup(void **state)
{
    if (rp_test_tmp_setup(state))
        return -1;
    rp_model_params p;
    rp_model_params_default(&p);
    p.quiet = true;
    return rp_test_load(rp_test_source("models/rapid-tiny"), 2, true, &p, &tiny) ? -1 : 0;
}

static int teardown(void **state)
{
    rp_model_destroy(tiny);
    return rp_test_tmp_teardown(state);
}

static json_t *load_fixtures(void)
{
    json_error_t e;
    json_t *f = json_load_file(rp_test_source("tests/data/rapid-tiny/fixtures.json"), 0, &e);
    if (!f)
        fail_msg("fixtures.json: %s", e.text);
    return f;
}

// One sequence in a pool, driven through the main model and the MTP layer.
typedef struct run {
    rp_kv_seq seq;
    int32_t *pos, *sq;
    bool *want;
} run;

static void run_init(run *r, int cap)
{
    rp_kv_seq_init(&r->seq);
    r->pos = calloc((size_t)cap, sizeof(int32_t));
    r->sq = calloc((size_t)cap, sizeof(int32_t));
    r->want = calloc((size_t)cap, sizeof(bool));
}

static void run_deinit(rp_kv_pool *kv, run *r)
{
    rp_kv_seq_deinit(kv, &r->seq);
    free(r->pos);
    free(r->sq);
    free(r->want);
}

// Main model over ids at positions [at, at+n), every row wanting logits and hidden.
static void main_step(rp_model *m, rp_kv_pool *kv, run *r, const int32_t *ids, int at, int n, float *logits,
                      float *hidden)
{
    assert_int_equal(rp_kv_seq_reserve(kv, &r->seq, at + n), RP_OK);
    for (int i = 0; i < n; i++) {
        r->pos[i] = at + i;
        r->want[i] = true;
    }
    rp_kv_seq *seqs[1] = {&r->seq};
    rp_batch b = {n, ids, r->pos, r->sq, r->want, seqs, 1, NULL};
    if (rp_model_forward_ex(m, kv, &b, logits, hidden))
        fail_msg("forward: %s", rp_error_message());
}

// MTP rows at positions [at, at+n): tokens next[i] = x[at+i+1], hidden rows h[at+i].
static void mtp_step(rp_model *m, rp_kv_pool *kv, run *r, const int32_t *next, int at, int n, const float *hidden,
                     float *logits, float *hidden_out)
{
    for (int i = 0; i < n; i++) {
        r->pos[i] = at + i;
        r->want[i] = true;
    }
    rp_kv_seq *seqs[1] = {&r->seq};
    rp_batch b = {n, next, r->pos, r->sq, r->want, seqs, 1, NULL};
    if (rp_model_forward_mtp(m, kv, &b, hidden, logits, hidden_out))
        fail_msg("mtp forward: %s", rp_error_message());
}

// MTP logits of every prompt row (T-1 rows) of ids, K and V cached as kv_type (float32
// where the logits are compared with transformers or across converted files to 1e-5).
static void mtp_over_prompt(rp_model *m, const int32_t *ids, int T, rp_dtype kv_type, float *mtp_logits)
{
    const rp_model_config *c = rp_model_get_config(m);
    rp_kv_pool *kv;
    assert_int_equal(rp_model_kv_create(m, 16, (T + 15) / 16 + 1, kv_type, &kv), RP_OK);
    run r;
    run_init(&r, T);
    float *logits = malloc((size_t)T * c->n_vocab * sizeof(float));
    float *hidden = malloc((size_t)T * c->dim * sizeof(float));
    main_step(m, kv, &r, ids, 0, T, logits, hidden);
    mtp_step(m, kv, &r, ids + 1, 0, T - 1, hidden, mtp_logits, NULL);
    free(logits);
    free(hidden);
    run_deinit(kv, &r);
    rp_kv_pool_destroy(kv);
}

// m's MTP logits over each prompt of `prompts` that has an "mtp" object (argmax and
// top-16 per row, all logits of the last row) against the reference; returns how many.
static int check_mtp_reference(rp_model *m, json_t *prompts, const char *what)
{
    const rp_model_config *c = rp_model_get_config(m);
    int V = c->n_vocab;
    size_t pi;
    json_t *p;
    int n_prompts = 0;
    json_array_foreach(prompts, pi, p) {
        json_t *ref = json_object_get(p, "mtp");
        if (!ref)
            continue;
        n_prompts++;
        int T;
        int32_t *ids = harness_ids(json_object_get(p, "prompt_ids"), &T);
        float *got = malloc((size_t)(T - 1) * V * sizeof(float));
        mtp_over_prompt(m, ids, T, RP_DTYPE_F32, got);
        json_t *amax = json_object_get(ref, "argmax"), *tids = json_object_get(ref, "top16_ids"),
               *tvals = json_object_get(ref, "top16_logits"), *last = json_object_get(ref, "last_row_logits");
        assert_int_equal((int)json_array_size(amax), T - 1);
        assert_int_equal((int)json_array_size(last), V);
        int clear = 0;
        for (int r = 0; r < T - 1; r++) {
            const float *row = got + (size_t)r * V;
            json_t *ri = json_array_get(tids, (size_t)r), *rv = json_array_get(tvals, (size_t)r);
            for (size_t j = 0; j < json_array_size(ri); j++) {
                int id = (int)json_integer_value(json_array_get(ri, j));
                double want = json_number_value(json_array_get(rv, j));
                if (fabs(row[id] - want) > 1e-3 * (1 + fabs(want)))
                    fail_msg("%s prompt %zu MTP row %d: logit of token %d is %.6f, reference %.6f", what, pi, r, id,
                             (double)row[id], want);
            }
            double margin = json_number_value(json_array_get(rv, 0)) - json_number_value(json_array_get(rv, 1));
            if (margin >= CLEAR_MARGIN) {
                int want = (int)json_integer_value(json_array_get(amax, (size_t)r));
                if (harness_argmax(row, V) != want)
                    fail_msg("%s prompt %zu MTP row %d: argmax %d, reference %d", what, pi, r,
                             harness_argmax(row, V), want);
                clear++;
            }
        }
        double num = 0, den = 0;
        const float *lg = got + (size_t)(T - 2) * V;
        for (int i = 0; i < V; i++) {
            double want = json_number_value(json_array_get(last, (size_t)i));
            num += (lg[i] - want) * (lg[i] - want);
            den += want * want;
        }
        double err = sqrt(num / (den > 0 ? den : 1));
        if (!(err < MAX_NORM_ERR))
            fail_msg("%s prompt %zu: MTP last-row normalized logit error %.3g", what, pi, err);
        assert_true(clear > (T - 1) / 2);
        print_message("  %s prompt %zu: %d MTP rows, %d argmax checked, last-row error %.2g\n", what, pi, T - 1,
                      clear, err);
        free(got);
        free(ids);
    }
    return n_prompts;
}

static void test_matches_reference(void **state)
{
    (void)state;
    const rp_model_config *c = rp_model_get_config(tiny);
    assert_true(rp_model_has_mtp(tiny));
    assert_int_equal(c->n_mtp, 1);
    assert_int_equal(rp_model_kv_layers(tiny), c->n_layer + 1);
    json_t *f = load_fixtures();
    assert_int_equal(check_mtp_reference(tiny, json_object_get(f, "prompts"), "rapid-tiny"), 3);
    json_decref(f);
}

// The Qwen3.5 hybrids' MTP layer (gated attention, (1 + w) norms; the MoE one with experts
// and a shared expert) against transformers' own modules (tools/fixtures/make_models.py,
// make_hybrid_mtp): the main model's logits are those of the model without it.
static void test_hybrid_matches_reference(void **state)
{
    (void)state;
    if (!harness_device_has_gdn()) {
        print_message("  skipped: %s has no Gated DeltaNet kernels yet\n", rp_test_device());
        skip();
    }
    static const char *names[] = {"qwen3.5-mtp", "qwen3.5-moe-mtp"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char dir[256];
        snprintf(dir, sizeof(dir), "tests/data/models/%s", names[i]);
        rp_model_params p;
        rp_model_params_default(&p);
        p.quiet = true;
        rp_model *m;
        assert_int_equal(rp_test_load(rp_test_source(dir), 2, true, &p, &m), RP_OK);
        const rp_model_config *c = rp_model_get_config(m);
        assert_true(rp_model_has_mtp(m));
        assert_true(rp_model_has_state(m));
        assert_int_equal(c->n_mtp, 1);
        // the attention layers and the MTP layer hold KV; the Gated DeltaNet layers state
        assert_int_equal(rp_model_kv_layers(m), c->n_layer - rp_config_gdn_layers(c) + 1);
        assert_int_equal(rp_config_layer_moe(c, c->n_layer), c->n_expert > 0);
        snprintf(dir, sizeof(dir), "tests/data/models/%s/reference.json", names[i]);
        json_error_t e;
        json_t *f = json_load_file(rp_test_source(dir), 0, &e);
        if (!f)
            fail_msg("%s: %s", dir, e.text);
        assert_int_equal(check_mtp_reference(m, json_object_get(f, "prompts"), names[i]), 3);
        json_decref(f);
        rp_model_destroy(m);
    }
}

// rp_model_forward_ex gives rp_model_forward's logits bit for bit, and hidden rows
// only for the tokens that want logits, or (want_hidden) a hidden row alone.
static void test_forward_ex_same_logits(void **state)
{
    (void)state;
    const rp_model_config *c = rp_model_get_config(tiny);
    int V = c->n_vocab, D = c->dim;
    const int32_t ids[] = {5, 300, 41, 77, 1020, 9, 9, 260};
    enum { T = 8 };
    rp_kv_pool *kv;
    assert_int_equal(rp_model_kv_create(tiny, 16, 4, RP_DTYPE_F16, &kv), RP_OK);
    rp_kv_seq s1, s2;
    rp_kv_seq_init(&s1);
    rp_kv_seq_init(&s2);
    assert_int_equal(rp_kv_seq_reserve(kv, &s1, T), RP_OK);
    assert_int_equal(rp_kv_seq_reserve(kv, &s2, T), RP_OK);
    int32_t pos[T], sq[T] = {0};
    bool want[T];
    for (int i = 0; i < T; i++) {
        pos[i] = i;
        want[i] = i % 3 == 0 || i == T - 1; // rows 0, 3, 6, 7
    }
    float *a = malloc(4 * (size_t)V * sizeof(float)), *b = malloc(4 * (size_t)V * sizeof(float));
    float *h = malloc(5 * (size_t)D * sizeof(float));
    for (int i = 0; i < 5 * D; i++)
        h[i] = 12345.0f; // the fifth row must stay untouched
    rp_kv_seq *seqs1[1] = {&s1}, *seqs2[1] = {&s2};
    rp_batch b1 = {T, ids, pos, sq, want, seqs1, 1, NULL}, b2 = {T, ids, pos, sq, want, seqs2, 1, NULL};
    assert_int_equal(rp_model_forward(tiny, kv, &b1, a), RP_OK);
    assert_int_equal(rp_model_forward_ex(tiny, kv, &b2, b, h), RP_OK);
    assert_memory_equal(a, b, 4 * (size_t)V * sizeof(float));
    for (int r = 0; r < 4; r++) {
        double ss = 0;
        for (int i = 0; i < D; i++) {
            assert_true(isfinite(h[(size_t)r * D + i]));
            ss += h[(size_t)r * D + i] * h[(size_t)r * D + i];
        }
        assert_true(ss > 0);
    }
    for (int i = 4 * D; i < 5 * D; i++)
        assert_true(h[i] == 12345.0f);
    // logits NULL: hidden rows only, the same ones.
    float *h2 = malloc(4 * (size_t)D * sizeof(float));
    assert_int_equal(rp_model_forward_ex(tiny, kv, &b2, NULL, h2), RP_OK);
    assert_memory_equal(h, h2, 4 * (size_t)D * sizeof(float));
    free(h2);
    // want_hidden: every token's hidden row (as when all want logits), logits only
    // for those that want them (the same as above), in batch order.
    bool all[T], only_hidden[T];
    for (int i = 0; i < T; i++) {
        all[i] = true;
        only_hidden[i] = !want[i] && i != 4; // row 4 wants neither
    }
    float *ha = malloc(T * (size_t)D * sizeof(float)), *la = malloc(T * (size_t)V * sizeof(float));
    float *hw = malloc(T * (size_t)D * sizeof(float)), *lw = malloc(4 * (size_t)V * sizeof(float));
    rp_batch ba = {T, ids, pos, sq, all, seqs2, 1, NULL}, bw = {T, ids, pos, sq, want, seqs2, 1, only_hidden};
    assert_int_equal(rp_model_forward_ex(tiny, kv, &ba, la, ha), RP_OK);
    for (int i = 0; i < T * D; i++)
        hw[i] = 777.0f;
    assert_int_equal(rp_model_forward_ex(tiny, kv, &bw, lw, hw), RP_OK);
    assert_memory_equal(lw, a, 4 * (size_t)V * sizeof(float));
    for (int i = 0, r = 0; i < T; i++)
        if (i != 4)
            assert_memory_equal(hw + (size_t)r++ * D, ha + (size_t)i * D, (size_t)D * sizeof(float));
    for (int i = (T - 1) * D; i < T * D; i++)
        assert_true(hw[i] == 777.0f); // 7 rows written, not 8
    // Without hidden, want_hidden is ignored: rp_model_forward's logits.
    assert_int_equal(rp_model_forward_ex(tiny, kv, &bw, lw, NULL), RP_OK);
    assert_memory_equal(lw, a, 4 * (size_t)V * sizeof(float));
    free(ha);
    free(la);
    free(hw);
    free(lw);
    free(a);
    free(b);
    free(h);
    rp_kv_seq_deinit(kv, &s1);
    rp_kv_seq_deinit(kv, &s2);
    rp_kv_pool_destroy(kv);
}

// Three sequences together in one main batch and one MTP batch (interleaved,
// different lengths) give each one's logits alone, bit for bit.
static void test_batch_equals_alone(void **state)
{
    (void)state;
    const rp_model_config *c = rp_model_get_config(tiny);
    int V = c->n_vocab, D = c->dim;
    json_t *f = load_fixtures();
    json_t *prompts = json_object_get(f, "prompts");
    enum { S = 3 };
    const int lens[S] = {40, 23, 57};
    int32_t *ids[S];
    float *alone[S];
    int total = 0;
    for (int s = 0; s < S; s++) {
        int n;
        ids[s] = harness_ids(json_object_get(json_array_get(prompts, (size_t)s * 2 + 1), "prompt_ids"), &n);
        assert_true(n >= lens[s]);
        alone[s] = malloc((size_t)(lens[s] - 1) * V * sizeof(float));
        mtp_over_prompt(tiny, ids[s], lens[s], RP_DTYPE_F16, alone[s]);
        total += lens[s];
    }
    rp_kv_pool *kv;
    assert_int_equal(rp_model_kv_create(tiny, 16, 16, RP_DTYPE_F16, &kv), RP_OK);
    rp_kv_seq seq[S];
    rp_kv_seq *seqs[S];
    for (int s = 0; s < S; s++) {
        rp_kv_seq_init(&seq[s]);
        seqs[s] = &seq[s];
        assert_int_equal(rp_kv_seq_reserve(kv, &seq[s], lens[s]), RP_OK);
    }
    // Round-robin interleaving of the three prompts.
    int32_t *tok = calloc((size_t)total, sizeof(int32_t)), *pos = calloc((size_t)total, sizeof(int32_t)),
            *sq = calloc((size_t)total, sizeof(int32_t));
    bool *want = calloc((size_t)total, sizeof(bool));
    int n = 0;
    for (int i = 0; n < total; i++)
        for (int s = 0; s < S; s++)
            if (i < lens[s]) {
                tok[n] = ids[s][i];
                pos[n] = i;
                sq[n] = s;
                want[n] = true;
                n++;
            }
    float *logits = malloc((size_t)total * V * sizeof(float)), *hidden = malloc((size_t)total * D * sizeof(float));
    rp_batch b = {total, tok, pos, sq, want, seqs, S, NULL};
    assert_int_equal(rp_model_forward_ex(tiny, kv, &b, logits, hidden), RP_OK);
    // MTP batch: each token but the last of each sequence, with its row's hidden state.
    int32_t *mtok = calloc((size_t)total, sizeof(int32_t));
    float *mh = malloc((size_t)total * D * sizeof(float)), *mlog = malloc((size_t)total * V * sizeof(float));
    int m = 0;
    int32_t *mpos = calloc((size_t)total, sizeof(int32_t)), *msq = calloc((size_t)total, sizeof(int32_t));
    for (int i = 0; i < total; i++) {
        int s = sq[i];
        if (pos[i] == lens[s] - 1)
            continue;
        mtok[m] = ids[s][pos[i] + 1];
        mpos[m] = pos[i];
        msq[m] = s;
        memcpy(mh + (size_t)m * D, hidden + (size_t)i * D, (size_t)D * sizeof(float));
        m++;
    }
    rp_batch mb = {m, mtok, mpos, msq, want, seqs, S, NULL};
    assert_int_equal(rp_model_forward_mtp(tiny, kv, &mb, mh, mlog, NULL), RP_OK);
    for (int i = 0; i < m; i++)
        if (memcmp(mlog + (size_t)i * V, alone[msq[i]] + (size_t)mpos[i] * V, (size_t)V * sizeof(float)) != 0)
            fail_msg("sequence %d MTP row %d differs in a batch", msq[i], mpos[i]);
    for (int s = 0; s < S; s++) {
        rp_kv_seq_deinit(kv, &seq[s]);
        free(ids[s]);
        free(alone[s]);
    }
    rp_kv_pool_destroy(kv);
    free(tok);
    free(pos);
    free(sq);
    free(want);
    free(logits);
    free(hidden);
    free(mtok);
    free(mh);
    free(mlog);
    free(mpos);
    free(msq);
    json_decref(f);
}

// A draft chain writes main and MTP KV past the verified end; after truncation
// the next steps give exactly the logits of a sequence that never drafted.
static void test_truncate_rerun(void **state)
{
    (void)state;
    const rp_model_config *c = rp_model_get_config(tiny);
    int V = c->n_vocab, D = c->dim;
    json_t *f = load_fixtures();
    int T;
    int32_t *ids = harness_ids(json_object_get(json_array_get(json_object_get(f, "prompts"), 1), "prompt_ids"), &T);
    enum { P = 30, K = 4, NEXT = 3 }; // verified prefix, drafts, steps compared after
    assert_true(T >= P + NEXT + 1);
    rp_kv_pool *kv;
    assert_int_equal(rp_model_kv_create(tiny, 16, 12, RP_DTYPE_F16, &kv), RP_OK);
    run clean, drafted;
    run_init(&clean, 64);
    run_init(&drafted, 64);
    float *logits = malloc((size_t)64 * V * sizeof(float)), *hidden = malloc((size_t)64 * D * sizeof(float));
    float *hc = malloc((size_t)64 * D * sizeof(float));
    float *mc = malloc((size_t)64 * V * sizeof(float)), *md = malloc((size_t)64 * V * sizeof(float));
    float *lc = malloc((size_t)64 * V * sizeof(float));
    // Both: main over ids[0..P), MTP rows 0..P-2.
    run *rs[2] = {&clean, &drafted};
    for (int k = 0; k < 2; k++) {
        main_step(tiny, kv, rs[k], ids, 0, P, logits, hidden);
        mtp_step(tiny, kv, rs[k], ids + 1, 0, P - 1, hidden, mc, NULL);
    }
    // drafted: x[P] = ids[P] "sampled"; an MTP chain of K drafts from row P-1 (needs
    // h[P-1], the last hidden row), then a main verification pass over x[P], d1..dK
    // of which only x[P] survives.
    float hlast[1024];
    assert_true(D <= 1024);
    memcpy(hlast, hidden + (size_t)(P - 1) * D, (size_t)D * sizeof(float));
    assert_int_equal(rp_kv_seq_reserve(kv, &drafted.seq, P + K + 1), RP_OK);
    int32_t chain[K + 1];
    chain[0] = ids[P];
    float *h = hlast, *hout = malloc((size_t)D * sizeof(float)), *hbuf = malloc((size_t)D * sizeof(float));
    for (int k = 0; k < K; k++) {
        mtp_step(tiny, kv, &drafted, &chain[k], P - 1 + k, 1, h, md, hout);
        chain[k + 1] = (harness_argmax(md, V) + 1 + k) % V; // deliberately not the model's guess
        memcpy(hbuf, hout, (size_t)D * sizeof(float));
        h = hbuf;
    }
    main_step(tiny, kv, &drafted, chain, P, K + 1, logits, hidden);
    rp_kv_seq_truncate(kv, &drafted.seq, P + 1); // only x[P] accepted
    assert_int_equal(drafted.seq.n_tokens, P + 1);
    // Now both continue identically: main over ids[P..P+NEXT), MTP over rows P-1..P+NEXT-2.
    for (int k = 0; k < 2; k++) {
        run *r = rs[k];
        // main KV for x[P] exists in drafted (verified); recompute it anyway in clean only.
        int at = k == 0 ? P : P + 1;
        int n = P + NEXT - at;
        main_step(tiny, kv, r, ids + at, at, n, k == 0 ? lc : logits, k == 0 ? hc : hidden);
    }
    // drafted lacks h[P-1] and h[P] from this pass: take them from the clean run's rows where they coincide
    // (the clean run's row 0 is x[P] at position P, bit-identical to the drafted verification row 0).
    assert_memory_equal(lc + (size_t)1 * V, logits, (size_t)(NEXT - 1) * V * sizeof(float));
    assert_memory_equal(hc + (size_t)1 * D, hidden, (size_t)(NEXT - 1) * D * sizeof(float));
    // MTP rows P-1..P+NEXT-2 with real hidden states h[P-1], h[P..]: the same in both.
    float *mh = malloc((size_t)(NEXT + 1) * D * sizeof(float));
    memcpy(mh, hlast, (size_t)D * sizeof(float));
    memcpy(mh + D, hc, (size_t)NEXT * D * sizeof(float));
    mtp_step(tiny, kv, &clean, ids + P, P - 1, NEXT, mh, mc, NULL);
    mtp_step(tiny, kv, &drafted, ids + P, P - 1, NEXT, mh, md, NULL);
    assert_memory_equal(mc, md, (size_t)NEXT * V * sizeof(float));
    free(mh);
    free(hout);
    free(hbuf);
    free(logits);
    free(hidden);
    free(hc);
    free(mc);
    free(md);
    free(lc);
    run_deinit(kv, &clean);
    run_deinit(kv, &drafted);
    rp_kv_pool_destroy(kv);
    free(ids);
    json_decref(f);
}

// A chain of drafts is deterministic, and its first step is the fixture's MTP row.
static void test_chain(void **state)
{
    (void)state;
    const rp_model_config *c = rp_model_get_config(tiny);
    int V = c->n_vocab, D = c->dim;
    json_t *f = load_fixtures();
    json_t *p = json_array_get(json_object_get(f, "prompts"), 1);
    int T;
    int32_t *ids = harness_ids(json_object_get(p, "prompt_ids"), &T);
    enum { K = 6 };
    int32_t drafts[2][K + 1];
    for (int rep = 0; rep < 2; rep++) {
        rp_kv_pool *kv;
        assert_int_equal(rp_model_kv_create(tiny, 16, (T + K) / 16 + 2, RP_DTYPE_F16, &kv), RP_OK);
        run r;
        run_init(&r, T + K);
        float *logits = malloc((size_t)T * V * sizeof(float)), *hidden = malloc((size_t)T * D * sizeof(float));
        main_step(tiny, kv, &r, ids, 0, T - 1, logits, hidden);
        mtp_step(tiny, kv, &r, ids + 1, 0, T - 2, hidden, NULL, NULL); // KV only
        assert_int_equal(rp_kv_seq_reserve(kv, &r.seq, T + K), RP_OK);
        float *h = malloc((size_t)D * sizeof(float)), *ml = malloc((size_t)V * sizeof(float));
        memcpy(h, hidden + (size_t)(T - 2) * D, (size_t)D * sizeof(float));
        drafts[rep][0] = ids[T - 1];
        for (int k = 0; k < K; k++) {
            mtp_step(tiny, kv, &r, &drafts[rep][k], T - 2 + k, 1, h, ml, h);
            drafts[rep][k + 1] = harness_argmax(ml, V);
            if (k == 0) {
                json_t *amax = json_object_get(json_object_get(p, "mtp"), "argmax");
                assert_int_equal(drafts[rep][1], (int)json_integer_value(json_array_get(amax, (size_t)T - 2)));
            }
        }
        free(h);
        free(ml);
        free(logits);
        free(hidden);
        run_deinit(kv, &r);
        rp_kv_pool_destroy(kv);
    }
    assert_memory_equal(drafts[0], drafts[1], sizeof(drafts[0]));
    free(ids);
    json_decref(f);
}

// How often chained drafts match the main model's greedy continuation (the
// fixture's greedy tokens, teacher-forced): measured and printed; only the first
// step, the one training optimized, has a floor (README: ~75% on code).
static void test_chain_acceptance(void **state)
{
    (void)state;
    const rp_model_config *c = rp_model_get_config(tiny);
    int V = c->n_vocab, D = c->dim;
    enum { K = 4 };
    json_t *f = load_fixtures();
    size_t pi;
    json_t *p;
    long hits[K] = {0}, runs[K] = {0}, trials = 0;
    json_array_foreach(json_object_get(f, "prompts"), pi, p) {
        if (!json_object_get(p, "mtp"))
            continue;
        int np, ng;
        int32_t *prompt = harness_ids(json_object_get(p, "prompt_ids"), &np);
        int32_t *greedy = harness_ids(json_object_get(p, "greedy"), &ng);
        int T = np + ng;
        int32_t *ids = malloc((size_t)T * sizeof(int32_t));
        memcpy(ids, prompt, (size_t)np * sizeof(int32_t));
        memcpy(ids + np, greedy, (size_t)ng * sizeof(int32_t));
        rp_kv_pool *kv;
        assert_int_equal(rp_model_kv_create(tiny, 16, (T + K) / 16 + 2, RP_DTYPE_F16, &kv), RP_OK);
        run r;
        run_init(&r, T + K);
        float *logits = malloc((size_t)T * V * sizeof(float)), *hidden = malloc((size_t)T * D * sizeof(float));
        main_step(tiny, kv, &r, ids, 0, T, logits, hidden);
        assert_int_equal(rp_kv_seq_reserve(kv, &r.seq, T + K), RP_OK);
        float *h = malloc((size_t)D * sizeof(float)), *ml = malloc((size_t)V * sizeof(float));
        // From each generated position t (x[t+1] known), chain K drafts of x[t+2..t+K+1].
        for (int t = np - 1; t + 1 + K < T; t++) {
            // MTP KV rows 0..t-1 with real hidden states (recomputed each time: simple, exact).
            mtp_step(tiny, kv, &r, ids + 1, 0, t, hidden, NULL, NULL);
            memcpy(h, hidden + (size_t)t * D, (size_t)D * sizeof(float));
            int32_t tok = ids[t + 1];
            bool ok = true;
            trials++;
            for (int k = 0; k < K; k++) {
                mtp_step(tiny, kv, &r, &tok, t + k, 1, h, ml, h);
                tok = harness_argmax(ml, V);
                ok = ok && tok == ids[t + 2 + k];
                hits[k] += tok == ids[t + 2 + k];
                runs[k] += ok;
            }
        }
        free(h);
        free(ml);
        free(logits);
        free(hidden);
        run_deinit(kv, &r);
        rp_kv_pool_destroy(kv);
        free(ids);
        free(prompt);
        free(greedy);
    }
    print_message("  %ld chains: draft k matches greedy (any prefix / whole prefix so far):", trials);
    for (int k = 0; k < K; k++)
        print_message(" k=%d %.0f%%/%.0f%%", k + 1, 100.0 * hits[k] / trials, 100.0 * runs[k] / trials);
    print_message("\n");
    assert_true(trials >= 60); // enough positions for the floor below to mean something
    assert_true(hits[0] * 2 > trials);
    json_decref(f);
}

// BF16 GGUF conversion keeps the MTP layer, bit for bit; F32 within rounding.
static void test_gguf_roundtrip(void **state)
{
    (void)state;
    const rp_model_config *c = rp_model_get_config(tiny);
    int V = c->n_vocab;
    const int32_t ids[] = {1, 50, 700, 3, 3, 8000, 42, 99, 100, 7};
    enum { T = 10 };
    float *want = malloc((size_t)(T - 1) * V * sizeof(float)), *got = malloc((size_t)(T - 1) * V * sizeof(float));
    mtp_over_prompt(tiny, ids, T, RP_DTYPE_F32, want);
    const rp_dtype types[2] = {RP_DTYPE_BF16, RP_DTYPE_F32};
    for (int i = 0; i < 2; i++) {
        const char *out = rp_test_tmp_path(i == 0 ? "tiny-bf16.gguf" : "tiny-f32.gguf");
        if (rp_model_convert_gguf(rp_test_source("models/rapid-tiny"), out, types[i]))
            fail_msg("convert: %s", rp_error_message());
        rp_model *g = harness_load(out, 2, RP_DTYPE_F32);
        assert_true(rp_model_has_mtp(g));
        assert_int_equal(rp_model_get_config(g)->n_layer, c->n_layer);
        assert_int_equal(rp_model_kv_layers(g), c->n_layer + 1);
        mtp_over_prompt(g, ids, T, RP_DTYPE_F32, got);
        if (i == 0) {
            assert_memory_equal(want, got, (size_t)(T - 1) * V * sizeof(float));
        } else {
            double num = 0, den = 0;
            for (size_t k = 0; k < (size_t)(T - 1) * V; k++) {
                num += (got[k] - want[k]) * (double)(got[k] - want[k]);
                den += want[k] * (double)want[k];
            }
            assert_true(sqrt(num / den) < 1e-5);
        }
        rp_model_destroy(g);
    }
    free(want);
    free(got);
}

// Quantized on load, the MTP layer still agrees closely.
static void test_quantized(void **state)
{
    (void)state;
    int V = rp_model_get_config(tiny)->n_vocab;
    const int32_t ids[] = {1, 50, 700, 3, 3, 8000, 42, 99, 100, 7, 11, 12};
    enum { T = 12 };
    float *want = malloc((size_t)(T - 1) * V * sizeof(float)), *got = malloc((size_t)(T - 1) * V * sizeof(float));
    mtp_over_prompt(tiny, ids, T, RP_DTYPE_F32, want);
    rp_model *q = harness_load(rp_test_source("models/rapid-tiny"), 2, RP_DTYPE_Q8_0);
    assert_true(rp_model_has_mtp(q));
    assert_true(rp_model_weight_bytes(q) < rp_model_weight_bytes(tiny));
    mtp_over_prompt(q, ids, T, RP_DTYPE_F32, got);
    double num = 0, den = 0;
    for (size_t k = 0; k < (size_t)(T - 1) * V; k++) {
        num += (got[k] - want[k]) * (double)(got[k] - want[k]);
        den += want[k] * (double)want[k];
    }
    print_message("  q8_0 MTP normalized error %.3g\n", sqrt(num / den));
    assert_true(sqrt(num / den) < 0.05);
    rp_model_destroy(q);
    free(want);
    free(got);
}

// Models without MTP: qwen3 (none) and qwen3-mtp (mtp.* tensors, but the config does
// not announce them: skipped as before).
static void test_without_mtp(void **state)
{
    (void)state;
    const char *dirs[2] = {"tests/data/models/qwen3", "tests/data/models/qwen3-mtp"};
    for (int i = 0; i < 2; i++) {
        char dir[4096];
        snprintf(dir, sizeof(dir), "%s", rp_test_source(dirs[i]));
        rp_model *m = harness_load(dir, 1, RP_DTYPE_F32);
        const rp_model_config *c = rp_model_get_config(m);
        assert_false(rp_model_has_mtp(m));
        assert_int_equal(c->n_mtp, 0);
        assert_int_equal(rp_model_kv_layers(m), c->n_layer);
        rp_kv_pool *kv;
        assert_int_equal(rp_model_kv_create(m, 16, 2, RP_DTYPE_F16, &kv), RP_OK);
        assert_int_equal(rp_kv_pool_n_layers(kv), c->n_layer);
        rp_kv_seq s;
        rp_kv_seq_init(&s);
        assert_int_equal(rp_kv_seq_reserve(kv, &s, 1), RP_OK);
        rp_kv_seq *seqs[1] = {&s};
        int32_t tok = 1, pos = 0, sq = 0;
        bool want = true;
        float *h = calloc((size_t)c->dim, sizeof(float)), *l = malloc((size_t)c->n_vocab * sizeof(float));
        rp_batch b = {1, &tok, &pos, &sq, &want, seqs, 1, NULL};
        assert_int_equal(rp_model_forward_mtp(m, kv, &b, h, l, NULL), RP_ERR_UNSUPPORTED);
        free(h);
        free(l);
        rp_kv_seq_deinit(kv, &s);
        rp_kv_pool_destroy(kv);
        rp_model_destroy(m);
    }
}

static void test_bad_batches(void **state)
{
    (void)state;
    const rp_model_config *c = rp_model_get_config(tiny);
    // A pool without the MTP layer.
    rp_kv_pool *small;
    assert_int_equal(rp_kv_pool_create(rp_model_backend(tiny), c->n_layer, c->n_kv_head, c->head_dim, 16, 2, RP_DTYPE_F16, &small),
                     RP_OK);
    rp_kv_seq s;
    rp_kv_seq_init(&s);
    assert_int_equal(rp_kv_seq_reserve(small, &s, 4), RP_OK);
    rp_kv_seq *seqs[1] = {&s};
    int32_t tok[2] = {1, 2}, pos[2] = {0, 1}, sq[2] = {0, 0};
    bool want[2] = {true, true};
    float *h = calloc(2 * (size_t)c->dim, sizeof(float)), *l = malloc(2 * (size_t)c->n_vocab * sizeof(float));
    rp_batch b = {2, tok, pos, sq, want, seqs, 1, NULL};
    assert_int_equal(rp_model_forward_mtp(tiny, small, &b, h, l, NULL), RP_ERR_INVALID);
    assert_int_equal(rp_model_forward(tiny, small, &b, l), RP_OK); // the main model is fine with it
    rp_kv_seq_deinit(small, &s);
    rp_kv_pool_destroy(small);

    rp_kv_pool *kv;
    assert_int_equal(rp_model_kv_create(tiny, 16, 2, RP_DTYPE_F16, &kv), RP_OK);
    assert_int_equal(rp_kv_seq_reserve(kv, &s, 2), RP_OK);
    assert_int_equal(rp_model_forward_mtp(tiny, kv, &b, NULL, l, NULL), RP_ERR_INVALID);
    tok[1] = c->n_vocab;
    assert_int_equal(rp_model_forward_mtp(tiny, kv, &b, h, l, NULL), RP_ERR_RANGE);
    tok[1] = 2;
    pos[1] = 2; // no slot
    assert_int_equal(rp_model_forward_mtp(tiny, kv, &b, h, l, NULL), RP_ERR_RANGE);
    pos[1] = 1;
    sq[1] = 1;
    assert_int_equal(rp_model_forward_mtp(tiny, kv, &b, h, l, NULL), RP_ERR_INVALID);
    sq[1] = 0;
    assert_int_equal(rp_model_forward_mtp(tiny, kv, &b, h, l, NULL), RP_OK);
    b.n_tokens = 0;
    assert_int_equal(rp_model_forward_mtp(tiny, kv, &b, h, l, NULL), RP_OK);
    free(h);
    free(l);
    rp_kv_seq_deinit(kv, &s);
    rp_kv_pool_destroy(kv);
}

static rp_status load_quiet(const char *path)
{
    rp_model_params p;
    rp_model_params_default(&p);
    p.quiet = true;
    rp_model *m = NULL;
    rp_status st = rp_test_load(path, 0, false, &p, &m);
    rp_model_destroy(m);
    return st;
}

// Bad MTP counts in config.json and GGUF metadata are load errors naming the field;
// a config announcing an MTP layer whose tensors are missing names the tensor.
static void test_bad_config(void **state)
{
    (void)state;
    // GGUF: nextn_predict_layers must leave at least one main layer.
    const char *path = rp_test_tmp_path("bad-nextn.gguf");
    rp_gguf_writer *w;
    assert_int_equal(rp_gguf_writer_create(&w), RP_OK);
    assert_int_equal(rp_gguf_writer_add_str(w, "general.architecture", "qwen3"), RP_OK);
    assert_int_equal(rp_gguf_writer_add_u32(w, "qwen3.embedding_length", 64), RP_OK);
    assert_int_equal(rp_gguf_writer_add_u32(w, "qwen3.block_count", 2), RP_OK);
    assert_int_equal(rp_gguf_writer_add_u32(w, "qwen3.nextn_predict_layers", 2), RP_OK);
    assert_int_equal(rp_gguf_writer_add_u32(w, "qwen3.feed_forward_length", 128), RP_OK);
    assert_int_equal(rp_gguf_writer_add_u32(w, "qwen3.attention.head_count", 2), RP_OK);
    static float emb[4 * 64];
    int64_t ne[2] = {64, 4};
    assert_int_equal(rp_gguf_writer_add_tensor(w, "token_embd.weight", RP_DTYPE_F32, 2, ne, emb), RP_OK);
    assert_int_equal(rp_gguf_writer_write(w, path), RP_OK);
    rp_gguf_writer_destroy(w);
    assert_int_equal(load_quiet(path), RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "nextn_predict_layers"));

    // HF: the qwen3 test model with a config that announces an MTP layer it lacks,
    // or gives a non-integer count.
    const char *dir = rp_test_tmp_path("qwen3-announce");
    assert_int_equal(mkdir(dir, 0755), 0);
    char src[4096], dst[4096];
    snprintf(src, sizeof(src), "%s", rp_test_source("tests/data/models/qwen3/config.json"));
    json_error_t e;
    json_t *cfg = json_load_file(src, 0, &e);
    assert_non_null(cfg);
    const char *files[] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                           "model.safetensors.index.json"};
    for (int i = 0; i < 3; i++) {
        char rel[512];
        snprintf(rel, sizeof(rel), "tests/data/models/qwen3/%s", files[i]);
        snprintf(src, sizeof(src), "%s", rp_test_source(rel));
        snprintf(dst, sizeof(dst), "%s/%s", dir, files[i]);
        assert_int_equal(symlink(src, dst), 0);
    }
    snprintf(dst, sizeof(dst), "%s/config.json", dir);
    json_object_set_new(cfg, "mtp_num_hidden_layers", json_integer(1));
    assert_int_equal(json_dump_file(cfg, dst, 0), 0);
    assert_int_equal(load_quiet(dir), RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "missing tensor 'mtp.layers.0."));
    json_object_set_new(cfg, "mtp_num_hidden_layers", json_string("one"));
    assert_int_equal(json_dump_file(cfg, dst, 0), 0);
    assert_int_equal(load_quiet(dir), RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "mtp_num_hidden_layers"));
    json_object_set_new(cfg, "mtp_num_hidden_layers", json_integer(-1));
    assert_int_equal(json_dump_file(cfg, dst, 0), 0);
    assert_int_equal(load_quiet(dir), RP_ERR_INVALID);
    json_object_set_new(cfg, "mtp_num_hidden_layers", json_integer(0));
    assert_int_equal(json_dump_file(cfg, dst, 0), 0);
    assert_int_equal(load_quiet(dir), RP_OK);
    json_decref(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_reference),
        cmocka_unit_test(test_hybrid_matches_reference), cmocka_unit_test(test_forward_ex_same_logits),
        cmocka_unit_test(test_batch_equals_alone), cmocka_unit_test(test_truncate_rerun),
        cmocka_unit_test(test_chain),              cmocka_unit_test(test_chain_acceptance),
        cmocka_unit_test(test_gguf_roundtrip),
        cmocka_unit_test(test_quantized),          cmocka_unit_test(test_without_mtp),
        cmocka_unit_test(test_bad_batches),        cmocka_unit_test(test_bad_config),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
