/*
 * gguf.c - the GGUF reader.
 *
 * Layout of a GGUF v2/v3 file (little-endian):
 *   magic "GGUF", u32 version, u64 n_tensors, u64 n_kv,
 *   n_kv x (string key, u32 type, value), where a string is u64 length + bytes
 *   and an array is u32 element type + u64 count + elements,
 *   n_tensors x (string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset),
 *   padding to general.alignment (default 32), then tensor data; each tensor's
 *   offset is relative to the data start and a multiple of the alignment.
 *
 * The parser reads through a bounds-checked cursor, so no field can make it read
 * past the mapping; every failure names the file, the field and the offset.
 * Arrays of entries grow as entries are parsed (memory follows the bytes read,
 * never a count field), and keys and tensor names go into hash indexes, so a
 * hostile header can neither exhaust memory nor make duplicate detection or
 * lookups quadratic.
 */
#include "gguf.h"

#include <stdio.h>

#define MAX_KEY_LEN 65535
#define MAX_ELEMS ((uint64_t)1 << 40)


typedef struct kv {
    const char *key; // NUL-terminated copy
    rp_gguf_type type;
    rp_gguf_type elem_type; // arrays
    uint64_t n;             // arrays: element count
    const uint8_t *val;     // value bytes in the mapping (array: first element)
    const uint8_t **strs;   // string arrays: pointer to each element's length field
} kv;

struct rp_gguf {
    char *path;
    rp_mapping map;
    bool owns_map; // false for rp_gguf_open_memory
    rp_name_index key_ix, tensor_ix;
    uint32_t version;
    int64_t n_kv;
    kv *kvs;
    int64_t n_tensors;
    rp_gguf_tensor *tensors;
    char **tensor_names;
    size_t alignment;
};

// Returns p grown to hold `need` elements of `elem` bytes (capacity *cap, doubled
// as needed), or NULL on OOM with p untouched. Arrays grow as entries are parsed,
// so memory follows the bytes actually read, never a count field that a corrupt
// file can set to anything.
static void *grow(void *p, int64_t *cap, size_t elem, int64_t need)
{
    if (need <= *cap)
        return p;
    int64_t nc = *cap ? *cap * 2 : 64;
    void *q = rp_realloc(p, (size_t)nc * elem);
    if (q)
        *cap = nc;
    return q;
}

typedef struct cursor {
    const uint8_t *p, *end, *base;
    const char *path;
} cursor;

static rp_status bad(const cursor *c, const char *what)
{
    return RP_ERR(RP_ERR_INVALID, "%s: corrupt GGUF file: %s at byte %zu", c->path, what, (size_t)(c->p - c->base));
}

static bool take(cursor *c, size_t n, const uint8_t **out)
{
    if ((size_t)(c->end - c->p) < n)
        return false;
    *out = c->p;
    c->p += n;
    return true;
}

static bool rd_u32(cursor *c, uint32_t *v)
{
    const uint8_t *p;
    if (!take(c, 4, &p))
        return false;
    memcpy(v, p, 4);
    return true;
}

static bool rd_u64(cursor *c, uint64_t *v)
{
    const uint8_t *p;
    if (!take(c, 8, &p))
        return false;
    memcpy(v, p, 8);
    return true;
}

// A string: returns the bytes (not NUL-terminated) and length.
static bool rd_str(cursor *c, const uint8_t **s, uint64_t *len)
{
    if (!rd_u64(c, len))
        return false;
    if (*len > (uint64_t)(c->end - c->p))
        return false;
    return take(c, (size_t)*len, s);
}

static size_t scalar_size(rp_gguf_type t)
{
    switch (t) {
    case RP_GGUF_UINT8:
    case RP_GGUF_INT8:
    case RP_GGUF_BOOL: return 1;
    case RP_GGUF_UINT16:
    case RP_GGUF_INT16: return 2;
    case RP_GGUF_UINT32:
    case RP_GGUF_INT32:
    case RP_GGUF_FLOAT32: return 4;
    case RP_GGUF_UINT64:
    case RP_GGUF_INT64:
    case RP_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

static rp_status parse_kv(cursor *c, kv *e)
{
    const uint8_t *key;
    uint64_t klen;
    uint32_t type;
    if (!rd_str(c, &key, &klen))
        return bad(c, "truncated metadata key");
    if (klen == 0 || klen > MAX_KEY_LEN)
        return bad(c, "metadata key of invalid length");
    e->key = rp_strndup((const char *)key, (size_t)klen);
    if (!e->key)
        return RP_ERR(RP_ERR_NOMEM, "%s: out of memory", c->path);
    if (!rd_u32(c, &type))
        return bad(c, "truncated metadata type");
    e->type = (rp_gguf_type)type;
    if (type == RP_GGUF_STRING) {
        const uint8_t *s;
        uint64_t n;
        e->val = c->p;
        if (!rd_str(c, &s, &n))
            return bad(c, "truncated string value");
        return RP_OK;
    }
    if (type == RP_GGUF_ARRAY) {
        uint32_t et;
        if (!rd_u32(c, &et) || !rd_u64(c, &e->n))
            return bad(c, "truncated array header");
        e->elem_type = (rp_gguf_type)et;
        if (e->n > MAX_ELEMS)
            return bad(c, "array too long");
        e->val = c->p;
        if (et == RP_GGUF_STRING) {
            // Each string needs at least its 8-byte length: bound n before allocating.
            if (e->n > (uint64_t)(c->end - c->p) / 8)
                return bad(c, "truncated string array");
            int64_t cap = 0;
            for (uint64_t i = 0; i < e->n; i++) {
                const uint8_t *s;
                uint64_t n;
                const uint8_t **strs = grow(e->strs, &cap, sizeof(*e->strs), (int64_t)i + 1);
                if (!strs)
                    return RP_ERR(RP_ERR_NOMEM, "%s: out of memory", c->path);
                e->strs = strs;
                e->strs[i] = c->p;
                if (!rd_str(c, &s, &n))
                    return bad(c, "truncated string in array");
            }
            return RP_OK;
        }
        size_t es = scalar_size(e->elem_type);
        if (es == 0)
            return bad(c, "unsupported array element type");
        size_t total;
        const uint8_t *p;
        if (!rp_mul_size((size_t)e->n, es, &total) || !take(c, total, &p))
            return bad(c, "truncated array");
        return RP_OK;
    }
    size_t sz = scalar_size(e->type);
    if (sz == 0)
        return bad(c, "unknown metadata value type");
    e->val = c->p;
    const uint8_t *p;
    if (!take(c, sz, &p))
        return bad(c, "truncated metadata value");
    return RP_OK;
}

static const kv *find(const rp_gguf *g, const char *key)
{
    int64_t i = rp_gguf_find_key(g, key);
    return i < 0 ? NULL : &g->kvs[i];
}

static bool read_int(rp_gguf_type t, const uint8_t *p, int64_t *out)
{
    switch (t) {
    case RP_GGUF_UINT8: *out = *p; return true;
    case RP_GGUF_INT8: *out = (int8_t)*p; return true;
    case RP_GGUF_BOOL: *out = *p != 0; return true;
    case RP_GGUF_UINT16: { uint16_t v; memcpy(&v, p, 2); *out = v; return true; }
    case RP_GGUF_INT16: { int16_t v; memcpy(&v, p, 2); *out = v; return true; }
    case RP_GGUF_UINT32: { uint32_t v; memcpy(&v, p, 4); *out = v; return true; }
    case RP_GGUF_INT32: { int32_t v; memcpy(&v, p, 4); *out = v; return true; }
    case RP_GGUF_UINT64: {
        uint64_t v;
        memcpy(&v, p, 8);
        if (v > INT64_MAX)
            return false;
        *out = (int64_t)v;
        return true;
    }
    case RP_GGUF_INT64: { int64_t v; memcpy(&v, p, 8); *out = v; return true; }
    default: return false;
    }
}

static bool read_float(rp_gguf_type t, const uint8_t *p, double *out)
{
    if (t == RP_GGUF_FLOAT32) {
        float v;
        memcpy(&v, p, 4);
        *out = v;
        return true;
    }
    if (t == RP_GGUF_FLOAT64) {
        memcpy(out, p, 8);
        return true;
    }
    int64_t i;
    if (t != RP_GGUF_BOOL && read_int(t, p, &i)) {
        *out = (double)i;
        return true;
    }
    return false;
}

static rp_status parse_tensor(cursor *c, rp_gguf *g, int64_t idx)
{
    rp_gguf_tensor *t = &g->tensors[idx];
    const uint8_t *name;
    uint64_t nlen, off;
    uint32_t n_dims, type;
    if (!rd_str(c, &name, &nlen))
        return bad(c, "truncated tensor name");
    if (nlen == 0 || nlen > MAX_KEY_LEN)
        return bad(c, "tensor name of invalid length");
    g->tensor_names[idx] = rp_strndup((const char *)name, (size_t)nlen);
    if (!g->tensor_names[idx])
        return RP_ERR(RP_ERR_NOMEM, "%s: out of memory", c->path);
    t->name = g->tensor_names[idx];
    if (!rd_u32(c, &n_dims))
        return bad(c, "truncated tensor info");
    if (n_dims == 0 || n_dims > RP_GGUF_MAX_DIMS)
        return RP_ERR(RP_ERR_INVALID, "%s: tensor '%s' has %u dimensions (1 to %d allowed)", c->path, t->name, n_dims,
                      RP_GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;
    size_t n_elems = 1;
    for (int d = 0; d < RP_GGUF_MAX_DIMS; d++) {
        uint64_t ne = 1;
        if (d < (int)n_dims && !rd_u64(c, &ne))
            return bad(c, "truncated tensor shape");
        if (ne == 0 || ne > ((uint64_t)1 << 40))
            return RP_ERR(RP_ERR_INVALID, "%s: tensor '%s' has invalid dimension %d (%llu)", c->path, t->name, d,
                          (unsigned long long)ne);
        if (!rp_mul_size(n_elems, (size_t)ne, &n_elems))
            return RP_ERR(RP_ERR_INVALID, "%s: tensor '%s': element count overflows", c->path, t->name);
        t->ne[d] = (int64_t)ne;
    }
    if (!rd_u32(c, &type) || !rd_u64(c, &off))
        return bad(c, "truncated tensor info");
    if (!rp_dtype_valid((int)type) || type == RP_DTYPE_Q8_K)
        return RP_ERR(RP_ERR_UNSUPPORTED, "%s: tensor '%s' has type %u, which Rapid does not support", c->path,
                      t->name, type);
    t->type = (rp_dtype)type;
    size_t row;
    if (!rp_dtype_row_bytes(t->type, t->ne[0], &row))
        return RP_ERR(RP_ERR_INVALID, "%s: tensor '%s': row of %lld elements is not a whole number of %s blocks",
                      c->path, t->name, (long long)t->ne[0], rp_dtype_name(t->type));
    if (!rp_mul_size(row, n_elems / (size_t)t->ne[0], &t->size))
        return RP_ERR(RP_ERR_INVALID, "%s: tensor '%s' is too large", c->path, t->name);
    t->data = (const void *)(uintptr_t)off; // resolved after the header
    return RP_OK;
}

// Parses and validates g->map (set by the caller); g->path names it in messages.
static rp_status parse(rp_gguf *g)
{
    static const uint8_t empty[1];
    const char *path = g->path;
    rp_status st;
    const uint8_t *base = g->map.data ? g->map.data : empty; // an empty file maps to NULL
    cursor c = {base, base + g->map.size, base, path};
    const uint8_t *magic;
    uint64_t n_tensors, n_kv;
    if (!take(&c, 4, &magic) || memcmp(magic, "GGUF", 4) != 0)
        return RP_ERR(RP_ERR_INVALID, "%s: not a GGUF file (bad magic)", path);
    if (!rd_u32(&c, &g->version))
        return bad(&c, "truncated header");
    if (g->version != 2 && g->version != 3) {
        if ((g->version & 0xffff) == 0 && g->version >> 16)
            return RP_ERR(RP_ERR_UNSUPPORTED, "%s: big-endian GGUF files are not supported", path);
        return RP_ERR(RP_ERR_UNSUPPORTED, "%s: GGUF version %u is not supported (2 and 3 are)", path, g->version);
    }
    if (!rd_u64(&c, &n_tensors) || !rd_u64(&c, &n_kv))
        return bad(&c, "truncated header");
    // Every kv needs >= 14 bytes and every tensor info >= 33: a cheap early check.
    if (n_kv > g->map.size / 14 || n_tensors > g->map.size / 33)
        return bad(&c, "metadata or tensor count larger than the file");
    // n_kv/n_tensors count entries as they are parsed, so rp_gguf_close frees what a failed parse allocated.
    int64_t cap_kv = 0, cap_t = 0, cap_n = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        kv *kvs = grow(g->kvs, &cap_kv, sizeof(kv), (int64_t)i + 1);
        if (!kvs)
            return RP_ERR(RP_ERR_NOMEM, "%s: out of memory", path);
        g->kvs = kvs;
        memset(&g->kvs[i], 0, sizeof(kv));
        g->n_kv = (int64_t)i + 1;
        if ((st = parse_kv(&c, &g->kvs[i])))
            return st;
    }
    if (!rp_name_index_init(&g->key_ix, g->n_kv))
        return RP_ERR(RP_ERR_NOMEM, "%s: out of memory", path);
    for (int64_t i = 0; i < g->n_kv; i++)
        if (rp_name_index_put(&g->key_ix, g->kvs[i].key, i) >= 0)
            return RP_ERR(RP_ERR_INVALID, "%s: duplicate metadata key '%s'", path, g->kvs[i].key);
    g->alignment = 32;
    const kv *al = find(g, "general.alignment");
    if (al) {
        int64_t a;
        if (al->type == RP_GGUF_BOOL || !read_int(al->type, al->val, &a) || a <= 0 || (a & (a - 1)) || a > 65536)
            return RP_ERR(RP_ERR_INVALID, "%s: general.alignment is not a power of two up to 65536", path);
        g->alignment = (size_t)a;
    }
    for (uint64_t i = 0; i < n_tensors; i++) {
        rp_gguf_tensor *ts = grow(g->tensors, &cap_t, sizeof(rp_gguf_tensor), (int64_t)i + 1);
        if (ts)
            g->tensors = ts;
        char **names = ts ? grow(g->tensor_names, &cap_n, sizeof(char *), (int64_t)i + 1) : NULL;
        if (!names)
            return RP_ERR(RP_ERR_NOMEM, "%s: out of memory", path);
        g->tensor_names = names;
        memset(&g->tensors[i], 0, sizeof(rp_gguf_tensor));
        g->tensor_names[i] = NULL;
        g->n_tensors = (int64_t)i + 1;
        if ((st = parse_tensor(&c, g, (int64_t)i)))
            return st;
    }
    if (!rp_name_index_init(&g->tensor_ix, g->n_tensors))
        return RP_ERR(RP_ERR_NOMEM, "%s: out of memory", path);
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (rp_name_index_put(&g->tensor_ix, g->tensors[i].name, i) >= 0)
            return RP_ERR(RP_ERR_INVALID, "%s: duplicate tensor '%s'", path, g->tensors[i].name);
    size_t hdr = (size_t)(c.p - c.base);
    size_t data_start = (hdr + g->alignment - 1) / g->alignment * g->alignment;
    if (g->n_tensors > 0 && data_start > g->map.size)
        return RP_ERR(RP_ERR_INVALID, "%s: truncated: no tensor data after the header", path);
    for (int64_t i = 0; i < g->n_tensors; i++) {
        rp_gguf_tensor *t = &g->tensors[i];
        uintptr_t off = (uintptr_t)t->data;
        size_t end;
        if (off % g->alignment != 0)
            return RP_ERR(RP_ERR_INVALID, "%s: tensor '%s' offset %zu is not aligned to %zu", path, t->name,
                          (size_t)off, g->alignment);
        if (!rp_add_size(data_start, off, &end) || !rp_add_size(end, t->size, &end) || end > g->map.size)
            return RP_ERR(RP_ERR_INVALID,
                          "%s: truncated: tensor '%s' (%zu bytes at data offset %zu, data starting at byte %zu) ends "
                          "past the end of the file (%zu bytes)",
                          path, t->name, t->size, (size_t)off, data_start, g->map.size);
        t->data = base + data_start + off;
    }
    return RP_OK;
}

static rp_status open_common(const char *path, const void *data, size_t size, rp_gguf **out)
{
    *out = NULL;
    rp_gguf *g = rp_calloc(1, sizeof(*g));
    if (!g || !(g->path = rp_strdup(path))) {
        rp_free(g);
        return RP_ERR(RP_ERR_NOMEM, "%s: out of memory", path);
    }
    rp_status st;
    if (data) {
        g->map.data = data;
        g->map.size = size;
    } else {
        if ((st = rp_file_map(path, &g->map)))
            goto fail;
        g->owns_map = true;
    }
    if ((st = parse(g)))
        goto fail;
    *out = g;
    return RP_OK;
fail:
    rp_gguf_close(g);
    return st;
}

rp_status rp_gguf_open(const char *path, rp_gguf **out)
{
    return open_common(path, NULL, 0, out);
}

rp_status rp_gguf_open_memory(const void *data, size_t size, const char *name, rp_gguf **out)
{
    static const uint8_t empty[1];
    return open_common(name, size ? data : empty, size, out);
}

void rp_gguf_close(rp_gguf *g)
{
    if (!g)
        return;
    if (g->kvs)
        for (int64_t i = 0; i < g->n_kv; i++) {
            rp_free((void *)g->kvs[i].key);
            rp_free(g->kvs[i].strs);
        }
    if (g->tensor_names)
        for (int64_t i = 0; i < g->n_tensors; i++)
            rp_free(g->tensor_names[i]);
    rp_free(g->kvs);
    rp_free(g->tensors);
    rp_free(g->tensor_names);
    rp_name_index_deinit(&g->key_ix);
    rp_name_index_deinit(&g->tensor_ix);
    if (g->owns_map)
        rp_file_unmap(&g->map);
    rp_free(g->path);
    rp_free(g);
}

const char *rp_gguf_path(const rp_gguf *g)
{
    return g->path;
}

uint32_t rp_gguf_version(const rp_gguf *g)
{
    return g->version;
}

int64_t rp_gguf_n_keys(const rp_gguf *g)
{
    return g->n_kv;
}

const char *rp_gguf_key_name(const rp_gguf *g, int64_t i)
{
    return g->kvs[i].key;
}

int64_t rp_gguf_find_key(const rp_gguf *g, const char *key)
{
    return rp_name_index_get(&g->key_ix, key);
}

rp_gguf_type rp_gguf_key_type(const rp_gguf *g, int64_t i)
{
    return g->kvs[i].type;
}

bool rp_gguf_get_int(const rp_gguf *g, const char *key, int64_t *out)
{
    const kv *e = find(g, key);
    return e && e->type != RP_GGUF_BOOL && read_int(e->type, e->val, out);
}

bool rp_gguf_get_float(const rp_gguf *g, const char *key, double *out)
{
    const kv *e = find(g, key);
    return e && read_float(e->type, e->val, out);
}

bool rp_gguf_get_bool(const rp_gguf *g, const char *key, bool *out)
{
    const kv *e = find(g, key);
    if (!e || e->type != RP_GGUF_BOOL)
        return false;
    *out = *e->val != 0;
    return true;
}

static const char *str_at(const uint8_t *p, size_t *len)
{
    uint64_t n;
    memcpy(&n, p, 8);
    if (len)
        *len = (size_t)n;
    return (const char *)p + 8;
}

const char *rp_gguf_get_str(const rp_gguf *g, const char *key, size_t *len)
{
    const kv *e = find(g, key);
    if (!e || e->type != RP_GGUF_STRING)
        return NULL;
    return str_at(e->val, len);
}

bool rp_gguf_get_arr(const rp_gguf *g, const char *key, rp_gguf_type *elem_type, uint64_t *n)
{
    const kv *e = find(g, key);
    if (!e || e->type != RP_GGUF_ARRAY)
        return false;
    if (elem_type)
        *elem_type = e->elem_type;
    if (n)
        *n = e->n;
    return true;
}

const char *rp_gguf_arr_str(const rp_gguf *g, const char *key, uint64_t i, size_t *len)
{
    const kv *e = find(g, key);
    if (!e || e->type != RP_GGUF_ARRAY || e->elem_type != RP_GGUF_STRING || i >= e->n)
        return NULL;
    return str_at(e->strs[i], len);
}

int64_t rp_gguf_arr_int(const rp_gguf *g, const char *key, uint64_t i)
{
    const kv *e = find(g, key);
    int64_t v = 0;
    if (e && e->type == RP_GGUF_ARRAY && i < e->n && scalar_size(e->elem_type))
        read_int(e->elem_type, e->val + i * scalar_size(e->elem_type), &v);
    return v;
}

double rp_gguf_arr_float(const rp_gguf *g, const char *key, uint64_t i)
{
    const kv *e = find(g, key);
    double v = 0;
    if (e && e->type == RP_GGUF_ARRAY && i < e->n && scalar_size(e->elem_type))
        read_float(e->elem_type, e->val + i * scalar_size(e->elem_type), &v);
    return v;
}

int64_t rp_gguf_n_tensors(const rp_gguf *g)
{
    return g->n_tensors;
}

const rp_gguf_tensor *rp_gguf_tensor_at(const rp_gguf *g, int64_t i)
{
    return (i >= 0 && i < g->n_tensors) ? &g->tensors[i] : NULL;
}

const rp_gguf_tensor *rp_gguf_find_tensor(const rp_gguf *g, const char *name)
{
    int64_t i = rp_name_index_get(&g->tensor_ix, name);
    return i < 0 ? NULL : &g->tensors[i];
}
