/*
 * model_name.c - MODEL on the command line, by name: every command that takes a MODEL
 * (run, serve, tokenize, template, pull, rm) goes through here, so a path, a repo id
 * (org/name[@rev][:QUANT]) and an alias mean the same everywhere (src/hub/hub.h has the
 * rules). A miss prints what was tried and the next step; run and serve download a
 * missing model unless --no-download or HF_HUB_OFFLINE=1.
 */
#include "cli.h"

#include "../base/base.h"

#include <stdio.h>
#include <unistd.h>

rp_hub_catalog *rp_cli_catalog(const char *cmd)
{
    char user[RP_HUB_PATH_MAX];
    rp_hub_catalog *c = NULL;
    if (rp_hub_catalog_load(rp_cli_catalog_path(), rp_hub_user_catalog_path(user, sizeof(user)) ? user : NULL, &c)) {
        fprintf(stderr, "rapid %s: %s\n", cmd, rp_error_message());
        return NULL;
    }
    return c;
}

bool rp_cli_cache_dir(const char *cmd, char *buf, size_t cap)
{
    if (rp_hub_cache_dir(buf, cap))
        return true;
    fprintf(stderr, "rapid %s: no hub cache folder: set HF_HUB_CACHE, HF_HOME or HOME\n", cmd);
    return false;
}

void rp_cli_pull_params(const char *cache, const char *token, rp_hub_pull_params *p)
{
    memset(p, 0, sizeof(*p));
    p->cache = cache;
    p->token = token;
    p->log = stderr;
    p->progress_bar = isatty(STDERR_FILENO);
}

// The alias' parsers into def, each only when the chat module knows the name.
static void alias_defaults(const char *cmd, const rp_hub_catalog *cat, const rp_hub_name *n, rp_cli_model_defaults *def)
{
    memset(def, 0, sizeof(*def));
    rp_hub_entry e;
    if (n->kind != RP_HUB_NAME_ALIAS || !rp_hub_catalog_find(cat, n->alias, &e))
        return;
    rp_tool_format tf;
    rp_reasoning_format rf;
    if (e.tool_parser && rp_tool_format_from_name(e.tool_parser, &tf) == RP_OK)
        snprintf(def->tool_parser, sizeof(def->tool_parser), "%s", e.tool_parser);
    else if (e.tool_parser)
        fprintf(stderr, "rapid %s: warning: the catalog's tool_parser '%s' for %s is unknown; left out\n", cmd,
                e.tool_parser, e.alias);
    if (e.reasoning_parser && rp_reasoning_format_from_name(e.reasoning_parser, &rf) == RP_OK)
        snprintf(def->reasoning_parser, sizeof(def->reasoning_parser), "%s", e.reasoning_parser);
    else if (e.reasoning_parser)
        fprintf(stderr, "rapid %s: warning: the catalog's reasoning_parser '%s' for %s is unknown; left out\n", cmd,
                e.reasoning_parser, e.alias);
}

// A split GGUF (x-00001-of-00003.gguf): the loader reads one file, so say what to do instead.
static int check_split(const char *cmd, const rp_hub_resolved *r)
{
    const char *base = strrchr(r->path, '/');
    base = base ? base + 1 : r->path;
    size_t n = strlen(base);
    if (n < 20 || strcmp(base + n - 5, ".gguf") || strncmp(base + n - 14, "-of-", 4) ||
        !strncmp(base + n - 10, "00001", 5))
        return 0;
    fprintf(stderr,
            "rapid %s: %s is a GGUF split into shards, which Rapid does not load yet; merge them with llama.cpp's "
            "`llama-gguf-split --merge %s merged.gguf` and give the merged file, or name the safetensors repo\n",
            cmd, r->path, r->path);
    return 1;
}

int rp_cli_resolve_model(const char *cmd, const char *model, bool download, const char *token, rp_hub_resolved *out,
                         rp_cli_model_defaults *def)
{
    rp_hub_catalog *cat = rp_cli_catalog(cmd);
    if (!cat)
        return 1;
    rp_hub_name n;
    char cache[RP_HUB_PATH_MAX];
    int rc = 1;
    if (rp_hub_name_parse(model, cat, &n)) {
        fprintf(stderr, "rapid %s: %s\n", cmd, rp_error_message());
        goto done;
    }
    if (def)
        alias_defaults(cmd, cat, &n, def);
    bool have_cache = n.kind == RP_HUB_NAME_PATH || rp_cli_cache_dir(cmd, cache, sizeof(cache));
    if (!have_cache)
        goto done;
    if (!rp_hub_resolve(&n, n.kind == RP_HUB_NAME_PATH ? NULL : cache, out)) {
        rc = n.kind == RP_HUB_NAME_PATH ? 0 : check_split(cmd, out);
        goto done;
    }
    if (n.kind == RP_HUB_NAME_PATH || !download || rp_hub_offline()) {
        bool flag = !strcmp(cmd, "run") || !strcmp(cmd, "serve"); // the commands with --no-download
        fprintf(stderr, "rapid %s: %s%s\n", cmd, rp_error_message(),
                n.kind != RP_HUB_NAME_PATH && !download && flag ? " (or drop --no-download)" : "");
        goto done;
    }
    fprintf(stderr, "rapid %s: %s is not in the hub cache (%s): downloading it\n", cmd, model, cache);
    rp_hub_pull_params pp;
    rp_cli_pull_params(cache, token, &pp);
    if (rp_hub_pull(&n, &pp, out)) {
        fprintf(stderr, "rapid %s: %s\n", cmd, rp_error_message());
        goto done;
    }
    rc = check_split(cmd, out);
done:
    rp_hub_catalog_destroy(cat);
    return rc;
}
