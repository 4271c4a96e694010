/*
 * cache.c - the prefix cache's memory side: keys, the table from keys to pool
 * blocks, lookups that walk a token list block by block, taking and
 * publishing blocks, and the pool's evict hook.
 *
 * The table is open addressing with linear probing over block ids (twice the
 * pool's block count, so it never fills) with backward-shift deletion (no
 * tombstones). Per pool block the cache keeps the key, the parent key and
 * the token ids it was published with; a lookup compares them, so a key
 * collision is a miss. Everything is sized at create: lookups, takes and
 * publishes allocate nothing.
 */
#include "cache_int.h"

#include <stdio.h>
#include <stdlib.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#define CACHE_TAG "rapid-kv-cache-1"

void rp_cache_params_default(rp_cache_params *p)
{
    memset(p, 0, sizeof(*p));
}

/* ---- keys ----------------------------------------------------------------- */

rp_cache_key rp_cache_key_of(const rp_cache *c, rp_cache_key parent, const int32_t *toks)
{
    XXH3_state_t h;
    XXH3_INITSTATE(&h);
    XXH3_128bits_reset(&h);
    XXH3_128bits_update(&h, &parent, sizeof(parent));
    XXH3_128bits_update(&h, c->fp, sizeof(c->fp));
    XXH3_128bits_update(&h, toks, (size_t)c->bs * sizeof(int32_t));
    XXH128_hash_t r = XXH3_128bits_digest(&h);
    return (rp_cache_key){r.low64, r.high64};
}

void rp_cache_key_hex(rp_cache_key k, char out[33])
{
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)k.hi, (unsigned long long)k.lo);
}

/* ---- the memory table ------------------------------------------------------ */

static size_t home(const rp_cache *c, rp_cache_key k)
{
    return (size_t)k.lo & (c->m_cap - 1);
}

static int32_t m_find(const rp_cache *c, rp_cache_key k)
{
    for (size_t i = home(c, k);; i = (i + 1) & (c->m_cap - 1)) {
        int32_t b = c->m_table[i];
        if (b < 0)
            return -1;
        if (key_eq(c->m_key[b], k))
            return b;
    }
}

static void m_insert(rp_cache *c, rp_cache_key k, rp_cache_key parent, const int32_t *toks, int32_t b)
{
    size_t i = home(c, k);
    while (c->m_table[i] >= 0)
        i = (i + 1) & (c->m_cap - 1);
    c->m_table[i] = b;
    c->m_key[b] = k;
    c->m_parent[b] = parent;
    memcpy(c->m_toks + (size_t)b * c->bs, toks, (size_t)c->bs * sizeof(int32_t));
    c->m_valid[b] = true;
    c->n_mem++;
    rp_kv_block_set_cached(c->pool, b, true);
}

// Removes block b's entry (b must be in the table); the pool mark is the caller's.
static void m_remove(rp_cache *c, int32_t b)
{
    size_t mask = c->m_cap - 1, i = home(c, c->m_key[b]);
    while (c->m_table[i] != b)
        i = (i + 1) & mask;
    // Backward shift: move later members of the run into the hole when their home allows.
    for (size_t j = (i + 1) & mask; c->m_table[j] >= 0; j = (j + 1) & mask) {
        size_t h = home(c, c->m_key[c->m_table[j]]);
        bool movable = i <= j ? (h <= i || h > j) : (h <= i && h > j);
        if (movable) {
            c->m_table[i] = c->m_table[j];
            i = j;
        }
    }
    c->m_table[i] = -1;
    c->m_valid[b] = false;
    c->n_mem--;
}

// The memory block holding exactly (key, parent, toks), or -1.
static int32_t m_match(const rp_cache *c, rp_cache_key k, rp_cache_key parent, const int32_t *toks)
{
    int32_t b = m_find(c, k);
    if (b < 0 || !key_eq(c->m_parent[b], parent) ||
        memcmp(c->m_toks + (size_t)b * c->bs, toks, (size_t)c->bs * sizeof(int32_t)) != 0)
        return -1;
    return b;
}

// The pool is about to reuse block b: forget it, after queueing a copy for the disk.
static void on_evict(void *ctx, int32_t b)
{
    rp_cache *c = ctx;
    if (!c->m_valid[b])
        return;
    if (c->dir)
        rp_cache_disk_stage(c, b, rp_cache_now_ns(), false);
    m_remove(c, b);
    c->st.mem_evictions++;
}

/* ---- create / destroy ------------------------------------------------------ */

static void cache_free(rp_cache *c)
{
    rp_free(c->m_valid);
    rp_free(c->m_key);
    rp_free(c->m_parent);
    rp_free(c->m_toks);
    rp_free(c->m_use);
    rp_free(c->m_table);
    rp_free(c->l_key);
    rp_free(c->l_where);
    rp_free(c->l_block);
    rp_free(c->t_blocks);
    rp_free_aligned(c->load_buf);
    rp_cache_states_free(c);
    rp_free(c);
}

rp_status rp_cache_create(rp_kv_pool *pool, const uint8_t model_fp[16], const rp_cache_params *p, rp_cache **out)
{
    *out = NULL;
    rp_cache_params dp;
    rp_cache_params_default(&dp);
    if (!p)
        p = &dp;
    rp_cache *c = rp_calloc(1, sizeof(*c));
    if (!c)
        return RP_ERR(RP_ERR_NOMEM, "prefix cache: out of memory");
    c->pool = pool;
    c->bs = rp_kv_pool_block_size(pool);
    c->n_blocks = rp_kv_pool_n_blocks(pool);
    c->block_bytes = rp_kv_pool_block_bytes(pool);

    XXH3_state_t h;
    XXH3_INITSTATE(&h);
    XXH3_128bits_reset(&h);
    XXH3_128bits_update(&h, CACHE_TAG, sizeof(CACHE_TAG) - 1);
    XXH3_128bits_update(&h, model_fp, 16);
    uint32_t geo[5] = {(uint32_t)rp_kv_pool_n_layers(pool), (uint32_t)rp_kv_pool_n_kv_head(pool),
                       (uint32_t)rp_kv_pool_head_dim(pool), (uint32_t)c->bs, (uint32_t)rp_kv_pool_type(pool)};
    XXH3_128bits_update(&h, geo, sizeof(geo));
    if (rp_kv_pool_n_state_layers(pool) > 0) { // (only then: the fingerprints of other models stay as they were)
        const rp_state_layer *sl = rp_kv_pool_state_layer(pool, 0);
        uint32_t sg[6] = {(uint32_t)rp_kv_pool_n_state_layers(pool), (uint32_t)sl->n_k_head, (uint32_t)sl->n_v_head,
                          (uint32_t)sl->dk, (uint32_t)sl->dv, (uint32_t)sl->kc};
        XXH3_128bits_update(&h, sg, sizeof(sg));
    }
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(&h));
    memcpy(c->fp, canon.digest, 16);
    for (int i = 0; i < 16; i++)
        snprintf(c->fp_hex + 2 * i, 3, "%02x", c->fp[i]);

    size_t nb = (size_t)c->n_blocks;
    c->m_cap = 16;
    while (c->m_cap < 2 * nb)
        c->m_cap *= 2;
    c->m_valid = rp_calloc(nb, sizeof(bool));
    c->m_key = rp_calloc(nb, sizeof(rp_cache_key));
    c->m_parent = rp_calloc(nb, sizeof(rp_cache_key));
    c->m_use = rp_calloc(nb, sizeof(uint64_t));
    c->m_table = rp_malloc(c->m_cap * sizeof(int32_t));
    c->l_key = rp_malloc(nb * sizeof(rp_cache_key));
    c->l_where = rp_malloc(nb);
    c->l_block = rp_malloc(nb * sizeof(int32_t));
    c->t_blocks = rp_malloc(nb * sizeof(int32_t));
    size_t tok_bytes;
    if (rp_mul_size(nb * sizeof(int32_t), (size_t)c->bs, &tok_bytes))
        c->m_toks = rp_malloc(tok_bytes);
    if (!c->m_valid || !c->m_key || !c->m_parent || !c->m_use || !c->m_table || !c->l_key || !c->l_where ||
        !c->l_block || !c->t_blocks || !c->m_toks) {
        cache_free(c);
        return RP_ERR(RP_ERR_NOMEM, "prefix cache: out of memory for the index of %zu blocks", nb);
    }
    for (size_t i = 0; i < c->m_cap; i++)
        c->m_table[i] = -1;
    rp_status sst = rp_cache_states_init(c, p);
    if (sst) {
        cache_free(c);
        return sst;
    }
    if (p->dir && *p->dir) {
        rp_status st;
        if (!(c->load_buf = rp_malloc_aligned(c->block_bytes))) {
            cache_free(c);
            return RP_ERR(RP_ERR_NOMEM, "prefix cache: out of memory for a block buffer");
        }
        if ((st = rp_cache_disk_open(c, p->dir, p))) {
            rp_cache_disk_close(c);
            if (st == RP_ERR_NOMEM) {
                cache_free(c);
                return st;
            }
            // A folder that cannot be made, is a file, cannot be read or written: serve
            // from memory, and say so (once: a cache is created once per engine).
            RP_LOGW("prefix cache: the disk tier is off: %s; the cache stays in memory", rp_error_message());
            rp_free_aligned(c->load_buf);
            c->load_buf = NULL;
        }
    }
    rp_kv_pool_set_evict(pool, on_evict, c);
    *out = c;
    return RP_OK;
}

static int cmp_use_desc(const void *a, const void *b, void *ctx)
{
    const uint64_t *use = ctx;
    uint64_t x = use[*(const int32_t *)a], y = use[*(const int32_t *)b];
    return x < y ? 1 : x > y ? -1 : 0;
}

void rp_cache_destroy(rp_cache *c)
{
    if (!c)
        return;
    if (c->dir) {
        c->deadline = rp_time_s() + c->flush_s;
        if (c->flush_s > 0) { // the blocks most recently used first
            int n = 0;
            for (int32_t b = 0; b < c->n_blocks; b++)
                if (c->m_valid[b])
                    c->t_blocks[n++] = b;
            qsort_r(c->t_blocks, (size_t)n, sizeof(int32_t), cmp_use_desc, c->m_use);
            uint64_t now = rp_cache_now_ns();
            for (int i = 0; i < n && rp_time_s() < c->deadline; i++) // the files keep the order
                rp_cache_disk_stage(c, c->t_blocks[i], now - (uint64_t)i, true);
        }
        rp_cache_disk_close(c);
    }
    for (int32_t b = 0; b < c->n_blocks; b++)
        if (c->m_valid[b])
            rp_kv_block_set_cached(c->pool, b, false);
    rp_kv_pool_set_evict(c->pool, NULL, NULL);
    cache_free(c);
}

char *rp_cache_default_dir(void)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home_dir = getenv("HOME");
    char buf[4096];
    if (xdg && xdg[0] == '/')
        snprintf(buf, sizeof(buf), "%s/rapid/kv", xdg);
    else if (home_dir && *home_dir)
        snprintf(buf, sizeof(buf), "%s/.cache/rapid/kv", home_dir);
    else
        return NULL;
    return rp_strdup(buf);
}

const char *rp_cache_dir(const rp_cache *c)
{
    return c->dir;
}

/* ---- lookups --------------------------------------------------------------- */

void rp_cache_lookup(rp_cache *c, const int32_t *toks, int max_blocks, rp_cache_match *out)
{
    memset(out, 0, sizeof(*out));
    if (max_blocks > c->n_blocks)
        max_blocks = c->n_blocks;
    if (max_blocks < 0)
        max_blocks = 0;
    c->l_n = 0;
    c->l_max = max_blocks;
    rp_cache_key parent = {0, 0};
    for (int i = 0; i < max_blocks; i++) {
        const int32_t *t = toks + (size_t)i * c->bs;
        rp_cache_key k = rp_cache_key_of(c, parent, t);
        int32_t b = m_match(c, k, parent, t);
        if (b >= 0) {
            bool live = rp_kv_block_refs(c->pool, b) > 0;
            c->l_where[i] = live ? WHERE_LIVE : WHERE_IDLE;
            out->n_live += live;
            out->n_idle += !live;
        } else if (c->dir && rp_cache_disk_has(c, KIND_BLOCK, k, parent, t)) {
            c->l_where[i] = WHERE_DISK;
            out->n_disk++;
        } else {
            break;
        }
        c->l_key[i] = k;
        c->l_block[i] = b;
        c->l_n = i + 1;
        parent = k;
    }
    out->n_blocks = c->l_n;
    if (c->state_bytes) // a prefix ends where a state was kept
        rp_cache_states_trim(c, toks, out);
}

rp_status rp_cache_take(rp_cache *c, const int32_t *toks, rp_kv_seq *s, int *n_blocks)
{
    *n_blocks = 0;
    RP_ASSERT(s->n_blocks == 0 && s->n_tokens == 0);
    int n = c->l_n;
    // Memory blocks first, all of them: reading disk blocks takes free blocks,
    // which must not be these.
    for (int i = 0; i < n; i++)
        if (c->l_where[i] != WHERE_DISK)
            rp_kv_block_ref(c->pool, c->l_block[i]);
    int got = 0;
    for (; got < n; got++) {
        int i = got;
        if (c->l_where[i] != WHERE_DISK) {
            c->t_blocks[i] = c->l_block[i];
            continue;
        }
        rp_cache_key parent = i ? c->l_key[i - 1] : (rp_cache_key){0, 0};
        const int32_t *t = toks + (size_t)i * c->bs;
        int32_t b;
        if (rp_kv_block_alloc(c->pool, &b) != RP_OK)
            break;
        if (!rp_cache_disk_load(c, c->l_key[i], parent, t, b)) {
            rp_kv_block_unref(c->pool, b);
            break;
        }
        if (m_find(c, c->l_key[i]) < 0) // (it cannot be there: the lookup missed it in memory)
            m_insert(c, c->l_key[i], parent, t, b);
        c->t_blocks[i] = b;
        c->st.disk_hit_blocks++;
    }
    for (int i = got; i < n; i++) // found but not taken: give the memory ones back
        if (c->l_where[i] != WHERE_DISK)
            rp_kv_block_unref(c->pool, c->l_block[i]);
    rp_status st = rp_kv_seq_adopt(c->pool, s, c->t_blocks, got);
    if (st) {
        for (int i = 0; i < got; i++)
            rp_kv_block_unref(c->pool, c->t_blocks[i]);
        got = 0;
    } else if (got > 0 && c->state_bytes) { // the state at the prefix's end, or nothing
        bool found = false;
        if (got == n)
            st = rp_cache_states_restore(c, toks, s, &found);
        if (st || !found) {
            rp_kv_seq_truncate(c->pool, s, 0);
            got = 0;
        }
    }
    for (int i = 0; i < got; i++) // recency: the prefix's first block last
        c->m_use[c->t_blocks[i]] = c->clock + (uint64_t)(got - i);
    c->clock += (uint64_t)got;
    c->st.hit_blocks += (uint64_t)got;
    c->st.miss_blocks += (uint64_t)(c->l_max - got);
    c->l_n = 0;
    *n_blocks = got;
    return st;
}

int rp_cache_prefetch(rp_cache *c, const int32_t *toks, int max_reads)
{
    int n = c->l_n, reads = 0, left = 0;
    bool stopped = false;
    // Hold the prefix's memory blocks (and each block read) while reading: a
    // read takes a free block, which must not be one of them.
    for (int i = 0; i < n; i++)
        if (c->l_where[i] != WHERE_DISK)
            rp_kv_block_ref(c->pool, c->l_block[i]);
    for (int i = 0; i < n; i++) {
        if (c->l_where[i] != WHERE_DISK)
            continue;
        if (stopped || reads == max_reads) {
            left += !stopped;
            continue;
        }
        rp_cache_key parent = i ? c->l_key[i - 1] : (rp_cache_key){0, 0};
        const int32_t *t = toks + (size_t)i * c->bs;
        int32_t b;
        if (rp_kv_block_alloc(c->pool, &b) != RP_OK) {
            stopped = true;
            continue;
        }
        if (!rp_cache_disk_load(c, c->l_key[i], parent, t, b)) {
            rp_kv_block_unref(c->pool, b);
            stopped = true;
            continue;
        }
        if (m_find(c, c->l_key[i]) >= 0) { // the key names another block in memory (a collision)
            rp_kv_block_unref(c->pool, b);
            stopped = true;
            continue;
        }
        m_insert(c, c->l_key[i], parent, t, b);
        c->l_where[i] = WHERE_IDLE;
        c->l_block[i] = b; // held by the alloc until the end
        c->st.disk_hit_blocks++;
        reads++;
    }
    // Let go, the prefix's first block last: it is the most recent, the pool reuses it last.
    for (int i = n - 1; i >= 0; i--)
        if (c->l_where[i] != WHERE_DISK) {
            c->m_use[c->l_block[i]] = c->clock + (uint64_t)(n - i);
            rp_kv_block_unref(c->pool, c->l_block[i]);
        }
    c->clock += (uint64_t)n;
    c->l_n = 0;
    return stopped ? 0 : left;
}

void rp_cache_publish(rp_cache *c, const int32_t *toks, const rp_kv_seq *s, int n_blocks)
{
    rp_cache_key key, parent;
    rp_cache_publish_keys(c, toks, s, n_blocks, &key, &parent);
}

void rp_cache_publish_keys(rp_cache *c, const int32_t *toks, const rp_kv_seq *s, int n_blocks, rp_cache_key *last,
                           rp_cache_key *last_parent)
{
    if (n_blocks > s->n_blocks)
        n_blocks = s->n_blocks;
    rp_cache_key parent = {0, 0};
    *last = *last_parent = parent;
    for (int i = 0; i < n_blocks; i++) {
        const int32_t *t = toks + (size_t)i * c->bs;
        rp_cache_key k = rp_cache_key_of(c, parent, t);
        int32_t b = s->blocks[i], have = m_find(c, k);
        if (have < 0 && !c->m_valid[b])
            m_insert(c, k, parent, t, b);
        // else: cached already, by this block or, when the same prefix was computed
        // twice (or the key collides), by another one, which stays
        if (c->m_valid[b] && key_eq(c->m_key[b], k)) // recency: the prefix's first block last
            c->m_use[b] = c->clock + (uint64_t)(n_blocks - i);
        *last_parent = parent;
        *last = parent = k;
    }
    c->clock += (uint64_t)n_blocks;
}

void rp_cache_get_stats(rp_cache *c, rp_cache_stats *out)
{
    if (c->dir)
        pthread_mutex_lock(&c->dmu);
    *out = c->st;
    out->mem_blocks = c->n_mem;
    out->mem_bytes = c->n_mem * c->block_bytes;
    out->disk = c->dir != NULL;
    out->disk_blocks = c->n_disk - c->n_disk_states;
    out->disk_states = c->n_disk_states;
    out->state_snaps = c->n_snaps;
    out->state_mem_bytes = c->n_snaps * c->state_bytes;
    out->state_cap = (uint64_t)c->n_snap_cap;
    out->disk_bytes = c->disk_bytes;
    out->disk_budget = c->dir ? c->budget : 0;
    if (c->dir)
        pthread_mutex_unlock(&c->dmu);
}
