/*
 * fuzz_json.c - libFuzzer driver for JSON-constrained decoding (src/grammar/).
 *
 * Input: byte 0 seeds how the text is cut into tokens (pieces of 1..8 bytes),
 * the rest is the text.
 *   1. The recognizer reads the text byte by byte. If it takes all of it and
 *      says done, jansson must read the text as one object (unless jansson
 *      refuses only a number's range or a NUL in a key); if jansson reads an
 *      object and the text stays within the recognizer's limits (runs of
 *      whitespace, nesting), the recognizer must take it and say done.
 *   2. The pieces, the text's distinct bytes, one end-of-generation and one
 *      never-allowed token form a vocabulary. Step by step from the start (over
 *      the first 512 bytes), the mask must equal simulating every token,
 *      never leave a row empty, and the next piece must be accepted exactly
 *      when the mask allows it.
 * Anything else aborts.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

#include "grammar/grammar_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_json: invariant broken: %s\n", what);
        abort();
    }
}

// False when the text may be an object to jansson that the recognizer rightly refuses.
static bool within_limits(const uint8_t *p, size_t n)
{
    size_t run = 0, opens = 0;
    for (size_t i = 0; i < n; i++) {
        bool ws = p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r';
        run = ws ? run + 1 : 0;
        if (run > JSON_MAX_WS)
            return false;
        opens += p[i] == '{' || p[i] == '[';
        if (p[i] == 0)
            return false; // jansson reads past a raw NUL after a number ({"a":0<NUL>} is an object to it)
    }
    return opens <= JSON_MAX_DEPTH;
}

static void check_recognizer(const uint8_t *p, size_t n)
{
    json_state s;
    json_state_init(&s);
    size_t i = 0;
    while (i < n && json_step(&s, p[i]))
        i++;
    bool done = i == n && json_done(&s);
    json_error_t err;
    json_t *j = json_loadb((const char *)p, n, JSON_ALLOW_NUL, &err);
    bool object = j && json_is_object(j);
    bool excused = !j && (strstr(err.text, "too big") || strstr(err.text, "overflow") ||
                          strstr(err.text, "NUL byte in object key"));
    json_decref(j);
    if (done)
        check(object || excused, "what the recognizer finishes, jansson reads as an object");
    if (object && within_limits(p, n))
        check(done, "what jansson reads as an object, the recognizer finishes");
}

static void check_mask(const uint8_t *p, size_t n, uint8_t seed)
{
    enum { MAX_TEXT = 512, MAX_TOK = MAX_TEXT + 256 + 2 };
    static json_tok toks[MAX_TOK];
    static float logits[MAX_TOK + 3];
    if (n > MAX_TEXT)
        n = MAX_TEXT;
    int32_t nt = 0, n_piece = 0;
    uint32_t r = seed * 2654435761u + 1;
    for (size_t i = 0; i < n;) {
        r ^= r << 13;
        r ^= r >> 17;
        r ^= r << 5;
        size_t len = 1 + r % 8;
        if (len > n - i)
            len = n - i;
        n_piece++;
        toks[nt++] = (json_tok){p + i, len, JT_CAND};
        i += len;
    }
    bool seen[256] = {false};
    for (size_t i = 0; i < n; i++) {
        if (!seen[p[i]]) {
            seen[p[i]] = true;
            toks[nt++] = (json_tok){p + i, 1, JT_CAND};
        }
    }
    toks[nt++] = (json_tok){(const uint8_t *)"<eog>", 5, JT_EOG};
    toks[nt++] = (json_tok){(const uint8_t *)"{", 1, JT_NEVER};

    rp_json_vocab *v = NULL;
    rp_json_match *m = NULL;
    check(json_vocab_build(toks, nt, &v) == RP_OK, "vocab build");
    check(rp_json_match_create(v, NULL, &m) == RP_OK, "match create");
    int32_t n_vocab = nt + 3; // a row padded past the vocabulary
    for (int32_t piece = 0; piece <= n_piece; piece++) {
        for (int32_t i = 0; i < n_vocab; i++)
            logits[i] = (float)(i % 7);
        rp_json_match_mask(m, logits, n_vocab);
        const match_state *s = json_match_state(m);
        const rp_json_schema *sc = json_match_schema(m);
        bool any_cand = false, any = false, untouched = true;
        for (int32_t i = 0; i < nt; i++) {
            match_state t = *s;
            bool ok = v->kind[i] == JT_CAND && match_feed(sc, &t, v->blob + v->off[i], v->off[i + 1] - v->off[i]);
            any_cand |= ok;
        }
        for (int32_t i = 0; i < n_vocab; i++) {
            any |= !isinf(logits[i]);
            untouched &= logits[i] == (float)(i % 7);
        }
        check(any, "a row is never empty");
        if (untouched) { // only when nothing continues and no token ends (never here: there is one)
            check(!any_cand && v->n_eog == 0, "a row is left alone only when nothing can follow");
            break;
        }
        for (int32_t i = 0; i < n_vocab; i++) {
            bool want = false;
            if (i < nt && v->kind[i] == JT_CAND) {
                match_state t = *s;
                want = match_feed(sc, &t, v->blob + v->off[i], v->off[i + 1] - v->off[i]);
            } else if (i < nt && v->kind[i] == JT_EOG) {
                want = match_complete(sc, s) || !any_cand;
            }
            check(want == !isinf(logits[i]), "mask equals brute force");
            if (want)
                check(logits[i] == (float)(i % 7), "allowed logits are kept");
        }
        if (piece == n_piece)
            break;
        match_state before = *s;
        bool allowed = !isinf(logits[piece]);
        rp_status st = rp_json_match_accept(m, piece);
        check((st == RP_OK) == allowed, "accept agrees with the mask");
        if (!allowed) {
            check(memcmp(&before, json_match_state(m), sizeof(before)) == 0, "a refused token changes nothing");
            break;
        }
    }
    check(rp_json_match_accept(m, nt - 1) == RP_ERR_INVALID, "a never-allowed token is refused");
    rp_error_clear();
    rp_json_match_destroy(m);
    rp_json_vocab_destroy(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    check_recognizer(data + 1, size - 1);
    check_mask(data + 1, size - 1, data[0]);
    return 0;
}
