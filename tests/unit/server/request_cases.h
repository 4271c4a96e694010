/*
 * request_cases.h - the checks every API's request-reader test runs the same
 * way, over a reader the test supplies (a body_reader: JSON text in, rp_api_req
 * out, its own extra state released inside):
 *
 *   run_field_cases  a table of one-field variations of a valid body, each
 *                    accepted or refused with a 400 naming the field;
 *   expect_conversion the template messages (and tools) a body becomes,
 *                    compared as whole JSON;
 *   run_sweep        the type-confusion sweep (json_mutate.h) and every
 *                    truncation of a full body: read or refused with a 400.
 */
#ifndef RP_TEST_REQUEST_CASES_H
#define RP_TEST_REQUEST_CASES_H

#include "server/server_int.h"

#include "json_mutate.h"

// Reads body; true when accepted. q is initialized even on failure (the caller deinits it).
typedef bool (*body_reader)(const char *body, rp_api_req *q, rp_api_error *e);

// The body as a JSON object, or NULL with e filled and q initialized (a body that does not parse).
static inline json_t *parse_body(const char *body, rp_api_req *q, rp_api_error *e)
{
    json_t *b = NULL;
    memset(e, 0, sizeof(*e));
    if (!rp_json_parse_bytes(body, strlen(body), &b, e))
        rp_api_req_init(q);
    return b;
}

typedef struct fcase {
    const char *extra; // fields after the base fields (no leading comma), or a whole body when it starts with '{'
    bool ok;
    const char *param; // the field an error names ("" for none)
} fcase;

// Reads each case's body ("{" base "," extra "}", or extra itself) and checks the
// verdict: accepted, or a 400 whose param is the case's and whose message is not
// empty; with named_in_message (an error shape without param) the message must
// name the field too.
static inline void run_field_cases(const fcase *cases, size_t n, const char *base, body_reader read,
                                   bool named_in_message)
{
    char body[2048];
    for (size_t i = 0; i < n; i++) {
        const fcase *c = &cases[i];
        if (c->extra[0] == '{')
            snprintf(body, sizeof(body), "%s", c->extra);
        else
            snprintf(body, sizeof(body), "{%s,%s}", base, c->extra);
        rp_api_req q;
        rp_api_error e;
        bool ok = read(body, &q, &e);
        if (ok != c->ok)
            fail_msg("case %zu (%s): expected %s, got %s (%s)", i, c->extra, c->ok ? "ok" : "an error",
                     ok ? "ok" : "an error", e.message);
        if (!ok) {
            assert_int_equal(e.status, 400);
            if (strcmp(e.param, c->param) != 0)
                fail_msg("case %zu (%s): param '%s', expected '%s' (%s)", i, c->extra, e.param, c->param, e.message);
            assert_true(strlen(e.message) > 0);
            if (named_in_message && c->param[0] && !strstr(e.message, c->param) && !strstr(e.message, "messages"))
                fail_msg("case %zu: message '%s' does not name '%s'", i, e.message, c->param);
        }
        rp_api_req_deinit(&q);
    }
}

// Reads body and compares the template messages, and the tools (tools NULL: none), with the expected JSON.
static inline void expect_conversion(body_reader read, const char *body, const char *messages, const char *tools)
{
    rp_api_req q;
    rp_api_error e;
    if (!read(body, &q, &e))
        fail_msg("rejected (%s): %s", e.message, body);
    const json_t *got[2] = {q.messages, q.tools};
    const char *want_text[2] = {messages, tools};
    for (int k = 0; k < 2; k++) {
        if (!want_text[k]) {
            assert_null(got[k]);
            continue;
        }
        json_t *want = json_loads(want_text[k], 0, NULL);
        assert_non_null(want);
        if (!json_equal(want, got[k]))
            fail_msg("%s:\n got  %s\n want %s", k ? "tools" : "messages", json_dumps(got[k], JSON_PRESERVE_ORDER),
                     want_text[k]);
        json_decref(want);
    }
    rp_api_req_deinit(&q);
}

typedef struct sweep {
    body_reader read;
    int accepted, rejected;
} sweep;

static inline void sweep_one(const char *body, void *ctx)
{
    sweep *s = ctx;
    rp_api_req q;
    rp_api_error e;
    if (s->read(body, &q, &e)) {
        s->accepted++;
    } else {
        if (e.status != 400)
            fail_msg("status %d (%s) for %s", e.status, e.message, body);
        assert_true(strlen(e.message) > 0);
        s->rejected++;
    }
    rp_api_req_deinit(&q);
}

// full_body (accepted) with every value replaced by every wrong type and every
// key dropped, then every prefix of it (truncated uploads): each is accepted or
// refused with a 400 and a message; the sweep sees both.
static inline void run_sweep(const char *full_body, body_reader read)
{
    sweep s = {read, 0, 0};
    sweep_one(full_body, &s);
    assert_int_equal(s.accepted, 1);
    s.accepted = 0;
    int n = json_mutate_all(full_body, sweep_one, &s);
    assert_true(n > 1000);
    assert_true(s.accepted > 0 && s.rejected > 0);
    assert_int_equal(s.accepted + s.rejected, n);
    size_t len = strlen(full_body);
    for (size_t i = 0; i < len; i++) {
        char *p = strndup(full_body, i);
        sweep t = {read, 0, 0};
        sweep_one(p, &t);
        assert_int_equal(t.rejected, 1);
        free(p);
    }
}

#endif
