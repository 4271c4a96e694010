/*
 * catalog.c - aliases: the catalog shipped with Rapid (models/catalog.json, installed
 * beside the bundled model) and the user's (~/.config/rapid/models.json), the user's
 * entries replacing shipped ones of the same alias. Both files are
 *   {"models": {"qwen3-8b": {"repo": "Qwen/Qwen3-8B", "gguf": "Qwen/Qwen3-8B-GGUF",
 *                            "quant": "Q4_K_M", "family": "qwen3", ...}}}
 * Every field is checked when loaded (a string where a string belongs, a repo id that
 * parses), so a bad file is one error naming it and the alias, not a surprise later.
 * The entries are kept as one jansson object per alias; rp_hub_entry points into them.
 */
#include "hub.h"
#include "hub_int.h"

#include <jansson.h>
#include <stdlib.h>
#include <strings.h>

struct rp_hub_catalog {
    json_t *entries;      // alias -> object, with "_user" true for the user's
    const char **aliases; // (n) sorted
    size_t n;
};

static const char *const string_fields[] = {
    "repo", "revision", "gguf", "quant", "family", "description", "tool_parser", "reasoning_parser", "memory"};

static rp_status check_entry(const char *file, const char *alias, json_t *e)
{
    if (!json_is_object(e))
        return RP_ERR(RP_ERR_INVALID, "%s: models.%s: expected an object", file, alias);
    if (!rp_hub_alias_valid(alias))
        return RP_ERR(RP_ERR_INVALID, "%s: models.%s: an alias is letters, digits, '.', '-' and '_'", file, alias);
    for (size_t i = 0; i < sizeof(string_fields) / sizeof(string_fields[0]); i++) {
        json_t *v = json_object_get(e, string_fields[i]);
        if (v && !json_is_string(v))
            return RP_ERR(RP_ERR_INVALID, "%s: models.%s.%s: expected a string", file, alias, string_fields[i]);
    }
    const char *repo = json_string_value(json_object_get(e, "repo"));
    const char *gguf = json_string_value(json_object_get(e, "gguf"));
    if (!repo && !gguf)
        return RP_ERR(RP_ERR_INVALID, "%s: models.%s: needs \"repo\" or \"gguf\"", file, alias);
    if ((repo && !rp_hub_repo_valid(repo, strlen(repo))) || (gguf && !rp_hub_repo_valid(gguf, strlen(gguf))))
        return RP_ERR(RP_ERR_INVALID, "%s: models.%s: \"%s\" is not a repo id (org/name)", file, alias,
                      repo && !rp_hub_repo_valid(repo, strlen(repo)) ? repo : gguf);
    json_t *ctx = json_object_get(e, "context");
    if (ctx && (!json_is_integer(ctx) || json_integer_value(ctx) < 0))
        return RP_ERR(RP_ERR_INVALID, "%s: models.%s.context: expected a whole number", file, alias);
    return RP_OK;
}

// Adds the entries of one file into c->entries; a missing file is fine when optional.
static rp_status load_file(rp_hub_catalog *c, const char *path, bool user)
{
    if (!path)
        return RP_OK;
    if (!rp_file_exists(path)) {
        if (user)
            return RP_OK;
        return RP_ERR(RP_ERR_IO, "%s: the catalog is not there", path);
    }
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    if (!doc)
        return RP_ERR(RP_ERR_INVALID, "%s:%d: %s", path, je.line, je.text);
    rp_status st = RP_OK;
    json_t *models = json_object_get(doc, "models");
    if (!json_is_object(doc) || !json_is_object(models)) {
        st = RP_ERR(RP_ERR_INVALID, "%s: expected {\"models\": {ALIAS: {...}}}", path);
        goto done;
    }
    const char *alias;
    json_t *e;
    json_object_foreach(models, alias, e)
    {
        if ((st = check_entry(path, alias, e)))
            goto done;
        json_t *copy = json_deep_copy(e);
        if (!copy || json_object_set_new(copy, "_user", json_boolean(user)) ||
            json_object_set_new(c->entries, alias, copy)) {
            st = RP_ERR(RP_ERR_NOMEM, "out of memory");
            goto done;
        }
    }
done:
    json_decref(doc);
    return st;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

rp_status rp_hub_catalog_load(const char *shipped, const char *user, rp_hub_catalog **out)
{
    *out = NULL;
    rp_hub_catalog *c = rp_calloc(1, sizeof(*c));
    if (!c || !(c->entries = json_object())) {
        rp_free(c);
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    }
    rp_status st = load_file(c, shipped, false);
    if (!st)
        st = load_file(c, user, true);
    if (!st) {
        c->n = json_object_size(c->entries);
        c->aliases = rp_calloc(c->n ? c->n : 1, sizeof(*c->aliases));
        if (!c->aliases) {
            st = RP_ERR(RP_ERR_NOMEM, "out of memory");
        } else {
            size_t i = 0;
            const char *alias;
            json_t *e;
            json_object_foreach(c->entries, alias, e) c->aliases[i++] = alias;
            qsort(c->aliases, c->n, sizeof(*c->aliases), cmp_str);
        }
    }
    if (st) {
        rp_hub_catalog_destroy(c);
        return st;
    }
    *out = c;
    return RP_OK;
}

void rp_hub_catalog_destroy(rp_hub_catalog *c)
{
    if (!c)
        return;
    json_decref(c->entries);
    rp_free(c->aliases);
    rp_free(c);
}

size_t rp_hub_catalog_count(const rp_hub_catalog *c)
{
    return c ? c->n : 0;
}

static const char *str(json_t *e, const char *key)
{
    return json_string_value(json_object_get(e, key));
}

static void fill(const char *alias, json_t *e, rp_hub_entry *out)
{
    out->alias = alias;
    out->repo = str(e, "repo");
    out->rev = str(e, "revision");
    out->gguf = str(e, "gguf");
    out->quant = str(e, "quant");
    out->family = str(e, "family");
    out->description = str(e, "description");
    out->tool_parser = str(e, "tool_parser");
    out->reasoning_parser = str(e, "reasoning_parser");
    out->memory = str(e, "memory");
    out->context = (long)json_integer_value(json_object_get(e, "context"));
    out->user = json_is_true(json_object_get(e, "_user"));
}

void rp_hub_catalog_entry(const rp_hub_catalog *c, size_t i, rp_hub_entry *out)
{
    RP_ASSERT(i < c->n);
    fill(c->aliases[i], json_object_get(c->entries, c->aliases[i]), out);
}

bool rp_hub_catalog_find(const rp_hub_catalog *c, const char *alias, rp_hub_entry *out)
{
    if (!c)
        return false;
    for (size_t i = 0; i < c->n; i++)
        if (!strcasecmp(c->aliases[i], alias)) {
            fill(c->aliases[i], json_object_get(c->entries, c->aliases[i]), out);
            return true;
        }
    return false;
}

size_t rp_hub_catalog_closest(const rp_hub_catalog *c, const char *text, const char **out, size_t cap)
{
    if (!c || !cap)
        return 0;
    // A score per alias: the edit distance, less for a shared prefix ("qwen3" is close to
    // "qwen3-8b" though four edits away); far ones (more than half the text) are left out.
    size_t tl = strlen(text), n = 0;
    int scores[16];
    if (cap > 16)
        cap = 16;
    for (size_t i = 0; i < c->n; i++) {
        const char *a = c->aliases[i];
        int d = rp_str_distance(text, a);
        if (tl >= 3 && !strncasecmp(a, text, tl))
            d = 1;
        if (d > (int)(tl + 1) / 2 + 1)
            continue;
        size_t at = n < cap ? n : cap;
        while (at > 0 && scores[at - 1] > d)
            at--;
        if (at >= cap)
            continue;
        size_t last = n < cap ? n : cap - 1;
        for (size_t k = last; k > at; k--) {
            out[k] = out[k - 1];
            scores[k] = scores[k - 1];
        }
        out[at] = a;
        scores[at] = d;
        if (n < cap)
            n++;
    }
    return n;
}

bool rp_hub_user_catalog_path(char *buf, size_t cap)
{
    const char *xdg = getenv("XDG_CONFIG_HOME");
    const char *home = getenv("HOME");
    int w;
    if (xdg && *xdg == '/')
        w = snprintf(buf, cap, "%s/rapid/models.json", xdg);
    else if (home && *home)
        w = snprintf(buf, cap, "%s/.config/rapid/models.json", home);
    else
        return false;
    return w > 0 && (size_t)w < cap;
}
