/*
 * parse_harness.h - shared by the output-parser tests: run a reply through the
 * parser whole (rp_parse_all) or in chunks cut at given positions, check the
 * event stream's invariants on the way, and compare results.
 *
 * Invariants checked on every stream: a call's first event is its TOOL_START
 * (so the name comes first); ARGS/END/ABORT only for a started call; events
 * apply cleanly; every completed call's arguments parse as a JSON object. For
 * well-formed replies (`valid`): no ABORT, and no content delta holds a marker.
 */
#ifndef RP_PARSE_HARNESS_H
#define RP_PARSE_HARNESS_H

#include "test_util.h"

#include "chat/chat.h"

#include <jansson.h>

static const char *const harness_markers[] = {
    "<tool_call>",  "</tool_call>", "<think>", "</think>",   "<|python_tag|>",
    "[TOOL_CALLS]", "[ARGS]",       "<｜tool", "<function=", "<parameter=",
};

typedef struct stream_check {
    bool valid;
    int started[64]; // per call index: 1 while between START and END/ABORT
    size_t n_events;
} stream_check;

static void check_events(stream_check *sc, const rp_parse_event *ev, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const rp_parse_event *e = &ev[i];
        sc->n_events++;
        int k = e->index;
        switch (e->type) {
        case RP_PARSE_EVENT_CONTENT:
            if (sc->valid) {
                for (size_t m = 0; m < sizeof(harness_markers) / sizeof(harness_markers[0]); m++) {
                    const char *mk = harness_markers[m];
                    size_t ml = strlen(mk);
                    for (size_t s = 0; s + ml <= e->len; s++)
                        if (memcmp(e->text + s, mk, ml) == 0)
                            fail_msg("marker %s leaked into content delta '%.*s'", mk, (int)e->len, e->text);
                }
            }
            /* fall through */
        case RP_PARSE_EVENT_REASONING:
            assert_true(e->len > 0);
            assert_non_null(e->text);
            break;
        case RP_PARSE_EVENT_TOOL_START:
            assert_true(k >= 0 && k < 64);
            assert_int_equal(sc->started[k], 0);
            assert_non_null(e->name);
            assert_non_null(e->id);
            assert_true(e->name[0] != 0);
            sc->started[k] = 1;
            break;
        case RP_PARSE_EVENT_TOOL_ARGS:
            assert_true(k >= 0 && k < 64 && sc->started[k]);
            assert_true(e->len > 0);
            break;
        case RP_PARSE_EVENT_TOOL_ABORT:
            if (sc->valid)
                fail_msg("unexpected abort of call %d", k);
            /* fall through */
        case RP_PARSE_EVENT_TOOL_END:
            assert_true(k >= 0 && k < 64 && sc->started[k]);
            sc->started[k] = 0;
            break;
        default:
            fail_msg("unknown event type %d", (int)e->type);
        }
    }
}

static void check_result_json(const rp_parse_result *r)
{
    for (size_t i = 0; i < r->n_calls; i++) {
        json_error_t err;
        json_t *a = json_loads(r->calls[i].arguments, JSON_ALLOW_NUL, &err);
        if (!a || !json_is_object(a))
            fail_msg("call %zu (%s): arguments are not a JSON object: %s", i, r->calls[i].name, r->calls[i].arguments);
        assert_int_equal(strlen(r->calls[i].arguments), r->calls[i].arguments_len);
        json_decref(a);
    }
}

// Streams text cut at cuts[0..n_cuts) (ascending) into a fresh parser; *out gets the result.
static void run_stream(const rp_parser_config *cfg, const char *text, size_t len, const size_t *cuts, size_t n_cuts,
                       bool valid, rp_parse_result *out)
{
    rp_parser *p = NULL;
    assert_int_equal(rp_parser_create(cfg, &p), RP_OK);
    rp_parse_result_init(out);
    stream_check sc;
    memset(&sc, 0, sizeof(sc));
    sc.valid = valid;
    size_t pos = 0;
    const rp_parse_event *ev;
    size_t n;
    for (size_t c = 0; c <= n_cuts; c++) {
        size_t end = c < n_cuts ? cuts[c] : len;
        assert_int_equal(rp_parser_push(p, text + pos, end - pos, &ev, &n), RP_OK);
        check_events(&sc, ev, n);
        assert_int_equal(rp_parse_result_apply(out, ev, n), RP_OK);
        pos = end;
    }
    assert_int_equal(rp_parser_finish(p, &ev, &n), RP_OK);
    check_events(&sc, ev, n);
    assert_int_equal(rp_parse_result_apply(out, ev, n), RP_OK);
    for (int k = 0; k < 64; k++)
        assert_int_equal(sc.started[k], 0);
    // no more text after finish
    assert_int_equal(rp_parser_push(p, "x", 1, &ev, &n), RP_ERR_INVALID);
    rp_parser_destroy(p);
    check_result_json(out);
}

static const char *str_or_empty(const char *s)
{
    return s ? s : "";
}

static void assert_results_equal(const rp_parse_result *a, const rp_parse_result *b, const char *what)
{
    if (a->content_len != b->content_len || strcmp(str_or_empty(a->content), str_or_empty(b->content)) != 0)
        fail_msg("%s: content differs: '%s' vs '%s'", what, str_or_empty(a->content), str_or_empty(b->content));
    if (a->reasoning_len != b->reasoning_len || strcmp(str_or_empty(a->reasoning), str_or_empty(b->reasoning)) != 0)
        fail_msg("%s: reasoning differs: '%s' vs '%s'", what, str_or_empty(a->reasoning), str_or_empty(b->reasoning));
    if (a->n_calls != b->n_calls)
        fail_msg("%s: %zu calls vs %zu", what, a->n_calls, b->n_calls);
    for (size_t i = 0; i < a->n_calls; i++) {
        if (strcmp(a->calls[i].name, b->calls[i].name) || strcmp(a->calls[i].id, b->calls[i].id) ||
            strcmp(a->calls[i].arguments, b->calls[i].arguments))
            fail_msg("%s: call %zu differs: %s %s %s vs %s %s %s", what, i, a->calls[i].id, a->calls[i].name,
                     a->calls[i].arguments, b->calls[i].id, b->calls[i].name, b->calls[i].arguments);
    }
}

// Whole, byte by byte, and cut in two at every position: all the same result. Returns the whole one in *whole.
static void check_all_splits(const rp_parser_config *cfg, const char *text, bool valid, rp_parse_result *whole)
{
    size_t len = strlen(text);
    assert_int_equal(rp_parse_all(cfg, text, len, whole), RP_OK);
    check_result_json(whole);
    rp_parse_result r;
    run_stream(cfg, text, len, NULL, 0, valid, &r);
    assert_results_equal(whole, &r, "one push");
    rp_parse_result_deinit(&r);
    size_t *cuts = malloc((len + 1) * sizeof(size_t));
    for (size_t i = 0; i < len; i++)
        cuts[i] = i + 1;
    run_stream(cfg, text, len, cuts, len ? len - 1 : 0, valid, &r);
    assert_results_equal(whole, &r, "byte by byte");
    rp_parse_result_deinit(&r);
    for (size_t i = 0; i <= len; i++) {
        cuts[0] = i;
        run_stream(cfg, text, len, cuts, 1, valid, &r);
        char what[64];
        snprintf(what, sizeof(what), "split at %zu", i);
        assert_results_equal(whole, &r, what);
        rp_parse_result_deinit(&r);
    }
    free(cuts);
}

#endif
