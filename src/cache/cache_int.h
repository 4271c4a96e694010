/*
 * cache_int.h - the prefix cache's internals, shared by cache.c (keys, the
 * memory table, lookups), state.c (recurrent-state snapshots in memory) and
 * disk.c (block and state files, the folder index, the writer thread).
 */
#ifndef RP_CACHE_INT_H
#define RP_CACHE_INT_H

#include "cache.h"

#include <pthread.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the block file format is written in the host's byte order, which must be little-endian"
#endif

typedef struct rp_cache_key {
    uint64_t lo, hi;
} rp_cache_key;

static inline bool key_eq(rp_cache_key a, rp_cache_key b)
{
    return a.lo == b.lo && a.hi == b.hi;
}

// Where a looked-up block was found.
enum { WHERE_LIVE = 0, WHERE_IDLE = 1, WHERE_DISK = 2 };

// What a disk file holds: a block's KV (`.kvb`) or the recurrent state at a block's end (`.kvs`).
enum { KIND_BLOCK = 0, KIND_STATE = 1 };

// The file header, 128 bytes, followed by block_size int32 token ids and the payload. A
// state file has its own magic; its geometry fields are the state's: n_layer the state
// layers, n_kv_head the value heads, head_dim the value head size, dtype RP_DTYPE_F32 (the
// rest of the state's geometry is in the fingerprint, and the payload's size in payload_bytes).
#define BLOCK_MAGIC "RPKVBLK"   // 7 characters and a NUL: 8 bytes
#define STATE_MAGIC "RPKVSTA"
// Version 3: the payload is the backends' canonical layout (rp_backend_kv_block_export: per
// layer K then V, each by token), whatever a backend keeps in memory; versions 1 and 2 (2:
// the CPU's K, transposed inside the block) fail the header check and are deleted.
#define BLOCK_VERSION 3
typedef struct block_header {
    char magic[8];
    uint32_t version;
    uint32_t header_bytes; // 128 + 4 * block_size: where the payload starts
    uint8_t fingerprint[16];
    uint8_t key[16];
    uint8_t parent[16];
    uint32_t n_layer, n_kv_head, head_dim, block_size;
    uint32_t dtype; // rp_dtype of K and V (RP_DTYPE_F16 or RP_DTYPE_F32)
    uint32_t reserved0;
    uint64_t payload_bytes;
    uint64_t payload_sum; // XXH3-64 of the payload
    uint64_t reserved1, reserved2;
    uint64_t header_sum; // XXH3-64 of the 120 bytes before it, then the token ids
} block_header;
_Static_assert(sizeof(block_header) == 128, "the block header is 128 bytes");

// A block copied out of the pool, waiting for (or being given to) the writer.
typedef struct stage_slot {
    uint8_t *data;  // (block_bytes) the payload
    int32_t *toks;  // (block_size)
    rp_cache_key key, parent;
    uint64_t use;   // the file's last use (ns since the epoch, its mtime)
    int state;      // SLOT_FREE, SLOT_FILLING, SLOT_QUEUED, SLOT_WRITING
} stage_slot;
enum { SLOT_FREE = 0, SLOT_FILLING, SLOT_QUEUED, SLOT_WRITING };

// One indexed file (a block's or a state's: the same key may have both).
typedef struct disk_ent {
    rp_cache_key key, parent;
    uint64_t last_use; // ns since the epoch: file mtime, refreshed on use
    bool live;
    uint8_t kind;      // KIND_BLOCK or KIND_STATE
} disk_ent;

// A recurrent-state snapshot in memory: the state at the end of the prefix whose last
// block is (key, parent, toks), n_blocks blocks long.
typedef struct state_snap {
    uint8_t *data;  // (state_bytes) allocated when first used
    int32_t *toks;  // (bs) the last block's tokens
    rp_cache_key key, parent;
    int32_t n_blocks;
    uint64_t use;   // the cache clock at the last publish or hit
    bool valid;
    bool writing;   // queued for or being written to its file: data is read-only (under dmu)
} state_snap;

enum { FAULT_NONE = 0, FAULT_MID_WRITE, FAULT_BEFORE_RENAME };

struct rp_cache {
    rp_kv_pool *pool;
    int bs, n_blocks;
    size_t block_bytes;
    uint8_t fp[16]; // the cache's fingerprint: the model's with the pool geometry and dtype
    char fp_hex[33];

    // Memory (engine thread), indexed by pool block id.
    bool *m_valid;          // (n_blocks) the block is in the table
    rp_cache_key *m_key;    // (n_blocks)
    rp_cache_key *m_parent; // (n_blocks)
    int32_t *m_toks;        // (n_blocks, bs)
    uint64_t *m_use;        // (n_blocks) the clock at the last publish or hit; within one prefix
                            // the earlier blocks get the later stamps (a block is no use without
                            // its parents, so they are kept longer)
    uint64_t clock;
    int32_t *m_table;       // (m_cap) open addressing by key.lo, block ids, -1 empty
    size_t m_cap;
    uint64_t n_mem;

    // The last lookup (engine thread).
    rp_cache_key *l_key; // (n_blocks)
    uint8_t *l_where;    // (n_blocks)
    int32_t *l_block;    // (n_blocks) memory blocks found
    int l_n, l_max;
    int32_t *t_blocks;   // (n_blocks) rp_cache_take's scratch
    uint8_t *load_buf;   // (block_bytes) a disk block being read
    int l_snap;          // the last lookup's state: a snapshot index, L_SNAP_DISK, or -1

    // Recurrent state (state_bytes 0: the pool has none).
    size_t state_bytes;  // one snapshot (rp_kv_pool_state_bytes)
    state_snap *snaps;   // (n_snap_cap)
    int32_t *snap_toks;  // (n_snap_cap, bs)
    int n_snap_cap;      // snapshots the memory budget allows
    uint64_t n_snaps;    // valid ones

    // Disk (NULL dir: none).
    char *dir;
    uint64_t budget;
    double flush_s;
    int fault, fault_at; // the test hook
    pthread_mutex_t dmu; // guards the index, the staging queue and the counters below
    pthread_cond_t dcv;  // the writer waits for work; the engine for a free slot
    bool dmu_live, dcv_live;
    disk_ent *ents;     // (ent_cap)
    int32_t *ent_toks;  // (ent_cap, bs)
    int32_t *ent_free;  // (ent_cap) recycled entry indices
    int n_ent, ent_cap, n_ent_free;
    int32_t *d_table;   // (d_cap) entry indices, -1 empty
    size_t d_cap;
    uint64_t n_disk, n_disk_states, disk_bytes; // n_disk: entries of both kinds
    stage_slot *slots;  // (n_slots)
    int n_slots;
    uint8_t *stage_data; // (n_slots, block_bytes) the slots' payloads, one allocation
    int32_t *stage_toks; // (n_slots, bs)
    int *q;             // (n_slots) ring of queued slot indices
    int q_head, q_len;
    int *sq;            // (n_snap_cap) ring of snapshots queued for their files
    int sq_head, sq_len;
    pthread_t writer;
    bool writer_live, stopping;
    double deadline;    // rp_time_s() past which a stopping writer drops what is left
    uint64_t n_writes;  // files started (for the fault hook)

    rp_cache_stats st; // counters (disk ones under dmu)
};

#define L_SNAP_DISK (-2) // l_snap: the lookup's state is on disk

// cache.c
rp_cache_key rp_cache_key_of(const rp_cache *c, rp_cache_key parent, const int32_t *toks);
void rp_cache_key_hex(rp_cache_key k, char out[33]);
// rp_cache_publish, giving the key of the last block published and its parent's (zeros: none).
void rp_cache_publish_keys(rp_cache *c, const int32_t *toks, const rp_kv_seq *s, int n_blocks, rp_cache_key *last,
                           rp_cache_key *last_parent);

// state.c
rp_status rp_cache_states_init(rp_cache *c, const rp_cache_params *p);
void rp_cache_states_free(rp_cache *c);
// Ends the last lookup's prefix at its last block with a snapshot (memory or disk): l_n and
// l_snap set, the match's counts recomputed.
void rp_cache_states_trim(rp_cache *c, const int32_t *toks, rp_cache_match *out);
// Writes the last lookup's snapshot into s's state at the prefix's end (l_n blocks), reading
// it from disk into a memory snapshot first when it is there. *found false when that read
// fails (the file gone or bad; s unchanged); errors: kv's (rp_kv_seq_state_write).
rp_status rp_cache_states_restore(rp_cache *c, const int32_t *toks, rp_kv_seq *s, bool *found);

// disk.c
rp_status rp_cache_disk_open(rp_cache *c, const char *base, const rp_cache_params *p);
void rp_cache_disk_close(rp_cache *c);
// True when the index has a file of this kind for key with this parent and tokens (one
// that checked out at index time).
bool rp_cache_disk_has(rp_cache *c, int kind, rp_cache_key key, rp_cache_key parent, const int32_t *toks);
// Reads the block file of key into pool block b after checking everything;
// false (the file deleted and unindexed when it failed a check) otherwise.
bool rp_cache_disk_load(rp_cache *c, rp_cache_key key, rp_cache_key parent, const int32_t *toks, int32_t b);
// The same for the state file of key, into dst (state_bytes).
bool rp_cache_disk_load_state(rp_cache *c, rp_cache_key key, rp_cache_key parent, const int32_t *toks, void *dst);
// Queues snapshot i for its file (marks it writing); when the file is there already, only
// refreshes its recency.
void rp_cache_disk_stage_state(rp_cache *c, int i);
// Copies pool block b (memory entry) for the writer, to be filed as last used
// at `use` (ns since the epoch). wait: block until a slot frees or the
// deadline passes (shutdown); else drop when none is free.
void rp_cache_disk_stage(rp_cache *c, int32_t b, uint64_t use, bool wait);
uint64_t rp_cache_now_ns(void);

#endif
