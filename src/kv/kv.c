/*
 * kv.c - the KV block pool: reference counts and one free list that doubles
 * as the prefix cache's LRU.
 *
 * All memory is taken at creation (no allocation per token); a block is free
 * when its reference count is zero. The free blocks are a doubly linked list
 * through two index arrays: plain blocks are pushed at the head and taken
 * from it (so at the start ids are handed out lowest first and runs are
 * reproducible), cached blocks are appended at the tail when released, so
 * the head-side cached block is the least recently released one.
 */
#include "kv.h"

struct rp_kv_pool {
    rp_backend *be;
    int n_layer, n_kv_head, head_dim, block_size, n_blocks;
    rp_dtype type;       // of K and V: RP_DTYPE_F16 or RP_DTYPE_F32
    size_t block_bytes;  // bytes of K and V of one block in one layer (rp_kv_layer_block_bytes)
    rp_kv_layer *layers; // (n_layer), in the backend's layout
    int32_t *refs;       // (n_blocks)
    uint8_t *cached;     // (n_blocks) marked by the prefix cache
    int32_t *next, *prev; // (n_blocks) the free list's links, -1 at the ends
    int32_t head, tail;
    int n_free, n_cached_free;
    rp_kv_evict_fn evict;
    void *evict_ctx;
    // recurrent state (rp_kv_pool_add_states)
    rp_kv_state_geom sg;
    rp_state_layer *states; // (sg.n_layer)
    uint8_t *slot_used;     // (sg.n_slots)
    int n_free_states;
};

size_t rp_kv_block_bytes(int n_layer, int n_kv_head, int head_dim, int block_size, rp_dtype type)
{
    return (size_t)n_layer * 2 * block_size * n_kv_head * head_dim * (size_t)rp_dtype_block_bytes(type);
}

rp_status rp_kv_pool_create(rp_backend *be, int n_layer, int n_kv_head, int head_dim, int block_size, int n_blocks,
                            rp_dtype type, rp_kv_pool **out)
{
    *out = NULL;
    if (n_layer <= 0 || n_kv_head <= 0 || head_dim <= 0 || block_size <= 0 || n_blocks <= 0)
        return RP_ERR(RP_ERR_INVALID, "kv pool: invalid geometry");
    if (type != RP_DTYPE_F16 && type != RP_DTYPE_F32)
        return RP_ERR(RP_ERR_INVALID, "kv pool: K and V can be f16 or f32, not %s", rp_dtype_name(type));
    rp_kv_pool *p = rp_calloc(1, sizeof(*p));
    if (!p)
        return RP_ERR(RP_ERR_NOMEM, "kv pool: out of memory");
    p->be = be;
    p->n_layer = n_layer;
    p->n_kv_head = n_kv_head;
    p->head_dim = head_dim;
    p->block_size = block_size;
    p->n_blocks = n_blocks;
    p->type = type;
    p->block_bytes = 2 * (size_t)block_size * n_kv_head * head_dim * (size_t)rp_dtype_block_bytes(type);
    p->layers = rp_calloc((size_t)n_layer, sizeof(rp_kv_layer));
    p->refs = rp_calloc((size_t)n_blocks, sizeof(int32_t));
    p->cached = rp_calloc((size_t)n_blocks, 1);
    p->next = rp_malloc((size_t)n_blocks * sizeof(int32_t));
    p->prev = rp_malloc((size_t)n_blocks * sizeof(int32_t));
    rp_status st = RP_OK;
    if (!p->layers || !p->refs || !p->cached || !p->next || !p->prev) {
        st = RP_ERR(RP_ERR_NOMEM, "kv pool: out of memory");
        goto fail;
    }
    for (int l = 0; l < n_layer; l++)
        if ((st = rp_backend_kv_layer_init(be, n_blocks, block_size, n_kv_head, head_dim, type, &p->layers[l])))
            goto fail;
    for (int i = 0; i < n_blocks; i++) {
        p->next[i] = i + 1 < n_blocks ? i + 1 : -1;
        p->prev[i] = i - 1;
    }
    p->head = 0;
    p->tail = n_blocks - 1;
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
    for (int l = 0; p->states && l < p->sg.n_layer; l++) {
        rp_backend_free(p->be, p->states[l].state);
        rp_backend_free(p->be, p->states[l].log);
    }
    rp_free(p->states);
    rp_free(p->slot_used);
    if (p->layers)
        for (int l = 0; l < p->n_layer; l++)
            rp_backend_kv_layer_deinit(p->be, &p->layers[l]);
    rp_free(p->layers);
    rp_free(p->refs);
    rp_free(p->cached);
    rp_free(p->next);
    rp_free(p->prev);
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

int rp_kv_pool_n_kv_head(const rp_kv_pool *p)
{
    return p->n_kv_head;
}

int rp_kv_pool_head_dim(const rp_kv_pool *p)
{
    return p->head_dim;
}

int rp_kv_pool_free_blocks(const rp_kv_pool *p)
{
    return p->n_free;
}

int rp_kv_pool_cached_free(const rp_kv_pool *p)
{
    return p->n_cached_free;
}

size_t rp_kv_pool_block_bytes(const rp_kv_pool *p)
{
    return rp_kv_block_bytes(p->n_layer, p->n_kv_head, p->head_dim, p->block_size, p->type);
}

rp_dtype rp_kv_pool_type(const rp_kv_pool *p)
{
    return p->type;
}

void rp_kv_pool_set_evict(rp_kv_pool *p, rp_kv_evict_fn fn, void *ctx)
{
    p->evict = fn;
    p->evict_ctx = ctx;
}

/* ---- recurrent state --------------------------------------------------------- */

// A state layer of geometry g (no memory), for its sizes.
static rp_state_layer state_shape(const rp_kv_state_geom *g)
{
    return (rp_state_layer){.n_slots = g->n_slots,
                            .log_cap = g->log_cap,
                            .n_k_head = g->n_k_head,
                            .n_v_head = g->n_v_head,
                            .dk = g->dk,
                            .dv = g->dv,
                            .kc = g->kc};
}

size_t rp_kv_state_slot_bytes(const rp_kv_state_geom *g)
{
    rp_state_layer st = state_shape(g);
    return (size_t)g->n_layer * (2 * rp_state_floats(&st) + (size_t)g->log_cap * rp_state_log_floats(&st)) *
           sizeof(float);
}

size_t rp_kv_pool_state_slot_bytes(const rp_kv_pool *p)
{
    return p->states ? rp_kv_state_slot_bytes(&p->sg) : 0;
}

rp_status rp_kv_pool_add_states(rp_kv_pool *p, const rp_kv_state_geom *g)
{
    if (p->states)
        return RP_ERR(RP_ERR_INVALID, "kv pool: state layers already added");
    if (g->n_layer <= 0 || g->n_k_head <= 0 || g->n_v_head <= 0 || g->n_v_head % g->n_k_head || g->dk <= 0 ||
        g->dv <= 0 || g->kc < 1 || g->n_slots <= 0 || g->log_cap < 0)
        return RP_ERR(RP_ERR_INVALID, "kv pool: invalid recurrent state geometry");
    p->sg = *g;
    p->states = rp_calloc((size_t)g->n_layer, sizeof(rp_state_layer));
    p->slot_used = rp_calloc((size_t)g->n_slots, 1);
    if (!p->states || !p->slot_used)
        return RP_ERR(RP_ERR_NOMEM, "kv pool: out of memory");
    for (int l = 0; l < g->n_layer; l++) {
        rp_state_layer *st = &p->states[l];
        *st = state_shape(g);
        size_t sb, lb;
        if (!rp_mul_size(2 * (size_t)g->n_slots * sizeof(float), rp_state_floats(st), &sb) ||
            !rp_mul_size((size_t)g->n_slots * g->log_cap * sizeof(float), rp_state_log_floats(st), &lb))
            return RP_ERR(RP_ERR_RANGE, "kv pool: recurrent state too large");
        rp_status s = rp_backend_alloc(p->be, sb, (void **)&st->state);
        if (!s && lb)
            s = rp_backend_alloc(p->be, lb, (void **)&st->log);
        if (s)
            return rp_error_prefix(s, "recurrent state for %d sequences (%.1f MiB each)", g->n_slots,
                                   (double)rp_kv_state_slot_bytes(g) / (1 << 20));
    }
    p->n_free_states = g->n_slots;
    return RP_OK;
}

int rp_kv_pool_n_state_layers(const rp_kv_pool *p)
{
    return p->states ? p->sg.n_layer : 0;
}

rp_state_layer *rp_kv_pool_state_layer(rp_kv_pool *p, int layer)
{
    RP_ASSERT(p->states && layer >= 0 && layer < p->sg.n_layer);
    return &p->states[layer];
}

int rp_kv_pool_free_states(const rp_kv_pool *p)
{
    return p->n_free_states;
}

void rp_kv_seq_state_advance(const rp_kv_pool *p, rp_kv_seq *s, int32_t n)
{
    RP_ASSERT(s->state_slot > 0 && n >= 0 && s->state_pos + n <= s->n_tokens);
    if (n == 0)
        return;
    s->log_pos = n <= p->sg.log_cap ? s->state_pos : -1;
    s->state_pos += n;
    s->state_cur ^= 1;
}

// Takes a free state slot for s (RP_ERR_RANGE when none is free).
static rp_status state_take(rp_kv_pool *p, rp_kv_seq *s)
{
    if (!p->states || s->state_slot > 0)
        return RP_OK;
    for (int i = 0; i < p->sg.n_slots; i++)
        if (!p->slot_used[i]) {
            p->slot_used[i] = 1;
            p->n_free_states--;
            s->state_slot = i + 1;
            s->state_pos = 0;
            s->state_cur = 0;
            s->log_pos = -1;
            return RP_OK;
        }
    return RP_ERR(RP_ERR_RANGE, "recurrent state full: all %d slots in use", p->sg.n_slots);
}

static void state_release(rp_kv_pool *p, rp_kv_seq *s)
{
    if (s->state_slot <= 0)
        return;
    RP_ASSERT(p->states && s->state_slot <= p->sg.n_slots && p->slot_used[s->state_slot - 1]);
    p->slot_used[s->state_slot - 1] = 0;
    p->n_free_states++;
    s->state_slot = s->state_pos = s->state_cur = 0;
    s->log_pos = -1;
}

size_t rp_kv_pool_state_bytes(const rp_kv_pool *p)
{
    return p->states ? (size_t)p->sg.n_layer * rp_state_floats(&p->states[0]) * sizeof(float) : 0;
}

// Layer l's copy `copy` of slot `slot` (0-based).
static float *state_copy(const rp_kv_pool *p, int l, int slot, int copy)
{
    return p->states[l].state + ((size_t)slot * 2 + (size_t)copy) * rp_state_floats(&p->states[l]);
}

rp_status rp_kv_seq_state_read(rp_kv_pool *p, const rp_kv_seq *s, void *host)
{
    RP_ASSERT(p->states && s->state_slot > 0);
    size_t n = rp_state_floats(&p->states[0]) * sizeof(float);
    for (int l = 0; l < p->sg.n_layer; l++) {
        rp_status st = rp_backend_download(p->be, (uint8_t *)host + (size_t)l * n,
                                           state_copy(p, l, s->state_slot - 1, s->state_cur), n);
        if (st)
            return st;
    }
    return RP_OK;
}

rp_status rp_kv_seq_state_write(rp_kv_pool *p, rp_kv_seq *s, int32_t pos, const void *host)
{
    RP_ASSERT(p->states && pos >= 0 && pos <= s->n_tokens);
    bool took = s->state_slot == 0;
    rp_status st = state_take(p, s);
    if (st)
        return st;
    size_t n = rp_state_floats(&p->states[0]) * sizeof(float);
    for (int l = 0; l < p->sg.n_layer && !st; l++)
        st = rp_backend_upload(p->be, state_copy(p, l, s->state_slot - 1, 0), (const uint8_t *)host + (size_t)l * n,
                               n);
    if (st) {
        if (took)
            state_release(p, s);
        return st;
    }
    s->state_pos = pos;
    s->state_cur = 0;
    s->log_pos = -1;
    return RP_OK;
}

/* ---- the free list ---------------------------------------------------------- */

static void list_remove(rp_kv_pool *p, int32_t b)
{
    if (p->prev[b] >= 0)
        p->next[p->prev[b]] = p->next[b];
    else
        p->head = p->next[b];
    if (p->next[b] >= 0)
        p->prev[p->next[b]] = p->prev[b];
    else
        p->tail = p->prev[b];
    p->next[b] = p->prev[b] = -1;
    p->n_free--;
    if (p->cached[b])
        p->n_cached_free--;
}

static void list_push_head(rp_kv_pool *p, int32_t b)
{
    p->prev[b] = -1;
    p->next[b] = p->head;
    if (p->head >= 0)
        p->prev[p->head] = b;
    else
        p->tail = b;
    p->head = b;
    p->n_free++;
}

static void list_push_tail(rp_kv_pool *p, int32_t b)
{
    p->next[b] = -1;
    p->prev[b] = p->tail;
    if (p->tail >= 0)
        p->next[p->tail] = b;
    else
        p->head = b;
    p->tail = b;
    p->n_free++;
    p->n_cached_free++;
}

static void check_block(const rp_kv_pool *p, int32_t b)
{
    RP_ASSERT(b >= 0 && b < p->n_blocks);
}

/* ---- single blocks ---------------------------------------------------------- */

int32_t rp_kv_block_refs(const rp_kv_pool *p, int32_t b)
{
    check_block(p, b);
    return p->refs[b];
}

bool rp_kv_block_is_cached(const rp_kv_pool *p, int32_t b)
{
    check_block(p, b);
    return p->cached[b] != 0;
}

void rp_kv_block_set_cached(rp_kv_pool *p, int32_t b, bool cached)
{
    check_block(p, b);
    if ((p->cached[b] != 0) == cached)
        return;
    if (p->refs[b] == 0) { // free: move between the plain and the cached end
        list_remove(p, b);
        p->cached[b] = cached;
        if (cached)
            list_push_tail(p, b);
        else
            list_push_head(p, b);
    } else {
        p->cached[b] = cached;
    }
}

rp_status rp_kv_block_alloc(rp_kv_pool *p, int32_t *out)
{
    if (p->head < 0)
        return RP_ERR(RP_ERR_RANGE, "KV cache full: no free block");
    int32_t b = p->head;
    if (p->cached[b] && p->evict)
        p->evict(p->evict_ctx, b); // may unmark it (set_cached keeps it at the head)
    b = p->head;
    list_remove(p, b);
    p->cached[b] = 0;
    p->refs[b] = 1;
    *out = b;
    return RP_OK;
}

void rp_kv_block_ref(rp_kv_pool *p, int32_t b)
{
    check_block(p, b);
    if (p->refs[b] == 0) {
        RP_ASSERT(p->cached[b]); // a plain free block holds nothing to share
        list_remove(p, b);
    }
    p->refs[b]++;
}

void rp_kv_block_unref(rp_kv_pool *p, int32_t b)
{
    check_block(p, b);
    RP_ASSERT(p->refs[b] > 0);
    if (--p->refs[b] > 0)
        return;
    if (p->cached[b])
        list_push_tail(p, b);
    else
        list_push_head(p, b);
}

rp_status rp_kv_block_read(rp_kv_pool *p, int32_t b, void *host)
{
    check_block(p, b);
    rp_status st;
    for (int l = 0; l < p->n_layer; l++)
        if ((st = rp_backend_kv_block_export(p->be, &p->layers[l], b, (uint8_t *)host + (size_t)l * p->block_bytes)))
            return st;
    return RP_OK;
}

rp_status rp_kv_block_write(rp_kv_pool *p, int32_t b, const void *host)
{
    check_block(p, b);
    rp_status st;
    for (int l = 0; l < p->n_layer; l++)
        if ((st = rp_backend_kv_block_import(p->be, &p->layers[l], b,
                                             (const uint8_t *)host + (size_t)l * p->block_bytes)))
            return st;
    return RP_OK;
}

rp_status rp_kv_block_copy(rp_kv_pool *p, int32_t dst, int32_t src)
{
    check_block(p, dst);
    check_block(p, src);
    rp_status st;
    for (int l = 0; l < p->n_layer; l++)
        if ((st = rp_backend_kv_block_copy(p->be, &p->layers[l], dst, src)))
            return st;
    return RP_OK;
}

/* ---- sequences -------------------------------------------------------------- */

void rp_kv_seq_init(rp_kv_seq *s)
{
    memset(s, 0, sizeof(*s));
}

void rp_kv_seq_deinit(rp_kv_pool *p, rp_kv_seq *s)
{
    rp_kv_seq_truncate(p, s, 0);
    rp_free(s->blocks);
    memset(s, 0, sizeof(*s));
}

static rp_status grow_table(rp_kv_seq *s, int32_t need)
{
    if (need <= s->cap)
        return RP_OK;
    int32_t cap = s->cap ? s->cap : 16;
    while (cap < need)
        cap *= 2;
    int32_t *nb = rp_realloc(s->blocks, (size_t)cap * sizeof(int32_t));
    if (!nb)
        return RP_ERR(RP_ERR_NOMEM, "KV block table: out of memory");
    s->blocks = nb;
    s->cap = cap;
    return RP_OK;
}

rp_status rp_kv_seq_reserve(rp_kv_pool *p, rp_kv_seq *s, int32_t n_tokens)
{
    if (n_tokens <= s->n_tokens)
        return RP_OK;
    int32_t need = (n_tokens + p->block_size - 1) / p->block_size;
    int32_t more = need - s->n_blocks;
    if (more > p->n_free)
        return RP_ERR(RP_ERR_RANGE, "KV cache full: %d more blocks needed, %d free", more, p->n_free);
    rp_status st = grow_table(s, need);
    if (st || (st = state_take(p, s)))
        return st;
    for (int32_t i = 0; i < more; i++) {
        int32_t b = -1;
        st = rp_kv_block_alloc(p, &b);
        RP_ASSERT(st == RP_OK); // counted above
        s->blocks[s->n_blocks++] = b;
    }
    s->n_tokens = n_tokens;
    return RP_OK;
}

rp_status rp_kv_seq_adopt(rp_kv_pool *p, rp_kv_seq *s, const int32_t *blocks, int n)
{
    RP_ASSERT(s->n_tokens == s->n_blocks * p->block_size && n >= 0);
    rp_status st = grow_table(s, s->n_blocks + n);
    if (st)
        return st;
    for (int i = 0; i < n; i++) {
        check_block(p, blocks[i]);
        RP_ASSERT(p->refs[blocks[i]] > 0);
        s->blocks[s->n_blocks++] = blocks[i];
    }
    s->n_tokens = s->n_blocks * p->block_size;
    return RP_OK;
}

rp_status rp_kv_seq_unshare_last(rp_kv_pool *p, rp_kv_seq *s)
{
    if (s->n_blocks == 0)
        return RP_OK;
    int32_t old = s->blocks[s->n_blocks - 1];
    if (p->refs[old] == 1 && !p->cached[old])
        return RP_OK;
    int32_t b;
    rp_status st = rp_kv_block_alloc(p, &b);
    if (st)
        return st;
    if ((st = rp_kv_block_copy(p, b, old))) {
        rp_kv_block_unref(p, b);
        return st;
    }
    s->blocks[s->n_blocks - 1] = b;
    rp_kv_block_unref(p, old);
    return RP_OK;
}

void rp_kv_seq_truncate(rp_kv_pool *p, rp_kv_seq *s, int32_t n_tokens)
{
    if (n_tokens == 0)
        state_release(p, s);
    RP_ASSERT(n_tokens == 0 || n_tokens >= s->state_pos);
    if (n_tokens >= s->n_tokens)
        return;
    int32_t keep = (n_tokens + p->block_size - 1) / p->block_size;
    while (s->n_blocks > keep)
        rp_kv_block_unref(p, s->blocks[--s->n_blocks]);
    s->n_tokens = n_tokens;
}
