/*
 * env_opts.c - flags from a config file and from the environment, by one rule each:
 *
 *   - the environment: `rapid serve --foo-bar V` can also be given as RAPID_FOO_BAR=V
 *     (the flag's name in capitals, '-' as '_', after RAPID_), so a service unit or a
 *     container sets options without putting them (an API key) on a command line that
 *     `ps` shows. A flag without a value is on for 1/true/yes/on and off for
 *     0/false/no/off or empty.
 *   - a config file (--config FILE, else $RAPID_CONFIG): one JSON object whose keys are
 *     the long flags' names without the dashes, {"port": 8000, "no-spec-decode": true};
 *     a value is a string or a number, or for a flag without a value true (given) or
 *     false (absent). "model" names the positional MODEL (used when the command line
 *     names none). Anything else (an unknown key, a value of another type, an array, an
 *     object, null, "config" or "help") is a usage error naming the file and the key.
 *     A variable turns off a flag the file gives (RAPID_MMAP=0 over "mmap": true); the
 *     command line cannot, having no --no-X for every flag X.
 *
 * Both become flags placed before the command line's own, the file's first, then the
 * variables': getopt reads them in that order and a later flag overrides an earlier one,
 * so flags > env > file falls out of one pass, and every value is checked by the same
 * code as on the command line.
 */
#include "cli.h"

#include "../base/base.h"

#include <ctype.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

// A config file larger than this is refused unread: no option needs more.
#define CONFIG_MAX_BYTES (1u << 20)

// The variable's name for a long flag ("api-key": "RAPID_API_KEY").
static void env_name(const char *flag, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "RAPID_");
    for (const char *p = flag; *p && n + 1 < cap; p++)
        out[n++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    out[n < cap ? n : cap - 1] = 0;
}

static bool is_word(const char *v, const char *const *words)
{
    for (int i = 0; words[i]; i++)
        if (strcasecmp(v, words[i]) == 0)
            return true;
    return false;
}

// Flags that never come from a variable or the file: --help, and --config (it names the file).
static bool is_meta(const char *name)
{
    return strcmp(name, "help") == 0 || strcmp(name, "config") == 0;
}

// "--name" or "--name=value" in a heap string; NULL when out of memory.
static char *flag_arg(const char *name, const char *value)
{
    size_t len = strlen(name) + (value ? strlen(value) : 0) + 4;
    char *arg = rp_malloc(len);
    if (arg)
        snprintf(arg, len, value ? "--%s=%s" : "--%s", name, value ? value : "");
    return arg;
}

// Appends argument `arg` (heap, taken; NULL: out of memory) that came from `origin`.
static int push(const char *cmd, rp_cli_env_argv *out, char *arg, const char *origin)
{
    char *name = arg ? rp_strdup(origin) : NULL;
    if (!name) {
        rp_free(arg);
        fprintf(stderr, "rapid %s: out of memory\n", cmd);
        return 1;
    }
    out->argv[1 + out->n_env] = arg;
    out->names[out->n_env++] = name;
    return 0;
}

// The --config value on the command line (its last), else $RAPID_CONFIG (empty: none), else
// NULL. The command line is read by getopt on a copy, so that a --config that is another
// flag's value, past "--" or abbreviated is seen exactly as the real pass sees it.
static const char *config_path(const char *shorts, const struct option *longs, int argc, char **argv, bool *oom)
{
    int id = 0, li = -1;
    for (int i = 0; longs[i].name; i++)
        if (strcmp(longs[i].name, "config") == 0)
            id = longs[i].val, li = i;
    if (li < 0)
        return NULL;
    const char *path = NULL;
    char **copy = rp_calloc((size_t)argc + 1, sizeof(char *));
    if (!copy) {
        *oom = true;
        return NULL;
    }
    memcpy(copy, argv, (size_t)argc * sizeof(char *));
    int save_opterr = opterr, c;
    opterr = 0;
    optind = 0;
    while ((c = getopt_long(argc, copy, shorts, longs, NULL)) != -1)
        if (c == id)
            path = optarg;
    opterr = save_opterr;
    optind = 0;
    rp_free(copy);
    if (!path && (path = getenv("RAPID_CONFIG")) && !*path)
        path = NULL;
    return path;
}

// JSON's name for a value's type, for messages.
static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER:
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

// The long flag named `key` (not a meta one), or NULL.
static const struct option *find_flag(const struct option *longs, const char *key)
{
    for (int i = 0; longs[i].name; i++)
        if (strcmp(longs[i].name, key) == 0 && !is_meta(key))
            return &longs[i];
    return NULL;
}

// A usage error for a key that names no flag, with the closest flag (or "model").
static int unknown_key(const char *cmd, const char *path, const struct option *longs, const char *key)
{
    if (is_meta(key))
        return rp_cli_usage_error(cmd, "%s: \"%s\" cannot be set in a config file", path, key);
    const char *best = "model";
    int best_d = rp_str_distance(key, best);
    for (int i = 0; longs[i].name; i++) {
        int d = rp_str_distance(key, longs[i].name);
        if (!is_meta(longs[i].name) && d < best_d)
            best = longs[i].name, best_d = d;
    }
    return rp_cli_usage_error(cmd, "%s: \"%s\" is not an option of `rapid %s` (closest: %s%s)", path, key, cmd,
                              strcmp(best, "model") ? "--" : "", best);
}

// A number as the shortest text that reads back to it ("0.5", "8000").
static void number_text(const json_t *v, char *buf, size_t cap)
{
    if (json_is_integer(v)) {
        snprintf(buf, cap, "%lld", (long long)json_integer_value(v));
        return;
    }
    double x = json_real_value(v);
    snprintf(buf, cap, "%.15g", x);
    if (strtod(buf, NULL) != x)
        snprintf(buf, cap, "%.17g", x);
}

// Reads the config file at `path` into *obj (a JSON object; json_decref it) after checking
// every key and value. 0, else the status to exit with, the message printed.
static int load_config(const char *cmd, const char *path, const struct option *longs, json_t **obj)
{
    *obj = NULL;
    char *text = NULL;
    size_t len = 0;
    if (rp_file_read(path, &text, &len))
        return rp_cli_usage_error(cmd, "--config: %s", rp_error_message());
    if (len > CONFIG_MAX_BYTES) {
        rp_free(text);
        return rp_cli_usage_error(cmd, "%s: %zu bytes, larger than a config file may be (%u)", path, len,
                                  CONFIG_MAX_BYTES);
    }
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    rp_free(text);
    if (!root)
        return rp_cli_usage_error(cmd, "%s: line %d, column %d: %s", path, jerr.line, jerr.column, jerr.text);
    if (!json_is_object(root)) {
        int rc = rp_cli_usage_error(cmd, "%s: expected a JSON object of options ({\"port\": 8000, ...}), not %s",
                                    path, type_name(root));
        json_decref(root);
        return rc;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        const struct option *f = find_flag(longs, key);
        bool is_model = strcmp(key, "model") == 0;
        const char *want = NULL; // the type the key takes, when v is not of it
        if (is_model)
            want = json_is_string(v) && *json_string_value(v) ? NULL : "a non-empty string (MODEL)";
        else if (!f) {
            int rc = unknown_key(cmd, path, longs, key);
            json_decref(root);
            return rc;
        } else if (f->has_arg == no_argument)
            want = json_is_boolean(v) ? NULL : "true or false";
        else
            want = json_is_string(v) || json_is_number(v) ? NULL : "a string or a number";
        if (want) {
            int rc = rp_cli_usage_error(cmd, "%s: \"%s\" takes %s, not %s", path, key, want,
                                        is_model && json_is_string(v) ? "an empty string" : type_name(v));
            json_decref(root);
            return rc;
        }
    }
    *obj = root;
    return 0;
}

int rp_cli_env_args(const char *cmd, const char *shorts, const struct option *longs, int argc, char **argv,
                    rp_cli_env_argv *out)
{
    static const char *const on[] = {"1", "true", "yes", "on", NULL}, *const off[] = {"0", "false", "no", "off", "", NULL};
    memset(out, 0, sizeof(*out));
    int n_longs = 0;
    while (longs[n_longs].name)
        n_longs++;
    bool oom = false;
    const char *path = config_path(shorts, longs, argc, argv, &oom);
    json_t *file = NULL;
    int rc = path ? load_config(cmd, path, longs, &file) : 0;
    if (rc)
        return rc;
    size_t n_keys = file ? json_object_size(file) : 0;
    out->argv = rp_calloc((size_t)argc + (size_t)n_longs + n_keys + 1, sizeof(char *));
    out->names = rp_calloc((size_t)n_longs + n_keys + 1, sizeof(char *));
    if (oom || !out->argv || !out->names) {
        fprintf(stderr, "rapid %s: out of memory\n", cmd);
        rc = 1;
        goto fail;
    }
    out->argv[0] = argv[0];
    const char *key;
    json_t *v;
    json_object_foreach(file, key, v)
    {
        char num[40];
        if (strcmp(key, "model") == 0) {
            if (!(out->model = rp_strdup(json_string_value(v)))) {
                fprintf(stderr, "rapid %s: out of memory\n", cmd);
                rc = 1;
                goto fail;
            }
            continue;
        }
        // false, or true turned off by the flag's variable (RAPID_MMAP=0 over "mmap": true)
        char name[96];
        env_name(key, name, sizeof(name));
        const char *env = getenv(name);
        if (json_is_false(v) || (json_is_true(v) && env && is_word(env, off)))
            continue;
        const char *value = NULL;
        if (json_is_number(v))
            number_text(v, num, sizeof(num)), value = num;
        else if (json_is_string(v))
            value = json_string_value(v);
        if ((rc = push(cmd, out, flag_arg(key, value), path)))
            goto fail;
    }
    out->n_file = out->n_env;
    for (int i = 0; i < n_longs; i++) {
        char name[96];
        env_name(longs[i].name, name, sizeof(name));
        const char *val = is_meta(longs[i].name) ? NULL : getenv(name);
        if (!val)
            continue;
        if (longs[i].has_arg == no_argument) {
            if (is_word(val, off))
                continue;
            if (!is_word(val, on)) {
                rc = rp_cli_usage_error(cmd, "%s=%s: expected 1 or 0 (true/false, yes/no, on/off)", name, val);
                goto fail;
            }
        }
        if ((rc = push(cmd, out, flag_arg(longs[i].name, longs[i].has_arg == no_argument ? NULL : val), name)))
            goto fail;
    }
    int n = 1 + out->n_env;
    for (int i = 1; i < argc; i++)
        out->argv[n++] = argv[i];
    out->argc = n;
    json_decref(file);
    return 0;
fail:
    json_decref(file);
    rp_cli_env_free(out);
    return rc;
}

const char *rp_cli_env_origin(const rp_cli_env_argv *e, int index)
{
    return index >= 1 && index <= e->n_env ? e->names[index - 1] : NULL;
}

rp_cli_origin rp_cli_env_rank(const rp_cli_env_argv *e, int index)
{
    if (index >= 1 && index <= e->n_file)
        return RP_CLI_FROM_FILE;
    return index >= 1 && index <= e->n_env ? RP_CLI_FROM_ENV : RP_CLI_FROM_ARGS;
}

void rp_cli_env_free(rp_cli_env_argv *e)
{
    for (int i = 0; i < e->n_env; i++) {
        rp_free(e->argv[1 + i]);
        rp_free(e->names[i]);
    }
    rp_free(e->argv);
    rp_free(e->names);
    rp_free(e->model);
    memset(e, 0, sizeof(*e));
}
