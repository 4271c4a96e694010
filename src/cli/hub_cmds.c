/*
 * hub_cmds.c - the commands about models on disk: `rapid pull NAME` (download into the
 * hub cache), `rapid models` (what is there; --catalog: the aliases), `rapid rm NAME`
 * (delete one, with the blobs no other snapshot uses) and `rapid ps` (what a running
 * server has loaded and how busy it is, from its /v1/models and /v1/status).
 */
#include "cli.h"

#include "../base/base.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static bool help_flag(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
            return true;
    return false;
}

int rp_cli_pull(int argc, char **argv)
{
    if (help_flag(argc, argv)) {
        printf("usage: rapid pull NAME [--hf-token TOKEN]\n"
               "\n"
               "Downloads NAME into the Hugging Face hub cache ($HF_HUB_CACHE, $HF_HOME/hub or\n"
               "~/.cache/huggingface/hub), where huggingface_hub, transformers and vLLM find it too.\n"
               "NAME: a repo id org/name[@REVISION], a GGUF repo with a quant org/name:Q4_K_M, or an\n"
               "alias (`rapid models --catalog`). Only the files the model needs are fetched; a cut\n"
               "download resumes; LFS files are checked against their sha256.\n"
               "\n"
               "  --hf-token TOKEN  for gated or private repos (default $HF_TOKEN, then the token file\n"
               "                    `hf auth login` writes)\n"
               "environment: HF_ENDPOINT (default https://huggingface.co), HF_HUB_DOWNLOAD_TIMEOUT\n"
               "(seconds without data before giving up, default 10), HF_HUB_OFFLINE=1 (refuse)\n");
        return 0;
    }
    const char *name = NULL, *token = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--hf-token") && i + 1 < argc)
            token = argv[++i];
        else if (argv[i][0] == '-')
            return rp_cli_usage_error("pull", "unknown option '%s'", argv[i]);
        else if (!name)
            name = argv[i];
        else
            return rp_cli_usage_error("pull", "expected one NAME");
    }
    if (!name)
        return rp_cli_usage_error("pull", "expected a NAME (org/name, org/name:QUANT or an alias)");
    rp_hub_catalog *cat = rp_cli_catalog("pull");
    if (!cat)
        return 1;
    rp_hub_name n;
    char cache[RP_HUB_PATH_MAX];
    rp_hub_resolved r;
    int rc = 1;
    if (rp_hub_name_parse(name, cat, &n) ||
        (n.kind == RP_HUB_NAME_PATH &&
         RP_ERR(RP_ERR_INVALID, "%s is a path; pull takes a repo id (org/name) or an alias", name))) {
        fprintf(stderr, "rapid pull: %s\n", rp_error_message());
        goto done;
    }
    if (!rp_cli_cache_dir("pull", cache, sizeof(cache)))
        goto done;
    rp_hub_pull_params pp;
    rp_cli_pull_params(cache, token, &pp);
    if (rp_hub_pull(&n, &pp, &r)) {
        fprintf(stderr, "rapid pull: %s\n", rp_error_message());
        goto done;
    }
    printf("%s\n", r.path);
    rc = 0;
done:
    rp_hub_catalog_destroy(cat);
    return rc;
}

static int list_catalog(void)
{
    rp_hub_catalog *cat = rp_cli_catalog("models");
    if (!cat)
        return 1;
    if (!rp_cli_catalog_path())
        fprintf(stderr, "rapid models: Rapid's catalog (models/catalog.json) was not found beside the binary, under "
                        "the install prefix or in the source tree; set RAPID_CATALOG to it\n");
    printf("%-22s %-40s %-36s %s\n", "ALIAS", "REPO", "GGUF (alias:QUANT)", "NOTES");
    for (size_t i = 0; i < rp_hub_catalog_count(cat); i++) {
        rp_hub_entry e;
        rp_hub_catalog_entry(cat, i, &e);
        char gguf[RP_HUB_REPO_MAX + RP_HUB_QUANT_MAX + 2] = "-";
        if (e.gguf)
            snprintf(gguf, sizeof(gguf), "%s%s%s", e.gguf, e.quant ? ":" : "", e.quant ? e.quant : "");
        printf("%-22s %-40s %-36s %s%s%s\n", e.alias, e.repo ? e.repo : "-", gguf, e.memory ? e.memory : "",
               e.description && e.memory ? "; " : "", e.description ? e.description : "");
        if (e.user)
            printf("%-22s (from your models.json)\n", "");
    }
    rp_hub_catalog_destroy(cat);
    return 0;
}

int rp_cli_models(int argc, char **argv)
{
    if (help_flag(argc, argv)) {
        printf("usage: rapid models [--catalog]\n"
               "\n"
               "Lists the models in the Hugging Face hub cache ($HF_HUB_CACHE, $HF_HOME/hub or\n"
               "~/.cache/huggingface/hub): name, format, size, revision, folder. Models downloaded by\n"
               "huggingface_hub, transformers or vLLM are there too.\n"
               "  --catalog   list the aliases instead: Rapid's catalog and your ~/.config/rapid/models.json\n");
        return 0;
    }
    bool catalog = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--catalog"))
            catalog = true;
        else
            return rp_cli_usage_error("models", "unexpected argument '%s'", argv[i]);
    }
    if (catalog)
        return list_catalog();
    char cache[RP_HUB_PATH_MAX];
    if (!rp_cli_cache_dir("models", cache, sizeof(cache)))
        return 1;
    rp_hub_local *l;
    size_t n;
    if (rp_hub_list(cache, &l, &n)) {
        fprintf(stderr, "rapid models: %s\n", rp_error_message());
        return 1;
    }
    if (!n) {
        printf("no models in %s (`rapid pull NAME` downloads one; `rapid models --catalog` lists names)\n", cache);
        return 0;
    }
    printf("%-44s %-12s %8s %-20s %s\n", "NAME", "FORMAT", "SIZE", "REVISION", "PATH");
    for (size_t i = 0; i < n; i++) {
        char size[32], rev[RP_HUB_REV_MAX + 16];
        rp_hub_format_bytes((double)l[i].bytes, size, sizeof(size));
        snprintf(rev, sizeof(rev), "%s%s%.12s", l[i].refs, l[i].refs[0] ? " " : "", l[i].commit);
        printf("%-44s %-12s %8s %-20s %s\n", l[i].repo, l[i].format, size, rev, l[i].path);
    }
    rp_free(l);
    return 0;
}

int rp_cli_rm(int argc, char **argv)
{
    if (help_flag(argc, argv)) {
        printf("usage: rapid rm NAME\n"
               "\n"
               "Deletes a model from the hub cache: org/name (every revision), org/name@REV (one\n"
               "snapshot), org/name:QUANT (one GGUF file), or an alias. Blobs another snapshot still\n"
               "links to are kept.\n");
        return 0;
    }
    if (argc != 2 || argv[1][0] == '-')
        return rp_cli_usage_error("rm", argc < 2 ? "expected a NAME" : "expected one NAME");
    rp_hub_catalog *cat = rp_cli_catalog("rm");
    if (!cat)
        return 1;
    rp_hub_name n;
    char cache[RP_HUB_PATH_MAX];
    uint64_t freed = 0;
    int rc = 1;
    if (rp_hub_name_parse(argv[1], cat, &n) || !rp_cli_cache_dir("rm", cache, sizeof(cache)) ||
        rp_hub_remove(&n, cache, &freed)) {
        if (*rp_error_message())
            fprintf(stderr, "rapid rm: %s\n", rp_error_message());
    } else {
        char size[32];
        rp_hub_format_bytes((double)freed, size, sizeof(size));
        printf("removed %s (%s freed)\n", argv[1], size);
        rc = 0;
    }
    rp_hub_catalog_destroy(cat);
    return rc;
}

/* ---- ps --------------------------------------------------------------------------- */

static size_t grow(char *data, size_t size, size_t n, void *ud)
{
    char **buf = ud;
    size_t have = *buf ? strlen(*buf) : 0, add = size * n;
    if (have + add > (8u << 20))
        return 0;
    char *b = rp_realloc(*buf, have + add + 1);
    if (!b)
        return 0;
    memcpy(b + have, data, add);
    b[have + add] = 0;
    *buf = b;
    return add;
}

// GET base+path as JSON; NULL after a message.
static json_t *get_json(const char *base, const char *path, const char *key)
{
    char url[2048], auth[1100];
    snprintf(url, sizeof(url), "%s%s", base, path);
    CURL *c = curl_easy_init();
    if (!c)
        return NULL;
    char *body = NULL;
    struct curl_slist *h = NULL;
    if (key && *key) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key);
        h = curl_slist_append(h, auth);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, grow);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(c);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    curl_slist_free_all(h);
    json_t *doc = NULL;
    if (rc != CURLE_OK)
        fprintf(stderr, "rapid ps: no server at %s: %s\n", base, curl_easy_strerror(rc));
    else if (code != 200)
        fprintf(stderr, "rapid ps: %s answered HTTP %ld%s\n", url, code,
                code == 401 ? " (give the server's key with --api-key or RAPID_API_KEY)" : "");
    else if (!(doc = json_loads(body ? body : "", 0, NULL)))
        fprintf(stderr, "rapid ps: %s did not answer JSON\n", url);
    rp_free(body);
    return doc;
}

static long long num(json_t *o, const char *a, const char *b)
{
    return (long long)json_integer_value(json_object_get(json_object_get(o, a), b));
}

int rp_cli_ps(int argc, char **argv)
{
    if (help_flag(argc, argv)) {
        printf("usage: rapid ps [--url URL | --host ADDR --port N] [--api-key KEY]\n"
               "\n"
               "Asks a running `rapid serve` what it has loaded and how busy it is (GET /v1/models and\n"
               "/v1/status). Default http://127.0.0.1:8000; the key defaults to $RAPID_API_KEY.\n");
        return 0;
    }
    const char *host = "127.0.0.1", *port = "8000", *url = NULL, *key = getenv("RAPID_API_KEY");
    for (int i = 1; i < argc; i++) {
        bool v = i + 1 < argc;
        if (!strcmp(argv[i], "--url") && v)
            url = argv[++i];
        else if (!strcmp(argv[i], "--host") && v)
            host = argv[++i];
        else if (!strcmp(argv[i], "--port") && v)
            port = argv[++i];
        else if (!strcmp(argv[i], "--api-key") && v)
            key = argv[++i];
        else
            return rp_cli_usage_error("ps", "unexpected argument '%s'", argv[i]);
    }
    char base[1024];
    if (url)
        snprintf(base, sizeof(base), "%s", url);
    else
        snprintf(base, sizeof(base), "http://%s:%s", host, port);
    for (size_t l = strlen(base); l && base[l - 1] == '/';)
        base[--l] = 0;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = 1;
    json_t *models = get_json(base, "/v1/models", key), *st = models ? get_json(base, "/v1/status", key) : NULL;
    if (st) {
        json_t *data = json_object_get(models, "data");
        for (size_t i = 0; i < json_array_size(data); i++)
            printf("model    %s\n", json_string_value(json_object_get(json_array_get(data, i), "id")));
        printf("requests %lld running, %lld queued, %lld done\n", num(st, "requests", "running"),
               num(st, "requests", "queued"), num(st, "requests", "done"));
        printf("kv       %lld of %lld blocks used, context %lld tokens\n", num(st, "kv", "blocks_used"),
               num(st, "kv", "blocks"), num(st, "kv", "context_tokens"));
        printf("tokens   %lld prefilled, %lld generated\n", num(st, "engine", "tokens_prefilled"),
               num(st, "engine", "tokens_generated"));
        rc = 0;
    }
    json_decref(models);
    json_decref(st);
    curl_global_cleanup();
    return rc;
}
