/*
 * bench.c - `rapid bench`: the command line of the benchmark client
 * (src/bench/). Three forms:
 *   rapid bench --base-url URL --model NAME --out FILE.json [options]   measure
 *   rapid bench compare A.json B.json [--md OUT.md] [--svg OUT.svg]     compare
 *   rapid bench merge --out OUT.json IN.json...                        join runs
 * Parsing only; the work is in the bench module. A run whose requests all
 * failed exits 1 (the result file still holds every reason).
 */
#include "cli.h"

#include "../bench/bench.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#ifndef RP_DATADIR
#define RP_DATADIR "/usr/local/share/rapid"
#endif

static void bench_usage(FILE *f)
{
    fprintf(f, "usage: rapid bench --base-url URL --model NAME --out FILE.json [options]\n"
               "       rapid bench compare A.json B.json [--md OUT.md] [--svg OUT.svg]\n"
               "       rapid bench merge --out OUT.json IN.json...\n"
               "\n"
               "Measures an OpenAI-compatible server (any, not only rapid serve) with streaming\n"
               "/v1/chat/completions requests: time to first token, decode tok/s = (completion tokens - 1) /\n"
               "(last token - first token) with the server's own token count, end to end, and the text. Every\n"
               "request's record, a summary (medians over runs) and the machine go into FILE.json; failed\n"
               "requests are recorded with the reason and the run goes on.\n"
               "\n"
               "options:\n"
               "      --base-url URL       the server, e.g. http://127.0.0.1:8000 (a trailing /v1 is fine)\n"
               "      --model NAME         the request's model field\n"
               "      --out FILE           the result file (rewritten after each scenario)\n"
               "      --tasks FILE         task file (default: bench/tasks.json, also looked for next to the binary)\n"
               "      --scenario LIST      tasks, concurrency, agent, prefill, tools, interference or all,\n"
               "                           comma-separated\n"
               "                           (default tasks)\n"
               "      --runs N             repetitions (default 3)\n"
               "      --label TEXT         name of the configuration measured (compare shows it)\n"
               "      --only IDS           only these tasks of the tasks scenario (comma-separated ids)\n"
               "      --concurrency LIST   streams started together (default from the task file: 1,4,16)\n"
               "      --restart-cmd CMD    agent: shell command that restarts the server; the turns are then replayed\n"
               "      --restart-timeout S  how long to wait for the restarted server (default 300)\n"
               "      --warmup N           unrecorded requests first (default 0)\n"
               "      --seed N             nonces of cold prompts (same seed: same prompts; default: from the clock)\n"
               "      --timeout S          per request (default 600)\n"
               "      --stdlib DIR         Python standard library folder (default: asked of python3)\n"
               "      --api-key KEY        sent as Authorization: Bearer KEY\n"
               "      --meta KEY=VALUE     a fact recorded in the environment (repeatable)\n"
               "  -q, --quiet              no progress lines\n"
               "\n"
               "compare: per task the speedup of B over A (decode B/A, end to end and TTFT A/B), median and\n"
               "range over runs paired by index, and how many outputs were byte-identical; --md writes a\n"
               "Markdown table, --svg a bar chart.\n"
               "  -h, --help               this help\n");
}

static bool parse_seconds(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v > 0 && v <= 1e7))
        return false;
    *out = v;
    return true;
}

// "1,4,16" into levels (at most cap); false when malformed.
static bool parse_levels(const char *s, int *levels, size_t cap, size_t *n)
{
    *n = 0;
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || v < 1 || v > 1024 || *n == cap || (*end && *end != ','))
            return false;
        levels[(*n)++] = (int)v;
        s = *end ? end + 1 : end;
        if (*end && !*s)
            return false;
    }
    return *n > 0;
}

// The task file when none is given: ./bench/tasks.json, then next to the binary.
static const char *default_tasks(void)
{
    static char found[PATH_MAX + 64];
    if (rp_file_exists("bench/tasks.json"))
        return "bench/tasks.json";
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = 0;
        static const char *rel[] = {"../bench/", "../share/rapid/bench/", "../../bench/"};
        for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
            snprintf(found, sizeof(found), "%s/%stasks.json", exe, rel[i]);
            if (rp_file_exists(found))
                return found;
        }
    }
    snprintf(found, sizeof(found), "%s/bench/tasks.json", RP_DATADIR);
    return rp_file_exists(found) ? found : "bench/tasks.json";
}

static int bad_usage(const char *fmt, const char *arg)
{
    char msg[256];
    snprintf(msg, sizeof(msg), fmt, arg);
    return rp_cli_usage_error("bench", "%s", msg);
}

static int cmd_compare(int argc, char **argv)
{
    const char *md = NULL, *svg = NULL, *files[2];
    int nf = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--md") == 0 || strcmp(argv[i], "--svg") == 0) {
            if (i + 1 >= argc)
                return bad_usage("option '%s' needs a value", argv[i]);
            *(argv[i][2] == 'm' ? &md : &svg) = argv[i + 1];
            i++;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            bench_usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return bad_usage("unknown option '%s'", argv[i]);
        } else if (nf < 2) {
            files[nf++] = argv[i];
        } else {
            return bad_usage("compare takes two result files, got a third: '%s'", argv[i]);
        }
    }
    if (nf != 2)
        return bad_usage("compare takes two result files (A.json B.json)%s", "");
    if (rp_bench_compare(files[0], files[1], stdout, md, svg) != RP_OK) {
        fprintf(stderr, "rapid bench compare: %s\n", rp_error_message());
        return 1;
    }
    return 0;
}

static int cmd_merge(int argc, char **argv)
{
    const char *out = NULL;
    const char **in = rp_calloc((size_t)argc, sizeof(*in));
    size_t n = 0;
    int rc = 0;
    if (!in) {
        fprintf(stderr, "rapid bench merge: out of memory\n");
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--out") == 0 || strcmp(argv[i], "-o") == 0) {
            if (i + 1 >= argc) {
                rc = bad_usage("option '%s' needs a value", argv[i]);
                goto done;
            }
            out = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            rc = bad_usage("unknown option '%s'", argv[i]);
            goto done;
        } else {
            in[n++] = argv[i];
        }
    }
    if (!out || n == 0) {
        rc = bad_usage("merge needs --out FILE and at least one input file%s", "");
        goto done;
    }
    if (rp_bench_merge(in, n, out) != RP_OK) {
        fprintf(stderr, "rapid bench merge: %s\n", rp_error_message());
        rc = 1;
    }
done:
    rp_free(in);
    return rc;
}

int rp_cli_bench(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "compare") == 0)
        return cmd_compare(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "merge") == 0)
        return cmd_merge(argc - 1, argv + 1);
    enum {
        O_BASE = 1000,
        O_MODEL,
        O_OUT,
        O_TASKS,
        O_SCENARIO,
        O_RUNS,
        O_LABEL,
        O_ONLY,
        O_CONC,
        O_RESTART,
        O_RESTART_TIMEOUT,
        O_WARMUP,
        O_SEED,
        O_TIMEOUT,
        O_STDLIB,
        O_KEY,
        O_META,
    };
    static const struct option longs[] = {
        {"base-url", required_argument, 0, O_BASE},
        {"model", required_argument, 0, O_MODEL},
        {"out", required_argument, 0, O_OUT},
        {"tasks", required_argument, 0, O_TASKS},
        {"scenario", required_argument, 0, O_SCENARIO},
        {"runs", required_argument, 0, O_RUNS},
        {"label", required_argument, 0, O_LABEL},
        {"only", required_argument, 0, O_ONLY},
        {"concurrency", required_argument, 0, O_CONC},
        {"restart-cmd", required_argument, 0, O_RESTART},
        {"restart-timeout", required_argument, 0, O_RESTART_TIMEOUT},
        {"warmup", required_argument, 0, O_WARMUP},
        {"seed", required_argument, 0, O_SEED},
        {"timeout", required_argument, 0, O_TIMEOUT},
        {"stdlib", required_argument, 0, O_STDLIB},
        {"api-key", required_argument, 0, O_KEY},
        {"meta", required_argument, 0, O_META},
        {"quiet", no_argument, 0, 'q'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    rp_bench_params p;
    rp_bench_params_default(&p);
    p.tasks_path = NULL;
    int levels[16];
    json_t *meta = json_object(), *args = json_array();
    int rc = 2;
    if (!meta || !args) {
        fprintf(stderr, "rapid bench: out of memory\n");
        rc = 1;
        goto done;
    }
    for (int i = 0; i < argc; i++)
        json_array_append_new(args, json_string(argv[i]));
    optind = 1;
    opterr = 0;
    int c, li = -1;
    while ((c = getopt_long(argc, argv, ":qh", longs, &li)) != -1) {
        bool ok = true;
        char optname[64];
        if (li >= 0)
            snprintf(optname, sizeof(optname), "--%s", longs[li].name);
        else
            snprintf(optname, sizeof(optname), "-%c", c);
        li = -1;
        long long v;
        switch (c) {
        case O_BASE:
            p.base_url = optarg;
            break;
        case O_MODEL:
            p.model = optarg;
            break;
        case O_OUT:
            p.out_path = optarg;
            break;
        case O_TASKS:
            p.tasks_path = optarg;
            break;
        case O_SCENARIO:
            ok = rp_bench_scenarios_parse(optarg, &p.scenarios) == RP_OK;
            break;
        case O_RUNS:
            ok = rp_cli_parse_long(optarg, 1, 1000, &v), p.runs = (int)v;
            break;
        case O_LABEL:
            p.label = optarg;
            break;
        case O_ONLY:
            p.only = optarg;
            break;
        case O_CONC:
            ok = parse_levels(optarg, levels, 16, &p.n_levels);
            p.levels = levels;
            break;
        case O_RESTART:
            p.restart_cmd = optarg;
            break;
        case O_RESTART_TIMEOUT:
            ok = parse_seconds(optarg, &p.restart_timeout_s);
            break;
        case O_WARMUP:
            ok = rp_cli_parse_long(optarg, 0, 100, &v), p.warmup = (int)v;
            break;
        case O_SEED:
            ok = rp_cli_parse_long(optarg, 0, LLONG_MAX, &v), p.seed = (uint64_t)v;
            break;
        case O_TIMEOUT:
            ok = parse_seconds(optarg, &p.timeout_s);
            break;
        case O_STDLIB:
            p.stdlib_dir = optarg;
            break;
        case O_KEY:
            p.api_key = optarg;
            break;
        case O_META: {
            const char *eq = strchr(optarg, '=');
            ok = eq && eq != optarg;
            if (ok) {
                char key[128];
                snprintf(key, sizeof(key), "%.*s", (int)(eq - optarg < 127 ? eq - optarg : 127), optarg);
                json_object_set_new(meta, key, json_string(eq + 1));
            }
            break;
        }
        case 'q':
            p.quiet = true;
            break;
        case 'h':
            bench_usage(stdout);
            rc = 0;
            goto done;
        case ':':
            rc = bad_usage("option '%s' needs a value", argv[optind - 1]);
            goto done;
        default:
            rc = bad_usage("unknown option '%s'", argv[optind - 1]);
            goto done;
        }
        if (!ok) {
            rc = rp_cli_usage_error("bench", "invalid value '%s' for %s%s%s%s", optarg, optname,
                                    c == O_SCENARIO ? " (" : "", c == O_SCENARIO ? rp_error_message() : "",
                                    c == O_SCENARIO ? ")" : "");
            goto done;
        }
    }
    if (optind < argc) {
        rc = bad_usage("unexpected argument '%s'", argv[optind]);
        goto done;
    }
    if (!p.base_url || !p.model || !p.out_path) {
        rc = bad_usage("give --base-url, --model and --out%s", "");
        goto done;
    }
    if (!p.tasks_path)
        p.tasks_path = default_tasks();
    p.meta = meta;
    p.argv = args;
    size_t n_req = 0, n_failed = 0;
    if (rp_bench_run(&p, &n_req, &n_failed) != RP_OK) {
        fprintf(stderr, "rapid bench: %s\n", rp_error_message());
        rc = 1;
        goto done;
    }
    if (!p.quiet || n_failed)
        fprintf(stderr, "rapid bench: %zu requests, %zu failed; results in %s\n", n_req, n_failed, p.out_path);
    rc = n_req && n_failed == n_req ? 1 : 0;
done:
    json_decref(meta);
    json_decref(args);
    return rc;
}
