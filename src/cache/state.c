/*
 * state.c - the prefix cache's recurrent-state snapshots in memory (models
 * with Gated DeltaNet layers): made when a sequence's state sits at the end of
 * a block (rp_cache_publish_state), filed under that block's key, found again
 * by a lookup (whose prefix is cut back to the last block that has one), and
 * written into the state slot of the sequence that takes the prefix.
 *
 * A fixed array of snapshots, as many as the memory budget allows, each
 * allocated when first used; the least recently used is replaced first, but
 * never one the writer thread is still copying to its file (disk.c). The array
 * is small (a snapshot is megabytes), so it is searched linearly.
 */
#include "cache_int.h"

#define SNAPS_MAX 4096 // most snapshots, whatever the budget

rp_status rp_cache_states_init(rp_cache *c, const rp_cache_params *p)
{
    c->l_snap = -1;
    c->state_bytes = rp_kv_pool_state_bytes(c->pool);
    if (!c->state_bytes)
        return RP_OK;
    uint64_t budget = p->state_mem ? p->state_mem : RP_CACHE_STATE_MEM_DEFAULT;
    uint64_t n = budget / c->state_bytes;
    n = n < 1 ? 1 : n > SNAPS_MAX ? SNAPS_MAX : n;
    c->snaps = rp_calloc(n, sizeof(state_snap));
    c->snap_toks = rp_malloc(n * (size_t)c->bs * sizeof(int32_t));
    if (!c->snaps || !c->snap_toks)
        return RP_ERR(RP_ERR_NOMEM, "prefix cache: out of memory for %llu state snapshots", (unsigned long long)n);
    c->n_snap_cap = (int)n;
    for (int i = 0; i < c->n_snap_cap; i++)
        c->snaps[i].toks = c->snap_toks + (size_t)i * c->bs;
    return RP_OK;
}

void rp_cache_states_free(rp_cache *c)
{
    for (int i = 0; c->snaps && i < c->n_snap_cap; i++)
        rp_free_aligned(c->snaps[i].data);
    rp_free(c->snaps);
    rp_free(c->snap_toks);
    c->snaps = NULL;
    c->snap_toks = NULL;
}

bool rp_cache_has_states(const rp_cache *c)
{
    return c->state_bytes > 0;
}

// The valid snapshot of exactly (key, parent, toks), or -1.
static int snap_find(const rp_cache *c, rp_cache_key k, rp_cache_key parent, const int32_t *toks)
{
    for (int i = 0; i < c->n_snap_cap; i++) {
        const state_snap *s = &c->snaps[i];
        if (s->valid && key_eq(s->key, k) && key_eq(s->parent, parent) &&
            memcmp(s->toks, toks, (size_t)c->bs * sizeof(int32_t)) == 0)
            return i;
    }
    return -1;
}

// A snapshot to fill, emptied, with its memory: an unused one, else the least recently
// used one that is not being written; -1 when there is none (or no memory for it).
static int snap_victim(rp_cache *c)
{
    int best = -1;
    if (c->dir)
        pthread_mutex_lock(&c->dmu);
    for (int i = 0; i < c->n_snap_cap; i++) {
        const state_snap *s = &c->snaps[i];
        if (!s->valid && !s->writing) {
            best = i;
            break;
        }
        if (!s->writing && (best < 0 || s->use < c->snaps[best].use))
            best = i;
    }
    if (c->dir)
        pthread_mutex_unlock(&c->dmu);
    if (best < 0)
        return -1;
    state_snap *s = &c->snaps[best];
    if (s->valid) {
        s->valid = false;
        c->n_snaps--;
    }
    if (!s->data && !(s->data = rp_malloc_aligned(c->state_bytes)))
        return -1;
    return best;
}

void rp_cache_publish_state(rp_cache *c, const int32_t *toks, const rp_kv_seq *s, int n_blocks)
{
    RP_ASSERT(c->state_bytes && n_blocks >= 1 && n_blocks <= s->n_blocks && s->state_slot > 0 &&
              s->state_pos == n_blocks * c->bs);
    rp_cache_key key, parent;
    rp_cache_publish_keys(c, toks, s, n_blocks, &key, &parent);
    const int32_t *t = toks + (size_t)(n_blocks - 1) * c->bs;
    int i = snap_find(c, key, parent, t);
    if (i >= 0) { // the same prefix's state again (it depends on the tokens alone)
        c->snaps[i].use = c->clock++;
        return;
    }
    if ((i = snap_victim(c)) < 0) {
        c->st.state_drops++;
        return;
    }
    state_snap *sn = &c->snaps[i];
    if (rp_kv_seq_state_read(c->pool, s, sn->data) != RP_OK) {
        c->st.state_drops++;
        return;
    }
    sn->key = key;
    sn->parent = parent;
    memcpy(sn->toks, t, (size_t)c->bs * sizeof(int32_t));
    sn->n_blocks = n_blocks;
    sn->use = c->clock++;
    sn->valid = true;
    c->n_snaps++;
    c->st.state_saves++;
    if (c->dir)
        rp_cache_disk_stage_state(c, i);
}

void rp_cache_states_trim(rp_cache *c, const int32_t *toks, rp_cache_match *out)
{
    int best = 0;
    c->l_snap = -1;
    for (int i = 0; i < c->n_snap_cap; i++) { // the longest prefix with a snapshot in memory
        const state_snap *s = &c->snaps[i];
        int n = s->n_blocks;
        if (!s->valid || n > c->l_n || n <= best || !key_eq(c->l_key[n - 1], s->key))
            continue;
        rp_cache_key parent = n > 1 ? c->l_key[n - 2] : (rp_cache_key){0, 0};
        if (key_eq(s->parent, parent) && memcmp(s->toks, toks + (size_t)(n - 1) * c->bs, (size_t)c->bs * 4) == 0) {
            best = n;
            c->l_snap = i;
        }
    }
    for (int n = c->l_n; c->dir && n > best; n--) { // a longer one on disk
        rp_cache_key parent = n > 1 ? c->l_key[n - 2] : (rp_cache_key){0, 0};
        if (rp_cache_disk_has(c, KIND_STATE, c->l_key[n - 1], parent, toks + (size_t)(n - 1) * c->bs)) {
            best = n;
            c->l_snap = L_SNAP_DISK;
            break;
        }
    }
    c->l_n = best;
    out->n_blocks = best;
    out->n_live = out->n_idle = out->n_disk = 0;
    for (int i = 0; i < best; i++) {
        out->n_live += c->l_where[i] == WHERE_LIVE;
        out->n_idle += c->l_where[i] == WHERE_IDLE;
        out->n_disk += c->l_where[i] == WHERE_DISK;
    }
}

rp_status rp_cache_states_restore(rp_cache *c, const int32_t *toks, rp_kv_seq *s, bool *found)
{
    *found = false;
    int n = c->l_n, i = c->l_snap;
    RP_ASSERT(n > 0 && i != -1);
    if (i == L_SNAP_DISK) { // into a memory snapshot first: the next hit is a memcpy
        rp_cache_key key = c->l_key[n - 1], parent = n > 1 ? c->l_key[n - 2] : (rp_cache_key){0, 0};
        const int32_t *t = toks + (size_t)(n - 1) * c->bs;
        if ((i = snap_victim(c)) < 0 || !rp_cache_disk_load_state(c, key, parent, t, c->snaps[i].data))
            return RP_OK; // no memory for it, or the file is gone or bad: a miss
        state_snap *sn = &c->snaps[i];
        sn->key = key;
        sn->parent = parent;
        memcpy(sn->toks, t, (size_t)c->bs * sizeof(int32_t));
        sn->n_blocks = n;
        sn->valid = true;
        c->n_snaps++;
        c->st.state_disk_hits++;
    }
    rp_status st = rp_kv_seq_state_write(c->pool, s, n * c->bs, c->snaps[i].data);
    if (st)
        return st;
    c->snaps[i].use = c->clock++;
    c->st.state_hits++;
    *found = true;
    return RP_OK;
}
