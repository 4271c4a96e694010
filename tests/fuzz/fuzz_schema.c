/*
 * fuzz_schema.c - libFuzzer driver for JSON Schema compilation and the schema
 * matcher (src/grammar/schema.c, regex.c, json_match.c).
 *
 * Input: a schema (JSON text), a NUL byte, a document. A schema jansson reads
 * is compiled (tight limits, so a hostile schema is refused quickly):
 *   - a refusal carries a status among the documented ones and a JSON pointer;
 *   - a compiled schema reads the document byte by byte, and a document it
 *     takes whole and calls complete is JSON to jansson;
 *   - over a vocabulary of every single byte plus an end-of-generation token,
 *     the mask at each position equals simulating every token, a state that is
 *     not complete always leaves some byte to continue with (no dead ends), and
 *     the document's next byte is accepted exactly when the mask allows it.
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
        fprintf(stderr, "fuzz_schema: invariant broken: %s\n", what);
        abort();
    }
}

static void check_mask(const rp_json_schema *sc, const uint8_t *doc, size_t n)
{
    static uint8_t bytes[256];
    json_tok toks[257];
    for (int c = 1; c < 256; c++) {
        bytes[c] = (uint8_t)c;
        toks[c - 1] = (json_tok){&bytes[c], 1, JT_CAND};
    }
    toks[255] = (json_tok){(const uint8_t *)"<eog>", 5, JT_EOG};
    int32_t nt = 256;
    rp_json_vocab *v = NULL;
    rp_json_match *m = NULL;
    check(json_vocab_build(toks, nt, &v) == RP_OK, "vocab build");
    check(rp_json_match_create(v, sc, &m) == RP_OK, "match create");
    float logits[256];
    for (size_t at = 0; at <= n && at < 256; at++) {
        for (int32_t i = 0; i < nt; i++)
            logits[i] = 1.0f;
        rp_json_match_mask(m, logits, nt);
        const match_state *s = json_match_state(m);
        bool any_cand = false;
        for (int32_t i = 0; i < nt - 1; i++) {
            match_state t = *s;
            bool want = match_feed(sc, &t, &bytes[i + 1], 1);
            check(want == !isinf(logits[i]), "mask equals brute force");
            any_cand |= want;
        }
        bool complete = match_complete(sc, s);
        check(!isinf(logits[nt - 1]) == (complete || !any_cand), "end of generation exactly when complete");
        check(any_cand || complete, "no dead end: an incomplete state has a byte to continue with");
        if (at == n || doc[at] == 0)
            break;
        bool allowed = !isinf(logits[doc[at] - 1]);
        check((rp_json_match_accept(m, doc[at] - 1) == RP_OK) == allowed, "accept agrees with the mask");
        if (!allowed)
            break;
    }
    rp_error_clear();
    rp_json_match_destroy(m);
    rp_json_vocab_destroy(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    if (!nul)
        return 0;
    json_error_t je;
    json_t *j = json_loadb((const char *)data, (size_t)(nul - data), JSON_DECODE_ANY, &je);
    if (!j)
        return 0;
    const uint8_t *doc = nul + 1;
    size_t n = size - (size_t)(doc - data);
    rp_json_schema_limits lim;
    rp_json_schema_limits_default(&lim);
    lim.max_nodes = 500;
    lim.max_pattern_states = 200;
    lim.budget_ms = 50;
    rp_json_schema *sc = NULL;
    rp_json_schema_error err;
    rp_status st = rp_json_schema_compile(j, &lim, &sc, &err);
    json_decref(j);
    if (st) {
        check(st == RP_ERR_UNSUPPORTED || st == RP_ERR_INVALID || st == RP_ERR_LIMIT || st == RP_ERR_NOMEM,
              "a documented status");
        check(err.path[0] == '#', "a JSON pointer");
        check(sc == NULL, "no schema on failure");
        rp_error_clear();
        return 0;
    }
    match_state s;
    match_state_init(&s, sc);
    size_t i = 0;
    while (i < n && match_step(sc, &s, doc[i]))
        i++;
    if (i == n && match_complete(sc, &s)) {
        json_t *d = json_loadb((const char *)doc, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        // jansson refuses numbers past its range (1e999) that JSON allows: tolerate only that.
        check(d || strstr(je.text, "too big") || strstr(je.text, "overflow"), "a complete document is JSON");
        json_decref(d);
    }
    check_mask(sc, doc, n);
    rp_json_schema_unref(sc);
    return 0;
}
