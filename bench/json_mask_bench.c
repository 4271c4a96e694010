/*
 * json_mask_bench.c - the cost of JSON-constrained decoding per step: building
 * the vocabulary's trie once, then rp_json_match_mask from typical positions in
 * a JSON object (start, key, string value, number, after a comma, inside a
 * UTF-8 character, after the end) and averaged over a random walk.
 *
 * Usage: json-mask-bench TOKENIZER [REPEAT [ROW [SCHEMA...]]]
 *   TOKENIZER: a tokenizer.json, model folder or .gguf file (rp_tok_load_file).
 *   ROW: the logits row's length when the model pads it past the vocabulary
 *   (e.g. 151936 for Qwen2); default the vocabulary's size (0: the same).
 *   SCHEMA: JSON Schema files, or corpus files ({"schema", "valid": [...]},
 *   tests/data/schemas/): per schema, the compile time (median of 20, no
 *   cache), the mask at every byte position of its first valid document (fed
 *   through single-byte tokens) and over a random walk of the schema.
 * json_object mode prints one line per position: allowed tokens, microseconds per mask (median
 * and 90th percentile of REPEAT runs, default 200, after one warm-up run: the
 * median is the figure to quote on a shared machine), next to the time of
 * writing the whole row once (the floor of any mask).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <jansson.h>

#include "bench_model.h"
#include "grammar/grammar_int.h"

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

// Feeds text to a fresh match through the single-byte tokens of the vocabulary.
static bool set_state(rp_json_match *m, const rp_json_vocab *v, const char *text)
{
    for (const char *p = text; *p; p++) {
        int32_t id = -1;
        for (int32_t i = 0; i < v->n_tok && id < 0; i++)
            if (v->kind[i] == JT_CAND && v->off[i + 1] - v->off[i] == 1 && v->blob[v->off[i]] == (uint8_t)*p)
                id = i;
        if (id < 0 || rp_json_match_accept(m, id) != RP_OK)
            return false;
    }
    return true;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// Median and 90th percentile of n timings (sorted in place).
static void quantiles(double *t, int n, double *med, double *p90)
{
    qsort(t, (size_t)n, sizeof(*t), cmp_double);
    *med = t[n / 2];
    *p90 = t[n * 9 / 10];
}

static uint64_t rng_state = 0x2545F4914F6CDD1DULL;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

// The mask's median and p90 over `steps` masks of a random walk of schema sc
// (uniform among allowed tokens, restarted when the value ends).
static void walk_times(const rp_json_vocab *v, const rp_json_schema *sc, float *logits, int32_t n_vocab, double *times,
                       int steps, double *med, double *p90)
{
    rp_json_match *m = NULL;
    if (rp_json_match_create(v, sc, &m) != RP_OK)
        exit(1);
    for (int s = 0; s < steps; s++) {
        for (int32_t i = 0; i < n_vocab; i++)
            logits[i] = 0.0f;
        double t1 = now_us();
        rp_json_match_mask(m, logits, n_vocab);
        times[s] = now_us() - t1;
        int32_t n_allowed = 0;
        for (int32_t i = 0; i < n_vocab; i++)
            n_allowed += !isinf(logits[i]);
        int32_t k = (int32_t)(rng() % (uint64_t)n_allowed), pick = -1;
        for (int32_t i = 0; i < n_vocab && pick < 0; i++)
            if (!isinf(logits[i]) && k-- == 0)
                pick = i;
        if (v->kind[pick] == JT_EOG || rp_json_match_accept(m, pick) != RP_OK) {
            rp_json_match_destroy(m);
            if (rp_json_match_create(v, sc, &m) != RP_OK)
                exit(1);
        }
    }
    quantiles(times, steps, med, p90);
    rp_json_match_destroy(m);
}

static int bench_schema(const char *path, const rp_json_vocab *v, float *logits, int32_t n_vocab, double *times,
                        int repeat)
{
    json_error_t je;
    json_t *file = json_load_file(path, 0, &je);
    if (!file) {
        fprintf(stderr, "%s: %s\n", path, je.text);
        return 1;
    }
    json_t *schema = json_object_get(file, "schema") ? json_object_get(file, "schema") : file;
    json_t *doc = json_array_get(json_object_get(file, "valid"), 0);
    double ct[20];
    rp_json_schema *sc = NULL;
    for (int r = 0; r < 20; r++) {
        rp_json_schema_unref(sc);
        double t1 = now_us();
        if (rp_json_schema_compile(schema, NULL, &sc, NULL) != RP_OK) {
            fprintf(stderr, "%s: %s\n", path, rp_error_message());
            return 1;
        }
        ct[r] = now_us() - t1;
    }
    double cmed, cp90, dmed = 0, dp90 = 0, wmed, wp90;
    quantiles(ct, 20, &cmed, &cp90);
    // Every byte position of the first valid document: one mask each, all positions pooled.
    int n_pos = 0;
    if (doc) {
        char *text = json_dumps(doc, JSON_COMPACT);
        size_t len = strlen(text);
        rp_json_match *m = NULL;
        if (rp_json_match_create(v, sc, &m) != RP_OK)
            return 1;
        int reps = repeat / 20 > 1 ? repeat / 20 : 1;
        for (size_t i = 0; i <= len && n_pos + reps <= repeat * 5; i++) {
            for (int r = 0; r < reps; r++) {
                double t1 = now_us();
                rp_json_match_mask(m, logits, n_vocab);
                times[n_pos++] = now_us() - t1;
            }
            char one[2] = {i < len ? text[i] : 0, 0};
            if (i == len || !set_state(m, v, one))
                break;
        }
        if (n_pos)
            quantiles(times, n_pos, &dmed, &dp90);
        rp_json_match_destroy(m);
        free(text);
    }
    walk_times(v, sc, logits, n_vocab, times, repeat * 5, &wmed, &wp90);
    const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    printf("schema %-18s compile %6.2f ms  document (%4d masks) %6.1f / %6.1f us  random walk %6.1f / %6.1f us\n",
           name, cmed / 1e3, n_pos, dmed, dp90, wmed, wp90);
    rp_json_schema_unref(sc);
    json_decref(file);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s TOKENIZER [REPEAT [ROW]]\n", argv[0]);
        return 2;
    }
    int repeat = argc > 2 ? atoi(argv[2]) : 200;
    if (repeat < 1)
        repeat = 1;
    const char *tok_path = bench_model_path(argv[1]);
    if (!tok_path)
        return 1;
    rp_tokenizer *t = NULL;
    if (rp_tok_load_file(tok_path, &t) != RP_OK) {
        fprintf(stderr, "%s\n", rp_error_message());
        return 1;
    }
    int32_t n_vocab = rp_tok_n_vocab(t);
    if (argc > 3 && atoi(argv[3]) > n_vocab) // (0 or less: the vocabulary's size)
        n_vocab = atoi(argv[3]);
    rp_json_vocab *v = NULL;
    double t0 = now_us();
    if (rp_json_vocab_create(t, &v) != RP_OK) {
        fprintf(stderr, "%s\n", rp_error_message());
        return 1;
    }
    double t_build = now_us() - t0;
    printf("vocabulary: %d tokens (row %d), %d candidates, %d trie nodes, longest %u bytes; build %.1f ms\n",
           (int)rp_tok_n_vocab(t), (int)n_vocab, (int)v->n_cand, (int)v->n_node, v->max_len, t_build / 1e3);

    float *logits = malloc((size_t)n_vocab * sizeof(float));
    double *times = malloc((size_t)repeat * 5 * sizeof(double));
    double med, p90;
    if (!logits || !times)
        return 1;
    static const char *const positions[][2] = {
        {"start", ""},
        {"key", "{\"na"},
        {"string value", "{\"name\": \"Al"},
        {"value expected", "{\"a\": "},
        {"number", "{\"a\": 12"},
        {"after a comma", "{\"a\": [1, 2], "},
        {"inside a UTF-8 char", "{\"a\": \"\xE4"},
        {"after a backslash", "{\"a\": \"x\\"},
        {"object done", "{\"a\": 1}"},
    };
    printf("%-22s %8s %10s %10s\n", "position", "allowed", "median us", "p90 us");
    // The floor of any mask: writing the whole row once.
    for (int r = 0; r < repeat; r++) {
        double t1 = now_us();
        for (int32_t i = 0; i < n_vocab; i++)
            logits[i] = -INFINITY;
        __asm__ volatile("" : : "r"(logits) : "memory");
        times[r] = now_us() - t1;
    }
    quantiles(times, repeat, &med, &p90);
    printf("%-22s %8s %10.1f %10.1f\n", "(fill the row)", "", med, p90);
    for (size_t p = 0; p < sizeof(positions) / sizeof(positions[0]); p++) {
        rp_json_match *m = NULL;
        if (rp_json_match_create(v, NULL, &m) != RP_OK || !set_state(m, v, positions[p][1])) {
            printf("%-22s (cannot reach with this vocabulary)\n", positions[p][0]);
            rp_json_match_destroy(m);
            continue;
        }
        for (int32_t i = 0; i < n_vocab; i++)
            logits[i] = 0.0f;
        rp_json_match_mask(m, logits, n_vocab);
        int32_t allowed = 0;
        for (int32_t i = 0; i < n_vocab; i++)
            allowed += !isinf(logits[i]);
        for (int r = 0; r < repeat; r++) {
            double t1 = now_us();
            rp_json_match_mask(m, logits, n_vocab);
            times[r] = now_us() - t1;
        }
        quantiles(times, repeat, &med, &p90);
        printf("%-22s %8d %10.1f %10.1f\n", positions[p][0], (int)allowed, med, p90);
        rp_json_match_destroy(m);
    }

    // A random walk: uniform among allowed tokens, restarted when the object closes.
    walk_times(v, NULL, logits, n_vocab, times, repeat * 5, &med, &p90);
    printf("%-22s %8s %10.1f %10.1f\n", "random walk", "", med, p90);
    for (int a = 4; a < argc; a++)
        if (bench_schema(argv[a], v, logits, n_vocab, times, repeat))
            return 1;
    free(logits);
    free(times);
    rp_json_vocab_destroy(v);
    rp_tok_destroy(t);
    return 0;
}
