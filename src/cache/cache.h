/*
 * cache.h - the prefix cache: whole KV blocks found again by their tokens, in
 * memory and on disk.
 *
 * Keys: block i of a token list is keyed by a hash chain,
 *   key[i] = XXH3-128(key[i-1] | fingerprint | the block's token ids), key[-1] = 0,
 * so a key names the whole prefix up to the block's end. The fingerprint is
 * the model's (rp_model_fingerprint) mixed with the pool's geometry and KV
 * dtype. Every entry also keeps its parent key and token ids, compared on
 * each hit, so a hash collision costs a miss, never a wrong block.
 *
 * Memory: a cached block is a pool block marked cached (kv.h). When the last
 * sequence holding it lets go it stays in the pool, free but findable, until
 * the pool hands it out again (least recently released first); then the
 * pool's evict hook drops it from the table and, with a disk tier, queues a
 * copy for writing.
 *
 * Disk: one file per block, `<key as 32 hex digits>.kvb`, in
 * `<dir>/<fingerprint as 32 hex digits>/`: a 128-byte header (magic, format
 * version, fingerprint, key, parent key, layer count, kv heads, head size,
 * block size, dtype, payload size and XXH3-64 checksum, header checksum) and
 * the block's token ids, then the payload (rp_kv_block_read's layout).
 * Written by a background thread from copies taken on the engine thread
 * (temp name, fsync, rename), under a byte budget (least recently used files
 * go first). At create the folder is indexed from the headers; a file that
 * fails any check (also at load: tokens, parent, size, payload checksum) is
 * deleted and never used (counted in disk_rejects; the index logs one line
 * for all it deleted, a load one line per file); only regular files are read
 * (never a FIFO, a device or a symbolic link under a block's name); temp
 * files of dead writers are deleted. Lookups
 * fall through memory to disk; a disk block is read into a free pool block on
 * the engine thread when a request takes it.
 *
 * Recurrent state (a pool with state layers, kv.h): a prefix is only worth its
 * KV blocks together with the state the sequence had at their end, which is far
 * bigger than a block (Qwen3.5-9B: ~50 MiB against ~0.5 MiB) and exists only
 * where a forward ended. So the cache keeps states as snapshots, each filed
 * under the key of the block it ends (rp_cache_publish_state), in memory up to
 * a byte budget (least recently used go first) and, with a disk tier, in
 * `<key>.kvs` files beside the blocks (the same header with its own magic, the
 * block's token ids, the state as rp_kv_seq_state_read lays it out), written
 * as soon as they are made (by the writer thread, from the snapshot itself)
 * and counted in the same byte budget. A lookup's prefix ends at the last
 * block that has a snapshot; taking it restores the state into the sequence.
 *
 * Test hook: RP_CACHE_FAULT=mid-write[:N] or before-rename[:N] in the
 * environment at rp_cache_create makes the N-th block file written (default
 * 1) end the process with _exit(RP_CACHE_FAULT_EXIT) halfway through its
 * payload, or once it is whole but before its rename.
 *
 * Threads: everything but rp_cache_get_stats belongs to the engine thread
 * (the pool's owner). The writer thread touches only the disk index (under a
 * lock) and the staging buffers it was handed.
 */
#ifndef RP_CACHE_H
#define RP_CACHE_H

#include "../kv/kv.h"

#define RP_CACHE_DISK_BUDGET_DEFAULT ((uint64_t)4 << 30) // bytes
#define RP_CACHE_FLUSH_S_DEFAULT 10.0                   // seconds rp_cache_destroy may spend writing
#define RP_CACHE_FAULT_EXIT 86                          // the fault hook's exit status
#define RP_CACHE_STATE_MEM_DEFAULT ((uint64_t)1 << 30)  // bytes of state snapshots in memory

typedef struct rp_cache rp_cache;

typedef struct rp_cache_params {
    const char *dir;      // disk tier folder (blocks go to dir/<fingerprint>/); NULL or "": memory only
    uint64_t disk_budget; // most bytes of block files; 0 = RP_CACHE_DISK_BUDGET_DEFAULT
    double flush_s;       // at destroy, most seconds spent writing blocks to disk; 0 = default, < 0: none
    size_t stage_bytes;   // host memory for blocks waiting to be written; 0 = 64 MiB (at least 2 blocks)
    uint64_t state_mem;   // a pool with state layers: most bytes of state snapshots in memory
                          // (allocated as they are made; at least one); 0 = RP_CACHE_STATE_MEM_DEFAULT
} rp_cache_params;

void rp_cache_params_default(rp_cache_params *p);

// Creates the cache over a pool (borrowed; it must outlive the cache, which
// installs the pool's evict hook). model_fp: rp_model_fingerprint's 16 bytes.
// With a disk folder: creates it (and its parents), indexes it, starts the
// writer. A folder that cannot be used (cannot be made, is a file, cannot be
// read or written) is not an error: the cache is made without a disk tier
// (rp_cache_dir NULL) and one warning names the folder and the reason.
// Errors: RP_ERR_NOMEM.
rp_status rp_cache_create(rp_kv_pool *pool, const uint8_t model_fp[16], const rp_cache_params *p, rp_cache **out);
// Writes the cached blocks not yet on disk (most recently used first, for at
// most flush_s seconds, then the rest are dropped), stops the writer, removes
// the evict hook and frees the cache. Sequences holding cached blocks may
// outlive it (the blocks stay marked: call only when the pool is going too,
// or unmark them first). NULL is a no-op.
void rp_cache_destroy(rp_cache *c);

// The default base folder: $XDG_CACHE_HOME/rapid/kv, else $HOME/.cache/rapid/kv.
// Heap string (rp_free it); NULL when neither variable is set (or out of memory).
char *rp_cache_default_dir(void);
// The fingerprint folder in use (dir/<fingerprint>), or NULL without a disk tier.
const char *rp_cache_dir(const rp_cache *c);

// What a lookup found: the leading whole blocks of a token list that are cached.
typedef struct rp_cache_match {
    int n_blocks; // leading blocks found, in memory or on disk
    int n_live;   // of which in memory and held by a sequence (taking them costs no free block)
    int n_idle;   // in memory and free (each costs a free block, nothing to read)
    int n_disk;   // only on disk (each costs a free block and a read)
} rp_cache_match;

// Looks up the leading whole blocks of toks, at most max_blocks of them
// (toks holds at least max_blocks * block_size tokens). With state layers the
// prefix found ends at the last of them that has a state snapshot (in memory
// or on disk). Changes nothing but the cache's scratch, which rp_cache_take reads.
void rp_cache_lookup(rp_cache *c, const int32_t *toks, int max_blocks, rp_cache_match *out);
// Appends the blocks found by the last rp_cache_lookup (of the same toks,
// nothing taken or published in between) to s, which must be empty: memory
// blocks gain a reference, disk blocks are read into free blocks (which then
// join the memory cache). *n_blocks gets how many were appended: fewer than
// found when a disk block is gone or fails a check (the file is deleted) or
// when no block is free. With state layers it is all or nothing: the
// snapshot is written into s's state (s takes a state slot, which must be
// free) as its state at the prefix's end, and when a block or the snapshot
// cannot be had (a file gone or bad) nothing is appended. Counts hits and
// misses for the stats. Errors (s unchanged, *n_blocks 0): RP_ERR_NOMEM (the
// block table), RP_ERR_DEVICE, RP_ERR_RANGE (no free state slot).
rp_status rp_cache_take(rp_cache *c, const int32_t *toks, rp_kv_seq *s, int *n_blocks);
// Reads up to max_reads of the disk blocks found by the last rp_cache_lookup
// (of the same toks, nothing taken or published in between), in order, into
// free blocks that join the memory cache as idle cached blocks (most recently
// used, so the pool reuses them last); nobody holds them. Used to spread a long
// prefix's reads over several steps while other requests run. Returns the
// disk blocks of the lookup left unread (0: a new lookup finds the prefix in
// memory). A read that fails (file gone or bad: deleted) or no free block ends
// the reading: the prefix then ends there, and 0 is returned. The lookup is
// used up (rp_cache_take needs a new one).
int rp_cache_prefetch(rp_cache *c, const int32_t *toks, int max_reads);
// Offers s's first n_blocks whole blocks (their tokens toks[0, n_blocks *
// block_size), all with final KV) to the cache; blocks whose key is already
// cached are left as they are. The sequence keeps its references.
void rp_cache_publish(rp_cache *c, const int32_t *toks, const rp_kv_seq *s, int n_blocks);
// With state layers: publishes s's first n_blocks blocks (n_blocks >= 1) as
// rp_cache_publish does and keeps a snapshot of s's state, which must be at
// their end (state_pos == n_blocks * block_size), filed under the last one's
// key (with a disk tier it is queued for its file at once). When the memory
// budget is full the least recently used snapshot goes (one being written
// stays; when all are, this one is dropped, counted in state_drops).
void rp_cache_publish_state(rp_cache *c, const int32_t *toks, const rp_kv_seq *s, int n_blocks);
// Whether the cache keeps states (its pool has state layers).
bool rp_cache_has_states(const rp_cache *c);

typedef struct rp_cache_stats {
    uint64_t hit_blocks;      // blocks taken by requests (memory and disk)
    uint64_t disk_hit_blocks; // of which read from disk
    uint64_t miss_blocks;     // whole blocks looked up by rp_cache_take's callers and not taken
    uint64_t mem_blocks;      // pool blocks holding cached prefixes now (held or free)
    uint64_t mem_bytes;
    uint64_t mem_evictions;   // cached blocks whose pool block was reused
    bool disk;                // a disk tier is on
    uint64_t disk_blocks;     // block files indexed now
    uint64_t disk_bytes;
    uint64_t disk_budget;
    uint64_t disk_writes;       // files written (blocks and states)
    uint64_t disk_write_drops;  // blocks not written: no staging buffer free, or an I/O error
    uint64_t disk_evictions;    // files removed for the budget
    uint64_t disk_rejects;      // files deleted because they failed a check
    // Recurrent state snapshots (a pool with state layers; zeros otherwise):
    uint64_t state_saves;     // snapshots made (rp_cache_publish_state)
    uint64_t state_drops;     // snapshots not made: no memory, or every one was being written
    uint64_t state_hits;      // snapshots restored by rp_cache_take (memory and disk)
    uint64_t state_disk_hits; // of which read from disk
    uint64_t state_snaps;     // snapshots in memory now
    uint64_t state_mem_bytes; // their bytes
    uint64_t state_cap;       // most snapshots in memory (the budget's)
    uint64_t disk_states;     // state files indexed now (their bytes are in disk_bytes, their
                              // count in disk_blocks too)
} rp_cache_stats;

// A snapshot; any thread (the disk figures under the cache's lock; the memory
// figures are the engine thread's and may be a step old).
void rp_cache_get_stats(rp_cache *c, rp_cache_stats *out);

#endif
