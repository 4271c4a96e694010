/*
 * test_cli_config.c - `rapid serve --config FILE` (and $RAPID_CONFIG): the options it
 * gives, checked on the parsed options themselves (serve.c's parse_args, reached by
 * including serve.c), with the precedence command line > RAPID_* variable > file; true and
 * false for flags without a value; "model" for MODEL; and every refusal (unreadable, bad
 * JSON with its line and column, a key that names no option with the closest one, a value
 * of the wrong type, arrays, objects, malformed files: empty, truncated, not an object,
 * too large, NUL bytes) as one usage line before anything loads. The last case runs the
 * real binary: a file naming the model is the model the process tries to load.
 */
#include "test_util.h"
#include "test_tmp.h"

#include "cli/serve.c"

#include <fcntl.h>
#include <unistd.h>

static char err[65536];

// parse_args on `rapid serve ARGS...` (NULL-terminated), stderr into err. Its status.
static int parse(serve_opts *o, const char *const *args)
{
    char *argv[64] = {"rapid"};
    int n = 1;
    for (int i = 0; args[i]; i++) {
        assert_true(n < 63);
        argv[n++] = (char *)args[i];
    }
    argv[n] = NULL;
    const char *path = rp_test_tmp_path("stderr.txt");
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    int rc = parse_args(n, argv, o);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t k = fread(err, 1, sizeof(err) - 1, f);
    err[k] = 0;
    fclose(f);
    return rc;
}

// A config file of `len` bytes (len < 0: strlen) in the test folder; its path.
static const char *config(const char *name, const char *text, long len)
{
    const char *path = rp_test_tmp_path(name);
    rp_test_write_file(path, text, len < 0 ? strlen(text) : (size_t)len);
    return path;
}

// `--config PATH MODEL` must fail with status 2 and exactly one line holding `want`.
static void refused(const char *path, const char *want)
{
    serve_opts o;
    const char *args[] = {"--config", path, "m", NULL};
    int rc = parse(&o, args);
    serve_opts_free(&o);
    if (rc != 2 || !strstr(err, want))
        print_error("want status 2 and '%s', got %d: %s\n", want, rc, err);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, want));
    assert_non_null(strstr(err, "(see `rapid serve --help`)\n"));
    assert_ptr_equal(strchr(err, '\n'), err + strlen(err) - 1); // one line
}

static void test_precedence(void **state)
{
    (void)state;
    const char *file = config("prec.json",
                              "{\"port\": 7001, \"host\": \"10.0.0.1\", \"max-queue\": 5, \"ctx\": 100,\n"
                              " \"kv-memory\": 0.25, \"timeout\": 2.5, \"served-model-name\": \"from-file\"}",
                              -1);
    setenv("RAPID_PORT", "7002", 1);
    setenv("RAPID_MAX_QUEUE", "6", 1);
    setenv("RAPID_SERVED_MODEL_NAME", "from-env", 1);
    serve_opts o;
    const char *args[] = {"m", "--config", file, "--port", "7003", NULL};
    assert_int_equal(parse(&o, args), 0);
    assert_int_equal(o.sp.port, 7003);                       // flag > env > file
    assert_int_equal(o.ep.max_queue, 6);                     // env > file
    assert_string_equal(o.sp.served_model_name, "from-env"); // env > file
    assert_string_equal(o.sp.host, "10.0.0.1");              // the file alone
    assert_int_equal(o.ep.n_ctx, 100);
    assert_true(o.kv_fraction == 0.25);
    assert_true(o.sp.timeout_s == 2.5);
    assert_string_equal(o.model, "m");
    serve_opts_free(&o);

    // Without the flag, the variable; without the variable, the file.
    unsetenv("RAPID_MAX_QUEUE");
    const char *args2[] = {"--config", file, "m", NULL};
    assert_int_equal(parse(&o, args2), 0);
    assert_int_equal(o.sp.port, 7002);
    assert_int_equal(o.ep.max_queue, 5);
    serve_opts_free(&o);
    unsetenv("RAPID_PORT");
    unsetenv("RAPID_SERVED_MODEL_NAME");

    // $RAPID_CONFIG names the file when --config does not; --config wins over it.
    const char *other = config("other.json", "{\"port\": 7010}", -1);
    setenv("RAPID_CONFIG", file, 1);
    const char *plain[] = {"m", NULL};
    assert_int_equal(parse(&o, plain), 0);
    assert_int_equal(o.sp.port, 7001);
    serve_opts_free(&o);
    const char *both[] = {"m", "--config", other, NULL};
    assert_int_equal(parse(&o, both), 0);
    assert_int_equal(o.sp.port, 7010);
    assert_string_equal(o.sp.host, "127.0.0.1"); // nothing of RAPID_CONFIG's file
    serve_opts_free(&o);
    unsetenv("RAPID_CONFIG");

    // A file's bad value is named with the file it came from.
    refused(config("badport.json", "{\"port\": \"x\"}", -1), "invalid value 'x' for --port (from ");
    refused(config("bigport.json", "{\"port\": 70000}", -1), "invalid value '70000' for --port");
}

// The API key by the same rule: --api-key-file in the file loses to RAPID_API_KEY, and
// the file's --api-key loses to a key file from a variable.
static void test_api_key_precedence(void **state)
{
    (void)state;
    char key[512]; // (rp_test_tmp_path's buffers rotate)
    snprintf(key, sizeof(key), "%s", config("key.txt", "filekey\n", -1));
    char text[1024];
    snprintf(text, sizeof(text), "{\"api-key-file\": \"%s\"}", key);
    const char *file = config("keyfile.json", text, -1);
    setenv("RAPID_API_KEY", "envkey", 1);
    serve_opts o;
    const char *args[] = {"m", "--config", file, NULL};
    assert_int_equal(parse(&o, args), 0);
    assert_string_equal(o.sp.api_key, "envkey");
    serve_opts_free(&o);
    unsetenv("RAPID_API_KEY");
    assert_int_equal(parse(&o, args), 0);
    assert_string_equal(o.sp.api_key, "filekey");
    serve_opts_free(&o);

    const char *keyed = config("keyed.json", "{\"api-key\": \"cfgkey\"}", -1);
    setenv("RAPID_API_KEY_FILE", key, 1);
    const char *args2[] = {"m", "--config", keyed, NULL};
    assert_int_equal(parse(&o, args2), 0);
    assert_string_equal(o.sp.api_key, "filekey");
    serve_opts_free(&o);
    unsetenv("RAPID_API_KEY_FILE");
    const char *args3[] = {"m", "--config", keyed, "--api-key", "flagkey", NULL};
    assert_int_equal(parse(&o, args3), 0);
    assert_string_equal(o.sp.api_key, "flagkey");
    serve_opts_free(&o);
}

static void test_booleans(void **state)
{
    (void)state;
    const char *file = config("bools.json",
                              "{\"no-spec-decode\": true, \"mmap\": true, \"quiet\": true, \"no-disk-cache\": false,\n"
                              " \"strict-model-name\": false}",
                              -1);
    serve_opts o;
    const char *args[] = {"m", "--config", file, NULL};
    assert_int_equal(parse(&o, args), 0);
    assert_int_equal(o.ep.spec.method, RP_ENGINE_SPEC_OFF);
    assert_true(o.mmap);
    assert_true(o.sp.quiet);
    assert_false(o.no_disk_cache);
    assert_false(o.sp.strict_model_name);
    serve_opts_free(&o);
    // A variable turns a file's true off, and on what the file leaves false.
    setenv("RAPID_MMAP", "0", 1);
    setenv("RAPID_NO_DISK_CACHE", "yes", 1);
    assert_int_equal(parse(&o, args), 0);
    assert_false(o.mmap);
    assert_true(o.no_disk_cache);
    assert_true(o.sp.quiet);
    serve_opts_free(&o);
    unsetenv("RAPID_MMAP");
    unsetenv("RAPID_NO_DISK_CACHE");
    // Without the file, the defaults.
    const char *plain[] = {"m", NULL};
    assert_int_equal(parse(&o, plain), 0);
    assert_false(o.mmap);
    assert_false(o.sp.quiet);
    assert_int_not_equal(o.ep.spec.method, RP_ENGINE_SPEC_OFF);
    serve_opts_free(&o);
}

static void test_model_from_file(void **state)
{
    (void)state;
    const char *file = config("model.json", "{\"model\": \"/srv/models/qwen\", \"port\": 0}", -1);
    serve_opts o;
    const char *args[] = {"--config", file, NULL};
    assert_int_equal(parse(&o, args), 0);
    assert_string_equal(o.model, "/srv/models/qwen");
    assert_true(o.model_named);
    serve_opts_free(&o);
    const char *named[] = {"--config", file, "/cmdline/model", NULL}; // the command line's MODEL wins
    assert_int_equal(parse(&o, named), 0);
    assert_string_equal(o.model, "/cmdline/model");
    serve_opts_free(&o);
    refused(config("model-num.json", "{\"model\": 3}", -1), "\"model\" takes a non-empty string (MODEL), not a number");
    refused(config("model-empty.json", "{\"model\": \"\"}", -1), "\"model\" takes a non-empty string (MODEL), not an "
                                                                 "empty string");

    // Through the binary: the file's model is the one the process tries (and here fails) to load.
    const char *bad = config("model-bad.json", "{\"model\": \"/nonexistent/from-config\", \"port\": 0}", -1);
    char cmd[2048];
    static char out[4096];
    snprintf(cmd, sizeof(cmd), "'%s' serve --config '%s'", getenv("RP_BINARY"), bad);
    assert_int_equal(rp_test_run_shell(cmd, rp_test_tmp_path("serve.err"), out, sizeof(out), err, sizeof(err)), 1);
    assert_non_null(strstr(err, "/nonexistent/from-config"));
}

static void test_errors(void **state)
{
    (void)state;
    refused(rp_test_tmp_path("missing.json"), "--config: ");
    assert_non_null(strstr(err, "missing.json: cannot open"));
    refused(config("syntax.json", "{\"port\": 8000,\n  \"host\" }\n", -1), "syntax.json: line 2, column ");
    refused(config("unknown.json", "{\"prot\": 8000}", -1),
            "\"prot\" is not an option of `rapid serve` (closest: --port)");
    refused(config("unknown2.json", "{\"api-key-fil\": \"/k\"}", -1), "(closest: --api-key-file)");
    refused(config("modle.json", "{\"modle\": \"x\"}", -1), "(closest: model)");
    refused(config("dashes.json", "{\"--port\": 1}", -1), "\"--port\" is not an option");
    refused(config("meta.json", "{\"config\": \"other.json\"}", -1), "\"config\" cannot be set in a config file");
    refused(config("help.json", "{\"help\": true}", -1), "\"help\" cannot be set in a config file");
    refused(config("type1.json", "{\"port\": true}", -1), "\"port\" takes a string or a number, not a boolean");
    refused(config("type2.json", "{\"mmap\": \"yes\"}", -1), "\"mmap\" takes true or false, not a string");
    refused(config("type3.json", "{\"mmap\": 1}", -1), "\"mmap\" takes true or false, not a number");
    refused(config("type4.json", "{\"port\": null}", -1), "\"port\" takes a string or a number, not null");
    refused(config("array.json", "{\"allowed-origins\": [\"a\", \"b\"]}", -1),
            "\"allowed-origins\" takes a string or a number, not an array");
    refused(config("object.json", "{\"speculative-config\": {\"method\": \"ngram\"}}", -1),
            "\"speculative-config\" takes a string or a number, not an object");
    refused(config("dup.json", "{\"port\": 1, \"port\": 2}", -1), "duplicate object key");
}

static void test_malformed(void **state)
{
    (void)state;
    refused(config("empty.json", "", 0), "empty.json: line ");
    refused(config("blank.json", "  \n\n", -1), "blank.json: line ");
    refused(config("trunc.json", "{\"port\": 80", -1), "trunc.json: line 1, column ");
    refused(config("trunc2.json", "{\"host\": \"0.0.", -1), "trunc2.json: line 1, column ");
    refused(config("list.json", "[{\"port\": 1}]", -1), "expected a JSON object of options");
    assert_non_null(strstr(err, "not an array"));
    refused(config("str.json", "\"port\"", -1), "str.json: line 1, column 6: '[' or '{' expected");
    refused(config("num.json", "8000", -1), "num.json: line 1, column ");
    refused(config("nul1.json", "{\"port\": 8000}\0", 15), "nul1.json: line 1, column ");
    refused(config("nul2.json", "{\"host\": \"a\0b\"}", 15), "nul2.json: line 1, column ");
    refused(config("nul3.json", "{\"host\": \"a\\u0000b\"}", -1), "\\u0000 is not allowed");
    refused(config("nul4.json", "\0\0\0\0", 4), "nul4.json: line 1, column ");

    // Past 1 MiB: refused unparsed. Under it, a long value passes as any other.
    size_t big = (1u << 20) + 1;
    char *text = rp_malloc(big + 1);
    assert_non_null(text);
    memset(text, ' ', big);
    memcpy(text, "{\"host\": \"", 10);
    memcpy(text + big - 2, "\"}", 2);
    for (size_t i = 10; i < big - 2; i++)
        text[i] = 'h';
    refused(config("huge.json", text, (long)big), "larger than a config file may be");
    size_t ok_len = 900000;
    memcpy(text + ok_len - 2, "\"}", 2);
    const char *long_host = config("long.json", text, (long)ok_len);
    serve_opts o;
    const char *args[] = {"m", "--config", long_host, NULL};
    assert_int_equal(parse(&o, args), 0);
    assert_int_equal(strlen(o.sp.host), ok_len - 12);
    serve_opts_free(&o);
    // Deeply nested arrays: jansson's depth limit, one line.
    memset(text, '[', big);
    refused(config("deep.json", text, 100000), "deep.json: line 1, column ");
    rp_free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_precedence), cmocka_unit_test(test_api_key_precedence),
        cmocka_unit_test(test_booleans),   cmocka_unit_test(test_model_from_file),
        cmocka_unit_test(test_errors),     cmocka_unit_test(test_malformed),
    };
    return cmocka_run_group_tests(tests, rp_test_tmp_setup, rp_test_tmp_teardown);
}
