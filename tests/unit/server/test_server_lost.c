/*
 * test_server_lost.c - the server when the engine's device is lost (a GPU context
 * gone after a kernel fault; here the CPU backend's test hook, rp_cpu_test_lose): the
 * request under way fails with a 500 in the API's error shape, later requests are
 * refused with a 500 naming the failure, and the server is told to stop (rp_server_run
 * then returns the failure and `rapid serve` exits non-zero), never a hang.
 */
#include "test_util.h"

#include "backend/cpu/cpu.h"
#include "wire_server.h"

#include <signal.h>
#include <unistd.h>

static int setup(void **state)
{
    (void)state;
    setenv("RP_TEST_DEVICE", "cpu", 1); // the hook is the CPU backend's
    return wire_server_start(NULL, 0);
}

static int teardown(void **state)
{
    (void)state;
    wire_server_stop();
    return 0;
}

static void expect_500(const wire_resp *r, const char *words)
{
    if (r->status != 500)
        fail_msg("status %d, expected 500: %s", r->status, r->body);
    json_t *v = body_json(r);
    const char *msg = json_string_value(json_object_get(json_object_get(v, "error"), "message"));
    assert_non_null(msg);
    if (words && !strstr(msg, words))
        fail_msg("the error says [%s], expected it to name [%s]", msg, words);
    json_decref(v);
}

static void test_lost_device(void **state)
{
    (void)state;
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":8}";
    wire_resp r;
    wire_request("POST", "/v1/chat/completions", NULL, body, &r);
    assert_int_equal(r.status, 200); // serving
    free(r.body);
    rp_cpu_test_lose(rp_model_backend(wire_model), "lost in a test");
    wire_request("POST", "/v1/chat/completions", NULL, body, &r); // the one that meets the loss
    expect_500(&r, "lost in a test");
    free(r.body);
    wire_request("POST", "/v1/messages", NULL, "{\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                 &r);
    expect_500(&r, "the device failed: lost in a test");
    free(r.body);
    assert_non_null(rp_engine_failed(engine));
    alarm(20); // the stop must have been asked for: a regression fails (SIGALRM), never hangs
    rp_server_wait(server);
    alarm(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_lost_device)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
