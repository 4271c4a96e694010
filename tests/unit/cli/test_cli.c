/*
 * test_cli.c - the `rapid` command end to end: exit codes, messages, and the
 * text `rapid run` prints against the library's own greedy decode.
 */
#include "../model/model_harness.h"

#include "backend/cpu/cpu.h"
#include "tokenizer/tokenizer.h"

#include <sys/wait.h>
#include <unistd.h>

// Runs a shell command line; stdout into out (NUL-terminated), stderr into err. Its exit status.
static int run_shell(const char *line, char *out, size_t out_cap, char *err, size_t err_cap)
{
    char errfile[64], cmd[8192];
    snprintf(errfile, sizeof(errfile), "/tmp/rapid-test-cli-%d.err", (int)getpid());
    snprintf(cmd, sizeof(cmd), "%s 2>%s", line, errfile);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, out_cap - 1, p);
    out[n] = 0;
    int status = pclose(p);
    FILE *e = fopen(errfile, "r");
    n = e ? fread(err, 1, err_cap - 1, e) : 0;
    err[n] = 0;
    if (e)
        fclose(e);
    unlink(errfile);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Runs `rapid ARGS` through the shell; stdout into out (NUL-terminated), stderr into err.
static int run_rapid(const char *args, char *out, size_t out_cap, char *err, size_t err_cap)
{
    const char *bin = getenv("RP_BINARY");
    assert_non_null(bin);
    char cmd[8192];
    // The bundled model is found through $RAPID_MODELS, wherever the build directory is; the
    // device is the one the library's models in these tests load on (rp_test_device).
    snprintf(cmd, sizeof(cmd), "RAPID_MODELS='%s/models' RAPID_DEVICE='%s' '%s' %s", rp_test_source_dir(),
             rp_test_device(), bin, args);
    return run_shell(cmd, out, out_cap, err, err_cap);
}

static char out[65536], err[65536];

static void test_usage_errors(void **state)
{
    assert_int_equal(run_rapid("", out, sizeof(out), err, sizeof(err)), 2);
    assert_non_null(strstr(err, "usage: rapid"));
    assert_int_equal(run_rapid("frobnicate", out, sizeof(out), err, sizeof(err)), 2);
    assert_string_equal(err, "rapid: unknown command 'frobnicate' (see `rapid --help`)\n");
    assert_int_equal(run_rapid("run", out, sizeof(out), err, sizeof(err)), 2);
    assert_int_equal(run_rapid("run model -p", out, sizeof(out), err, sizeof(err)), 2);
    assert_int_equal(run_rapid("run model -p x -n abc", out, sizeof(out), err, sizeof(err)), 2);
    assert_non_null(strstr(err, "invalid value 'abc'"));
    assert_int_equal(run_rapid("run model -p x --temp -1", out, sizeof(out), err, sizeof(err)), 2);
    assert_int_equal(run_rapid("run model -p x --quant q3", out, sizeof(out), err, sizeof(err)), 2);
    assert_int_equal(run_rapid("run model -p x --kv-dtype q8", out, sizeof(out), err, sizeof(err)), 2);
    assert_int_equal(run_rapid("run model -p x --bogus", out, sizeof(out), err, sizeof(err)), 2);
    assert_string_equal(err, "rapid run: unknown option '--bogus' (see `rapid run --help`)\n");
    assert_int_equal(run_rapid("tokenize", out, sizeof(out), err, sizeof(err)), 2);
    assert_int_equal(run_rapid("--help", out, sizeof(out), err, sizeof(err)), 0);
    assert_non_null(strstr(out, "run MODEL"));
    assert_int_equal(run_rapid("run --help", out, sizeof(out), err, sizeof(err)), 0);
    assert_non_null(strstr(out, "--quant"));
    assert_int_equal(run_rapid("--version", out, sizeof(out), err, sizeof(err)), 0);
    assert_non_null(strstr(out, "rapid "));
}

// --device: a name this build lacks is one clear error (status 1) naming the devices it
// has; cpu runs; cuda in a build without it says how to get it.
static void test_device_flag(void **state)
{
    assert_int_equal(run_rapid("run --device tpu -p hi -n 1", out, sizeof(out), err, sizeof(err)), 1);
    assert_non_null(strstr(err, "unknown device 'tpu'"));
    assert_non_null(strstr(err, "cpu"));
    assert_int_equal(run_rapid("run --device cuda:x -p hi -n 1", out, sizeof(out), err, sizeof(err)), 1);
    assert_non_null(strstr(err, "unknown device 'cuda:x'"));
    assert_int_equal(run_rapid("run --device cpu -t 1 -p hi -n 2", out, sizeof(out), err, sizeof(err)), 0);
    assert_non_null(strstr(err, "1 threads"));
    bool have_cuda = false;
    for (int i = 0; i < rp_backend_count(); i++)
        have_cuda |= strcmp(rp_backend_name(i), "cuda") == 0;
    if (!have_cuda) {
        assert_int_equal(run_rapid("run --device cuda -p hi -n 1", out, sizeof(out), err, sizeof(err)), 1);
        assert_non_null(strstr(err, "no CUDA backend"));
    } else if (strcmp(rp_backend_default_name(), "cpu") == 0) { // a CUDA build where no GPU answers (CI)
        assert_int_equal(run_rapid("run --device cuda -p hi -n 1", out, sizeof(out), err, sizeof(err)), 1);
        assert_non_null(strstr(err, "device cuda:0: "));
        assert_int_equal(run_rapid("run --device cuda:3 -p hi -n 1", out, sizeof(out), err, sizeof(err)), 1);
        assert_non_null(strstr(err, "device cuda:3: "));
    }
    assert_int_equal(run_rapid("serve --device tpu --port 0", out, sizeof(out), err, sizeof(err)), 1);
    assert_non_null(strstr(err, "unknown device 'tpu'"));
}

static void test_bad_model_files(void **state)
{
    assert_int_equal(run_rapid("run /nonexistent/model -p hi", out, sizeof(out), err, sizeof(err)), 1);
    assert_non_null(strstr(err, "/nonexistent/model"));
    // A GGUF file cut short: one message naming the file, status 1.
    char path[64];
    snprintf(path, sizeof(path), "/tmp/rapid-test-cli-%d.gguf", (int)getpid());
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite("GGUF\x03\x00\x00\x00\x05\x00", 1, 10, f);
    fclose(f);
    char args[256];
    snprintf(args, sizeof(args), "run %s -p hi", path);
    assert_int_equal(run_rapid(args, out, sizeof(out), err, sizeof(err)), 1);
    assert_non_null(strstr(err, path));
    snprintf(args, sizeof(args), "tokenize %s hello", path);
    assert_int_equal(run_rapid(args, out, sizeof(out), err, sizeof(err)), 1);
    assert_non_null(strstr(err, path));
    unlink(path);
}

// `rapid run` greedy text equals the library's greedy tokens decoded, for 1 and 2 threads.
static void test_run_matches_library(void **state)
{
    char model[4096];
    snprintf(model, sizeof(model), "%s", rp_test_source("tests/data/models/qwen3"));
    const char *prompt = "def fibonacci(n):";
    rp_tokenizer *tok;
    assert_int_equal(rp_tok_load_file(model, &tok), RP_OK);
    int32_t *ids;
    size_t n_ids;
    assert_int_equal(rp_tok_encode(tok, prompt, strlen(prompt), true, &ids, &n_ids), RP_OK);
    // BF16 weights: the default (bf16 activations where the CPU has them) and --f32-activations
    for (int f32 = 0; f32 <= 1; f32++) {
        rp_model *m = harness_load_act(model, 1, RP_DTYPE_F32, f32);
        int32_t gen[16];
        harness_greedy(m, ids, (int)n_ids, 16, gen, NULL);
        // rapid run stops at an end-of-generation token; so does the expectation.
        const rp_model_config *cfg = rp_model_get_config(m);
        size_t n_gen = 0;
        for (bool stop = false; n_gen < 16 && !stop; n_gen += !stop) {
            stop = rp_tok_is_eog(tok, gen[n_gen]);
            for (int i = 0; i < cfg->n_eos; i++)
                stop = stop || gen[n_gen] == cfg->eos_ids[i];
        }
        char *want;
        size_t want_len;
        assert_int_equal(rp_tok_decode(tok, gen, n_gen, true, &want, &want_len), RP_OK);
        for (int threads = 1; threads <= 2; threads++) {
            char args[8192];
            snprintf(args, sizeof(args), "run '%s' -p '%s' -n 16 --threads %d --raw%s", model, prompt, threads,
                     f32 ? " --f32-activations" : "");
            assert_int_equal(run_rapid(args, out, sizeof(out), err, sizeof(err)), 0);
            size_t n = strlen(out);
            assert_true(n >= 1 && out[n - 1] == '\n');
            out[n - 1] = 0;
            if (strcmp(out, want) != 0)
                fail_msg("rapid run%s printed [%s], the library decodes [%s]", f32 ? " --f32-activations" : "", out,
                         want);
            assert_non_null(strstr(err, "prompt: "));
            assert_non_null(strstr(err, "generated: "));
            // the stats line names the arithmetic (and AMX's tiles where they do it)
            bool bf16 = !f32 && rp_cpu_bf16_act_pays() && strcmp(rp_test_device(), "cpu") == 0;
            assert_true(!strstr(err, "(bf16 activations") == !bf16);
            assert_true(!strstr(err, "(bf16 activations, AMX)") == !(bf16 && rp_cpu_has_amx()));
        }
        rp_free(want);
        rp_model_destroy(m);
    }
    rp_free(ids);
    rp_tok_destroy(tok);
}

// With no MODEL, the bundled model answers in its chat format.
static void test_default_model(void **state)
{
    assert_int_equal(run_rapid("run -p 'Who are you?' -n 40", out, sizeof(out), err, sizeof(err)), 0);
    assert_non_null(strstr(err, "models/rapid-tiny"));
    assert_non_null(strstr(out, "Rapid")); // "I'm a small demonstration model trained by the Rapid project..."
    assert_int_equal(run_rapid("run -p x extra1 extra2", out, sizeof(out), err, sizeof(err)), 2);
    assert_int_equal(run_rapid("run -p x --tool-parser bogus", out, sizeof(out), err, sizeof(err)), 2);
    assert_non_null(strstr(err, "--tool-parser"));
}

// A binary away from the source tree (as an out-of-tree build's: no models/
// next to it, RAPID_MODELS unset) finds the bundled model in the source tree
// it was built from; with that gone too (the test hook RP_TEST_SOURCE_TREE
// stands in for a moved source tree), run and serve fail with every place
// looked in and RAPID_MODELS named.
static void test_default_model_elsewhere(void **state)
{
    const char *bin = getenv("RP_BINARY");
    assert_non_null(bin);
    char dir[256], copy[512], cmd[8192];
    snprintf(dir, sizeof(dir), "/tmp/rapid-test-cli-elsewhere-%d", (int)getpid());
    snprintf(copy, sizeof(copy), "%s/bin/rapid", dir);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s' && mkdir -p '%s/bin' && cp '%s' '%s'", dir, dir, bin, copy);
    assert_int_equal(system(cmd), 0);
    char src_model[4096];
    snprintf(src_model, sizeof(src_model), "%s/models/rapid-tiny", rp_test_source_dir());

    snprintf(cmd, sizeof(cmd), "cd / && env -u RAPID_MODELS -u RP_TEST_SOURCE_TREE '%s' run -p 'Who are you?' -n 40",
             copy);
    int rc = run_shell(cmd, out, sizeof(out), err, sizeof(err));
    if (rc != 0 || !strstr(err, src_model))
        fail_msg("status %d; the source tree's model (%s) was not used: %s", rc, src_model, err);
    assert_non_null(strstr(out, "Rapid"));

    const char *cmds[] = {"run -p x", "serve --port 0"};
    for (int i = 0; i < 2; i++) {
        for (int with_env = 0; with_env < 2; with_env++) {
            snprintf(cmd, sizeof(cmd), "cd / && env %s RP_TEST_SOURCE_TREE=/nonexistent/src '%s' %s",
                     with_env ? "RAPID_MODELS=/nonexistent/models" : "-u RAPID_MODELS", copy, cmds[i]);
            rc = run_shell(cmd, out, sizeof(out), err, sizeof(err));
            if (rc == 0 && strstr(err, "/share/rapid/models/rapid-tiny")) {
                print_message("skipping the failure case: the model is installed under the prefix\n");
                continue;
            }
            assert_int_equal(rc, 1);
            char want[6][600];
            snprintf(want[0], sizeof(want[0]), "rapid %s: no MODEL given and the bundled model rapid-tiny was not found",
                     i ? "serve" : "run");
            snprintf(want[1], sizeof(want[1]), "%s", with_env ? "  /nonexistent/models/rapid-tiny\n" : "RAPID_MODELS is not set");
            snprintf(want[2], sizeof(want[2]), "  %s/bin/../models/rapid-tiny\n", dir);
            snprintf(want[3], sizeof(want[3]), "  %s/bin/../share/rapid/models/rapid-tiny\n", dir);
            snprintf(want[4], sizeof(want[4]), "  /nonexistent/src/models/rapid-tiny\n");
            snprintf(want[5], sizeof(want[5]), "set RAPID_MODELS to the folder that holds rapid-tiny");
            for (int k = 0; k < 6; k++)
                if (!strstr(err, want[k]))
                    fail_msg("`%s` (RAPID_MODELS %s): the message lacks [%s]: %s", cmds[i], with_env ? "set" : "unset",
                             want[k], err);
        }
    }
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

// Speculative decoding's flags: on by default, the same text in every
// configuration, drafted/accepted counts on the stats line, bad values refused.
static void test_spec_flags(void **state)
{
    static char base[65536];
    const char *prompt = "-p 'Rename `total` to `acc` in this file and return the whole file.\n\n```python\n"
                         "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n"
                         "    return total / len(values)\n```' -n 60";
    char draft[4096], args[8192], cfg[4096];
    snprintf(draft, sizeof(draft), "%s", rp_test_source("models/rapid-tiny-draft"));
    snprintf(args, sizeof(args), "run %s --no-spec-decode", prompt);
    assert_int_equal(run_rapid(args, base, sizeof(base), err, sizeof(err)), 0);
    assert_non_null(strstr(err, "spec: off"));
    const char *configs[] = {
        "",
        "--speculative-config '{\"method\": \"ngram\", \"adaptive\": false, \"num_speculative_tokens\": 5}'",
        "--speculative-config '{\"method\": \"mtp\", \"adaptive\": false}'",
        ("--draft-model '%s' --speculative-config '{\"method\": \"draft\", \"adaptive\": false, "
         "\"prompt_lookup_min\": 3, \"prompt_lookup_max\": 5}'"),
        "--mmap", // weights read from the file's mapping instead of the copy: the same text
    };
    const char *counts[] = {"spec accepted/drafted: ngram ", "ngram ", "mtp ", "draft ", "ngram "};
    for (int i = 0; i < 5; i++) {
        snprintf(cfg, sizeof(cfg), configs[i], draft);
        snprintf(args, sizeof(args), "run %s %s", prompt, cfg);
        assert_int_equal(run_rapid(args, out, sizeof(out), err, sizeof(err)), 0);
        if (strcmp(out, base) != 0)
            fail_msg("with [%s] rapid run printed [%s], without speculation [%s]", cfg, out, base);
        if (!strstr(err, counts[i]))
            fail_msg("with [%s] the stats line lacks [%s]: %s", cfg, counts[i], err);
    }
    // Refused: not JSON, not an object, unknown keys, bad values (status 2, the key named).
    const struct {
        const char *json, *msg;
    } bad[] = {
        {"{", "not valid JSON"},
        {"[1]", "must be a JSON object"},
        {"{\"method\": \"beam\"}", "\"method\""},
        {"{\"num_speculative_tokens\": 0}", "num_speculative_tokens"},
        {"{\"num_speculative_tokens\": \"4\"}", "num_speculative_tokens"},
        {"{\"adaptive\": 1}", "adaptive"},
        {"{\"prompt_lookup_max\": 99}", "prompt_lookup_max"},
        {"{\"model\": \"x\"}", "unknown key \"model\""},
        {"{\"method\": \"ngram\", \"method\": \"mtp\"}", "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(args, sizeof(args), "run -p hi --speculative-config '%s'", bad[i].json);
        assert_int_equal(run_rapid(args, out, sizeof(out), err, sizeof(err)), 2);
        if (!strstr(err, bad[i].msg))
            fail_msg("--speculative-config '%s': [%s] lacks [%s]", bad[i].json, err, bad[i].msg);
    }
    // The engine's refusals: status 1 with the reason.
    snprintf(args, sizeof(args), "run '%s' -p hi --speculative-config '{\"method\": \"mtp\"}'", draft);
    assert_int_equal(run_rapid(args, out, sizeof(out), err, sizeof(err)), 1);
    assert_non_null(strstr(err, "no MTP layer"));
    assert_int_equal(run_rapid("run -p hi --speculative-config '{\"method\": \"draft\"}'", out, sizeof(out), err,
                               sizeof(err)),
                     1);
    assert_non_null(strstr(err, "--draft-model"));
    snprintf(args, sizeof(args), "run -p hi --draft-model '%s'", rp_test_source("tests/data/models/qwen3"));
    assert_int_equal(run_rapid(args, out, sizeof(out), err, sizeof(err)), 1);
    assert_non_null(strstr(err, "tokenizer differs"));
}

// Tools offered through the chat template; the reply's call comes out parsed, as a JSON line.
static void test_tool_call(void **state)
{
    char path[64], args[256];
    snprintf(path, sizeof(path), "/tmp/rapid-test-cli-%d.json", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Current weather "
          "for a city\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
          "\"unit\":{\"type\":\"string\",\"enum\":[\"celsius\",\"fahrenheit\"]}},\"required\":[\"city\"]}}}]",
          f);
    fclose(f);
    snprintf(args, sizeof(args), "run -p \"What's the weather in Paris, in celsius?\" --tools %s -n 60", path);
    assert_int_equal(run_rapid(args, out, sizeof(out), err, sizeof(err)), 0);
    assert_non_null(strstr(out, "{\"tool_call\":{\"id\":\"call_"));
    assert_non_null(strstr(out, "\"name\":\"get_weather\""));
    assert_null(strstr(out, "<tool_call>")); // the markers never reach the text
    // Not a JSON array: a clear error.
    f = fopen(path, "w");
    fputs("{\"not\": \"an array\"}", f);
    fclose(f);
    assert_int_equal(run_rapid(args, out, sizeof(out), err, sizeof(err)), 1);
    assert_non_null(strstr(err, "JSON array"));
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_device_flag),
        cmocka_unit_test(test_bad_model_files),
        cmocka_unit_test(test_run_matches_library),
        cmocka_unit_test(test_default_model),
        cmocka_unit_test(test_default_model_elsewhere),
        cmocka_unit_test(test_tool_call),
        cmocka_unit_test(test_spec_flags),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
