/*
 * env_opts.c - flags from the environment: `rapid serve --foo-bar V` can also be
 * given as RAPID_FOO_BAR=V (the flag's name in capitals, '-' as '_', after RAPID_),
 * so a service unit or a container sets options without putting them (an API key)
 * on a command line that `ps` shows. A flag on the command line wins over its
 * variable. A flag without a value is on for 1/true/yes/on and off for
 * 0/false/no/off or empty.
 *
 * The variables become flags placed before the command line's own (getopt then reads
 * them first, and a later flag overrides an earlier one), so every value is checked
 * by the same code as on the command line.
 */
#include "cli.h"

#include "../base/base.h"

#include <ctype.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

int rp_cli_env_args(const char *cmd, const struct option *longs, int argc, char **argv, rp_cli_env_argv *out)
{
    static const char *const on[] = {"1", "true", "yes", "on", NULL}, *const off[] = {"0", "false", "no", "off", "", NULL};
    memset(out, 0, sizeof(*out));
    int n_longs = 0;
    while (longs[n_longs].name)
        n_longs++;
    out->argv = rp_calloc((size_t)(argc + n_longs + 1), sizeof(char *));
    out->names = rp_calloc((size_t)n_longs + 1, sizeof(char *));
    if (!out->argv || !out->names) {
        fprintf(stderr, "rapid %s: out of memory\n", cmd);
        rp_cli_env_free(out);
        return 1;
    }
    int n = 0;
    out->argv[n++] = argv[0];
    for (int i = 0; i < n_longs; i++) {
        char name[96];
        env_name(longs[i].name, name, sizeof(name));
        const char *v = strcmp(longs[i].name, "help") == 0 ? NULL : getenv(name);
        if (!v)
            continue;
        size_t len = strlen(longs[i].name) + strlen(v) + 4;
        char *arg = NULL;
        if (longs[i].has_arg == no_argument) {
            if (is_word(v, off))
                continue;
            if (!is_word(v, on)) {
                int rc = rp_cli_usage_error(cmd, "%s=%s: expected 1 or 0 (true/false, yes/no, on/off)", name, v);
                rp_cli_env_free(out);
                return rc;
            }
            arg = rp_malloc(len);
            if (arg)
                snprintf(arg, len, "--%s", longs[i].name);
        } else {
            arg = rp_malloc(len);
            if (arg)
                snprintf(arg, len, "--%s=%s", longs[i].name, v);
        }
        if (!arg) {
            fprintf(stderr, "rapid %s: out of memory\n", cmd);
            rp_cli_env_free(out);
            return 1;
        }
        out->names[out->n_env] = rp_strdup(name);
        out->argv[n++] = arg;
        out->n_env++;
    }
    for (int i = 1; i < argc; i++)
        out->argv[n++] = argv[i];
    out->argc = n;
    return 0;
}

const char *rp_cli_env_origin(const rp_cli_env_argv *e, int index)
{
    return index >= 1 && index <= e->n_env ? e->names[index - 1] : NULL;
}

void rp_cli_env_free(rp_cli_env_argv *e)
{
    for (int i = 0; i < e->n_env; i++) {
        rp_free(e->argv[1 + i]);
        rp_free(e->names[i]);
    }
    rp_free(e->argv);
    rp_free(e->names);
    memset(e, 0, sizeof(*e));
}
