/*
 * files.c - which of a repo's files make a model, the same choice for the files on
 * disk (a snapshot) and the file list the hub sends (a pull).
 *
 * A folder model: config.json, generation_config.json, the tokenizer files
 * (tokenizer.json, tokenizer_config.json, special_tokens_map.json, tokenizer.model,
 * vocab.json, merges.txt), chat_template.jinja/.json and every top-level *.safetensors
 * with model.safetensors.index.json. Never *.bin, *.pth, *.pt or subfolders
 * (meta-llama's original/ holds the .pth checkpoint): Rapid loads safetensors.
 *
 * A GGUF model (as llama-server's -hf and Ollama's hf.co/ pick): the .gguf files that
 * are not mmproj (the vision projector); with a quant, those whose name holds it as a
 * word (Q4_K does not match Q4_K_M), case ignored; the default quant Q4_K_M, then Q4_0, Q8_0, then the first file.
 * Shards of one file are one candidate, complete only when every index is listed.
 * Among candidates, top-level files come before ones in subfolders, then by name.
 */
#include "hub.h"
#include "hub_int.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/stat.h>

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), t = strlen(tail);
    return n >= t && !strcasecmp(s + n - t, tail);
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

bool rp_hub_gguf_shard(const char *name, int *index, int *count)
{
    // "...-00001-of-00003.gguf"
    size_t n = strlen(name);
    if (n < 20 || !ends_with(name, ".gguf"))
        return false;
    const char *p = name + n - 5 - 15; // "-00001-of-00003"
    if (p[0] != '-' || strncmp(p + 6, "-of-", 4))
        return false;
    int a = 0, b = 0;
    for (int i = 1; i <= 5; i++) {
        if (p[i] < '0' || p[i] > '9' || p[i + 9] < '0' || p[i + 9] > '9')
            return false;
        a = a * 10 + (p[i] - '0');
        b = b * 10 + (p[i + 9] - '0');
    }
    if (a < 1 || b < 1 || a > b)
        return false;
    *index = a;
    *count = b;
    return true;
}

// True when the file's name holds quant as a word: after the start or one of "-_.", before the
// end or one of "-." ('_' is inside quant names: Q4_K is not Q4_K_M).
static bool has_quant(const char *path, const char *quant)
{
    const char *name = base_name(path);
    size_t q = strlen(quant), n = strlen(name);
    for (size_t i = 0; i + q <= n; i++) {
        if (strncasecmp(name + i, quant, q))
            continue;
        bool left = i == 0 || strchr("-_.", name[i - 1]);
        bool right = i + q == n || strchr("-.", name[i + q]);
        if (left && right)
            return true;
    }
    return false;
}

static bool is_gguf(const char *path)
{
    return ends_with(path, ".gguf") && strncasecmp(base_name(path), "mmproj", 6);
}

// The quant label of a GGUF file name, for messages: the last '-'/'.'-separated word
// before ".gguf" (shard suffix removed), e.g. "Q4_K_M".
static void quant_label(const char *path, char *out, size_t cap)
{
    char b[256];
    snprintf(b, sizeof(b), "%s", base_name(path));
    int i, c;
    size_t n = strlen(b);
    if (rp_hub_gguf_shard(b, &i, &c))
        b[n - 20] = 0;
    else if (n >= 5)
        b[n - 5] = 0;
    char *s = strrchr(b, '-');
    char *d = strrchr(b, '.');
    if (d > s)
        s = d;
    snprintf(out, cap, "%s", s ? s + 1 : b);
}

// Marks the candidate whose first file is files[first]: the file, or every shard with the
// same stem (the name up to "-0000K-of-"). False when a shard is missing.
static bool take(const char *const *files, size_t n, size_t first, bool *keep)
{
    int idx, count;
    if (!rp_hub_gguf_shard(files[first], &idx, &count)) {
        keep[first] = true;
        return true;
    }
    size_t stem = strlen(files[first]) - 20;
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        int ii, cc;
        if (strlen(files[i]) == stem + 20 && !strncmp(files[i], files[first], stem) &&
            rp_hub_gguf_shard(files[i], &ii, &cc) && cc == count) {
            keep[i] = true;
            found++;
        }
    }
    return found == count;
}

// Whether a is a better candidate than b (top level first, then name order).
static bool better(const char *a, const char *b)
{
    bool ta = !strchr(a, '/'), tb = !strchr(b, '/');
    if (ta != tb)
        return ta;
    return strcmp(a, b) < 0;
}

static long pick(const char *const *files, size_t n, const char *quant)
{
    long best = -1;
    for (size_t i = 0; i < n; i++) {
        int idx, count;
        if (!is_gguf(files[i]) || (quant && !has_quant(files[i], quant)))
            continue;
        if (rp_hub_gguf_shard(files[i], &idx, &count) && idx != 1)
            continue;
        if (best < 0 || better(files[i], files[best]))
            best = (long)i;
    }
    return best;
}

static rp_status select_gguf(const char *const *files, size_t n, const char *quant, bool *keep, long *main_file)
{
    long best = -1;
    if (quant && *quant) {
        best = pick(files, n, quant);
    } else {
        static const char *const defaults[] = {"Q4_K_M", "Q4_0", "Q8_0"};
        for (size_t d = 0; d < 3 && best < 0; d++)
            best = pick(files, n, defaults[d]);
        if (best < 0)
            best = pick(files, n, NULL);
    }
    if (best < 0) {
        char list[1024] = "";
        size_t used = 0;
        for (size_t i = 0; i < n && used < sizeof(list) - 80; i++) {
            int idx, count;
            if (!is_gguf(files[i]) || (rp_hub_gguf_shard(files[i], &idx, &count) && idx != 1))
                continue;
            char q[256];
            quant_label(files[i], q, sizeof(q));
            used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s", used ? ", " : "", q);
        }
        if (!used)
            return RP_ERR(RP_ERR_INVALID, "no GGUF file in the repo");
        return RP_ERR(RP_ERR_INVALID, "no GGUF file for quant %s; there are: %s", quant && *quant ? quant : "(default)",
                      list);
    }
    if (!take(files, n, (size_t)best, keep))
        return RP_ERR(RP_ERR_INVALID, "%s: a shard of it is missing", files[best]);
    *main_file = best;
    return RP_OK;
}

rp_status rp_hub_select_files(const char *const *files, size_t n, bool gguf, const char *quant, bool *keep,
                              long *main_file)
{
    memset(keep, 0, n * sizeof(*keep));
    *main_file = -1;
    bool any_st = false, any_gguf = false;
    for (size_t i = 0; i < n; i++) {
        any_st |= !strchr(files[i], '/') && ends_with(files[i], ".safetensors");
        any_gguf |= is_gguf(files[i]);
    }
    if (gguf || (quant && *quant) || (!any_st && any_gguf))
        return select_gguf(files, n, quant, keep, main_file);
    if (!any_st)
        return RP_ERR(RP_ERR_UNSUPPORTED,
                      "no safetensors and no GGUF file in the repo (Rapid loads those; *.bin / *.pth it does not)");
    static const char *const named[] = {"config.json",
                                        "generation_config.json",
                                        "tokenizer.json",
                                        "tokenizer_config.json",
                                        "special_tokens_map.json",
                                        "tokenizer.model",
                                        "vocab.json",
                                        "merges.txt",
                                        "chat_template.jinja",
                                        "chat_template.json",
                                        "model.safetensors.index.json"};
    bool config = false;
    for (size_t i = 0; i < n; i++) {
        if (strchr(files[i], '/'))
            continue;
        bool k = ends_with(files[i], ".safetensors");
        for (size_t j = 0; !k && j < sizeof(named) / sizeof(named[0]); j++)
            k = !strcmp(files[i], named[j]);
        keep[i] = k;
        config |= !strcmp(files[i], "config.json");
    }
    if (!config)
        return RP_ERR(RP_ERR_UNSUPPORTED, "the repo has safetensors but no config.json");
    return RP_OK;
}

/* ---- walking a folder ------------------------------------------------------ */

rp_status rp_hub_strv_add(rp_hub_strv *l, const char *str)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        char **v = rp_realloc(l->v, cap * sizeof(*v));
        if (!v)
            return RP_ERR(RP_ERR_NOMEM, "out of memory");
        l->v = v, l->cap = cap;
    }
    if (!(l->v[l->n] = rp_strdup(str)))
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    l->n++;
    return RP_OK;
}

bool rp_hub_strv_has(const rp_hub_strv *l, const char *str)
{
    for (size_t i = 0; i < l->n; i++)
        if (!strcmp(l->v[i], str))
            return true;
    return false;
}

void rp_hub_strv_free(rp_hub_strv *l)
{
    rp_hub_free_list(l->v, l->n);
    memset(l, 0, sizeof(*l));
}

rp_status rp_hub_read_line(const char *path, char *buf, size_t cap)
{
    char *text;
    size_t len;
    rp_status st = rp_file_read(path, &text, &len);
    if (st == RP_ERR_NOMEM)
        return st;
    if (st) {
        rp_error_clear();
        return RP_ERR_IO;
    }
    while (len && strchr(" \t\r\n", text[len - 1]))
        text[--len] = 0;
    bool ok = len && rp_hub_fmt(buf, cap, "%s", text);
    rp_free(text);
    return ok ? RP_OK : RP_ERR_IO;
}

void rp_hub_format_bytes(double b, char *out, size_t cap)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024 && i < 4)
        b /= 1024, i++;
    snprintf(out, cap, i ? "%.1f %s" : "%.0f %s", b, unit[i]);
}

static rp_status walk_dir(rp_hub_strv *w, const char *root, const char *rel, int depth)
{
    char dir[RP_HUB_PATH_MAX];
    if (!rp_hub_fmt(dir, sizeof(dir), "%s%s%s", root, *rel ? "/" : "", rel))
        return RP_ERR(RP_ERR_INVALID, "path too long under %s", root);
    DIR *d = opendir(dir);
    if (!d)
        return RP_ERR(RP_ERR_IO, "%s: %s", dir, strerror(errno));
    rp_status st = RP_OK;
    struct dirent *e;
    while (!st && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char sub[RP_HUB_PATH_MAX], full[RP_HUB_PATH_MAX];
        if (!rp_hub_fmt(sub, sizeof(sub), "%s%s%s", rel, *rel ? "/" : "", e->d_name) ||
            !rp_hub_fmt(full, sizeof(full), "%s/%s", root, sub))
            continue;
        struct stat sb;
        if (stat(full, &sb)) // a dangling link: its blob is gone, the file is not there
            continue;
        if (S_ISDIR(sb.st_mode)) {
            if (depth < 4)
                st = walk_dir(w, root, sub, depth + 1);
        } else if (S_ISREG(sb.st_mode)) {
            st = rp_hub_strv_add(w, sub);
        }
    }
    closedir(d);
    return st;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

rp_status rp_hub_walk(const char *dir, char ***out, size_t *n)
{
    rp_hub_strv w = {0};
    rp_status st = walk_dir(&w, dir, "", 0);
    if (st) {
        rp_hub_strv_free(&w);
        return st;
    }
    if (w.n)
        qsort(w.v, w.n, sizeof(*w.v), cmp_str);
    *out = w.v;
    *n = w.n;
    return RP_OK;
}

void rp_hub_free_list(char **list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        rp_free(list[i]);
    rp_free(list);
}
