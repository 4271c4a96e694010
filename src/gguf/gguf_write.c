/*
 * gguf_write.c - the GGUF writer (v3).
 *
 * The writer keeps every key/value already serialized (the bytes that follow the
 * type field in the file) and every tensor's data copied, so rp_gguf_writer_write
 * only lays them out: header, key/values, tensor infos with offsets rounded up to
 * the alignment, zero padding to the alignment, then each tensor's data padded to
 * the alignment. The file is written to "<path>.tmp.<pid>" and renamed over
 * <path>, so a reader never sees a half-written file.
 *
 * Values are written in host byte order; Rapid only runs on little-endian hosts,
 * which is GGUF's order.
 *
 * Threads: a writer belongs to one thread at a time.
 */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#define DEFAULT_ALIGNMENT 32

typedef struct wkv {
    char *key;
    rp_gguf_type type;
    uint8_t *val; // (len) serialized value: what follows the type field in the file
    size_t len;
} wkv;

typedef struct wtensor {
    char *name;
    rp_dtype type;
    int n_dims;
    int64_t ne[RP_GGUF_MAX_DIMS]; // ne[0] innermost; unused dims are 1
    uint8_t *data;                // (size) bytes
    size_t size;
} wtensor;

struct rp_gguf_writer {
    wkv *kvs;
    size_t n_kv, cap_kv;
    wtensor *tensors;
    size_t n_tensors, cap_tensors;
    size_t alignment;
};

// A growable byte buffer for serializing one value.
typedef struct bytes {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} bytes;

static void put(bytes *b, const void *src, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *p = rp_realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_u32(bytes *b, uint32_t v)
{
    put(b, &v, 4);
}

static void put_u64(bytes *b, uint64_t v)
{
    put(b, &v, 8);
}

static void put_str(bytes *b, const char *s)
{
    size_t n = strlen(s);
    put_u64(b, n);
    put(b, s, n);
}

static size_t scalar_size(rp_gguf_type t)
{
    switch (t) {
    case RP_GGUF_UINT8:
    case RP_GGUF_INT8:
    case RP_GGUF_BOOL:
        return 1;
    case RP_GGUF_UINT16:
    case RP_GGUF_INT16:
        return 2;
    case RP_GGUF_UINT32:
    case RP_GGUF_INT32:
    case RP_GGUF_FLOAT32:
        return 4;
    case RP_GGUF_UINT64:
    case RP_GGUF_INT64:
    case RP_GGUF_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

rp_status rp_gguf_writer_create(rp_gguf_writer **out)
{
    *out = rp_calloc(1, sizeof(**out));
    if (!*out)
        return RP_ERR(RP_ERR_NOMEM, "gguf writer: out of memory");
    (*out)->alignment = DEFAULT_ALIGNMENT;
    return RP_OK;
}

void rp_gguf_writer_destroy(rp_gguf_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n_kv; i++) {
        rp_free(w->kvs[i].key);
        rp_free(w->kvs[i].val);
    }
    for (size_t i = 0; i < w->n_tensors; i++) {
        rp_free(w->tensors[i].name);
        rp_free(w->tensors[i].data);
    }
    rp_free(w->kvs);
    rp_free(w->tensors);
    rp_free(w);
}

// Takes ownership of b's bytes (freed on failure too).
static rp_status add_kv(rp_gguf_writer *w, const char *key, rp_gguf_type type, bytes *b)
{
    rp_status st;
    if (b->oom) {
        st = RP_ERR(RP_ERR_NOMEM, "gguf writer: out of memory");
        goto fail;
    }
    size_t klen = strlen(key), align = w->alignment;
    if (klen == 0 || klen > 65535) {
        st = RP_ERR(RP_ERR_INVALID, "gguf writer: metadata key of invalid length %zu", klen);
        goto fail;
    }
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kvs[i].key, key) == 0) {
            st = RP_ERR(RP_ERR_INVALID, "gguf writer: duplicate metadata key '%s'", key);
            goto fail;
        }
    if (strcmp(key, "general.alignment") == 0) {
        uint32_t a;
        if (type != RP_GGUF_UINT32 || b->n != 4) {
            st = RP_ERR(RP_ERR_INVALID, "gguf writer: general.alignment must be a u32");
            goto fail;
        }
        memcpy(&a, b->p, 4);
        if (a == 0 || (a & (a - 1)) || a > 65536) {
            st = RP_ERR(RP_ERR_INVALID, "gguf writer: general.alignment %u is not a power of two up to 65536", a);
            goto fail;
        }
        align = a;
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? w->cap_kv * 2 : 16;
        wkv *kvs = rp_realloc(w->kvs, cap * sizeof(*kvs));
        if (!kvs) {
            st = RP_ERR(RP_ERR_NOMEM, "gguf writer: out of memory");
            goto fail;
        }
        w->kvs = kvs;
        w->cap_kv = cap;
    }
    char *k = rp_strdup(key);
    if (!k) {
        st = RP_ERR(RP_ERR_NOMEM, "gguf writer: out of memory");
        goto fail;
    }
    w->kvs[w->n_kv++] = (wkv){k, type, b->p, b->n};
    w->alignment = align;
    return RP_OK;
fail:
    rp_free(b->p);
    return st;
}

rp_status rp_gguf_writer_add_val(rp_gguf_writer *w, const char *key, rp_gguf_type type, const void *val)
{
    size_t sz = scalar_size(type);
    if (sz == 0)
        return RP_ERR(RP_ERR_INVALID, "gguf writer: key '%s': type %d is not a scalar type", key, (int)type);
    bytes b = {0};
    put(&b, val, sz);
    return add_kv(w, key, type, &b);
}

rp_status rp_gguf_writer_add_str(rp_gguf_writer *w, const char *key, const char *val)
{
    bytes b = {0};
    put_str(&b, val);
    return add_kv(w, key, RP_GGUF_STRING, &b);
}

rp_status rp_gguf_writer_add_u32(rp_gguf_writer *w, const char *key, uint32_t val)
{
    return rp_gguf_writer_add_val(w, key, RP_GGUF_UINT32, &val);
}

rp_status rp_gguf_writer_add_i32(rp_gguf_writer *w, const char *key, int32_t val)
{
    return rp_gguf_writer_add_val(w, key, RP_GGUF_INT32, &val);
}

rp_status rp_gguf_writer_add_f32(rp_gguf_writer *w, const char *key, float val)
{
    return rp_gguf_writer_add_val(w, key, RP_GGUF_FLOAT32, &val);
}

rp_status rp_gguf_writer_add_bool(rp_gguf_writer *w, const char *key, bool val)
{
    uint8_t v = val ? 1 : 0;
    return rp_gguf_writer_add_val(w, key, RP_GGUF_BOOL, &v);
}

rp_status rp_gguf_writer_add_str_arr(rp_gguf_writer *w, const char *key, const char *const *vals, uint64_t n)
{
    bytes b = {0};
    put_u32(&b, RP_GGUF_STRING);
    put_u64(&b, n);
    for (uint64_t i = 0; i < n; i++)
        put_str(&b, vals[i]);
    return add_kv(w, key, RP_GGUF_ARRAY, &b);
}

rp_status rp_gguf_writer_add_arr(rp_gguf_writer *w, const char *key, rp_gguf_type elem_type, const void *vals,
                                 uint64_t n)
{
    size_t es = scalar_size(elem_type), total;
    if (es == 0)
        return RP_ERR(RP_ERR_INVALID, "gguf writer: key '%s': array element type %d is not a scalar type", key,
                      (int)elem_type);
    if (n > SIZE_MAX || !rp_mul_size((size_t)n, es, &total))
        return RP_ERR(RP_ERR_INVALID, "gguf writer: key '%s': array too large", key);
    bytes b = {0};
    put_u32(&b, (uint32_t)elem_type);
    put_u64(&b, n);
    if (total)
        put(&b, vals, total);
    return add_kv(w, key, RP_GGUF_ARRAY, &b);
}

rp_status rp_gguf_writer_add_tensor(rp_gguf_writer *w, const char *name, rp_dtype type, int n_dims, const int64_t *ne,
                                    const void *data)
{
    size_t nlen = strlen(name);
    if (nlen == 0 || nlen > 65535)
        return RP_ERR(RP_ERR_INVALID, "gguf writer: tensor name of invalid length %zu", nlen);
    if (!rp_dtype_valid((int)type) || type == RP_DTYPE_Q8_K)
        return RP_ERR(RP_ERR_INVALID, "gguf writer: tensor '%s': unsupported type %d", name, (int)type);
    if (n_dims < 1 || n_dims > RP_GGUF_MAX_DIMS)
        return RP_ERR(RP_ERR_INVALID, "gguf writer: tensor '%s': %d dimensions (1 to %d allowed)", name, n_dims,
                      RP_GGUF_MAX_DIMS);
    wtensor t = {.type = type, .n_dims = n_dims};
    size_t rows = 1;
    for (int d = 0; d < RP_GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] <= 0 || (d > 0 && !rp_mul_size(rows, (size_t)t.ne[d], &rows)))
            return RP_ERR(RP_ERR_INVALID, "gguf writer: tensor '%s': invalid dimension %d (%lld)", name, d,
                          (long long)t.ne[d]);
    }
    size_t row;
    if (!rp_dtype_row_bytes(type, t.ne[0], &row))
        return RP_ERR(RP_ERR_INVALID,
                      "gguf writer: tensor '%s': row of %lld elements is not a whole number of %s "
                      "blocks",
                      name, (long long)t.ne[0], rp_dtype_name(type));
    if (!rp_mul_size(row, rows, &t.size))
        return RP_ERR(RP_ERR_INVALID, "gguf writer: tensor '%s' is too large", name);
    for (size_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return RP_ERR(RP_ERR_INVALID, "gguf writer: duplicate tensor '%s'", name);
    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? w->cap_tensors * 2 : 16;
        wtensor *ts = rp_realloc(w->tensors, cap * sizeof(*ts));
        if (!ts)
            return RP_ERR(RP_ERR_NOMEM, "gguf writer: out of memory");
        w->tensors = ts;
        w->cap_tensors = cap;
    }
    t.name = rp_strdup(name);
    t.data = rp_malloc(t.size);
    if (!t.name || !t.data) {
        rp_free(t.name);
        rp_free(t.data);
        return RP_ERR(RP_ERR_NOMEM, "gguf writer: out of memory");
    }
    memcpy(t.data, data, t.size);
    w->tensors[w->n_tensors++] = t;
    return RP_OK;
}

static size_t align_up(size_t n, size_t a)
{
    return (n + a - 1) / a * a;
}

rp_status rp_gguf_writer_write(rp_gguf_writer *w, const char *path)
{
    static const uint8_t zeros[64];
    rp_status st = RP_OK;
    bytes h = {0};
    // Header, key/values and tensor infos go into one buffer; the data is streamed.
    put(&h, "GGUF", 4);
    put_u32(&h, 3);
    put_u64(&h, w->n_tensors);
    put_u64(&h, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        put_str(&h, w->kvs[i].key);
        put_u32(&h, (uint32_t)w->kvs[i].type);
        put(&h, w->kvs[i].val, w->kvs[i].len);
    }
    size_t off = 0;
    for (size_t i = 0; i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        put_str(&h, t->name);
        put_u32(&h, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++)
            put_u64(&h, (uint64_t)t->ne[d]);
        put_u32(&h, (uint32_t)t->type);
        put_u64(&h, off);
        off = align_up(off + t->size, w->alignment);
    }
    size_t pad = align_up(h.n, w->alignment) - h.n;
    while (pad) {
        size_t k = pad < sizeof(zeros) ? pad : sizeof(zeros);
        put(&h, zeros, k);
        pad -= k;
    }
    if (h.oom) {
        st = RP_ERR(RP_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    rp_file_writer f;
    if ((st = rp_file_writer_open(&f, path)))
        goto fail;
    rp_file_writer_write(&f, h.p, h.n);
    for (size_t i = 0; i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        rp_file_writer_write(&f, t->data, t->size);
        rp_file_writer_zeros(&f, align_up(t->size, w->alignment) - t->size);
    }
    st = rp_file_writer_commit(&f);
fail:
    rp_free(h.p);
    return st;
}
