/*
 * wire_server.h - the real server in-process for the wire tests: the bundled
 * tiny model, an engine that runs one request and queues one more (a third
 * is refused: the 503 tests), rp_server on a free loopback port; plus the
 * waits and checks those tests share. Includes wire_client.h, whose
 * `wire_port` it defines. The test names its cmocka group setup and teardown
 * wire_server_start(KEY, MAX_BODY) / wire_server_stop().
 */
#ifndef RP_TEST_WIRE_SERVER_H
#define RP_TEST_WIRE_SERVER_H

#include "test_model.h"
#include "server/server_int.h"

static int wire_port;

#include "wire_client.h"

static int wire_ctx = 1024; // the engine's context (a test may set it before starting)
static rp_model *wire_model;
static rp_tokenizer *wire_tok;
static rp_engine *engine;
static rp_server *server;

// Starts the server requiring api_key; max_request_bytes 0 keeps the default; tune (may be
// NULL) changes the other server params last. Returns 0 or -1.
static int wire_server_start_tuned(const char *api_key, size_t max_request_bytes, void (*tune)(rp_server_params *sp))
{
    rp_log_set_level(RP_LOG_WARN);
    rp_model_params mp;
    rp_model_params_default(&mp);
    mp.quiet = true;
    const char *dir = rp_test_source("models/rapid-tiny");
    if (rp_test_load(dir, 2, false, &mp, &wire_model) || rp_tok_load_file(dir, &wire_tok))
        return -1;
    rp_engine_params ep;
    rp_engine_params_default(&ep);
    ep.n_ctx = wire_ctx;
    ep.max_running = 1; // one generates, one waits, the third is refused (the 503 tests)
    ep.max_queue = 1;
    if (rp_engine_create(wire_model, wire_tok, &ep, &engine))
        return -1;
    rp_server_params sp;
    rp_server_params_default(&sp);
    sp.port = 0;
    sp.api_key = api_key;
    if (max_request_bytes)
        sp.max_request_bytes = max_request_bytes;
    sp.quiet = true;
    if (tune)
        tune(&sp);
    if (rp_server_create(engine, wire_model, wire_tok, &sp, &server))
        return -1;
    wire_port = rp_server_port(server);
    return wire_port > 0 ? 0 : -1;
}

__attribute__((unused)) static int wire_server_start(const char *api_key, size_t max_request_bytes)
{
    return wire_server_start_tuned(api_key, max_request_bytes, NULL);
}

// Destroys the server (even with a stream still open), the engine and the model.
static void wire_server_stop(void)
{
    rp_server_destroy(server);
    rp_engine_destroy(engine);
    rp_tok_destroy(wire_tok);
    rp_model_destroy(wire_model);
}

// A cmocka group teardown that stops the server (wire_server_stop).
__attribute__((unused)) static int wire_teardown(void **state)
{
    (void)state;
    wire_server_stop();
    return 0;
}

// The response body as JSON (fails the test when it is not).
static json_t *body_json(const wire_resp *r)
{
    json_error_t e;
    json_t *v = json_loads(r->body, 0, &e);
    if (!v)
        fail_msg("not JSON (%s): %s", e.text, r->body);
    return v;
}

// The server still answers (after an error).
__attribute__((unused)) static void still_serving(void)
{
    wire_resp r;
    wire_request("GET", "/health", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"status\":\"ok\"}");
    free(r.body);
}

// Waits for `running` requests generating and `queued` waiting (a liveness bound, not a timing
// assertion).
static void wait_engine_queue(int running, int queued, const char *what)
{
    for (int i = 0; i < 3000; i++) {
        rp_engine_stats es;
        rp_engine_get_stats(engine, &es);
        if (es.running == running && es.queued == queued)
            return;
        usleep(10000);
    }
    fail_msg("the engine did not %s", what);
}

static void wait_engine(int running, const char *what)
{
    wait_engine_queue(running, 0, what);
}

__attribute__((unused)) static void wait_idle(void)
{
    wait_engine(0, "become idle");
}

// The engine has admitted the one request (queued -> running): the queue's one place is free.
__attribute__((unused)) static void wait_running(void)
{
    wait_engine(1, "start the request");
}

// One request generating and one in the queue's one place: the next is refused.
__attribute__((unused)) static void wait_queue_full(void)
{
    wait_engine_queue(1, 1, "queue the second request");
}

#endif
