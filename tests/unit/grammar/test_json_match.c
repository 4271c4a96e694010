/*
 * test_json_match.c - JSON-constrained decoding (src/grammar/): the byte-level
 * recognizer on a table of valid and invalid documents, differentially against
 * jansson (random bytes, mutated and generated documents), and the token mask
 * on real tokenizers: random and greedy walks that must end in a JSON object,
 * the mask equal to a brute-force simulation of every token, special tokens
 * never allowed, end-of-generation allowed exactly when the object is done,
 * never an all-masked row, a copied matcher running ahead (speculative drafts),
 * and bad ids, pathological vocabularies and failed allocations.
 */
#include "test_util.h"

#include <jansson.h>
#include <math.h>

#include "grammar/grammar_int.h"
#include "grammar/brute.h"

/* ---- helpers -------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;

static uint64_t rng(void)
{
    return rp_test_xorshift(&rng_state);
}

static uint32_t rng_below(uint32_t n)
{
    return (uint32_t)(rng() % n);
}

static float rng_float(float lo, float hi)
{
    return lo + (hi - lo) * (float)(rng() >> 40) / (float)(1 << 24);
}

// Feeds the whole text byte by byte: the number of bytes accepted; *done after them.
static size_t recognize(const char *text, size_t len, bool *done)
{
    json_state s;
    json_state_init(&s);
    size_t i = 0;
    for (; i < len; i++) {
        if (!json_step(&s, (uint8_t)text[i]))
            break;
    }
    *done = i == len && json_done(&s);
    return i;
}

// jansson's verdict: 1 an object, 0 rejected, -1 rejected only for a number's range.
static int jansson_object(const char *text, size_t len)
{
    json_error_t err;
    json_t *j = json_loadb(text, len, JSON_ALLOW_NUL, &err);
    if (!j) {
        if (strstr(err.text, "too big") || strstr(err.text, "overflow") || strstr(err.text, "NUL byte in object key"))
            return -1;
        return 0;
    }
    int ok = json_is_object(j);
    json_decref(j);
    return ok;
}

// False when the text may be an object to jansson that the recognizer rightly
// refuses: a run of whitespace (anywhere) or a count of opening brackets
// (anywhere) past the limits, or a raw NUL byte.
static bool within_limits(const char *text, size_t len)
{
    size_t run = 0, max_run = 0, opens = 0;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        run = (c == ' ' || c == '\t' || c == '\n' || c == '\r') ? run + 1 : 0;
        if (run > max_run)
            max_run = run;
        opens += c == '{' || c == '[';
        if (c == 0)
            return false; // jansson reads past a raw NUL after a number ({"a":0<NUL>} is an object to it)
    }
    return max_run <= JSON_MAX_WS && opens <= JSON_MAX_DEPTH;
}

// Recognizer and jansson must agree on `text` (when it stays within the limits).
static void check_differential(const char *text, size_t len)
{
    bool done;
    recognize(text, len, &done);
    int j = jansson_object(text, len);
    if (done && j == 0)
        fail_msg("recognizer accepts what jansson rejects: [%.*s]", (int)len, text);
    if (!done && j == 1 && within_limits(text, len))
        fail_msg("recognizer rejects a valid object: [%.*s]", (int)len, text);
}

/* ---- the recognizer on a table -------------------------------------------- */

static const char *const valid_docs[] = {
    "{}",
    " \n\t\r{}",
    "{\"a\":1}",
    "{ \"a\" : 1 }",
    "{\"a\":-0.5e+10,\"b\":0,\"c\":-0,\"d\":1E5,\"e\":1e-0,\"f\":12.34E-56,\"g\":9007199254740993}",
    "{\"a\":[1,2,{\"b\":null}],\"c\":true,\"d\":false}",
    "{\"a\" : [ ] , \"b\" : { } , \"c\" : [ 1 , [ 2 ] ] }",
    "{\"esc\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"}",
    "{\"\\u00e9\\uD83D\\uDE00\":\"\\u20AC\\u0000\\uFFFF\\ud7ff\\ue000\"}",
    "{\"utf8\":\"\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80\xEF\xBF\xBF\xF4\x8F\xBF\xBF\xE0\xA0\x80\xED\x9F\xBF\x7F\"}",
    "{\"a\":[0],\"b\":[0.0],\"c\":[-1e+9],\"d\":[true,false,null]}",
    "{\"a\":{\"b\":{\"c\":{\"d\":[[[[]]]]}}}}",
    "{\n  \"key\": \"value\",\n  \"list\": [\n    1,\n    2\n  ]\n}",
    "{\"dup\":1,\"dup\":2}",
    "{\"\":\"\"}",
    "{\"a\":1}\n\n                              ", // trailing whitespace up to the limit
};

static const char *const invalid_docs[] = {
    "[]",
    "\"a\"",
    "1",
    "",
    "{",
    "{\"a\":1",
    "{\"a\":01}",
    "{\"a\":1.}",
    "{\"a\":.5}",
    "{\"a\":+1}",
    "{\"a\":1e}",
    "{\"a\":1e+}",
    "{\"a\":-}",
    "{\"a\":--1}",
    "{\"a\":-a}",
    "{\"a\":0x1}",
    "{'a':1}",
    "{\"a\":1,}",
    "{,}",
    "{\"a\"}",
    "{\"a\":}",
    "{\"a\" 1}",
    "{\"a\":1 2}",
    "{\"a\":tru}",
    "{\"a\":truex}",
    "{\"a\":True}",
    "{\"a\":nul}",
    "{\"a\":NaN}",
    "{\"a\":Infinity}",
    "{\"a\":\"\\x\"}",
    "{\"a\":\"\\u12G4\"}",
    "{\"a\":\"\\u12\"}",
    "{\"a\":\"\\ud800\"}",
    "{\"a\":\"\\udc00\"}",
    "{\"a\":\"\\ud800\\u0041\"}",
    "{\"a\":\"\\ud800\\ud800\"}",
    "{\"a\":\"\\ud800x\"}",
    "{\"a\":\"\\ud800\\n\"}",
    "{\"a\":\"tab\there\"}",
    "{\"a\":\"nl\nhere\"}",
    "{\"a\":\"\xC0\x80\"}",
    "{\"a\":\"\xC1\xBF\"}",
    "{\"a\":\"\xE0\x80\x80\"}",
    "{\"a\":\"\xED\xA0\x80\"}",
    "{\"a\":\"\xF0\x80\x80\x80\"}",
    "{\"a\":\"\xF4\x90\x80\x80\"}",
    "{\"a\":\"\xF5\x80\x80\x80\"}",
    "{\"a\":\"\xFF\"}",
    "{\"a\":\"\x80\"}",
    "{\"a\":\"\xE4\xB8\"}",
    "{\"a\":\"\xE4\"}",
    "{}}",
    "{}                                 ", // 33 blanks after the object
    "{}{}",
    "{\"a\":[}",
    "{\"a\":{]}",
    "{\"a\":[1 2]}",
    "{\"a\":[,1]}",
    "{\"a\":[1,]}",
    "{\"a\":1}x",
    "{\"a\":\"abc",
    "{\"a\":[1,2",
    "{a:1}",
    "{\"a\"::1}",
    "\xEF\xBB\xBF{}",
};

static void expect_valid(const char *doc, size_t len)
{
    json_state s;
    json_state_init(&s);
    size_t end = len; // done from the closing brace on (only whitespace may follow)
    while (end > 0 && strchr(" \t\r\n", doc[end - 1]))
        end--;
    for (size_t i = 0; i < len; i++) {
        if (json_done(&s) != (i >= end))
            fail_msg("done is %d after %zu of %zu bytes of [%s]", json_done(&s), i, len, doc);
        if (!json_step(&s, (uint8_t)doc[i]))
            fail_msg("byte %zu rejected in [%s]", i, doc);
    }
    if (!json_done(&s))
        fail_msg("not done at the end of [%s]", doc);
    // In random splits through json_feed: each chunk commits whole.
    for (int r = 0; r < 20; r++) {
        json_state_init(&s);
        for (size_t i = 0; i < len;) {
            size_t n = 1 + rng_below(8);
            if (n > len - i)
                n = len - i;
            assert_true(json_feed(&s, (const uint8_t *)doc + i, n));
            i += n;
        }
        assert_true(json_done(&s));
    }
    assert_int_equal(jansson_object(doc, len), 1);
}

static void test_table(void **state)
{
    for (size_t i = 0; i < sizeof(valid_docs) / sizeof(valid_docs[0]); i++) {
        expect_valid(valid_docs[i], strlen(valid_docs[i]));
    }
    // A valid document with a NUL escape and a string holding every allowed ASCII byte.
    char buf[256];
    size_t n = 0;
    buf[n++] = '{';
    buf[n++] = '"';
    for (int c = 0x20; c < 0x80; c++)
        if (c != '"' && c != '\\')
            buf[n++] = (char)c;
    memcpy(buf + n, "\":1}", 4);
    n += 4;
    expect_valid(buf, n);

    for (size_t i = 0; i < sizeof(invalid_docs) / sizeof(invalid_docs[0]); i++) {
        const char *doc = invalid_docs[i];
        bool done;
        size_t len = strlen(doc);
        size_t acc = recognize(doc, len, &done);
        if (done)
            fail_msg("accepted [%s]", doc);
        // A rejection leaves json_feed's state as it was.
        json_state s, before;
        json_state_init(&s);
        before = s;
        if (acc < len) {
            assert_false(json_feed(&s, (const uint8_t *)doc, len));
            assert_memory_equal(&s, &before, sizeof(s));
        }
        if (jansson_object(doc, len) == 1 && within_limits(doc, len))
            fail_msg("jansson accepts invalid [%s]", doc);
    }
}

static void test_limits(void **state)
{
    char buf[1024];
    // Nesting: 64 levels open and close; a 65th '[' or '{' is refused.
    for (int kind = 0; kind < 2; kind++) {
        size_t n = 0;
        buf[n++] = '{';
        buf[n++] = '"';
        buf[n++] = 'a';
        buf[n++] = '"';
        buf[n++] = ':';
        for (int d = 1; d < JSON_MAX_DEPTH; d++) {
            if (kind) {
                buf[n++] = '[';
            } else {
                memcpy(buf + n, "{\"a\":", 5);
                n += 5;
            }
        }
        buf[n++] = '1';
        for (int d = 1; d < JSON_MAX_DEPTH; d++)
            buf[n++] = kind ? ']' : '}';
        buf[n++] = '}';
        expect_valid(buf, n);
        json_state s;
        json_state_init(&s);
        size_t open_end = 5 + (size_t)(JSON_MAX_DEPTH - 1) * (kind ? 1 : 5);
        assert_true(json_feed(&s, (const uint8_t *)buf, open_end));
        assert_int_equal(s.depth, JSON_MAX_DEPTH);
        json_state t = s;
        assert_false(json_step(&t, '['));
        t = s;
        assert_false(json_step(&t, '{'));
        t = s;
        assert_true(json_step(&t, '"'));
    }
    // Whitespace: JSON_MAX_WS blanks in a row anywhere between tokens, not one more.
    const char *places[] = {"", "{", "{\"a\"", "{\"a\":", "{\"a\":1", "{\"a\":[", "{\"a\":[1,", "{\"a\":1.5"};
    for (size_t p = 0; p < sizeof(places) / sizeof(places[0]); p++) {
        json_state s;
        json_state_init(&s);
        assert_true(json_feed(&s, (const uint8_t *)places[p], strlen(places[p])));
        for (int i = 0; i < JSON_MAX_WS; i++)
            assert_true(json_step(&s, " \n\t\r"[i % 4]));
        json_state t = s;
        assert_false(json_step(&t, ' '));
        // ...and any other byte that fits resets the count
        if (s.mode == JM_AFTER || s.mode == JM_OBJ_FIRST || s.mode == JM_ARR_FIRST) {
            t = s;
            assert_true(json_step(&t, s.mode == JM_OBJ_FIRST || (s.mode == JM_AFTER && s.depth == 1) ? '}' : ']'));
        }
    }
    // Inside strings blanks are content, not whitespace: no limit.
    json_state s;
    json_state_init(&s);
    assert_true(json_feed(&s, (const uint8_t *)"{\"a\":\"", 6));
    for (int i = 0; i < 1000; i++)
        assert_true(json_step(&s, ' '));
    assert_true(json_feed(&s, (const uint8_t *)"\"}", 2));
    assert_true(json_done(&s));
    // A number ends only at the next delimiter: "1" then "}" and "1" then " " then "}".
    json_state_init(&s);
    assert_true(json_feed(&s, (const uint8_t *)"{\"a\":1", 6));
    assert_false(json_done(&s));
    assert_true(json_feed(&s, (const uint8_t *)"2", 1));
    assert_true(json_feed(&s, (const uint8_t *)"}", 1));
    assert_true(json_done(&s));
    json_state_init(&s);
    assert_true(json_feed(&s, (const uint8_t *)"{\"a\":[-0.5e3", 12));
    assert_true(json_feed(&s, (const uint8_t *)" ]", 2));
    assert_true(json_feed(&s, (const uint8_t *)"}", 1));
    assert_true(json_done(&s));
    assert_int_equal(sizeof(json_state), 16);
}

/* ---- differential against jansson ----------------------------------------- */

static void test_random_bytes(void **state)
{
    static const char alphabet[] =
        "{}[]\":,0123456789-+.eE \n\tabcdefnlrstu\\/\x01\xC3\xA9\xE4\xB8\xAD\xF0\x9F\xED\xFF";
    char buf[64];
    for (int it = 0; it < 200000; it++) {
        size_t len = 1 + rng_below(sizeof(buf));
        bool ascii = rng_below(4) != 0;
        for (size_t i = 0; i < len; i++)
            buf[i] = ascii ? alphabet[rng_below(sizeof(alphabet) - 1)] : (char)rng_below(256);
        if (rng_below(2))
            buf[0] = '{';
        check_differential(buf, len);
    }
}

// A random UTF-8 string of up to max code points (NUL only when allow_nul).
static size_t random_utf8(char *out, int max, bool allow_nul)
{
    size_t n = 0;
    int count = (int)rng_below((uint32_t)max + 1);
    for (int i = 0; i < count; i++) {
        uint32_t cp;
        switch (rng_below(6)) {
        case 0:
            cp = rng_below(0x20);
            break;
        case 1:
        case 2:
            cp = 0x20 + rng_below(0x60);
            break;
        case 3:
            cp = "\"\\/\b\f\n\r\t"[rng_below(8)];
            break;
        case 4:
            cp = 0x80 + rng_below(0xFFFF - 0x80);
            if (cp >= 0xD800 && cp <= 0xDFFF)
                cp = 0xE000;
            break;
        default:
            cp = 0x10000 + rng_below(0x10FFFF - 0x10000 + 1);
            break;
        }
        if (cp == 0 && !allow_nul)
            cp = 1;
        if (cp < 0x80) {
            out[n++] = (char)cp;
        } else if (cp < 0x800) {
            out[n++] = (char)(0xC0 | cp >> 6);
            out[n++] = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out[n++] = (char)(0xE0 | cp >> 12);
            out[n++] = (char)(0x80 | (cp >> 6 & 0x3F));
            out[n++] = (char)(0x80 | (cp & 0x3F));
        } else {
            out[n++] = (char)(0xF0 | cp >> 18);
            out[n++] = (char)(0x80 | (cp >> 12 & 0x3F));
            out[n++] = (char)(0x80 | (cp >> 6 & 0x3F));
            out[n++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    return n;
}

static json_t *random_value(int depth);

static json_t *random_object(int depth)
{
    json_t *o = json_object();
    int n = (int)rng_below(depth < 5 ? 5 : 1);
    for (int i = 0; i < n; i++) {
        char key[256];
        size_t kn = random_utf8(key, 8, false);
        key[kn] = 0;
        json_object_set_new(o, key, random_value(depth + 1));
    }
    return o;
}

static json_t *random_value(int depth)
{
    char s[256];
    switch (rng_below(depth < 5 ? 9 : 7)) {
    case 0: {
        size_t n = random_utf8(s, 12, true);
        return json_stringn(s, n);
    }
    case 1:
        return json_integer((json_int_t)(rng() >> rng_below(64)) * (rng_below(2) ? 1 : -1));
    case 2:
        return json_integer((json_int_t)rng_below(100) - 50);
    case 3: {
        double m = (double)(int64_t)(rng() >> 11) / (double)(1ULL << 52);
        return json_real(m * pow(10.0, (double)((int)rng_below(601) - 300)));
    }
    case 4:
        return json_true();
    case 5:
        return json_false();
    case 6:
        return json_null();
    case 7: {
        json_t *a = json_array();
        int n = (int)rng_below(5);
        for (int i = 0; i < n; i++)
            json_array_append_new(a, random_value(depth + 1));
        return a;
    }
    default:
        return random_object(depth);
    }
}

static void test_generated_documents(void **state)
{
    for (int it = 0; it < 3000; it++) {
        json_t *o = random_object(1);
        size_t flags = rng_below(2) ? JSON_COMPACT : JSON_INDENT(rng_below(5));
        if (rng_below(2))
            flags |= JSON_ENSURE_ASCII;
        if (rng_below(2))
            flags |= JSON_ESCAPE_SLASH;
        char *text = json_dumps(o, flags);
        assert_non_null(text);
        size_t len = strlen(text);
        expect_valid(text, len);
        // Mutations: whatever the recognizer finishes, jansson must read as an object, and the other way round.
        char buf[8192];
        if (len + 8 < sizeof(buf)) {
            for (int m = 0; m < 30; m++) {
                memcpy(buf, text, len);
                size_t n = len;
                int edits = 1 + (int)rng_below(3);
                for (int e = 0; e < edits && n > 0; e++) {
                    size_t at = rng_below((uint32_t)n);
                    static const char pool[] = "{}[]\":,0-.e \\u\"\xC3\xA9";
                    char c = rng_below(4) ? pool[rng_below(sizeof(pool) - 1)] : (char)rng_below(256);
                    switch (rng_below(3)) {
                    case 0: // replace
                        buf[at] = c;
                        break;
                    case 1: // insert
                        memmove(buf + at + 1, buf + at, n - at);
                        buf[at] = c;
                        n++;
                        break;
                    default: // delete
                        memmove(buf + at, buf + at + 1, n - at - 1);
                        n--;
                        break;
                    }
                }
                check_differential(buf, n);
            }
        }
        free(text);
        json_decref(o);
    }
}

/* ---- the mask on real tokenizers ------------------------------------------- */


// Masks a random row and checks it against brute force (every id when full,
// else a sample); returns how many ids stayed allowed, or -1 when the row was
// left alone because nothing can continue and the vocabulary has no ending.
static int32_t mask_and_check(const rp_json_match *m, const rp_json_vocab *v, const rp_tokenizer *t, float *logits,
                              int32_t n_vocab, bool full)
{
    for (int32_t i = 0; i < n_vocab; i++)
        logits[i] = rng_float(-4.0f, 4.0f);
    rp_json_match_mask(m, logits, n_vocab);
    const match_state *s = json_match_state(m);
    const rp_json_schema *sc = json_match_schema(m);
    int32_t n_allowed = 0;
    bool any_cand = false;
    for (int32_t i = 0; i < n_vocab; i++) {
        bool ok = !isinf(logits[i]);
        n_allowed += ok;
        if (ok && i < v->n_tok && v->kind[i] == JT_CAND)
            any_cand = true;
    }
    assert_true(n_allowed > 0);
    if (n_allowed == n_vocab) { // untouched: only when no token continues and none ends
        for (int32_t i = 0; i < n_vocab && i < v->n_tok; i++) {
            if (v->kind[i] == JT_EOG)
                fail_msg("row left unmasked though token %d ends", (int)i);
            if (brute_allowed(v, sc, s, i, false))
                fail_msg("row left unmasked though token %d continues", (int)i);
        }
        return -1;
    }
    for (int32_t i = 0; i < n_vocab; i++) {
        bool ok = !isinf(logits[i]);
        if (t && i < v->n_tok) {
            if (ok)
                assert_false(rp_tok_is_special(t, i) && !rp_tok_is_eog(t, i));
            if (rp_tok_is_eog(t, i))
                assert_true(ok == (rp_json_match_done(m) || !any_cand));
        }
        if (!full && rng_below(16) != 0)
            continue;
        bool want = brute_allowed(v, sc, s, i, any_cand);
        if (want != ok)
            fail_msg("token %d: mask says %s, brute force says %s (mode %d)", (int)i, ok ? "yes" : "no",
                     want ? "yes" : "no", s->mode);
    }
    return n_allowed;
}

// Bytes still needed at the least to close the object from s (a guide for finishing walks).
static int lex_distance(const json_state *s)
{
    int key = (s->flags & JF_KEY) ? 2 : 0; // ':' and a value after a key
    int extra;
    switch (s->mode) {
    case JM_DONE:
        return 0;
    case JM_START:
        return 2;
    case JM_OBJ_KEY:
        extra = 4;
        break;
    case JM_COLON:
        extra = 2;
        break;
    case JM_VALUE:
    case JM_NUM_MINUS:
    case JM_NUM_DOT:
    case JM_NUM_E:
    case JM_NUM_ESIGN:
        extra = 1;
        break;
    case JM_STR:
        extra = 1 + key;
        break;
    case JM_STR_UTF8:
        extra = s->aux + 1 + key;
        break;
    case JM_STR_ESC:
        extra = 2 + key;
        break;
    case JM_STR_HEX:
        extra = 4 - s->aux + ((s->flags & JF_HIGH) ? 6 : 0) + 1 + key;
        break;
    case JM_STR_LOW_BS:
        extra = 7 + key;
        break;
    case JM_STR_LOW_U:
        extra = 6 + key;
        break;
    case JM_LIT:
        extra = (s->aux == 1 ? 5 : 4) - s->lo;
        break;
    default:
        extra = 0;
        break;
    }
    return extra + s->depth;
}

// The same for the matcher of json_object mode (the schema "any object").
static int distance(const match_state *s)
{
    if (s->mode == SM_DONE)
        return 0;
    if (s->mode == SM_VALUE)
        return 2;
    return lex_distance(&s->lex);
}

typedef struct walk_result {
    int steps;
    char *text; // the pieces' bytes
    size_t len;
    int32_t *ids; // the ids picked
    size_t n_ids;
} walk_result;

enum { WALK_UNIFORM, WALK_GREEDY, WALK_SHORT };

// One walk: `random_steps` steps picking an allowed token (uniformly, greedily on
// the random row, or uniformly among those of at most two bytes, which builds
// more structure, escapes and split characters), then the allowed token that
// brings the end closest, until an end-of-generation token.
static void walk(const rp_tokenizer *t, const rp_json_vocab *v, int32_t n_vocab, int random_steps, int policy,
                 walk_result *r)
{
    rp_json_match *m = NULL;
    assert_int_equal(rp_json_match_create(v, NULL, &m), RP_OK);
    float *logits = malloc((size_t)n_vocab * sizeof(float));
    size_t cap = 1 << 16;
    r->text = malloc(cap);
    r->ids = malloc(8192 * sizeof(int32_t));
    r->len = 0;
    r->n_ids = 0;
    assert_true(logits && r->text && r->ids);
    int step = 0;
    for (;; step++) {
        assert_true(step < random_steps + 2000);
        if (rp_json_match_done(m) && v->n_eog == 0)
            break; // no way to end: the object is the text
        int32_t n_allowed = mask_and_check(m, v, t, logits, n_vocab, step < 40 || step % 50 == 0);
        assert_true(n_allowed > 0);
        int32_t pick = -1;
        if (step < random_steps) {
            if (policy == WALK_GREEDY) {
                for (int32_t i = 0; i < n_vocab; i++)
                    if (!isinf(logits[i]) && (pick < 0 || logits[i] > logits[pick]))
                        pick = i;
            } else if (policy == WALK_SHORT) {
                int32_t n_short = 0;
                for (int32_t i = 0; i < v->n_tok; i++)
                    n_short += !isinf(logits[i]) && v->off[i + 1] - v->off[i] <= 2;
                int32_t k = n_short ? (int32_t)rng_below((uint32_t)n_short) : 0;
                for (int32_t i = 0; i < v->n_tok && pick < 0; i++)
                    if (!isinf(logits[i]) && (n_short == 0 || (v->off[i + 1] - v->off[i] <= 2 && k-- == 0)))
                        pick = i;
            } else {
                int32_t k = (int32_t)rng_below((uint32_t)n_allowed);
                for (int32_t i = 0; i < n_vocab && pick < 0; i++)
                    if (!isinf(logits[i]) && k-- == 0)
                        pick = i;
            }
        } else {
            int best = 1 << 30;
            for (int32_t i = 0; i < n_vocab; i++) {
                if (isinf(logits[i]))
                    continue;
                int d = 0;
                if (v->kind[i] == JT_CAND) {
                    match_state s = *json_match_state(m);
                    assert_true(match_feed(json_match_schema(m), &s, v->blob + v->off[i], v->off[i + 1] - v->off[i]));
                    d = distance(&s);
                }
                if (d < best || (d == best && logits[i] > logits[pick])) {
                    best = d;
                    pick = i;
                }
            }
        }
        assert_true(pick >= 0);
        bool done_before = rp_json_match_done(m);
        assert_int_equal(rp_json_match_accept(m, pick), RP_OK);
        if (v->kind[pick] == JT_EOG) {
            assert_true(done_before);
            break;
        }
        assert_true(r->n_ids < 8192);
        r->ids[r->n_ids++] = pick;
        size_t pl = v->off[pick + 1] - v->off[pick];
        assert_true(r->len + pl <= cap);
        memcpy(r->text + r->len, v->blob + v->off[pick], pl);
        r->len += pl;
    }
    r->steps = step;
    free(logits);
    rp_json_match_destroy(m);
}

static void check_walks(const char *path, int32_t extra_ids, int walks, int random_steps)
{
    rp_tokenizer *t = NULL;
    if (rp_tok_load_file(path, &t) != RP_OK)
        fail_msg("%s: %s", path, rp_error_message());
    rp_json_vocab *v = NULL;
    assert_int_equal(rp_json_vocab_create(t, &v), RP_OK);
    int32_t n_vocab = rp_tok_n_vocab(t) + extra_ids;
    for (int w = 0; w < walks; w++) {
        walk_result r;
        walk(t, v, n_vocab, random_steps, w % 3, &r);
        bool done;
        recognize(r.text, r.len, &done);
        assert_true(done);
        assert_int_not_equal(jansson_object(r.text, r.len), 0); // -1: a number past jansson's range

        // The text a client gets (the decoder's output) is that object too.
        char *dec = NULL;
        size_t dlen = 0;
        assert_int_equal(rp_tok_decode(t, r.ids, r.n_ids, true, &dec, &dlen), RP_OK);
        if (jansson_object(dec, dlen) == 0)
            fail_msg("%s: decoded text is not an object: [%.*s]", path, (int)dlen, dec);
        rp_free(dec);
        free(r.text);
        free(r.ids);
    }
    rp_json_vocab_destroy(v);
    rp_tok_destroy(t);
}

static void test_walks_bundled(void **state)
{
    // models/rapid-tiny: byte-level BPE with added special and non-special tokens (<think>, <tool_call>).
    check_walks(rp_test_source("models/rapid-tiny"), 5, 9, 300);
}

static void test_walks_spm(void **state)
{
    // SentencePiece BPE with byte fallback (U+2581 for spaces, <0xNN> pieces, a decoder that strips one space).
    check_walks(rp_test_source("tests/data/tokenizer/spm"), 0, 6, 300);
    check_walks(rp_test_source("tests/data/tokenizer/qwen2"), 0, 6, 300);
}

static void test_walks_conformance(void **state)
{
    RP_TEST_NEED_CONFORMANCE(dir);
    char path[4096];
    snprintf(path, sizeof(path), "%s/tokenizer/ggml-vocab-deepseek-llm.gguf", dir);
    check_walks(path, 0, 3, 60);
    snprintf(path, sizeof(path), "%s/tokenizer/ggml-vocab-llama-spm.gguf", dir);
    check_walks(path, 0, 3, 60);
}

/* ---- mask edge cases ------------------------------------------------------ */

static rp_json_vocab *build(const char *const *pieces, const uint8_t *kinds, int32_t n)
{
    json_tok toks[64];
    assert_true(n <= 64);
    for (int32_t i = 0; i < n; i++)
        toks[i] = (json_tok){(const uint8_t *)pieces[i], pieces[i] ? strlen(pieces[i]) : 0, kinds[i]};
    rp_json_vocab *v = NULL;
    assert_int_equal(json_vocab_build(toks, n, &v), RP_OK);
    return v;
}

static void test_small_vocab(void **state)
{
    // ids:               0    1     2      3    4      5       6     7    8   9
    const char *p[] = {"{", "\"", "a", "}", "<s>", "", "\"a\":", " ", "1", "\xE4"};
    const uint8_t k[] = {JT_CAND, JT_CAND, JT_CAND, JT_CAND, JT_EOG, JT_CAND, JT_CAND, JT_CAND, JT_CAND, JT_CAND};
    rp_json_vocab *v = build(p, k, 10);
    assert_int_equal(v->kind[5], JT_NEVER); // empty
    rp_json_match *m = NULL;
    assert_int_equal(rp_json_match_create(v, NULL, &m), RP_OK);
    float l[12];
    int32_t n = mask_and_check(m, v, NULL, l, 12, true);
    assert_int_equal(n, 2); // "{" and " "
    assert_false(isinf(l[0]) || isinf(l[7]));
    assert_true(isinf(l[10]) && isinf(l[11])); // past the vocabulary
    // Refused tokens leave the state as it was.
    assert_int_equal(rp_json_match_accept(m, 3), RP_ERR_INVALID);
    assert_int_equal(rp_json_match_accept(m, 4), RP_ERR_INVALID);
    assert_int_equal(rp_json_match_accept(m, 5), RP_ERR_INVALID);
    assert_int_equal(rp_json_match_accept(m, -1), RP_ERR_INVALID);
    assert_int_equal(rp_json_match_accept(m, 10), RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "outside the vocabulary"));
    assert_int_equal(rp_json_match_accept(m, 0), RP_OK);
    assert_int_equal(rp_json_match_accept(m, 6), RP_OK);
    assert_int_equal(rp_json_match_accept(m, 1), RP_OK);
    assert_int_equal(rp_json_match_accept(m, 9), RP_OK); // half a character
    mask_and_check(m, v, NULL, l, 10, true);
    assert_true(isinf(l[1])); // no closing quote inside a character
    assert_int_equal(rp_json_match_accept(m, 1), RP_ERR_INVALID);
    // The vocabulary has no continuation byte: only the end-of-generation token is left.
    n = mask_and_check(m, v, NULL, l, 10, true);
    assert_int_equal(n, 1);
    assert_false(isinf(l[4]));
    assert_int_equal(rp_json_match_accept(m, 4), RP_OK);
    // A shorter row than the vocabulary: ids past it are not touched.
    rp_json_match_destroy(m);
    assert_int_equal(rp_json_match_create(v, NULL, &m), RP_OK);
    for (int i = 0; i < 10; i++)
        l[i] = 1.0f;
    rp_json_match_mask(m, l, 3);
    assert_true(!isinf(l[0]) && isinf(l[1]) && isinf(l[2]) && l[3] == 1.0f);
    assert_int_equal(rp_json_match_accept(m, 0), RP_OK);
    assert_int_equal(rp_json_match_accept(m, 3), RP_OK);
    assert_true(rp_json_match_done(m));
    n = mask_and_check(m, v, NULL, l, 10, true);
    assert_int_equal(n, 2); // the end, or trailing whitespace
    assert_false(isinf(l[4]) || isinf(l[7]));
    assert_int_equal(rp_json_match_accept(m, 8), RP_ERR_INVALID); // nothing else after the object
    for (int i = 0; i < JSON_MAX_WS; i++)
        assert_int_equal(rp_json_match_accept(m, 7), RP_OK);
    n = mask_and_check(m, v, NULL, l, 10, true);
    assert_int_equal(n, 1);
    assert_false(isinf(l[4]));
    assert_int_equal(rp_json_match_accept(m, 4), RP_OK);
    rp_json_match_destroy(m);
    rp_json_vocab_destroy(v);

    // No end-of-generation token and no way on: the row is left as it was.
    const char *p2[] = {"{", "a"};
    const uint8_t k2[] = {JT_CAND, JT_CAND};
    v = build(p2, k2, 2);
    assert_int_equal(rp_json_match_create(v, NULL, &m), RP_OK);
    assert_int_equal(rp_json_match_accept(m, 0), RP_OK);
    l[0] = 0.5f;
    l[1] = 0.25f;
    rp_json_match_mask(m, l, 2);
    assert_true(l[0] == 0.5f && l[1] == 0.25f);
    rp_json_match_destroy(m);
    rp_json_vocab_destroy(v);

    // An empty vocabulary.
    v = build(NULL, NULL, 0);
    assert_int_equal(rp_json_match_create(v, NULL, &m), RP_OK);
    l[0] = 1.0f;
    rp_json_match_mask(m, l, 1);
    assert_true(l[0] == 1.0f);
    rp_json_match_destroy(m);
    rp_json_vocab_destroy(v);
}

// rp_json_match_copy: a copy runs ahead over tokens (speculative drafts) and
// masks as the original would after them; the original does not move.
static void test_copy(void **state)
{
    const char *p[] = {"{", "\"", "a", "}", "<s>", "\"a\":", " ", "1"};
    const uint8_t k[] = {JT_CAND, JT_CAND, JT_CAND, JT_CAND, JT_EOG, JT_CAND, JT_CAND, JT_CAND};
    rp_json_vocab *v = build(p, k, 8);
    rp_json_match *m = NULL, *ahead = NULL, *ref = NULL;
    assert_int_equal(rp_json_match_create(v, NULL, &m), RP_OK);
    assert_int_equal(rp_json_match_create(v, NULL, &ahead), RP_OK);
    assert_int_equal(rp_json_match_create(v, NULL, &ref), RP_OK);
    const int32_t seq[] = {0, 5, 7, 3, 4};
    for (int at = 0; at < 5; at++) {
        // ahead: m's state, then the tokens from `at` on, each row masked as ref's after the same tokens.
        rp_json_match_copy(ahead, m);
        rp_json_match_copy(ref, m);
        for (int j = at; j < 5; j++) {
            float la[8], lr[8];
            for (int i = 0; i < 8; i++)
                la[i] = lr[i] = (float)i;
            rp_json_match_mask(ahead, la, 8);
            rp_json_match_mask(ref, lr, 8);
            assert_memory_equal(la, lr, sizeof(la));
            assert_false(isinf(la[seq[j]]));
            assert_int_equal(rp_json_match_accept(ahead, seq[j]), RP_OK);
            assert_int_equal(rp_json_match_accept(ref, seq[j]), RP_OK);
        }
        assert_true(rp_json_match_done(ahead));
        // m itself is where it was: the next token of the sequence is allowed, the one after it is not.
        float l[8];
        for (int i = 0; i < 8; i++)
            l[i] = 0.0f;
        rp_json_match_mask(m, l, 8);
        assert_false(isinf(l[seq[at]]));
        if (at < 3)
            assert_true(isinf(l[seq[at + 1]]));
        assert_int_equal(rp_json_match_accept(m, seq[at]), RP_OK);
    }
    rp_json_match_destroy(m);
    rp_json_match_destroy(ahead);
    rp_json_match_destroy(ref);
    rp_json_vocab_destroy(v);
}

// Shared prefixes, duplicates and strings: the trie walk equals brute force on
// many random small vocabularies at random reachable states.
static void test_trie_random(void **state)
{
    static const char frag[][6] = {"{",    "}",    "[",        "]",    "\"",       ":",        ",",    " ",
                                   "\n",   "a",    "1",        "0",    "-",        ".",        "e",    "true",
                                   "nul",  "l",    "\\",       "u",    "D8",       "3d",       "de",   "00",
                                   "\xC3", "\xA9", "\xE4\xB8", "\xAD", "\xF0\x9F", "\x98\x80", "\x01", "x"};
    const int n_frag = (int)(sizeof(frag) / sizeof(frag[0]));
    for (int it = 0; it < 300; it++) {
        char store[48][24];
        const char *p[48];
        uint8_t k[48];
        int32_t n = 8 + (int32_t)rng_below(40);
        for (int32_t i = 0; i < n; i++) {
            store[i][0] = 0;
            int parts = 1 + (int)rng_below(3);
            for (int j = 0; j < parts; j++)
                strcat(store[i], frag[rng_below((uint32_t)n_frag)]);
            if (i > 0 && rng_below(8) == 0)
                memcpy(store[i], store[rng_below((uint32_t)i)], sizeof(store[i])); // a duplicate
            p[i] = store[i];
            uint32_t r = rng_below(20);
            k[i] = r == 0 ? JT_EOG : r == 1 ? JT_NEVER : JT_CAND;
        }
        rp_json_vocab *v = build(p, k, n);
        rp_json_match *m = NULL;
        assert_int_equal(rp_json_match_create(v, NULL, &m), RP_OK);
        float l[56];
        for (int step = 0; step < 40; step++) {
            if (mask_and_check(m, v, NULL, l, n + 2, true) < 0)
                break;
            int32_t allowed[56], na = 0;
            for (int32_t i = 0; i < n; i++)
                if (!isinf(l[i]))
                    allowed[na++] = i;
            int32_t pick = allowed[rng_below((uint32_t)na)];
            assert_int_equal(rp_json_match_accept(m, pick), RP_OK);
            if (v->kind[pick] == JT_EOG)
                break;
        }
        rp_json_match_destroy(m);
        rp_json_vocab_destroy(v);
    }
}

static void test_out_of_memory(void **state)
{
    rp_tokenizer *t = NULL;
    assert_int_equal(rp_tok_load_file(rp_test_source("tests/data/tokenizer/qwen2"), &t), RP_OK);
    for (long n = 0;; n++) {
        rp_json_vocab *v = NULL;
        rp_json_match *m = NULL;
        rp_alloc_fail_after(n, false);
        rp_status st = rp_json_vocab_create(t, &v);
        if (st == RP_OK)
            st = rp_json_match_create(v, NULL, &m);
        rp_alloc_fail_after(-1, false);
        rp_json_match_destroy(m);
        rp_json_vocab_destroy(v);
        if (st == RP_OK)
            break;
        assert_int_equal(st, RP_ERR_NOMEM);
        assert_true(n < 100);
    }
    rp_tok_destroy(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_random_bytes),
        cmocka_unit_test(test_generated_documents),
        cmocka_unit_test(test_small_vocab),
        cmocka_unit_test(test_copy),
        cmocka_unit_test(test_trie_random),
        cmocka_unit_test(test_walks_bundled),
        cmocka_unit_test(test_walks_spm),
        cmocka_unit_test(test_walks_conformance),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
