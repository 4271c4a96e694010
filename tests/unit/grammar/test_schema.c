/*
 * test_schema.c - JSON Schema compiled to the grammar (src/grammar/schema.c,
 * regex.c) and enforced by the matcher (json_match.c).
 *
 * - The corpus (tests/data/schemas/NAME.json; tests/e2e/schema_corpus.test.js has
 *   ajv check the same labels): every valid document is accepted, compact and
 *   pretty-printed; every invalid one and every "ordered_only" one (keys out of
 *   the schema's order) rejected; the cut point of a rejection is the first byte
 *   no valid continuation has.
 * - The token mask equals a brute-force simulation of every token (all of them
 *   on some steps, a sample on the others) on states of random walks through
 *   each corpus schema, over a byte vocabulary, the bundled Qwen2-style test
 *   tokenizer and deepseek-llm's 102k vocabulary; finished walks re-read as
 *   complete values; no walk reaches a state where nothing can follow.
 * - Patterns: the DFA against PCRE2 on random strings (everything the DFA
 *   accepts, PCRE2 matches; for ASCII patterns the two agree exactly).
 * - Keywords outside the subset and limits: the status, the JSON pointer and
 *   the keyword of the error; the cache by text.
 */
#include "test_util.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "grammar/grammar_int.h"
#include "grammar/brute.h"

static uint64_t rng_state = 0x2545F4914F6CDD1DULL;

static uint32_t rng_below(uint32_t n)
{
    return (uint32_t)(rp_test_xorshift(&rng_state) % n);
}

static rp_json_schema *compile_text(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, JSON_DECODE_ANY, &je);
    if (!j)
        fail_msg("bad test schema %s: %s", text, je.text);
    rp_json_schema *sc = NULL;
    rp_json_schema_error err;
    if (rp_json_schema_compile(j, NULL, &sc, &err) != RP_OK)
        fail_msg("schema %s: %s at %s", text, rp_error_message(), err.path);
    json_decref(j);
    return sc;
}

// How many bytes of text the grammar reads before refusing one (len when all), and whether it is complete.
static size_t run(const rp_json_schema *sc, const char *text, size_t len, bool *complete)
{
    match_state s;
    match_state_init(&s, sc);
    size_t i = 0;
    while (i < len && match_step(sc, &s, (uint8_t)text[i]))
        i++;
    *complete = i == len && match_complete(sc, &s);
    return i;
}

static bool accepts(const rp_json_schema *sc, const char *text)
{
    bool complete;
    run(sc, text, strlen(text), &complete);
    return complete;
}

/* ---- the corpus --------------------------------------------------------------- */

typedef struct corpus_entry {
    char name[64];
    json_t *doc; // {"schema", "valid", "invalid", "ordered_only"}
} corpus_entry;

static int load_corpus(corpus_entry *out, int cap)
{
    const char *dir = rp_test_source("tests/data/schemas");
    char path[1024];
    snprintf(path, sizeof(path), "%s", dir);
    DIR *d = opendir(path);
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < cap) {
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 5, ".json") != 0)
            continue;
        char file[1400];
        snprintf(file, sizeof(file), "%s/%s", path, de->d_name);
        json_error_t je;
        json_t *j = json_load_file(file, 0, &je);
        if (!j)
            fail_msg("%s: %s", file, je.text);
        snprintf(out[n].name, sizeof(out[n].name), "%.*s", (int)(l - 5), de->d_name);
        out[n++].doc = j;
    }
    closedir(d);
    assert_true(n >= 10);
    return n;
}

static void free_corpus(corpus_entry *c, int n)
{
    for (int i = 0; i < n; i++)
        json_decref(c[i].doc);
}

static rp_json_schema *corpus_schema(const corpus_entry *e)
{
    rp_json_schema *sc = NULL;
    rp_json_schema_error err;
    if (rp_json_schema_compile(json_object_get(e->doc, "schema"), NULL, &sc, &err) != RP_OK)
        fail_msg("%s: %s at %s", e->name, rp_error_message(), err.path);
    return sc;
}

static void test_corpus(void **state)
{
    (void)state;
    corpus_entry c[64];
    int n = load_corpus(c, 64);
    int n_valid = 0, n_invalid = 0;
    for (int i = 0; i < n; i++) {
        rp_json_schema *sc = corpus_schema(&c[i]);
        static const char *const lists[3] = {"valid", "invalid", "ordered_only"};
        for (int l = 0; l < 3; l++) {
            const json_t *docs = json_object_get(c[i].doc, lists[l]);
            for (size_t k = 0; k < json_array_size(docs); k++) {
                const size_t flags[2] = {JSON_COMPACT, JSON_INDENT(2)};
                for (int f = 0; f < 2; f++) {
                    char *text = json_dumps(json_array_get(docs, k), flags[f] | JSON_ENCODE_ANY);
                    bool ok = accepts(sc, text);
                    if (ok != (l == 0))
                        fail_msg("%s %s[%zu]: the grammar %s %s", c[i].name, lists[l], k,
                                 ok ? "accepts" : "rejects", text);
                    free(text);
                }
                n_valid += l == 0;
                n_invalid += l != 0;
            }
        }
        rp_json_schema_unref(sc);
    }
    assert_true(n_valid >= 25 && n_invalid >= 50);
    free_corpus(c, n);
}

/* ---- the mask over a real vocabulary -------------------------------------------- */


// Random walks through schema sc: at each step the mask must equal brute force
// (every id on the first steps and at random ones, else a sample). Returns the
// walks that reached an end-of-generation token.
static int walk_schema(const char *name, const rp_json_vocab *v, const rp_json_schema *sc, int walks, int max_steps)
{
    rp_json_match *m = NULL;
    int32_t n = v->n_tok;
    float *logits = malloc((size_t)n * sizeof(float));
    char *text = malloc(1 << 16);
    assert_non_null(logits);
    assert_non_null(text);
    int finished = 0;
    for (int w = 0; w < walks; w++) {
        assert_int_equal(rp_json_match_create(v, sc, &m), RP_OK);
        size_t len = 0;
        for (int step = 0; step < max_steps; step++) {
            for (int32_t i = 0; i < n; i++)
                logits[i] = 0.0f;
            rp_json_match_mask(m, logits, n);
            const match_state *s = json_match_state(m);
            bool full = step < 3 || rng_below(8) == 0, any_cand = false;
            int32_t n_allowed = 0, n_short = 0;
            for (int32_t i = 0; i < n; i++) {
                bool ok = !isinf(logits[i]);
                n_allowed += ok;
                any_cand |= ok && v->kind[i] == JT_CAND;
                n_short += ok && v->kind[i] == JT_CAND && v->off[i + 1] - v->off[i] <= 2;
            }
            assert_true(n_allowed > 0);
            if (!any_cand && !match_complete(sc, s))
                fail_msg("%s: a dead end after [%.*s]", name, (int)len, text);
            for (int32_t i = 0; i < n; i++) {
                if (!full && rng_below(32) != 0)
                    continue;
                bool want = brute_allowed(v, sc, s, i, any_cand), ok = !isinf(logits[i]);
                if (want != ok)
                    fail_msg("%s: token %d [%.*s] after [%.*s]: mask %d, brute force %d (mode %d)", name, (int)i,
                             (int)(v->off[i + 1] - v->off[i]), v->blob + v->off[i], (int)len, text, ok, want,
                             s->mode);
            }
            // Pick: end when allowed (half the time), else a short token (builds structure) or any.
            int32_t pick = -1;
            bool done = rp_json_match_done(m);
            if (done && rng_below(2) == 0) {
                for (int32_t i = 0; i < n && pick < 0; i++)
                    if (v->kind[i] == JT_EOG && !isinf(logits[i]))
                        pick = i;
            }
            if (pick < 0) {
                bool short_only = n_short > 0 && rng_below(4) != 0;
                int32_t k = (int32_t)rng_below((uint32_t)(short_only ? n_short : n_allowed));
                for (int32_t i = 0; i < n && pick < 0; i++) {
                    if (isinf(logits[i]))
                        continue;
                    if (short_only && !(v->kind[i] == JT_CAND && v->off[i + 1] - v->off[i] <= 2))
                        continue;
                    if (k-- == 0)
                        pick = i;
                }
            }
            assert_true(pick >= 0);
            assert_int_equal(rp_json_match_accept(m, pick), RP_OK);
            if (v->kind[pick] == JT_EOG) {
                bool complete;
                size_t at = run(sc, text, len, &complete);
                if (!complete)
                    fail_msg("%s: the finished text does not re-read (%zu of %zu bytes): [%.*s]", name, at, len,
                             (int)len, text);
                finished++;
                break;
            }
            size_t pl = v->off[pick + 1] - v->off[pick];
            if (len + pl >= (1 << 16))
                break;
            memcpy(text + len, v->blob + v->off[pick], pl);
            len += pl;
        }
        rp_json_match_destroy(m);
    }
    free(logits);
    free(text);
    return finished;
}

static void mask_corpus(const char *tokenizer, int walks, int steps)
{
    rp_tokenizer *t = NULL;
    if (rp_tok_load_file(tokenizer, &t) != RP_OK)
        fail_msg("%s: %s", tokenizer, rp_error_message());
    rp_json_vocab *v = NULL;
    assert_int_equal(rp_json_vocab_create(t, &v), RP_OK);
    corpus_entry c[64];
    int n = load_corpus(c, 64), finished = 0;
    for (int i = 0; i < n; i++) {
        rp_json_schema *sc = corpus_schema(&c[i]);
        finished += walk_schema(c[i].name, v, sc, walks, steps);
        rp_json_schema_unref(sc);
    }
    assert_true(finished > 0);
    free_corpus(c, n);
    rp_json_vocab_destroy(v);
    rp_tok_destroy(t);
}

// The bundled test tokenizer (Qwen2's pre-tokenizer, 1.7k tokens): long walks.
static void test_mask_corpus(void **state)
{
    (void)state;
    mask_corpus(rp_test_source("tests/data/tokenizer/qwen2"), 6, 120);
}

// A full-size vocabulary (deepseek-llm's byte-level BPE, 102k tokens).
static void test_mask_corpus_real(void **state)
{
    (void)state;
    RP_TEST_NEED_CONFORMANCE(dir);
    char path[4096];
    snprintf(path, sizeof(path), "%s/tokenizer/ggml-vocab-deepseek-llm.gguf", dir);
    mask_corpus(path, 2, 40);
}

// A small vocabulary of single bytes and a few pieces: every walk can finish, and
// every state on the way is checked in full.
static void test_mask_bytes(void **state)
{
    (void)state;
    json_tok toks[300];
    int32_t nt = 0;
    uint8_t bytes[256];
    for (int c = 1; c < 256; c++) {
        bytes[c] = (uint8_t)c;
        toks[nt++] = (json_tok){&bytes[c], 1, JT_CAND};
    }
    static const char *const pieces[] = {"\":", "\",\"", "null", "true", "{\"", "[]", "\"}", "12", "-0.5", "Z\"",
                                         "2024-01-01", "T10:00:00", "celsius\"", "@example.org"};
    for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++)
        toks[nt++] = (json_tok){(const uint8_t *)pieces[i], strlen(pieces[i]), JT_CAND};
    toks[nt++] = (json_tok){(const uint8_t *)"<eos>", 5, JT_EOG};
    rp_json_vocab *v = NULL;
    assert_int_equal(json_vocab_build(toks, nt, &v), RP_OK);
    corpus_entry c[64];
    int n = load_corpus(c, 64), finished = 0;
    for (int i = 0; i < n; i++) {
        rp_json_schema *sc = corpus_schema(&c[i]);
        finished += walk_schema(c[i].name, v, sc, 8, 400);
        rp_json_schema_unref(sc);
    }
    assert_true(finished > 0);
    free_corpus(c, n);
    rp_json_vocab_destroy(v);
}

/* ---- patterns against PCRE2 --------------------------------------------------------- */

static void test_patterns(void **state)
{
    (void)state;
    static const struct {
        const char *pattern;
        bool exact;        // ASCII only: the DFA and PCRE2 agree on every string
        const char *yes;   // a string both accept
    } cases[] = {
        {"^[A-Z]{2}-\\d+$", true, "AZ-09"}, {"^(ab|a)*c?$", true, "aabc"}, {"abc", true, "xabcx"},
        {"^a{2,4}b{0,2}$", true, "aaab"}, {"^(?:x|yz)+[0-9]?$", true, "xyz9"}, {"^[^a-c]*$", false, "xyz\xc3\xa9"},
        {"^.{3}$", false, "a\xc3\xa9" "b"}, {"^\\w+@\\w+\\.[a-z]{2,3}$", true, "a_1@b.co"}, {"b$", true, "aab"},
        {"^[a\\-z]$", true, "-"}, {"^\\S+$", false, "ab"}, {"^\\D\\W$", false, "a\xc3\xa9"},
        {"^(a|b)*a(a|b){3}$", true, "babbb"}, {"^(caf\xc3\xa9|th\xc3\xa9)$", false, "th\xc3\xa9"},
    };
    const char alphabet[] = "abcxyzAZ09-@._ \x7f";
    for (size_t p = 0; p < sizeof(cases) / sizeof(cases[0]); p++) {
        rx_dfa d;
        if (rx_compile(cases[p].pattern, strlen(cases[p].pattern), 1000, 1000, &d) != RP_OK)
            fail_msg("pattern %s: %s", cases[p].pattern, rp_error_message());
        int err;
        PCRE2_SIZE off;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)cases[p].pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &err, &off, NULL);
        assert_non_null(re);
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
        int n_match = 0;
        for (int k = 0; k < 20000; k++) {
            char s[12];
            int len = (int)rng_below(9);
            for (int i = 0; i < len; i++)
                s[i] = alphabet[rng_below(sizeof(alphabet) - 1)];
            if (rng_below(8) == 0 && len + 2 <= 10) { // a two-byte character now and then
                s[len++] = (char)0xC3;
                s[len++] = (char)0xA9;
            }
            bool dfa = rx_match(&d, (const uint8_t *)s, (size_t)len);
            bool pc = pcre2_match(re, (PCRE2_SPTR)s, (PCRE2_SIZE)len, 0, 0, md, NULL) >= 0;
            bool ascii = true;
            for (int i = 0; i < len; i++)
                ascii = ascii && (uint8_t)s[i] < 0x80;
            if (dfa && !pc)
                fail_msg("pattern %s: the DFA accepts [%.*s], PCRE2 does not", cases[p].pattern, len, s);
            if (cases[p].exact && ascii && dfa != pc)
                fail_msg("pattern %s: [%.*s]: DFA %d, PCRE2 %d", cases[p].pattern, len, s, dfa, pc);
            n_match += dfa;
        }
        (void)n_match;
        if (!rx_match(&d, (const uint8_t *)cases[p].yes, strlen(cases[p].yes)))
            fail_msg("pattern %s: the DFA refuses [%s]", cases[p].pattern, cases[p].yes);
        assert_true(pcre2_match(re, (PCRE2_SPTR)cases[p].yes, strlen(cases[p].yes), 0, 0, md, NULL) >= 0);
        pcre2_match_data_free(md);
        pcre2_code_free(re);
        rx_dfa_deinit(&d);
    }
    // Strings with a pattern or format are written without escapes.
    rp_json_schema *sc = compile_text("{\"type\":\"string\",\"pattern\":\"^a.b$\"}");
    assert_true(accepts(sc, "\"axb\""));
    assert_false(accepts(sc, "\"a\\u0078b\""));
    assert_false(accepts(sc, "\"a\\\"b\""));
    rp_json_schema_unref(sc);
}

/* ---- errors, limits, the cache ---------------------------------------------------------- */

static void expect_error(const char *schema, rp_status want, const char *path, const char *keyword)
{
    json_error_t je;
    json_t *j = json_loads(schema, JSON_DECODE_ANY, &je);
    assert_non_null(j);
    rp_json_schema *sc = NULL;
    rp_json_schema_error err;
    rp_status st = rp_json_schema_compile(j, NULL, &sc, &err);
    json_decref(j);
    if (st != want || strcmp(err.path, path) != 0 || strcmp(err.keyword, keyword) != 0)
        fail_msg("%s: status %d path %s keyword %s (want %d %s %s): %s", schema, st, err.path, err.keyword, want, path,
                 keyword, rp_error_message());
    assert_null(sc);
    rp_error_clear();
}

static void test_errors(void **state)
{
    (void)state;
    expect_error("{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{}}}}", RP_ERR_UNSUPPORTED, "#/properties/a/not",
                 "not");
    expect_error("{\"type\":\"object\",\"properties\":{\"a/b~c\":{\"type\":\"string\",\"minLength\":2}}}",
                 RP_ERR_UNSUPPORTED, "#/properties/a~1b~0c/minLength", "minLength");
    expect_error("{\"type\":\"array\",\"items\":{\"type\":\"string\",\"format\":\"hostname\"}}", RP_ERR_UNSUPPORTED,
                 "#/items/format", "format");
    expect_error("{\"type\":\"string\",\"pattern\":\"^(?=a)b$\"}", RP_ERR_UNSUPPORTED, "#/pattern", "pattern");
    expect_error("{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", RP_ERR_UNSUPPORTED, "#/pattern", "pattern");
    expect_error("{\"type\":\"string\",\"pattern\":\"^\\\"$\"}", RP_ERR_UNSUPPORTED, "#/pattern", "pattern");
    expect_error("{\"type\":\"string\",\"pattern\":\"[z-a]\"}", RP_ERR_INVALID, "#/pattern", "pattern");
    expect_error("{\"type\":\"string\",\"pattern\":\"^a|b$\"}", RP_ERR_UNSUPPORTED, "#/pattern", "pattern");
    expect_error("{\"$defs\":{\"x\":{\"type\":\"object\",\"patternProperties\":{}}},\"$ref\":\"#/$defs/x\"}",
                 RP_ERR_UNSUPPORTED, "#/$defs/x/patternProperties", "patternProperties");
    expect_error("{\"$ref\":\"https://example.com/s.json\"}", RP_ERR_UNSUPPORTED, "#/$ref", "$ref");
    expect_error("{\"$ref\":\"#/$defs/missing\"}", RP_ERR_INVALID, "#/$ref", "$ref");
    expect_error("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}",
                 RP_ERR_LIMIT, "#/$defs/b/$ref", "$ref");
    expect_error("{\"anyOf\":[{\"type\":\"object\"},{\"type\":\"object\",\"properties\":{\"a\":{}}}]}",
                 RP_ERR_UNSUPPORTED, "#/anyOf", "anyOf");
    expect_error("{\"type\":\"object\",\"properties\":{\"v\":{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}}}",
                 RP_ERR_UNSUPPORTED, "#/properties/v/oneOf", "oneOf");
    // Found only after the walk (the alternative is a $ref still being compiled): the whole schema is named.
    expect_error("{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"x\":{\"anyOf\":[{\"$ref\":\"#/$defs/n\"},"
                 "{\"type\":\"object\"}]}}}},\"$ref\":\"#/$defs/n\"}",
                 RP_ERR_UNSUPPORTED, "#", "anyOf");
    expect_error("{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}", RP_ERR_UNSUPPORTED,
                 "#/required", "required");
    expect_error("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"}}", RP_ERR_UNSUPPORTED,
                 "#/additionalProperties", "additionalProperties");
    expect_error("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", RP_ERR_INVALID, "#/maximum", "maximum");
    expect_error("{\"type\":\"integer\",\"exclusiveMinimum\":1,\"exclusiveMaximum\":2}", RP_ERR_INVALID, "#/maximum",
                 "maximum");
    expect_error("{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", RP_ERR_INVALID, "#/maxItems", "maxItems");
    expect_error("{\"type\":\"array\",\"items\":[{}]}", RP_ERR_UNSUPPORTED, "#/items", "items");
    expect_error("{\"enum\":[]}", RP_ERR_INVALID, "#/enum", "enum");
    expect_error("{\"type\":\"string\",\"enum\":[1,2]}", RP_ERR_INVALID, "#/enum", "enum");
    expect_error("{\"type\":\"strin\"}", RP_ERR_INVALID, "#/type", "type");
    expect_error("false", RP_ERR_UNSUPPORTED, "#", "");
    expect_error("[1]", RP_ERR_INVALID, "#", "");
    // A required recursion no document can end.
    expect_error("{\"type\":\"object\",\"properties\":{\"x\":{\"$ref\":\"#\"}},\"required\":[\"x\"]}",
                 RP_ERR_UNSUPPORTED, "#", "required");
    // Limits: a pattern whose DFA would need thousands of states; nesting; an enum; the time budget.
    expect_error("{\"type\":\"string\",\"pattern\":\"^(a|b)*a(a|b){12}$\"}", RP_ERR_LIMIT, "#/pattern", "pattern");
    expect_error("{\"type\":\"string\",\"pattern\":\"^a{1001}$\"}", RP_ERR_LIMIT, "#/pattern", "pattern");
    char deep[4096] = "";
    for (int i = 0; i < 40; i++)
        strcat(deep, "{\"type\":\"array\",\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 40; i++)
        strcat(deep, "}");
    json_t *j = json_loads(deep, 0, NULL);
    rp_json_schema *sc = NULL;
    rp_json_schema_error err;
    assert_int_equal(rp_json_schema_compile(j, NULL, &sc, &err), RP_ERR_LIMIT);
    json_decref(j);
    json_t *en = json_array();
    for (int i = 0; i < 1001; i++)
        json_array_append_new(en, json_integer(i));
    j = json_pack("{s:o}", "enum", en);
    assert_int_equal(rp_json_schema_compile(j, NULL, &sc, &err), RP_ERR_LIMIT);
    assert_string_equal(err.keyword, "enum");
    rp_json_schema_limits lim;
    rp_json_schema_limits_default(&lim);
    lim.budget_ms = 0;
    assert_int_equal(rp_json_schema_compile(j, &lim, &sc, &err), RP_ERR_LIMIT);
    // The pattern compiler has its own deadline (the schema's budget left): one spent already refuses.
    rx_dfa d;
    assert_int_equal(rx_compile("^(a|b)*c$", 9, 1000, -1, &d), RP_ERR_LIMIT);
    rp_json_schema_limits_default(&lim);
    lim.max_bytes = 100;
    assert_int_equal(rp_json_schema_compile(j, &lim, &sc, &err), RP_ERR_LIMIT);
    json_decref(j);
    rp_error_clear();
}

static void test_semantics(void **state)
{
    (void)state;
    rp_json_schema *sc = compile_text("{\"type\":\"integer\",\"minimum\":10,\"maximum\":20}");
    assert_true(accepts(sc, "15"));
    assert_false(accepts(sc, "9"));
    assert_false(accepts(sc, "21"));
    bool complete;
    // "3" can never become a number in 10..20: refused at once, not at the end.
    assert_int_equal(run(sc, "3", 1, &complete), 0);
    assert_int_equal(run(sc, "25", 2, &complete), 1);
    rp_json_schema_unref(sc);
    sc = compile_text("{\"type\":\"number\",\"exclusiveMaximum\":0.3}");
    assert_true(accepts(sc, "0.29999"));
    assert_false(accepts(sc, "0.3"));
    assert_true(accepts(sc, "-12.5"));
    assert_false(accepts(sc, "1e-3")); // bounded numbers are written without exponent
    rp_json_schema_unref(sc);
    // Depth: a recursive array of arrays stops opening containers at SC_MAX_DEPTH.
    sc = compile_text("{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}");
    char text[80] = "";
    for (int i = 0; i < SC_MAX_DEPTH; i++)
        strcat(text, "[");
    assert_int_equal(run(sc, text, SC_MAX_DEPTH, &complete), SC_MAX_DEPTH);
    strcat(text, "[");
    assert_int_equal(run(sc, text, SC_MAX_DEPTH + 1, &complete), SC_MAX_DEPTH);
    rp_json_schema_unref(sc);
    // An object that needs nested objects to be complete is not opened where they cannot fit.
    sc = compile_text("{\"type\":\"array\",\"items\":{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"object\",\"properties\":"
                      "{\"a\":{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"object\"}},\"required\":[\"b\"]}},"
                      "\"required\":[\"a\"]}]}}");
    text[0] = 0;
    for (int i = 0; i < SC_MAX_DEPTH - 3; i++) // the object needs three levels
        strcat(text, "[");
    strcat(text, "{");
    assert_int_equal(run(sc, text, strlen(text), &complete), strlen(text));
    text[strlen(text) - 1] = '[';
    strcat(text, "[{");
    assert_int_equal(run(sc, text, strlen(text), &complete), strlen(text) - 1);
    rp_json_schema_unref(sc);
    // A scalar root, json_object mode's schema.
    sc = compile_text("{\"enum\":[1,12]}");
    assert_true(accepts(sc, "1"));
    assert_true(accepts(sc, "12"));
    assert_false(accepts(sc, "123"));
    rp_json_schema_unref(sc);
    // A suffix (a tool call's closing tag): complete only after it, whitespace allowed before it.
    sc = compile_text("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}");
    assert_int_equal(rp_json_schema_set_suffix(sc, "\n</x>", 5), RP_OK);
    assert_false(accepts(sc, "{\"a\":1}"));
    assert_true(accepts(sc, "{\"a\":1}\n</x>"));
    assert_true(accepts(sc, "{\"a\":1}  \n</x>"));
    assert_false(accepts(sc, "{\"a\":1}\n</x> "));
    assert_false(accepts(sc, "{\"a\":1}\n </x>"));
    rp_json_schema_unref(sc);
    const rp_json_schema *any = json_schema_any_object();
    assert_true(accepts(any, " {\"a\": [1, {\"b\": null}]} "));
    assert_false(accepts(any, "[1]"));
}

static void test_cache(void **state)
{
    (void)state;
    rp_json_schema_cache *c = NULL;
    assert_int_equal(rp_json_schema_cache_create(2, NULL, &c), RP_OK);
    json_t *a = json_loads("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}}}", 0, NULL);
    json_t *a2 = json_loads("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}}}", 0, NULL);
    json_t *b = json_loads("{\"type\":\"object\",\"properties\":{\"y\":{},\"x\":{}}}", 0, NULL);
    json_t *bad = json_loads("{\"type\":\"object\",\"properties\":{\"x\":{\"not\":{}}}}", 0, NULL);
    rp_json_schema *s1, *s2, *s3, *s4;
    rp_json_schema_error err;
    assert_int_equal(rp_json_schema_cache_get(c, a, &s1, &err), RP_OK);
    assert_int_equal(rp_json_schema_cache_get(c, a2, &s2, &err), RP_OK);
    assert_ptr_equal(s1, s2);
    assert_int_equal(rp_json_schema_cache_get(c, b, &s3, &err), RP_OK);
    assert_ptr_not_equal(s1, s3);
    assert_int_equal(rp_json_schema_cache_get(c, bad, &s4, &err), RP_ERR_UNSUPPORTED);
    assert_string_equal(err.path, "#/properties/x/not");
    uint64_t hits, misses;
    rp_json_schema_cache_stats(c, &hits, &misses);
    assert_int_equal(hits, 1);
    assert_int_equal(misses, 3);
    rp_json_schema_cache_destroy(c); // handed-out references stay valid
    assert_true(accepts(s1, "{\"x\":3}"));
    assert_true(accepts(s3, "{\"y\":[],\"x\":1}"));
    rp_json_schema_unref(s1);
    rp_json_schema_unref(s2);
    rp_json_schema_unref(s3);
    json_decref(a);
    json_decref(a2);
    json_decref(b);
    json_decref(bad);
    rp_error_clear();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_corpus),     cmocka_unit_test(test_mask_bytes), cmocka_unit_test(test_mask_corpus),
        cmocka_unit_test(test_mask_corpus_real),
        cmocka_unit_test(test_patterns),   cmocka_unit_test(test_errors),     cmocka_unit_test(test_semantics),
        cmocka_unit_test(test_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
