/*
 * safetensors.c - the safetensors reader, the model-folder set and a writer.
 *
 * Opening a file maps it, checks the header length (file size, 100 MB cap),
 * parses the JSON header with jansson (duplicate names rejected, nesting depth
 * bounded by jansson) and turns every entry into an rp_st_tensor after checking
 * dtype, shape and offsets against the data area. A set is an array of shards
 * (mappings) plus one array of tensors and one hash index over their names, so
 * rp_st_find is O(1) and a name in two shards is caught at open. See
 * safetensors.h for the dtype policy (unsupported dtypes are listed, and refused
 * only when asked for).
 */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <jansson.h>

#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"

typedef struct dtype_desc {
    const char *name;
    int bits; // element width
    int type; // rp_dtype, or -1 when Rapid does not compute with it
} dtype_desc;

// The safetensors format's dtypes (safetensors 0.6).
static const dtype_desc dtypes[] = {
    {"F32", 32, RP_DTYPE_F32},
    {"F16", 16, RP_DTYPE_F16},
    {"BF16", 16, RP_DTYPE_BF16},
    {"F64", 64, -1},
    {"I64", 64, -1},
    {"U64", 64, -1},
    {"I32", 32, -1},
    {"U32", 32, -1},
    {"I16", 16, -1},
    {"U16", 16, -1},
    {"I8", 8, -1},
    {"U8", 8, -1},
    {"BOOL", 8, -1},
    {"F8_E4M3", 8, -1},
    {"F8_E5M2", 8, -1},
    {"F8_E8M0", 8, -1},
    {"F6_E2M3", 6, -1},
    {"F6_E3M2", 6, -1},
    {"F4", 4, -1},
};

static const dtype_desc *find_dtype(const char *name)
{
    for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++)
        if (strcmp(dtypes[i].name, name) == 0)
            return &dtypes[i];
    return NULL;
}

static const char *dtype_name_of(rp_dtype t)
{
    switch (t) {
    case RP_DTYPE_F32:
        return "F32";
    case RP_DTYPE_F16:
        return "F16";
    case RP_DTYPE_BF16:
        return "BF16";
    default:
        return NULL;
    }
}

/* ---- name index: open addressing from a name to an index ---- */


/* ---- the set ---- */

typedef struct shard {
    char *path;
    rp_mapping map;
    bool owns_map; // false for rp_st_open_memory
} shard;

struct rp_st_set {
    char *path;    // folder or file opened
    shard *shards; // (n_shards)
    int n_shards;
    rp_st_tensor *tensors; // (n_tensors); name and dtype_name are owned heap strings
    int64_t n_tensors, cap_tensors;
    rp_name_index ix;
    char **meta; // (2 * n_meta) key, value, key, value, ...
    int64_t n_meta, cap_meta;
};

void rp_st_close(rp_st_set *s)
{
    if (!s)
        return;
    for (int64_t i = 0; i < s->n_tensors; i++) {
        rp_free((char *)s->tensors[i].name);
        rp_free((char *)s->tensors[i].dtype_name);
    }
    rp_free(s->tensors);
    for (int64_t i = 0; i < 2 * s->n_meta; i++)
        rp_free(s->meta[i]);
    rp_free(s->meta);
    rp_name_index_deinit(&s->ix);
    for (int i = 0; i < s->n_shards; i++) {
        if (s->shards[i].owns_map)
            rp_file_unmap(&s->shards[i].map);
        rp_free(s->shards[i].path);
    }
    rp_free(s->shards);
    rp_free(s->path);
    rp_free(s);
}

static rp_status set_new(const char *path, int n_shards, rp_st_set **out)
{
    rp_st_set *s = rp_calloc(1, sizeof(*s));
    if (s && (s->path = rp_strdup(path)) && (s->shards = rp_calloc((size_t)n_shards, sizeof(shard)))) {
        *out = s;
        return RP_OK;
    }
    rp_st_close(s);
    return RP_ERR(RP_ERR_NOMEM, "%s: out of memory", path);
}

static void fmt_shape(char *buf, size_t cap, const int64_t *shape, int n_dims)
{
    size_t at = 0;
    at += (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < n_dims && at < cap; d++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (at < cap)
        snprintf(buf + at, cap - at, "]");
}

static rp_status parse_meta(rp_st_set *s, const char *path, json_t *m)
{
    if (!json_is_object(m))
        return RP_ERR(RP_ERR_INVALID, "%s: __metadata__ is not a JSON object", path);
    const char *key;
    json_t *val;
    json_object_foreach(m, key, val)
    {
        if (!json_is_string(val))
            return RP_ERR(RP_ERR_INVALID, "%s: __metadata__ value of '%s' is not a string", path, key);
        if (s->n_meta == s->cap_meta) {
            int64_t cap = s->cap_meta ? s->cap_meta * 2 : 8;
            char **p = rp_realloc(s->meta, (size_t)cap * 2 * sizeof(char *));
            if (!p)
                return RP_ERR(RP_ERR_NOMEM, "%s: out of memory", path);
            s->meta = p;
            s->cap_meta = cap;
        }
        char *k = rp_strdup(key), *v = rp_strdup(json_string_value(val));
        if (!k || !v) {
            rp_free(k);
            rp_free(v);
            return RP_ERR(RP_ERR_NOMEM, "%s: out of memory", path);
        }
        s->meta[2 * s->n_meta] = k;
        s->meta[2 * s->n_meta + 1] = v;
        s->n_meta++;
    }
    return RP_OK;
}

// A JSON integer in [0, INT64_MAX].
static bool get_count(json_t *x, int64_t *out)
{
    if (!json_is_integer(x) || json_integer_value(x) < 0)
        return false;
    *out = (int64_t)json_integer_value(x);
    return true;
}

static rp_status parse_entry(rp_st_set *s, const shard *sh, const char *name, json_t *e, const uint8_t *data,
                             size_t data_len)
{
    const char *path = sh->path;
    if (!*name)
        return RP_ERR(RP_ERR_INVALID, "%s: a tensor has an empty name", path);
    if (!json_is_object(e))
        return RP_ERR(RP_ERR_INVALID, "%s: tensor '%s': entry is not a JSON object", path, name);
    json_t *jd = json_object_get(e, "dtype"), *js = json_object_get(e, "shape"),
           *jo = json_object_get(e, "data_offsets");
    if (!json_is_string(jd))
        return RP_ERR(RP_ERR_INVALID, "%s: tensor '%s': dtype is missing or not a string", path, name);
    if (!json_is_array(js))
        return RP_ERR(RP_ERR_INVALID, "%s: tensor '%s': shape is missing or not an array", path, name);
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return RP_ERR(RP_ERR_INVALID, "%s: tensor '%s': data_offsets is missing or not [begin, end]", path, name);
    rp_st_tensor t = {.file = path};
    size_t nd = json_array_size(js);
    if (nd > RP_ST_MAX_DIMS)
        return RP_ERR(RP_ERR_UNSUPPORTED, "%s: tensor '%s' has %zu dimensions (at most %d are supported)", path, name,
                      nd, RP_ST_MAX_DIMS);
    t.n_dims = (int)nd;
    uint64_t n_elems = 1;
    for (int d = 0; d < RP_ST_MAX_DIMS; d++) {
        t.shape[d] = 1;
        if (d >= t.n_dims)
            continue;
        if (!get_count(json_array_get(js, (size_t)d), &t.shape[d]))
            return RP_ERR(RP_ERR_INVALID, "%s: tensor '%s': shape[%d] is not a non-negative integer", path, name, d);
        if (__builtin_mul_overflow(n_elems, (uint64_t)t.shape[d], &n_elems) || n_elems > INT64_MAX)
            return RP_ERR(RP_ERR_INVALID, "%s: tensor '%s': shape overflows", path, name);
    }
    t.n_elems = (int64_t)n_elems;
    int64_t begin, end;
    if (!get_count(json_array_get(jo, 0), &begin) || !get_count(json_array_get(jo, 1), &end))
        return RP_ERR(RP_ERR_INVALID, "%s: tensor '%s': data_offsets are not non-negative integers", path, name);
    if (begin > end || (uint64_t)end > data_len)
        return RP_ERR(RP_ERR_INVALID,
                      "%s: tensor '%s': data_offsets [%lld, %lld] are reversed or outside the data area (%zu bytes)",
                      path, name, (long long)begin, (long long)end, data_len);
    t.size = (size_t)(end - begin);
    t.data = data + begin;
    const char *dtype = json_string_value(jd);
    const dtype_desc *dd = find_dtype(dtype);
    if (dd) {
        uint64_t bits;
        if (__builtin_mul_overflow(n_elems, (uint64_t)dd->bits, &bits) || bits % 8 != 0 || bits / 8 != t.size) {
            char shp[256];
            fmt_shape(shp, sizeof(shp), t.shape, t.n_dims);
            return RP_ERR(RP_ERR_INVALID, "%s: tensor '%s': %s %s does not match data_offsets [%lld, %lld] (%zu bytes)",
                          path, name, dtype, shp, (long long)begin, (long long)end, t.size);
        }
        t.supported = dd->type >= 0;
        t.type = t.supported ? (rp_dtype)dd->type : RP_DTYPE_F32;
    }
    if (s->n_tensors == s->cap_tensors) {
        int64_t cap = s->cap_tensors ? s->cap_tensors * 2 : 64;
        rp_st_tensor *p = rp_realloc(s->tensors, (size_t)cap * sizeof(*p));
        if (!p)
            return RP_ERR(RP_ERR_NOMEM, "%s: out of memory", path);
        s->tensors = p;
        s->cap_tensors = cap;
    }
    char *nm = rp_strdup(name), *dn = rp_strdup(dtype);
    if (!nm || !dn) {
        rp_free(nm);
        rp_free(dn);
        return RP_ERR(RP_ERR_NOMEM, "%s: out of memory", path);
    }
    t.name = nm;
    t.dtype_name = dn;
    s->tensors[s->n_tensors++] = t;
    return RP_OK;
}

static int cmp_tensor(const void *a, const void *b)
{
    const rp_st_tensor *x = a, *y = b;
    uintptr_t px = (uintptr_t)x->data, py = (uintptr_t)y->data;
    if (px != py)
        return px < py ? -1 : 1;
    return strcmp(x->name, y->name);
}

// Parses the mapped shard `sh`, appending its tensors and metadata to s.
static rp_status parse_shard(rp_st_set *s, const shard *sh)
{
    const char *path = sh->path;
    const uint8_t *base = sh->map.data;
    size_t size = sh->map.size;
    if (size < 8)
        return RP_ERR(RP_ERR_INVALID, "%s: not a safetensors file: %zu bytes, too short for the header length", path,
                      size);
    uint64_t n;
    memcpy(&n, base, 8);
    if (n < 2 || n > RP_ST_MAX_HEADER)
        return RP_ERR(RP_ERR_INVALID, "%s: not a safetensors file: header length %llu (2 to %llu allowed)", path,
                      (unsigned long long)n, (unsigned long long)RP_ST_MAX_HEADER);
    if (n > size - 8)
        return RP_ERR(RP_ERR_INVALID, "%s: truncated: header length %llu exceeds the %zu bytes after it", path,
                      (unsigned long long)n, size - 8);
    json_error_t je;
    json_t *root = json_loadb((const char *)base + 8, (size_t)n, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return RP_ERR(RP_ERR_INVALID, "%s: header is not valid JSON: %s (line %d, column %d)", path, je.text, je.line,
                      je.column);
    rp_status st = RP_OK;
    if (!json_is_object(root)) {
        st = RP_ERR(RP_ERR_INVALID, "%s: header is not a JSON object", path);
        goto done;
    }
    int64_t first = s->n_tensors;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        if (strcmp(key, "__metadata__") == 0)
            st = parse_meta(s, path, val);
        else
            st = parse_entry(s, sh, key, val, base + 8 + n, size - 8 - (size_t)n);
        if (st)
            goto done;
    }
    if (s->n_tensors > first)
        qsort(s->tensors + first, (size_t)(s->n_tensors - first), sizeof(rp_st_tensor), cmp_tensor);
done:
    json_decref(root);
    return st;
}

// Builds the name index; a duplicate is an error naming both files.
static rp_status build_index(rp_st_set *s)
{
    if (!rp_name_index_init(&s->ix, s->n_tensors))
        return RP_ERR(RP_ERR_NOMEM, "%s: out of memory", s->path);
    for (int64_t i = 0; i < s->n_tensors; i++) {
        int64_t j = rp_name_index_put(&s->ix, s->tensors[i].name, i);
        if (j >= 0)
            return RP_ERR(RP_ERR_INVALID, "%s: tensor '%s' is in both %s and %s", s->path, s->tensors[i].name,
                          s->tensors[j].file, s->tensors[i].file);
    }
    return RP_OK;
}

// One file (mapped from `path`, or `data` when not NULL) as a set named `name`.
static rp_status open_single(const char *name, const char *path, const void *data, size_t size, rp_st_set **out)
{
    *out = NULL;
    rp_st_set *s;
    rp_status st = set_new(name, 1, &s);
    if (st)
        return st;
    shard *sh = &s->shards[0];
    if (!(sh->path = rp_strdup(path))) {
        st = RP_ERR(RP_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    s->n_shards = 1;
    if (data) {
        sh->map.data = data;
        sh->map.size = size;
    } else {
        if ((st = rp_file_map(path, &sh->map)))
            goto fail;
        sh->owns_map = true;
    }
    if ((st = parse_shard(s, sh)) || (st = build_index(s)))
        goto fail;
    *out = s;
    return RP_OK;
fail:
    rp_st_close(s);
    return st;
}

rp_status rp_st_open_file(const char *path, rp_st_set **out)
{
    return open_single(path, path, NULL, 0, out);
}

rp_status rp_st_open_memory(const void *data, size_t size, const char *name, rp_st_set **out)
{
    static const uint8_t empty[1];
    return open_single(name, name, size ? data : empty, size, out);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

// A shard name from weight_map: a plain file name in the folder.
static bool plain_name(const char *f)
{
    return *f && !strchr(f, '/') && strcmp(f, ".") != 0 && strcmp(f, "..") != 0;
}

static rp_status open_index(const char *dir, const char *ipath, rp_st_set **out)
{
    *out = NULL;
    char *text = NULL;
    size_t len;
    json_t *root = NULL;
    const char **files = NULL;
    rp_name_index fx = {0};
    rp_st_set *s = NULL;
    rp_status st = rp_file_read(ipath, &text, &len);
    if (st)
        return st;
    json_error_t je;
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        st = RP_ERR(RP_ERR_INVALID, "%s: not valid JSON: %s (line %d, column %d)", ipath, je.text, je.line, je.column);
        goto done;
    }
    json_t *wm = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(wm)) {
        st = RP_ERR(RP_ERR_INVALID, "%s: weight_map is missing or not a JSON object", ipath);
        goto done;
    }
    size_t n_entries = json_object_size(wm);
    if (n_entries == 0) {
        st = RP_ERR(RP_ERR_INVALID, "%s: weight_map is empty", ipath);
        goto done;
    }
    // The distinct shard names, sorted so shards are opened and listed in name order.
    files = rp_malloc(n_entries * sizeof(*files));
    if (!files || !rp_name_index_init(&fx, (int64_t)n_entries)) {
        st = RP_ERR(RP_ERR_NOMEM, "%s: out of memory", ipath);
        goto done;
    }
    int n_files = 0;
    const char *key;
    json_t *val;
    json_object_foreach(wm, key, val)
    {
        if (!json_is_string(val) || !plain_name(json_string_value(val))) {
            st = RP_ERR(RP_ERR_INVALID, "%s: weight_map entry '%s' is not a file name in the folder", ipath, key);
            goto done;
        }
        if (rp_name_index_put(&fx, json_string_value(val), n_files) < 0)
            files[n_files++] = json_string_value(val);
    }
    qsort(files, (size_t)n_files, sizeof(*files), cmp_str);
    rp_name_index_deinit(&fx);
    if (!rp_name_index_init(&fx, n_files)) {
        st = RP_ERR(RP_ERR_NOMEM, "%s: out of memory", ipath);
        goto done;
    }
    for (int i = 0; i < n_files; i++)
        rp_name_index_put(&fx, files[i], i);
    if ((st = set_new(dir, n_files, &s)))
        goto done;
    for (int i = 0; i < n_files; i++) {
        shard *sh = &s->shards[i];
        if (!(sh->path = rp_path_join(dir, files[i]))) {
            st = RP_ERR(RP_ERR_NOMEM, "%s: out of memory", ipath);
            goto done;
        }
        s->n_shards = i + 1;
        if ((st = rp_file_map(sh->path, &sh->map))) {
            st = rp_error_prefix(st, "%s names a shard that cannot be opened", ipath);
            goto done;
        }
        sh->owns_map = true;
        if ((st = parse_shard(s, sh)))
            goto done;
    }
    if ((st = build_index(s)))
        goto done;
    json_object_foreach(wm, key, val)
    {
        const rp_st_tensor *t = rp_st_find(s, key);
        int64_t k = rp_name_index_get(&fx, json_string_value(val));
        if (!t || t->file != s->shards[k].path) {
            st = RP_ERR(RP_ERR_INVALID, "%s: weight_map puts tensor '%s' in %s, which does not contain it%s%s%s", ipath,
                        key, json_string_value(val), t ? " (it is in " : "", t ? t->file : "", t ? ")" : "");
            goto done;
        }
    }
    *out = s;
    s = NULL;
done:
    rp_st_close(s);
    rp_name_index_deinit(&fx);
    rp_free(files);
    json_decref(root);
    rp_free(text);
    return st;
}

rp_status rp_st_open_dir(const char *dir, rp_st_set **out)
{
    *out = NULL;
    if (!rp_dir_exists(dir))
        return RP_ERR(RP_ERR_IO, "%s: not a folder", dir);
    char *ipath = rp_path_join(dir, INDEX_NAME), *spath = rp_path_join(dir, SINGLE_NAME);
    rp_status st;
    if (!ipath || !spath)
        st = RP_ERR(RP_ERR_NOMEM, "%s: out of memory", dir);
    else if (rp_file_exists(ipath))
        st = open_index(dir, ipath, out);
    else if (rp_file_exists(spath))
        st = open_single(dir, spath, NULL, 0, out);
    else
        st = RP_ERR(RP_ERR_IO, "%s: no %s or %s in this folder", dir, SINGLE_NAME, INDEX_NAME);
    rp_free(ipath);
    rp_free(spath);
    return st;
}

int64_t rp_st_n_tensors(const rp_st_set *s)
{
    return s->n_tensors;
}

const rp_st_tensor *rp_st_tensor_at(const rp_st_set *s, int64_t i)
{
    return (i >= 0 && i < s->n_tensors) ? &s->tensors[i] : NULL;
}

const rp_st_tensor *rp_st_find(const rp_st_set *s, const char *name)
{
    int64_t i = rp_name_index_get(&s->ix, name);
    return i < 0 ? NULL : &s->tensors[i];
}

rp_status rp_st_get(const rp_st_set *s, const char *name, const rp_st_tensor **out)
{
    const rp_st_tensor *t = rp_st_find(s, name);
    *out = NULL;
    if (!t)
        return RP_ERR(RP_ERR_INVALID, "%s: no tensor '%s'", s->path, name);
    if (!t->supported)
        return RP_ERR(RP_ERR_UNSUPPORTED,
                      "%s: tensor '%s' has dtype %s, which Rapid does not support (F32, F16 and "
                      "BF16 are)",
                      t->file, name, t->dtype_name);
    *out = t;
    return RP_OK;
}

const char *rp_st_metadata(const rp_st_set *s, const char *key)
{
    for (int64_t i = 0; i < s->n_meta; i++)
        if (strcmp(s->meta[2 * i], key) == 0)
            return s->meta[2 * i + 1];
    return NULL;
}

const char *rp_st_path(const rp_st_set *s)
{
    return s->path;
}

/* ---- writer ---- */

// The JSON header for rp_st_write; NULL with the error recorded.
static json_t *build_header(const char *path, const rp_st_tensor *tensors, int64_t n, const char *const *metadata,
                            rp_status *st)
{
    json_t *root = json_object(), *meta = NULL;
    if (!root)
        goto oom;
    if (metadata) {
        if (!(meta = json_object()) || json_object_set_new(root, "__metadata__", meta))
            goto oom;
        for (size_t i = 0; metadata[i]; i += 2) {
            if (!metadata[i + 1]) {
                *st = RP_ERR(RP_ERR_INVALID, "%s: metadata key '%s' has no value", path, metadata[i]);
                goto fail;
            }
            if (json_object_set_new(meta, metadata[i], json_string(metadata[i + 1])))
                goto oom;
        }
    }
    uint64_t off = 0;
    for (int64_t i = 0; i < n; i++) {
        const rp_st_tensor *t = &tensors[i];
        const char *dtype = t->dtype_name ? t->dtype_name : dtype_name_of(t->type);
        if (!t->name || !*t->name || strcmp(t->name, "__metadata__") == 0 || json_object_get(root, t->name)) {
            *st = RP_ERR(RP_ERR_INVALID, "%s: tensor %lld: empty, reserved or duplicate name", path, (long long)i);
            goto fail;
        }
        if (!dtype || t->n_dims < 0 || t->n_dims > RP_ST_MAX_DIMS) {
            *st = RP_ERR(RP_ERR_INVALID, "%s: tensor '%s': no dtype or bad n_dims", path, t->name);
            goto fail;
        }
        json_t *shape = json_array(), *offs = json_array(), *e = json_object();
        if (!e || json_object_set_new(root, t->name, e)) {
            json_decref(shape);
            json_decref(offs);
            goto oom;
        }
        if (!shape || json_object_set_new(e, "dtype", json_string(dtype)) || json_object_set_new(e, "shape", shape)) {
            json_decref(offs);
            goto oom;
        }
        if (!offs || json_object_set_new(e, "data_offsets", offs))
            goto oom;
        uint64_t n_elems = 1;
        for (int d = 0; d < t->n_dims; d++) {
            if (t->shape[d] < 0 || __builtin_mul_overflow(n_elems, (uint64_t)t->shape[d], &n_elems)) {
                *st = RP_ERR(RP_ERR_INVALID, "%s: tensor '%s': bad shape", path, t->name);
                goto fail;
            }
            if (json_array_append_new(shape, json_integer(t->shape[d])))
                goto oom;
        }
        const dtype_desc *dd = find_dtype(dtype);
        uint64_t bits;
        if (dd && (__builtin_mul_overflow(n_elems, (uint64_t)dd->bits, &bits) || bits / 8 != t->size)) {
            *st = RP_ERR(RP_ERR_INVALID, "%s: tensor '%s': size %zu does not match its shape and dtype %s", path,
                         t->name, t->size, dtype);
            goto fail;
        }
        if (json_array_append_new(offs, json_integer((json_int_t)off)) ||
            json_array_append_new(offs, json_integer((json_int_t)(off + t->size))))
            goto oom;
        off += t->size;
    }
    return root;
oom:
    *st = RP_ERR(RP_ERR_NOMEM, "%s: cannot build the JSON header (out of memory, or a string that is not UTF-8)", path);
fail:
    json_decref(root);
    return NULL;
}

rp_status rp_st_write(const char *path, const rp_st_tensor *tensors, int64_t n, const char *const *metadata)
{
    rp_status st = RP_OK;
    json_t *root = build_header(path, tensors, n, metadata, &st);
    if (!root)
        return st;
    size_t len = json_dumpb(root, NULL, 0, JSON_COMPACT);
    size_t padded = (len + 7) / 8 * 8;
    char *hdr = rp_malloc(padded + 8);
    if (!len || !hdr) {
        st = RP_ERR(RP_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    uint64_t n64 = padded;
    memcpy(hdr, &n64, 8);
    json_dumpb(root, hdr + 8, len, JSON_COMPACT);
    memset(hdr + 8 + len, ' ', padded - len);
    rp_file_writer f;
    if ((st = rp_file_writer_open(&f, path)))
        goto done;
    rp_file_writer_write(&f, hdr, padded + 8);
    for (int64_t i = 0; i < n; i++)
        rp_file_writer_write(&f, tensors[i].data, tensors[i].size);
    st = rp_file_writer_commit(&f);
done:
    rp_free(hdr);
    json_decref(root);
    return st;
}
