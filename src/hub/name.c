/*
 * name.c - what text on the command line names: a path, a repo id (org/name[@rev]
 * [:QUANT]) or an alias from the catalog (alias[:QUANT]). The rule, in order: text that
 * exists on disk or can only be a path is a path; one '/' between two valid parts is a
 * repo id; a known alias is an alias; anything else is an error that says which forms
 * were tried and the closest aliases. Also the small name checks hub_int.h declares.
 */
#include "hub.h"
#include "hub_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
           c == '_';
}

static bool part_valid(const char *s, size_t n)
{
    if (n == 0 || n > 96 || s[0] == '.' || s[0] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!name_char(s[i]) || (s[i] == '.' && i + 1 < n && s[i + 1] == '.'))
            return false;
    return true;
}

bool rp_hub_repo_valid(const char *s, size_t n)
{
    const char *slash = memchr(s, '/', n);
    return slash && part_valid(s, (size_t)(slash - s)) && part_valid(slash + 1, n - (size_t)(slash - s) - 1);
}

bool rp_hub_alias_valid(const char *s)
{
    size_t n = strlen(s);
    return n <= 64 && part_valid(s, n);
}

bool rp_hub_fmt(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
    return w >= 0 && (size_t)w < cap;
}

rp_status rp_hub_mkdirs(const char *path)
{
    char p[RP_HUB_PATH_MAX];
    if (!rp_hub_fmt(p, sizeof(p), "%s", path))
        return RP_ERR(RP_ERR_INVALID, "path too long: %s", path);
    for (char *s = p + 1;; s++) {
        if (*s == '/' || !*s) {
            char c = *s;
            *s = 0;
            if (mkdir(p, 0755) && errno != EEXIST)
                return RP_ERR(RP_ERR_IO, "%s: %s", p, strerror(errno));
            *s = c;
            if (!c)
                break;
        }
    }
    return RP_OK;
}

bool rp_hub_is_commit(const char *rev)
{
    size_t n = strlen(rev);
    if (n != 40)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((rev[i] >= '0' && rev[i] <= '9') || (rev[i] >= 'a' && rev[i] <= 'f')))
            return false;
    return true;
}

static bool quant_valid(const char *q)
{
    size_t n = strlen(q);
    if (!n || n >= RP_HUB_QUANT_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!name_char(q[i]))
            return false;
    return true;
}

// A revision: what git allows in a ref, less what would escape a folder.
static bool rev_valid(const char *r, size_t n)
{
    if (!n || n >= RP_HUB_REV_MAX || r[0] == '/' || r[0] == '.' || r[n - 1] == '/')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!(name_char(r[i]) || r[i] == '/') || (r[i] == '.' && i + 1 < n && r[i + 1] == '.'))
            return false;
    return true;
}

static bool path_like(const char *t)
{
    size_t n = strlen(t);
    return t[0] == '/' || t[0] == '.' || t[0] == '~' || (n >= 5 && !strcmp(t + n - 5, ".gguf"));
}

static rp_status unknown(const char *text, const rp_hub_catalog *cat, const char *why)
{
    char near[512] = "";
    const char *best[4];
    size_t k = rp_hub_catalog_closest(cat, text, best, 4);
    size_t used = 0;
    for (size_t i = 0; i < k; i++)
        used += (size_t)snprintf(near + used, sizeof(near) - used, "%s%s", i ? ", " : "; closest aliases: ", best[i]);
    return RP_ERR(RP_ERR_INVALID,
                  "'%s' %s: it is no file or folder, no repo id (org/name[@rev][:QUANT]) and no alias in the "
                  "catalog (`rapid models --catalog` lists them)%s",
                  text, why, near);
}

rp_status rp_hub_name_parse(const char *text, const rp_hub_catalog *cat, rp_hub_name *out)
{
    memset(out, 0, sizeof(*out));
    strcpy(out->rev, "main");
    size_t n = strlen(text);
    if (n == 0)
        return RP_ERR(RP_ERR_INVALID, "an empty MODEL");
    if (n >= sizeof(out->text))
        return RP_ERR(RP_ERR_INVALID, "MODEL too long (%zu bytes)", n);
    memcpy(out->text, text, n + 1);
    struct stat sb;
    if (!stat(text, &sb) || path_like(text)) {
        out->kind = RP_HUB_NAME_PATH;
        return RP_OK;
    }
    // name[@rev][:quant]: the quant after the last ':', the revision after the first '@'.
    char buf[RP_HUB_PATH_MAX];
    memcpy(buf, text, n + 1);
    char *colon = strrchr(buf, ':');
    if (colon) {
        *colon = 0;
        if (!quant_valid(colon + 1))
            return unknown(text, cat, "has a bad quant tag after ':'");
        rp_hub_fmt(out->quant, sizeof(out->quant), "%s", colon + 1);
        out->gguf = true;
    }
    char *at = strchr(buf, '@');
    if (at) {
        *at = 0;
        if (!rev_valid(at + 1, strlen(at + 1)))
            return unknown(text, cat, "has a bad revision after '@'");
        rp_hub_fmt(out->rev, sizeof(out->rev), "%s", at + 1);
        out->rev_given = true;
    }
    if (strchr(buf, '/')) {
        if (!rp_hub_repo_valid(buf, strlen(buf)) || strchr(strchr(buf, '/') + 1, '/'))
            return unknown(text, cat, "is not there");
        out->kind = RP_HUB_NAME_REPO;
        rp_hub_fmt(out->repo, sizeof(out->repo), "%s", buf); // fits: each part is at most 96
        return RP_OK;
    }
    rp_hub_entry e;
    if (!rp_hub_alias_valid(buf) || !rp_hub_catalog_find(cat, buf, &e))
        return unknown(text, cat, "is not there");
    out->kind = RP_HUB_NAME_ALIAS;
    snprintf(out->alias, sizeof(out->alias), "%s", e.alias);
    if (out->gguf || !e.repo) {
        if (!e.gguf)
            return RP_ERR(RP_ERR_INVALID, "'%s': the alias %s has no GGUF repo for a quant tag (its repo: %s)", text,
                          e.alias, e.repo);
        snprintf(out->repo, sizeof(out->repo), "%s", e.gguf);
        out->gguf = true;
        if (!out->quant[0] && e.quant)
            snprintf(out->quant, sizeof(out->quant), "%s", e.quant);
    } else {
        snprintf(out->repo, sizeof(out->repo), "%s", e.repo);
        if (!at && e.rev) {
            snprintf(out->rev, sizeof(out->rev), "%s", e.rev);
            out->rev_given = true;
        }
    }
    return RP_OK;
}
