/*
 * cache.c - the hub cache on disk, as huggingface_hub lays it out (and transformers,
 * vLLM and Rapid's own pulls share it):
 *   CACHE/models--ORG--NAME/blobs/ETAG                  the bytes (ETAG: the LFS sha256, else the git blob id)
 *   CACHE/models--ORG--NAME/refs/REV                    the commit REV points at (40 hex, no newline)
 *   CACHE/models--ORG--NAME/snapshots/COMMIT/FILE       a relative symlink to ../../blobs/ETAG
 * CACHE is $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub,
 * else ~/.cache/huggingface/hub (huggingface_hub's constants.py). Everything here reads
 * or deletes files; nothing touches the network. A snapshot counts as a model when the
 * files rp_hub_select_files chooses are all there (a dangling link is a missing file,
 * and a sharded safetensors model needs every shard its index names).
 */
#include "hub.h"
#include "hub_int.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <jansson.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

bool rp_hub_cache_dir(char *buf, size_t cap)
{
    const char *v = getenv("HF_HUB_CACHE");
    if (v && *v)
        return rp_hub_fmt(buf, cap, "%s", v);
    if ((v = getenv("HF_HOME")) && *v)
        return rp_hub_fmt(buf, cap, "%s/hub", v);
    if ((v = getenv("XDG_CACHE_HOME")) && *v)
        return rp_hub_fmt(buf, cap, "%s/huggingface/hub", v);
    if ((v = getenv("HOME")) && *v)
        return rp_hub_fmt(buf, cap, "%s/.cache/huggingface/hub", v);
    return false;
}

bool rp_hub_repo_dir(const char *cache, const char *repo, char *buf, size_t cap)
{
    const char *slash = strchr(repo, '/');
    if (!slash)
        return false;
    return rp_hub_fmt(buf, cap, "%s/models--%.*s--%s", cache, (int)(slash - repo), repo, slash + 1);
}

bool rp_hub_offline(void)
{
    const char *v = getenv("HF_HUB_OFFLINE");
    return v && (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on"));
}

// Reads refs/REV into commit: RP_OK; RP_ERR_IO (no message) when the ref is not there or
// not a commit; RP_ERR_NOMEM.
static rp_status read_ref(const char *repo_dir, const char *rev, char *commit, size_t cap)
{
    char p[RP_HUB_PATH_MAX];
    if (!rp_hub_fmt(p, sizeof(p), "%s/refs/%s", repo_dir, rev))
        return RP_ERR_IO;
    rp_status st = rp_hub_read_line(p, commit, cap);
    return st ? st : rp_hub_is_commit(commit) ? RP_OK : RP_ERR_IO;
}

// Every shard a model.safetensors.index.json names is present in snap; else the first missing one's name.
static bool index_complete(const char *snap, char *missing, size_t cap)
{
    char p[RP_HUB_PATH_MAX];
    if (!rp_hub_fmt(p, sizeof(p), "%s/model.safetensors.index.json", snap) || !rp_file_exists(p))
        return true;
    json_t *doc = json_load_file(p, 0, NULL);
    json_t *map = json_object_get(doc, "weight_map");
    bool ok = json_is_object(map);
    if (!ok)
        snprintf(missing, cap, "model.safetensors.index.json (unreadable)");
    const char *k;
    json_t *v;
    json_object_foreach(map, k, v)
    {
        const char *f = json_string_value(v);
        if (!ok || !f)
            continue;
        if (strstr(f, "..") || !rp_hub_fmt(p, sizeof(p), "%s/%s", snap, f) || !rp_file_exists(p)) {
            snprintf(missing, cap, "%s", f);
            ok = false;
        }
    }
    json_decref(doc);
    return ok;
}

// The snapshot's model: path of the folder or of the GGUF file picked. RP_ERR_IO with why
// (no weights there, a missing shard, no file for the quant) otherwise.
static rp_status snapshot_model(const char *snap, const rp_hub_name *n, char *path, size_t cap)
{
    char **files = NULL;
    size_t nf = 0;
    rp_status st = rp_hub_walk(snap, &files, &nf);
    if (st)
        return st;
    bool *keep = rp_calloc(nf ? nf : 1, sizeof(*keep));
    long main_file = -1;
    if (!keep) {
        st = RP_ERR(RP_ERR_NOMEM, "out of memory");
        goto done;
    }
    if ((st = rp_hub_select_files((const char *const *)files, nf, n->gguf, n->quant, keep, &main_file)))
        goto done;
    if (main_file >= 0) {
        if (!rp_hub_fmt(path, cap, "%s/%s", snap, files[main_file]))
            st = RP_ERR(RP_ERR_INVALID, "path too long: %s", snap);
        goto done;
    }
    char missing[512];
    if (!index_complete(snap, missing, sizeof(missing))) {
        st = RP_ERR(RP_ERR_IO, "the snapshot lacks %s", missing);
        goto done;
    }
    if (!rp_hub_fmt(path, cap, "%s", snap))
        st = RP_ERR(RP_ERR_INVALID, "path too long: %s", snap);
done:
    rp_free(keep);
    rp_hub_free_list(files, nf);
    return st;
}

static void display_name(const rp_hub_name *n, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s%s%s%s%s", n->repo, n->rev_given ? "@" : "", n->rev_given ? n->rev : "",
             n->quant[0] ? ":" : "", n->quant);
}

rp_status rp_hub_resolve(const rp_hub_name *n, const char *cache, rp_hub_resolved *out)
{
    memset(out, 0, sizeof(*out));
    out->name = *n;
    if (n->kind == RP_HUB_NAME_PATH) {
        struct stat sb;
        if (stat(n->text, &sb))
            return RP_ERR(RP_ERR_IO, "%s: no such file or folder (a MODEL is a path, a repo id org/name or an alias)",
                          n->text);
        snprintf(out->path, sizeof(out->path), "%s", n->text);
        return RP_OK;
    }
    char via[RP_HUB_PATH_MAX + 256] = "", name[RP_HUB_PATH_MAX];
    display_name(n, name, sizeof(name));
    if (n->kind == RP_HUB_NAME_ALIAS)
        snprintf(via, sizeof(via), "  the catalog: %s is %s\n", n->alias, name);
    rp_status st;
    char repo_dir[RP_HUB_PATH_MAX], why[RP_HUB_PATH_MAX + 600], commit[RP_HUB_REV_MAX] = "";
    if (!cache || !rp_hub_repo_dir(cache, n->repo, repo_dir, sizeof(repo_dir))) {
        snprintf(why, sizeof(why), "no hub cache folder (set HF_HUB_CACHE or HF_HOME)");
        goto miss;
    }
    if (!rp_dir_exists(repo_dir)) {
        snprintf(why, sizeof(why), "%s: not there", repo_dir);
        goto miss;
    }
    if (rp_hub_is_commit(n->rev)) {
        snprintf(commit, sizeof(commit), "%s", n->rev);
    } else if ((st = read_ref(repo_dir, n->rev, commit, sizeof(commit)))) {
        if (st == RP_ERR_NOMEM)
            return RP_ERR(st, "out of memory");
        snprintf(why, sizeof(why), "%s/refs/%s: not there (revision %s never fetched)", repo_dir, n->rev, n->rev);
        goto miss;
    }
    char snap[RP_HUB_PATH_MAX];
    if (!rp_hub_fmt(snap, sizeof(snap), "%s/snapshots/%s", repo_dir, commit) || !rp_dir_exists(snap)) {
        snprintf(why, sizeof(why), "%s/snapshots/%s: not there", repo_dir, commit);
        goto miss;
    }
    if ((st = snapshot_model(snap, n, out->path, sizeof(out->path)))) {
        if (st == RP_ERR_NOMEM)
            return st;
        snprintf(why, sizeof(why), "%s: %s", snap, rp_error_message());
        goto miss;
    }
    snprintf(out->commit, sizeof(out->commit), "%s", commit);
    return RP_OK;
miss:
    return RP_ERR(RP_ERR_IO,
                  "%s is not on this machine; tried:\n%s  the hub cache: %s\nnext: `rapid pull %s` downloads it%s",
                  n->text, via, why, n->text, rp_hub_offline() ? " (HF_HUB_OFFLINE is set: unset it first)" : "");
}

/* ---- listing ----------------------------------------------------------------- */

// Decodes "models--ORG--NAME" into "ORG/NAME"; false for other folders.
static bool repo_of(const char *dir_name, char *repo, size_t cap)
{
    if (strncmp(dir_name, "models--", 8))
        return false;
    const char *rest = dir_name + 8, *sep = strstr(rest, "--");
    if (!sep)
        return false;
    return rp_hub_fmt(repo, cap, "%.*s/%s", (int)(sep - rest), rest, sep + 2) && rp_hub_repo_valid(repo, strlen(repo));
}

// The refs (top-level files in refs/) that name commit, comma separated.
static void refs_naming(const char *repo_dir, const char *commit, char *out, size_t cap)
{
    out[0] = 0;
    char p[RP_HUB_PATH_MAX];
    if (!rp_hub_fmt(p, sizeof(p), "%s/refs", repo_dir))
        return;
    DIR *d = opendir(p);
    if (!d)
        return;
    struct dirent *e;
    size_t used = 0;
    while ((e = readdir(d))) {
        char c[RP_HUB_REV_MAX];
        if (e->d_name[0] == '.' || read_ref(repo_dir, e->d_name, c, sizeof(c)) || strcmp(c, commit))
            continue;
        int w = snprintf(out + used, cap - used, "%s%s", used ? "," : "", e->d_name);
        if (w < 0 || (size_t)w >= cap - used)
            break;
        used += (size_t)w;
    }
    closedir(d);
}

static rp_status add_snapshot(const char *repo, const char *repo_dir, const char *commit, rp_hub_local **list,
                              size_t *n, size_t *cap)
{
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 8;
        rp_hub_local *l = rp_realloc(*list, c * sizeof(*l));
        if (!l)
            return RP_ERR(RP_ERR_NOMEM, "out of memory");
        *list = l, *cap = c;
    }
    rp_hub_local *m = &(*list)[*n];
    memset(m, 0, sizeof(*m));
    snprintf(m->repo, sizeof(m->repo), "%s", repo);
    snprintf(m->commit, sizeof(m->commit), "%s", commit);
    if (!rp_hub_fmt(m->path, sizeof(m->path), "%s/snapshots/%s", repo_dir, commit))
        return RP_OK;
    refs_naming(repo_dir, commit, m->refs, sizeof(m->refs));
    char **files;
    size_t nf;
    rp_status st = rp_hub_walk(m->path, &files, &nf);
    if (st)
        return st;
    bool st_files = false, gguf = false;
    for (size_t i = 0; i < nf; i++) {
        char p[RP_HUB_PATH_MAX];
        struct stat sb;
        if (!rp_hub_fmt(p, sizeof(p), "%s/%s", m->path, files[i]) || stat(p, &sb))
            continue;
        m->bytes += (uint64_t)sb.st_size;
        m->n_files++;
        size_t l = strlen(files[i]);
        st_files |= l > 12 && !strcmp(files[i] + l - 12, ".safetensors");
        gguf |= l > 5 && !strcmp(files[i] + l - 5, ".gguf");
    }
    rp_hub_free_list(files, nf);
    snprintf(m->format, sizeof(m->format), "%s", gguf ? "gguf" : st_files ? "safetensors" : "other");
    (*n)++;
    return RP_OK;
}

static int cmp_local(const void *a, const void *b)
{
    const rp_hub_local *x = a, *y = b;
    int c = strcasecmp(x->repo, y->repo);
    return c ? c : strcmp(x->commit, y->commit);
}

rp_status rp_hub_list(const char *cache, rp_hub_local **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(cache);
    if (!d)
        return errno == ENOENT ? RP_OK : RP_ERR(RP_ERR_IO, "%s: %s", cache, strerror(errno));
    size_t cap = 0;
    rp_status st = RP_OK;
    struct dirent *e;
    while (!st && (e = readdir(d))) {
        char repo[RP_HUB_REPO_MAX], repo_dir[RP_HUB_PATH_MAX], snaps[RP_HUB_PATH_MAX];
        if (!repo_of(e->d_name, repo, sizeof(repo)) ||
            !rp_hub_fmt(repo_dir, sizeof(repo_dir), "%s/%s", cache, e->d_name) ||
            !rp_hub_fmt(snaps, sizeof(snaps), "%s/snapshots", repo_dir))
            continue;
        DIR *s = opendir(snaps);
        if (!s)
            continue;
        struct dirent *se;
        while (!st && (se = readdir(s)))
            if (se->d_name[0] != '.')
                st = add_snapshot(repo, repo_dir, se->d_name, out, n, &cap);
        closedir(s);
    }
    closedir(d);
    if (st) {
        rp_free(*out);
        *out = NULL;
        *n = 0;
        return st;
    }
    if (*n)
        qsort(*out, *n, sizeof(**out), cmp_local);
    return RP_OK;
}

/* ---- removing ----------------------------------------------------------------- */

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static rp_status rm_tree(const char *p)
{
    if (nftw(p, rm_entry, 16, FTW_DEPTH | FTW_PHYS) && errno != ENOENT)
        return RP_ERR(RP_ERR_IO, "%s: %s", p, strerror(errno));
    return RP_OK;
}

// The blob names every remaining snapshot links to, into used.
static rp_status blobs_in_use(const char *repo_dir, rp_hub_strv *used)
{
    char snaps[RP_HUB_PATH_MAX];
    if (!rp_hub_fmt(snaps, sizeof(snaps), "%s/snapshots", repo_dir))
        return RP_ERR(RP_ERR_INVALID, "path too long: %s", repo_dir);
    DIR *d = opendir(snaps);
    if (!d)
        return RP_OK;
    rp_status st = RP_OK;
    struct dirent *e;
    while (!st && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char snap[RP_HUB_PATH_MAX];
        char **files;
        size_t nf;
        if (!rp_hub_fmt(snap, sizeof(snap), "%s/%s", snaps, e->d_name) || rp_hub_walk(snap, &files, &nf)) {
            rp_error_clear();
            continue;
        }
        for (size_t i = 0; !st && i < nf; i++) {
            char p[RP_HUB_PATH_MAX], target[RP_HUB_PATH_MAX];
            ssize_t l;
            if (!rp_hub_fmt(p, sizeof(p), "%s/%s", snap, files[i]) ||
                (l = readlink(p, target, sizeof(target) - 1)) <= 0)
                continue;
            target[l] = 0;
            const char *b = strrchr(target, '/');
            st = rp_hub_strv_add(used, b ? b + 1 : target);
        }
        rp_hub_free_list(files, nf);
    }
    closedir(d);
    return st;
}

// Deletes blobs no snapshot links to (partial downloads, *.incomplete, are kept), then
// refs naming a snapshot that is gone, then the repo folder when no snapshot is left.
static rp_status collect(const char *repo_dir, uint64_t *freed)
{
    rp_hub_strv used = {0};
    rp_status st = blobs_in_use(repo_dir, &used);
    char p[RP_HUB_PATH_MAX];
    DIR *d;
    if (!st && rp_hub_fmt(p, sizeof(p), "%s/blobs", repo_dir) && (d = opendir(p))) {
        struct dirent *e;
        while ((e = readdir(d))) {
            char b[RP_HUB_PATH_MAX];
            struct stat sb;
            size_t l = strlen(e->d_name);
            if (e->d_name[0] == '.' || rp_hub_strv_has(&used, e->d_name) ||
                (l > 11 && !strcmp(e->d_name + l - 11, ".incomplete")) ||
                !rp_hub_fmt(b, sizeof(b), "%s/%s", p, e->d_name) || lstat(b, &sb))
                continue;
            if (!unlink(b))
                *freed += (uint64_t)sb.st_size;
        }
        closedir(d);
    }
    rp_hub_strv_free(&used);
    if (st)
        return st;
    // refs whose snapshot is gone
    if (rp_hub_fmt(p, sizeof(p), "%s/refs", repo_dir) && (d = opendir(p))) {
        struct dirent *e;
        while ((e = readdir(d))) {
            char c[RP_HUB_REV_MAX], s[RP_HUB_PATH_MAX], r[RP_HUB_PATH_MAX];
            if (e->d_name[0] == '.' || read_ref(repo_dir, e->d_name, c, sizeof(c)))
                continue;
            if (rp_hub_fmt(s, sizeof(s), "%s/snapshots/%s", repo_dir, c) && !rp_dir_exists(s) &&
                rp_hub_fmt(r, sizeof(r), "%s/%s", p, e->d_name))
                unlink(r);
        }
        closedir(d);
    }
    // no snapshot left: the whole folder (refs, blobs, partials) goes
    bool any = false;
    if (rp_hub_fmt(p, sizeof(p), "%s/snapshots", repo_dir) && (d = opendir(p))) {
        struct dirent *e;
        while ((e = readdir(d)))
            any |= e->d_name[0] != '.';
        closedir(d);
    }
    return any ? RP_OK : rm_tree(repo_dir);
}

rp_status rp_hub_remove(const rp_hub_name *n, const char *cache, uint64_t *freed)
{
    *freed = 0;
    if (n->kind == RP_HUB_NAME_PATH)
        return RP_ERR(RP_ERR_INVALID,
                      "%s: rm deletes models of the hub cache by name (org/name or an alias), not paths", n->text);
    char repo_dir[RP_HUB_PATH_MAX];
    if (!rp_hub_repo_dir(cache, n->repo, repo_dir, sizeof(repo_dir)) || !rp_dir_exists(repo_dir))
        return RP_ERR(RP_ERR_IO, "%s is not in the hub cache (%s)", n->repo, cache);
    if (n->quant[0] || n->rev_given) {
        char commit[RP_HUB_REV_MAX], snap[RP_HUB_PATH_MAX];
        if (rp_hub_is_commit(n->rev))
            snprintf(commit, sizeof(commit), "%s", n->rev);
        else if (read_ref(repo_dir, n->rev, commit, sizeof(commit)))
            return RP_ERR(RP_ERR_IO, "%s: no revision %s in the hub cache", n->repo, n->rev);
        if (!rp_hub_fmt(snap, sizeof(snap), "%s/snapshots/%s", repo_dir, commit) || !rp_dir_exists(snap))
            return RP_ERR(RP_ERR_IO, "%s: the snapshot %s is not there", n->repo, commit);
        if (!n->quant[0]) {
            rp_status st = rm_tree(snap);
            return st ? st : collect(repo_dir, freed);
        }
        // one GGUF's files in the snapshot
        char **files;
        size_t nf;
        rp_status st = rp_hub_walk(snap, &files, &nf);
        if (st)
            return st;
        bool *keep = rp_calloc(nf ? nf : 1, sizeof(*keep));
        long main_file;
        if (!keep)
            st = RP_ERR(RP_ERR_NOMEM, "out of memory");
        else if ((st = rp_hub_select_files((const char *const *)files, nf, true, n->quant, keep, &main_file)))
            rp_error_prefix(st, "%s", n->repo);
        for (size_t i = 0; !st && i < nf; i++) {
            char p[RP_HUB_PATH_MAX];
            if (keep[i] && rp_hub_fmt(p, sizeof(p), "%s/%s", snap, files[i]))
                unlink(p);
        }
        rp_free(keep);
        rp_hub_free_list(files, nf);
        if (st)
            return st;
        char **left;
        size_t nl;
        if (!rp_hub_walk(snap, &left, &nl)) { // an emptied snapshot goes
            if (!nl)
                rm_tree(snap);
            rp_hub_free_list(left, nl);
        }
        return collect(repo_dir, freed);
    }
    char snaps[RP_HUB_PATH_MAX];
    rp_status st = rp_hub_fmt(snaps, sizeof(snaps), "%s/snapshots", repo_dir) ? rm_tree(snaps) : RP_OK;
    return st ? st : collect(repo_dir, freed);
}
