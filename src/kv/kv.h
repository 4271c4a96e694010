/*
 * kv.h - the paged KV cache: a pool of fixed-size blocks and per-sequence block tables.
 *
 * The pool holds, for every layer, n_blocks blocks of block_size token slots
 * (K and V of n_kv_head x head_dim floats each), in backend memory. A sequence
 * owns a block table: its token at position p lives in slot
 * table[p / block_size] * block_size + p % block_size. Blocks are reference
 * counted so that later a prefix can be shared by several sequences; a
 * sequence can be truncated (speculative rollback) and the blocks past the new
 * end return to the pool.
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
} rp_kv_seq;

// Creates a pool of n_blocks blocks of block_size tokens for n_layer layers.
rp_status rp_kv_pool_create(rp_backend *be, int n_layer, int n_kv_head, int head_dim, int block_size, int n_blocks,
                            rp_kv_pool **out);
void rp_kv_pool_destroy(rp_kv_pool *p);
rp_kv_layer *rp_kv_pool_layer(rp_kv_pool *p, int layer);
int rp_kv_pool_block_size(const rp_kv_pool *p);
int rp_kv_pool_n_blocks(const rp_kv_pool *p);
int rp_kv_pool_n_layers(const rp_kv_pool *p);
int rp_kv_pool_free_blocks(const rp_kv_pool *p);
// Bytes one block takes over all layers (K and V).
size_t rp_kv_block_bytes(int n_layer, int n_kv_head, int head_dim, int block_size);

void rp_kv_seq_init(rp_kv_seq *s);
// Releases the sequence's blocks and its table.
void rp_kv_seq_deinit(rp_kv_pool *p, rp_kv_seq *s);
// Grows the sequence to hold n_tokens slots, taking blocks from the pool.
// RP_ERR_RANGE (nothing changed) when the pool has too few free blocks.
rp_status rp_kv_seq_reserve(rp_kv_pool *p, rp_kv_seq *s, int32_t n_tokens);
// Shrinks the sequence to n_tokens slots (n_tokens <= s->n_tokens); blocks past
// the end are released.
void rp_kv_seq_truncate(rp_kv_pool *p, rp_kv_seq *s, int32_t n_tokens);
// The slot of position pos (pos < s->n_tokens).
static inline int32_t rp_kv_seq_slot(const rp_kv_pool *p, const rp_kv_seq *s, int32_t pos)
{
    int bs = rp_kv_pool_block_size(p);
    return s->blocks[pos / bs] * bs + pos % bs;
}

#endif
