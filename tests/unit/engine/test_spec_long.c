/*
 * test_spec_long.c - speculative decoding is lossless over a task mix (long tier).
 *
 * 22 prompts on the default model: code edits (a real 117-line file,
 * tests/data/edit/stage1.py, renamed and returned in full; smaller files renamed,
 * changed, extended), JSON (key renames, extraction, transforms) and prose.
 * Greedy, each with speculation - prompt lookup, MTP and the draft model each
 * pinned, and `auto` - alone and eight at a time, must give byte for byte the
 * tokens (and finish reasons) of the same request without speculation; each
 * configuration must have drafted and had drafts accepted. Sampled and JSON
 * runs of the mix, eight at a time, must match too (same seeds, same text), and
 * so must a small draft cap.
 */
#include "spec_harness.h"

enum { N_P = 22, GEN = 160, GEN_FILE = 1900 };
static sh_prompt P[N_P];

static const char SNIPPET[] = "```python\n"
                              "import json\n"
                              "\n"
                              "\n"
                              "def load_config(path):\n"
                              "    with open(path) as f:\n"
                              "        config = json.load(f)\n"
                              "    if \"name\" not in config:\n"
                              "        config[\"name\"] = \"default\"\n"
                              "    return config\n"
                              "\n"
                              "\n"
                              "def save_config(path, config):\n"
                              "    with open(path, \"w\") as f:\n"
                              "        json.dump(config, f, indent=2)\n"
                              "```";

static const char *const TEXTS[N_P] = {
    // Code edits (index 0: the whole file, filled in at setup).
    NULL,
    "Rename `config` to `settings` everywhere in this file and return the whole file.\n\n%s",
    "Rename the function `load_config` to `read_config` and return the full file.\n\n%s",
    "Change the default name \"default\" to \"unnamed\" in this file and return the whole file.\n\n%s",
    "Add a line that prints the path at the start of `save_config`. Return the complete updated file.\n\n%s",
    "Change the indent from 2 to 4 and return the whole file.\n\n%s",
    "Refactor: rename `path` to `filename` throughout. Output the whole file.\n\n%s",
    "rename f -> handle, whole file please\n\n%s",
    // JSON.
    "Rename the key `name` to `title` in every object.\n\n```json\n[{\"id\": 1, \"name\": \"a\"}, {\"id\": 2, "
    "\"name\": \"b\"}, {\"id\": 3, \"name\": \"c\"}, {\"id\": 4, \"name\": \"d\"}]\n```",
    "Extract the name and the age as a JSON object: \"Maria Lopez is 34 and lives in Porto.\"",
    "Add the field `\"active\": true` to every object and return the JSON.\n\n```json\n[{\"user\": \"ann\", \"id\": "
    "7}, "
    "{\"user\": \"bob\", \"id\": 8}, {\"user\": \"cy\", \"id\": 9}]\n```",
    "Convert this list to a JSON object mapping each name to its score: ann 3, bob 5, cy 8, dee 1.",
    "Return the JSON object {\"ok\": true, \"items\": [1, 2, 3]} with every number doubled.",
    "Sort the objects by `id` and return the JSON.\n\n```json\n[{\"id\": 3, \"v\": \"c\"}, {\"id\": 1, \"v\": \"a\"}, "
    "{\"id\": 2, \"v\": \"b\"}]\n```",
    "Give me a JSON object describing a book with title, author and year.",
    // Prose.
    "Write a short story about a robot who learns to paint.",
    "Explain what a hash table is, in two sentences.",
    "List three prime numbers and say why each is prime.",
    "Summarize the plot of a detective story in three sentences.",
    "Write a polite email asking a colleague to review a pull request.",
    "What is the difference between a list and a tuple in Python?",
    "Describe a sunrise over the sea.",
};

static int setup(void **state)
{
    if (sh_setup())
        return -1;
    char *file;
    size_t len;
    if (rp_file_read(rp_test_source("tests/data/edit/stage1.py"), &file, &len))
        return -1;
    size_t cap = len + 4096;
    char *buf = malloc(cap);
    snprintf(buf, cap, "Rename `args` to `opts` everywhere in this file and return the whole file.\n\n```python\n%s```",
             file);
    P[0] = sh_chat(buf);
    rp_free(file);
    for (int i = 1; i < N_P; i++) {
        snprintf(buf, cap, TEXTS[i], SNIPPET);
        P[i] = sh_chat(buf);
    }
    free(buf);
    print_message("the 117-line file's prompt: %d tokens\n", P[0].n);
    return 0;
}

static int teardown(void **state)
{
    for (int i = 0; i < N_P; i++)
        rp_free(P[i].ids);
    sh_teardown();
    return 0;
}

static sh_result REF[N_P], GOT[N_P];

static int cap(int c)
{
    return c == SH_MTP || c == SH_DRAFT || c == SH_AUTO ? 4 : 0;
}

enum { GREEDY, SAMPLED, JSON };

// The references: the mix without speculation, greedy, sampled (temperature 0.7,
// top-p 0.9, a seed per request) or in JSON mode (half of it sampled).
static void reference(int mode)
{
    rp_engine *e = sh_engine(&SH_CONFIGS[SH_OFF], 0, 8, 0, 0);
    for (int i = 0; i < N_P; i++) {
        REF[i].gp = sh_greedy(&P[i], i == 0 && mode != JSON ? GEN_FILE : GEN);
        if (mode == SAMPLED) {
            REF[i].gp.sample.temperature = 0.7f;
            REF[i].gp.sample.top_p = 0.9f;
            REF[i].gp.sample.seed = 31 + (uint64_t)i;
        } else if (mode == JSON) {
            REF[i].gp.json = true;
            REF[i].gp.n_logprobs = 2;
            if (i % 2) {
                REF[i].gp.sample.temperature = 1.0f;
                REF[i].gp.sample.seed = (uint64_t)i;
            }
        }
    }
    sh_run(e, REF, N_P, false);
    rp_engine_destroy(e);
    int stops = 0;
    for (int i = 0; i < N_P; i++)
        stops += REF[i].finish == RP_GEN_STOP;
    print_message("reference: %d of %d end with an end-of-generation token; the first reply has %d tokens\n", stops,
                  N_P, REF[0].n);
}

// The mix under configuration c (draft cap k, 0: c's default): one at a time, then eight at a time.
static void compare(int c, int k, bool alone)
{
    const sh_config *cf = &SH_CONFIGS[c];
    for (int pass = alone ? 0 : 1; pass < 2; pass++) {
        rp_engine *e = sh_engine(cf, k ? k : cap(c), pass == 0 ? 1 : 8, 0, 0);
        for (int i = 0; i < N_P; i++)
            GOT[i].gp = REF[i].gp;
        if (pass == 0) {
            sh_run(e, GOT, N_P, false);
        } else {
            for (int at = 0; at < N_P; at += 8)
                sh_run(e, GOT + at, N_P - at < 8 ? N_P - at : 8, true);
        }
        for (int i = 0; i < N_P; i++)
            sh_same(&GOT[i], &REF[i], cf->name, i);
        print_message("%s%s, %s:\n", cf->name, k ? " (cap 3)" : "", pass == 0 ? "alone" : "eight at a time");
        sh_drafted(GOT, N_P, cf);
        rp_engine_stats es;
        rp_engine_get_stats(e, &es);
        assert_int_equal(es.kv_blocks_used, 0);
        rp_engine_destroy(e);
    }
}

static void test_greedy_mix(void **state)
{
    reference(GREEDY);
    for (int c = SH_NGRAM; c < SH_N_CONFIGS; c++)
        compare(c, 0, true);
    compare(SH_NGRAM, 3, false); // a small cap: many short verifications
}

static void test_sampled_mix(void **state)
{
    reference(SAMPLED);
    for (int c = SH_NGRAM; c < SH_N_CONFIGS; c++)
        compare(c, 0, false);
}

static void test_json_mix(void **state)
{
    reference(JSON);
    for (int c = SH_NGRAM; c < SH_N_CONFIGS; c++)
        compare(c, 0, false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_mix),
        cmocka_unit_test(test_sampled_mix),
        cmocka_unit_test(test_json_mix),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
