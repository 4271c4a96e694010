/*
 * api_fixture.h - scaffolding for the tests that #include an API file
 * (openai.c, anthropic.c, responses.c) to reach its readers and reply
 * writers: a server object with the tiny model's tokenizer, chat template and
 * output formats but no model or engine (`srv`, `tok`; api_setup /
 * api_teardown as the cmocka group's), a request with known token counts,
 * hand-made driver results, and JSON helpers. Include it after the API file.
 */
#ifndef RP_TEST_API_FIXTURE_H
#define RP_TEST_API_FIXTURE_H

#include "server/server_int.h"

static rp_server srv;
static rp_tokenizer *tok;

static inline int api_setup(void **state)
{
    (void)state;
    memset(&srv, 0, sizeof(srv));
    srv.model_name = "tiny-model";
    srv.n_ctx = 4096;
    if (rp_tok_load_file(rp_test_source("models/rapid-tiny"), &tok))
        return -1;
    const char *t = rp_tok_chat_template(tok);
    if (!t || rp_chat_template_create(t, strlen(t), &srv.tpl))
        return -1;
    srv.tok = tok;
    rp_parser_select(t, "qwen3", &srv.tool_format, &srv.reasoning_format);
    return 0;
}

static inline int api_teardown(void **state)
{
    (void)state;
    rp_chat_template_destroy(srv.tpl);
    rp_tok_destroy(tok);
    return 0;
}

// A request on srv whose generation reports 12 prompt tokens (4 of them from the
// prefix cache) and n_completion generated ones.
static inline rp_http_req api_req(int n_completion)
{
    rp_http_req r;
    memset(&r, 0, sizeof(r));
    r.srv = &srv;
    r.stats.n_prompt = 12;
    r.stats.n_cached = 4;
    r.stats.n_completion = n_completion;
    return r;
}

// A whole reply as rp_drv_collect would return it (content / reasoning may be NULL).
static inline void result_init(rp_drv_result *res, const char *content, const char *reasoning, rp_drv_finish finish)
{
    memset(res, 0, sizeof(*res));
    rp_buf_init(&res->content);
    rp_buf_init(&res->reasoning);
    if (content)
        rp_buf_puts(&res->content, content);
    if (reasoning)
        rp_buf_puts(&res->reasoning, reasoning);
    res->info.finish = finish;
}

static inline void add_call(rp_drv_result *res, const char *id, const char *name, const char *args)
{
    res->calls = rp_realloc(res->calls, (size_t)(res->n_calls + 1) * sizeof(*res->calls));
    res->calls[res->n_calls].id = rp_strdup(id);
    res->calls[res->n_calls].name = rp_strdup(name);
    res->calls[res->n_calls].arguments = rp_strdup(args);
    res->n_calls++;
    res->info.n_tool_calls = res->n_calls;
}

static inline const char *str(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

static inline long long num(const json_t *o, const char *k)
{
    return json_integer_value(json_object_get(o, k));
}

// v through JSON text and back, as a client sees it (v is released; fails the test on NULL).
static inline json_t *roundtrip(json_t *v)
{
    assert_non_null(v);
    char *s = json_dumps(v, JSON_COMPACT);
    json_decref(v);
    v = json_loads(s, 0, NULL);
    free(s);
    assert_non_null(v);
    return v;
}

#endif
