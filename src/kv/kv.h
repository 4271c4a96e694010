/*
 * kv.h - the paged KV cache: a pool of fixed-size blocks and per-sequence block tables.
 *
 * The pool holds, for every layer, n_blocks blocks of block_size token slots
 * (K and V of n_kv_head x head_dim values each, f16 or f32), in backend memory. A sequence
 * owns a block table: its token at position p lives in slot
 * table[p / block_size] * block_size + p % block_size. Blocks are reference
 * counted so that a prefix can be shared by several sequences; a sequence can
 * be truncated (speculative rollback) and the blocks past the new end return
 * to the pool.
 *
 * Cached blocks (the prefix cache, src/cache/): a block marked cached keeps
 * its contents when its last reference goes. It is then free (counted by
 * rp_kv_pool_free_blocks, and taken when nothing better is left) but can be
 * taken back with rp_kv_block_ref as long as it has not been reused. Free
 * blocks form one list: plain ones at the head (handed out first, lowest id
 * first at the start), cached ones appended at the tail as they are released,
 * so the cached block reused first is the one released longest ago (LRU). A
 * sequence releases its blocks last first, so the end of a prefix goes before
 * its beginning. Handing out a cached block first calls the pool's evict hook
 * (the prefix cache forgets the block, and may copy it to disk), then clears
 * the mark.
 *
 * The contents of a block that is shared (references > 1) or cached must not
 * change: a sequence that has to write into its last block when that block is
 * shared makes it private first (rp_kv_seq_unshare_last).
 *
 * Recurrent state (models with Gated DeltaNet layers, rp_kv_pool_add_states): the
 * pool also holds n_slots state slots per state layer (backend.h's rp_state_layer:
 * two copies of a sequence's state, and a log of its last forward's inputs). A
 * sequence takes a slot with its first reservation and gives it back when truncated
 * to nothing. Its state has consumed positions [0, state_pos); the forward advances
 * it (reading copy state_cur, writing the other, rp_kv_seq_state_advance). After a
 * forward of at most log_cap tokens the other copy still holds the state before it
 * (at log_pos) and the log its inputs, so the model can roll the state back to any
 * position in [log_pos, state_pos] (rp_model_seq_truncate replays the log); below
 * log_pos the state is gone, and truncating there (other than to 0) is a programmer
 * error.
 *
 * Threads: the pool and its sequences belong to the engine thread.
 */
#ifndef RP_KV_H
#define RP_KV_H

#include "../backend/backend.h"

typedef struct rp_kv_pool rp_kv_pool;

// A sequence's view of the pool. Caller-owned; rp_kv_seq_init / rp_kv_seq_deinit.
typedef struct rp_kv_seq {
    int32_t *blocks;  // (cap) block ids, the first n_blocks in use
    int32_t n_blocks;
    int32_t cap;
    int32_t n_tokens; // slots held: positions [0, n_tokens)
    // Recurrent state (a pool with state layers; all 0 otherwise and when it holds none):
    int32_t state_slot; // 1 + its slot, 0: none
    int32_t state_pos;  // positions the state has consumed: [0, state_pos) (<= n_tokens)
    int32_t state_cur;  // the copy (0 or 1) holding the state at state_pos
    int32_t log_pos;    // >= 0: the other copy holds the state at log_pos and the log the inputs
                        // from there to state_pos; -1: no rollback possible
} rp_kv_seq;

// Called when a cached block is about to be handed out for new contents; the
// block still holds its old contents during the call. Engine thread.
typedef void (*rp_kv_evict_fn)(void *ctx, int32_t block);

// Creates a pool of n_blocks blocks of block_size tokens for n_layer layers, K and V
// stored as type (RP_DTYPE_F16 or RP_DTYPE_F32; RP_ERR_INVALID otherwise).
rp_status rp_kv_pool_create(rp_backend *be, int n_layer, int n_kv_head, int head_dim, int block_size, int n_blocks,
                            rp_dtype type, rp_kv_pool **out);
void rp_kv_pool_destroy(rp_kv_pool *p);
rp_kv_layer *rp_kv_pool_layer(rp_kv_pool *p, int layer);
int rp_kv_pool_block_size(const rp_kv_pool *p);
int rp_kv_pool_n_blocks(const rp_kv_pool *p);
int rp_kv_pool_n_layers(const rp_kv_pool *p);
int rp_kv_pool_n_kv_head(const rp_kv_pool *p);
int rp_kv_pool_head_dim(const rp_kv_pool *p);
rp_dtype rp_kv_pool_type(const rp_kv_pool *p);
// Blocks with no reference: plain free ones plus cached ones nobody holds.
int rp_kv_pool_free_blocks(const rp_kv_pool *p);
// Of the free blocks, those marked cached.
int rp_kv_pool_cached_free(const rp_kv_pool *p);
// Bytes one block takes over all layers (K and V) when they are stored as type.
size_t rp_kv_block_bytes(int n_layer, int n_kv_head, int head_dim, int block_size, rp_dtype type);
// rp_kv_block_bytes of this pool's geometry.
size_t rp_kv_pool_block_bytes(const rp_kv_pool *p);
// Sets the hook called before a cached block is reused (NULL: none).
void rp_kv_pool_set_evict(rp_kv_pool *p, rp_kv_evict_fn fn, void *ctx);

// ---- recurrent state ----

// The geometry of a pool's state layers (all alike): rp_state_layer's.
typedef struct rp_kv_state_geom {
    int n_layer;                  // state layers
    int n_k_head, n_v_head, dk, dv, kc;
    int n_slots;                  // sequences that can hold state at once
    int log_cap;                  // tokens a forward may have for its state to be rolled back
} rp_kv_state_geom;

// Gives the pool state layers (once, before any sequence reserves). Errors: RP_ERR_INVALID
// (geometry, called twice), RP_ERR_NOMEM (the message names the size).
rp_status rp_kv_pool_add_states(rp_kv_pool *p, const rp_kv_state_geom *g);
// Bytes of state one slot takes over all state layers (both copies and the log), for a
// geometry (a memory budget's sizing) and for the pool's (0 without states).
size_t rp_kv_state_slot_bytes(const rp_kv_state_geom *g);
size_t rp_kv_pool_state_slot_bytes(const rp_kv_pool *p);
int rp_kv_pool_n_state_layers(const rp_kv_pool *p);
rp_state_layer *rp_kv_pool_state_layer(rp_kv_pool *p, int layer);
// Slots no sequence holds (0 without states).
int rp_kv_pool_free_states(const rp_kv_pool *p);
// Bytes of one sequence's state over all state layers, one copy (rp_kv_seq_state_read's
// layout: layer by layer, rp_state_floats floats each, the recurrent matrix then the conv
// window, as the backend keeps them); 0 without state layers.
size_t rp_kv_pool_state_bytes(const rp_kv_pool *p);
// Copies s's state (at state_pos; s holds a slot) to host memory, rp_kv_pool_state_bytes bytes.
// Errors: RP_ERR_DEVICE.
rp_status rp_kv_seq_state_read(rp_kv_pool *p, const rp_kv_seq *s, void *host);
// Makes the state in host memory s's state at pos (pos <= n_tokens), taking a slot when s
// holds none: state_pos = pos, and no rollback below it. Errors: RP_ERR_RANGE (no free slot;
// s unchanged), RP_ERR_DEVICE (a slot s already held has lost its state).
rp_status rp_kv_seq_state_write(rp_kv_pool *p, rp_kv_seq *s, int32_t pos, const void *host);
// After a forward ran n tokens of s from state_pos: the state is at state_pos + n in the other
// copy; rollback possible when n <= log_cap. For the model's forward.
void rp_kv_seq_state_advance(const rp_kv_pool *p, rp_kv_seq *s, int32_t n);

// ---- single blocks (b in [0, n_blocks); RP_ASSERT on a bad id) ----

int32_t rp_kv_block_refs(const rp_kv_pool *p, int32_t b);
bool rp_kv_block_is_cached(const rp_kv_pool *p, int32_t b);
// Marks or unmarks b as cached. Unmarking a free cached block moves it to the
// head of the free list (it holds nothing worth keeping any more).
void rp_kv_block_set_cached(rp_kv_pool *p, int32_t b, bool cached);
// Takes a free block (plain ones first, then the least recently released cached
// one, after the evict hook): *out has one reference. RP_ERR_RANGE when none is free.
rp_status rp_kv_block_alloc(rp_kv_pool *p, int32_t *out);
// Adds a reference; a free cached block leaves the free list (a cache hit).
// Taking a free block that is not cached is a programmer error.
void rp_kv_block_ref(rp_kv_pool *p, int32_t b);
// Drops a reference; at zero the block is free again.
void rp_kv_block_unref(rp_kv_pool *p, int32_t b);
// Copies block b's K and V of every layer to host memory (rp_kv_pool_block_bytes
// bytes, layer by layer, K then V, each (block_size, n_kv_head, head_dim) of the pool's
// type: the canonical layout of rp_backend_kv_block_export, the same on every backend).
rp_status rp_kv_block_read(rp_kv_pool *p, int32_t b, void *host);
// The reverse of rp_kv_block_read: fills block b from host memory.
rp_status rp_kv_block_write(rp_kv_pool *p, int32_t b, const void *host);
// Copies every layer of block src into block dst (within backend memory).
rp_status rp_kv_block_copy(rp_kv_pool *p, int32_t dst, int32_t src);

// ---- sequences ----

void rp_kv_seq_init(rp_kv_seq *s);
// Releases the sequence's blocks and its table.
void rp_kv_seq_deinit(rp_kv_pool *p, rp_kv_seq *s);
// Grows the sequence to hold n_tokens slots, taking blocks from the pool (and, in a pool
// with state layers, a state slot if it holds none). RP_ERR_RANGE (nothing changed) when
// the pool has too few free blocks or no free state slot;
// RP_ERR_NOMEM (nothing changed) when the table cannot grow.
rp_status rp_kv_seq_reserve(rp_kv_pool *p, rp_kv_seq *s, int32_t n_tokens);
// Appends n whole blocks whose references the caller hands over (each block
// already counts one reference for this sequence); the sequence must end on a
// block boundary (n_tokens == n_blocks * block_size) and grows by n blocks of
// tokens. RP_ERR_NOMEM (nothing changed, the references stay the caller's).
rp_status rp_kv_seq_adopt(rp_kv_pool *p, rp_kv_seq *s, const int32_t *blocks, int n);
// Makes the sequence's last block its own: when it is shared or cached, a
// free block takes a copy of it and replaces it in the table (the old one
// loses a reference). RP_ERR_RANGE (nothing changed) when no block is free.
rp_status rp_kv_seq_unshare_last(rp_kv_pool *p, rp_kv_seq *s);
// Shrinks the sequence to n_tokens slots (n_tokens <= s->n_tokens); blocks past
// the end are released. With state: n_tokens 0 gives the state slot back; otherwise
// n_tokens must not be below state_pos (rp_model_seq_truncate rolls the state back first).
void rp_kv_seq_truncate(rp_kv_pool *p, rp_kv_seq *s, int32_t n_tokens);
// The slot of position pos (pos < s->n_tokens).
static inline int32_t rp_kv_seq_slot(const rp_kv_pool *p, const rp_kv_seq *s, int32_t pos)
{
    int bs = rp_kv_pool_block_size(p);
    return s->blocks[pos / bs] * bs + pos % bs;
}

#endif
