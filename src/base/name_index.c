/*
 * name_index.c - a small open-addressing hash from names to indices (FNV-1a,
 * linear probing), used by the GGUF and safetensors readers for keys and
 * tensor names.
 */
#include "base.h"

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ULL; // FNV-1a
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ULL;
    return h;
}

bool rp_name_index_init(rp_name_index *x, int64_t n)
{
    size_t cap = 16;
    while (cap < (size_t)n * 2)
        cap *= 2;
    x->keys = rp_calloc(cap, sizeof(*x->keys));
    x->vals = rp_calloc(cap, sizeof(*x->vals));
    x->cap = cap;
    return x->keys && x->vals;
}

void rp_name_index_deinit(rp_name_index *x)
{
    rp_free(x->keys);
    rp_free(x->vals);
    memset(x, 0, sizeof(*x));
}

int64_t rp_name_index_put(rp_name_index *x, const char *key, int64_t val)
{
    size_t i = (size_t)hash_name(key) & (x->cap - 1);
    for (; x->keys[i]; i = (i + 1) & (x->cap - 1))
        if (strcmp(x->keys[i], key) == 0)
            return x->vals[i];
    x->keys[i] = key;
    x->vals[i] = val;
    return -1;
}

int64_t rp_name_index_get(const rp_name_index *x, const char *key)
{
    if (!x->cap)
        return -1;
    size_t i = (size_t)hash_name(key) & (x->cap - 1);
    for (; x->keys[i]; i = (i + 1) & (x->cap - 1))
        if (strcmp(x->keys[i], key) == 0)
            return x->vals[i];
    return -1;
}
