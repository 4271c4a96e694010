/*
 * kv.c - the KV block pool: a free list of block ids and reference counts.
 *
 * All memory is taken at creation (no allocation per token); a block is free
 * when its reference count is zero. Block ids are handed out lowest-first from
 * a stack so that runs are reproducible.
 */
#include "kv.h"

struct rp_kv_pool {
    rp_backend *be;
    int n_layer, n_kv_head, head_dim, block_size, n_blocks;
    rp_kv_layer *layers; // (n_layer)
    int32_t *free_stack; // (n_blocks) free block ids, top at n_free-1
    int n_free;
    int32_t *refs; // (n_blocks)
};

size_t rp_kv_block_bytes(int n_layer, int n_kv_head, int head_dim, int block_size)
{
    return (size_t)n_layer * 2 * block_size * n_kv_head * head_dim * sizeof(float);
}

rp_status rp_kv_pool_create(rp_backend *be, int n_layer, int n_kv_head, int head_dim, int block_size, int n_blocks,
                            rp_kv_pool **out)
{
    *out = NULL;
    if (n_layer <= 0 || n_kv_head <= 0 || head_dim <= 0 || block_size <= 0 || n_blocks <= 0)
        return RP_ERR(RP_ERR_INVALID, "kv pool: invalid geometry");
    size_t layer_bytes;
    if (!rp_mul_size((size_t)n_blocks * block_size, (size_t)n_kv_head * head_dim * sizeof(float), &layer_bytes))
        return RP_ERR(RP_ERR_RANGE, "kv pool: too large");
    rp_kv_pool *p = rp_calloc(1, sizeof(*p));
    if (!p)
        return RP_ERR(RP_ERR_NOMEM, "kv pool: out of memory");
    p->be = be;
    p->n_layer = n_layer;
    p->n_kv_head = n_kv_head;
    p->head_dim = head_dim;
    p->block_size = block_size;
    p->n_blocks = n_blocks;
    p->layers = rp_calloc((size_t)n_layer, sizeof(rp_kv_layer));
    p->free_stack = rp_malloc((size_t)n_blocks * sizeof(int32_t));
    p->refs = rp_calloc((size_t)n_blocks, sizeof(int32_t));
    rp_status st = RP_OK;
    if (!p->layers || !p->free_stack || !p->refs) {
        st = RP_ERR(RP_ERR_NOMEM, "kv pool: out of memory");
        goto fail;
    }
    for (int l = 0; l < n_layer; l++) {
        void *k, *v;
        if ((st = be->ops->alloc(be, layer_bytes, &k)))
            goto fail;
        p->layers[l].k = k;
        if ((st = be->ops->alloc(be, layer_bytes, &v)))
            goto fail;
        p->layers[l].v = v;
    }
    for (int i = 0; i < n_blocks; i++)
        p->free_stack[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    *out = p;
    return RP_OK;
fail:
    rp_kv_pool_destroy(p);
    return rp_error_prefix(st, "cannot allocate the KV cache (%d blocks of %d tokens)", n_blocks, block_size);
}

void rp_kv_pool_destroy(rp_kv_pool *p)
{
    if (!p)
        return;
    if (p->layers)
        for (int l = 0; l < p->n_layer; l++) {
            if (p->layers[l].k)
                p->be->ops->free(p->be, p->layers[l].k);
            if (p->layers[l].v)
                p->be->ops->free(p->be, p->layers[l].v);
        }
    rp_free(p->layers);
    rp_free(p->free_stack);
    rp_free(p->refs);
    rp_free(p);
}

rp_kv_layer *rp_kv_pool_layer(rp_kv_pool *p, int layer)
{
    return &p->layers[layer];
}

int rp_kv_pool_block_size(const rp_kv_pool *p)
{
    return p->block_size;
}

int rp_kv_pool_n_blocks(const rp_kv_pool *p)
{
    return p->n_blocks;
}

int rp_kv_pool_n_layers(const rp_kv_pool *p)
{
    return p->n_layer;
}

int rp_kv_pool_free_blocks(const rp_kv_pool *p)
{
    return p->n_free;
}

void rp_kv_seq_init(rp_kv_seq *s)
{
    memset(s, 0, sizeof(*s));
}

static void unref(rp_kv_pool *p, int32_t b)
{
    RP_ASSERT(p->refs[b] > 0);
    if (--p->refs[b] == 0)
        p->free_stack[p->n_free++] = b;
}

void rp_kv_seq_deinit(rp_kv_pool *p, rp_kv_seq *s)
{
    rp_kv_seq_truncate(p, s, 0);
    rp_free(s->blocks);
    memset(s, 0, sizeof(*s));
}

rp_status rp_kv_seq_reserve(rp_kv_pool *p, rp_kv_seq *s, int32_t n_tokens)
{
    if (n_tokens <= s->n_tokens)
        return RP_OK;
    int32_t need = (n_tokens + p->block_size - 1) / p->block_size;
    int32_t more = need - s->n_blocks;
    if (more > p->n_free)
        return RP_ERR(RP_ERR_RANGE, "KV cache full: %d more blocks needed, %d free", more, p->n_free);
    if (need > s->cap) {
        int32_t cap = s->cap ? s->cap : 16;
        while (cap < need)
            cap *= 2;
        int32_t *nb = rp_realloc(s->blocks, (size_t)cap * sizeof(int32_t));
        if (!nb)
            return RP_ERR(RP_ERR_NOMEM, "KV block table: out of memory");
        s->blocks = nb;
        s->cap = cap;
    }
    for (int32_t i = 0; i < more; i++) {
        int32_t b = p->free_stack[--p->n_free];
        p->refs[b] = 1;
        s->blocks[s->n_blocks++] = b;
    }
    s->n_tokens = n_tokens;
    return RP_OK;
}

void rp_kv_seq_truncate(rp_kv_pool *p, rp_kv_seq *s, int32_t n_tokens)
{
    if (n_tokens >= s->n_tokens)
        return;
    int32_t keep = (n_tokens + p->block_size - 1) / p->block_size;
    while (s->n_blocks > keep)
        unref(p, s->blocks[--s->n_blocks]);
    s->n_tokens = n_tokens;
}
