/*
 * disk.c - the prefix cache's disk tier: block and state files, the folder
 * index, the writer thread and the byte budget.
 *
 * Writes never run on the engine thread: it only copies an evicted block
 * into a free staging buffer (rp_kv_block_read, a memcpy on the CPU) and
 * queues it; when every buffer is busy the block is dropped (counted), so a
 * burst of evictions cannot stall a step. The writer thread takes the queued
 * blocks in batches (up to WRITE_BATCH): it writes each to its temp name, makes
 * them all durable with one syncfs of the folder's file system (one journal
 * commit and cache flush for the batch instead of one per file; fsync of each
 * where syncfs fails), renames them into place (rp_file_writer_publish),
 * fsyncs the folder once so the renames last too, then indexes them. A file is
 * still never renamed before its bytes are on disk: a crash leaves whole files
 * and temp files, never a partial file under a block's name.
 * Before a write it removes least recently used files until the new one fits
 * the budget. Reads run on the engine thread when a request takes a disk
 * block: the file is opened, its header and tokens checked against the
 * lookup, its payload checked against its checksum, then uploaded into a pool
 * block; the file's mtime is set to now, which is its recency across restarts.
 *
 * The index lives in memory: per file its key, parent key, tokens and last
 * use, in an open-addressing table (backward-shift deletion) under dmu. It is
 * built at open from the headers alone (the payload checksum waits for a
 * load); temp files whose writer process is gone are deleted then.
 *
 * State files (a pool with state layers, cache.h) go the same way with two
 * differences: a snapshot is queued as soon as it is made, and the writer
 * writes it from the snapshot itself (marked writing meanwhile, so it is not
 * replaced) instead of a staging copy, because it is far bigger than a block.
 * Index entries carry their kind: a block and its state share a key.
 */
#include "cache_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#define DIR_MAX 3000 // longest folder name accepted (file paths are built in fixed buffers)
#define PATH_BUF 4096
#define SLOTS_MAX 4096 // most staging buffers
#define STAGE_BYTES_DEFAULT ((size_t)64 << 20)
#define WRITE_BATCH 64 // most files made durable by one sync

uint64_t rp_cache_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static const char *const EXT[2] = {"kvb", "kvs"}; // by kind

static void file_path(const rp_cache *c, int kind, rp_cache_key k, char out[PATH_BUF])
{
    char hex[33];
    rp_cache_key_hex(k, hex);
    snprintf(out, PATH_BUF, "%s/%s.%s", c->dir, hex, EXT[kind]);
}

static size_t header_bytes(const rp_cache *c)
{
    return sizeof(block_header) + (size_t)c->bs * sizeof(int32_t);
}

static size_t payload_bytes(const rp_cache *c, int kind)
{
    return kind == KIND_STATE ? c->state_bytes : c->block_bytes;
}

static uint64_t file_bytes(const rp_cache *c, int kind)
{
    return header_bytes(c) + payload_bytes(c, kind);
}

// The header's geometry fields for a kind: n_layer, n_kv_head, head_dim, dtype.
static void geometry(const rp_cache *c, int kind, uint32_t g[4])
{
    if (kind == KIND_STATE) {
        const rp_state_layer *st = rp_kv_pool_state_layer(c->pool, 0);
        g[0] = (uint32_t)rp_kv_pool_n_state_layers(c->pool);
        g[1] = (uint32_t)st->n_v_head;
        g[2] = (uint32_t)st->dv;
        g[3] = (uint32_t)RP_DTYPE_F32;
    } else {
        g[0] = (uint32_t)rp_kv_pool_n_layers(c->pool);
        g[1] = (uint32_t)rp_kv_pool_n_kv_head(c->pool);
        g[2] = (uint32_t)rp_kv_pool_head_dim(c->pool);
        g[3] = (uint32_t)rp_kv_pool_type(c->pool);
    }
}

static uint64_t header_sum(const block_header *h, const int32_t *toks, int bs)
{
    XXH3_state_t s;
    XXH3_INITSTATE(&s);
    XXH3_64bits_reset(&s);
    XXH3_64bits_update(&s, h, offsetof(block_header, header_sum));
    XXH3_64bits_update(&s, toks, (size_t)bs * sizeof(int32_t));
    return XXH3_64bits_digest(&s);
}

static rp_cache_key key_from_bytes(const uint8_t b[16])
{
    rp_cache_key k;
    memcpy(&k.lo, b, 8);
    memcpy(&k.hi, b + 8, 8);
    return k;
}

static void key_to_bytes(rp_cache_key k, uint8_t b[16])
{
    memcpy(b, &k.lo, 8);
    memcpy(b + 8, &k.hi, 8);
}

// Everything a header can be checked for on its own: magic, version, sizes,
// geometry, fingerprint, its checksum, the key of its parent and tokens, and
// the file's size. NULL when it passes, else what failed (for the log).
static const char *header_problem(const rp_cache *c, int kind, const block_header *h, const int32_t *toks,
                                  uint64_t size)
{
    if (memcmp(h->magic, kind == KIND_STATE ? STATE_MAGIC : BLOCK_MAGIC, sizeof(h->magic)) != 0)
        return kind == KIND_STATE ? "not a state file" : "not a block file";
    if (h->version != BLOCK_VERSION)
        return "another format version";
    if (memcmp(h->fingerprint, c->fp, 16) != 0)
        return "another model's block";
    if (kind == KIND_STATE && !c->state_bytes)
        return "a state file, for a model without state";
    uint32_t g[4];
    geometry(c, kind, g);
    if (h->header_bytes != header_bytes(c) || h->n_layer != g[0] || h->n_kv_head != g[1] || h->head_dim != g[2] ||
        h->block_size != (uint32_t)c->bs || h->dtype != g[3] || h->payload_bytes != payload_bytes(c, kind))
        return kind == KIND_STATE ? "another state layout" : "another KV layout";
    if (size != file_bytes(c, kind))
        return "wrong size (truncated?)";
    if (h->header_sum != header_sum(h, toks, c->bs))
        return "header checksum mismatch";
    rp_cache_key want = rp_cache_key_of(c, key_from_bytes(h->parent), toks);
    if (!key_eq(want, key_from_bytes(h->key)))
        return "key does not match its tokens";
    return NULL;
}

// Opens a block file for reading, only if it is a regular file: never blocks
// on a FIFO or a device (O_NONBLOCK), never follows a symbolic link (block
// files are written and renamed into place by the cache itself, so a link
// under a block's name is not one of them). The fd, with *sb filled; or -1
// with *why set when the name holds something else than a block file (to be
// deleted), NULL when it cannot be opened now (gone, out of descriptors, ...:
// nothing to hold against the file).
static int open_block(const char *path, struct stat *sb, const char **why)
{
    *why = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY);
    if (fd < 0) {
        if (errno == ELOOP)
            *why = "a symbolic link, not a block file";
        return -1;
    }
    if (fstat(fd, sb) != 0 || !S_ISREG(sb->st_mode)) {
        *why = "not a regular file";
        close(fd);
        return -1;
    }
    return fd;
}

static bool read_full(int fd, void *buf, size_t n, off_t at)
{
    uint8_t *p = buf;
    while (n) {
        ssize_t k = pread(fd, p, n, at);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        p += k;
        n -= (size_t)k;
        at += k;
    }
    return true;
}

/* ---- the index (dmu held) ------------------------------------------------- */

static size_t d_home(const rp_cache *c, rp_cache_key k, int kind)
{
    return (size_t)(k.lo ^ (uint64_t)kind) & (c->d_cap - 1);
}

static int32_t d_find(const rp_cache *c, rp_cache_key k, int kind)
{
    if (!c->d_cap)
        return -1;
    for (size_t i = d_home(c, k, kind);; i = (i + 1) & (c->d_cap - 1)) {
        int32_t e = c->d_table[i];
        if (e < 0)
            return -1;
        if (key_eq(c->ents[e].key, k) && c->ents[e].kind == kind)
            return e;
    }
}

static void d_place(rp_cache *c, int32_t e)
{
    size_t i = d_home(c, c->ents[e].key, c->ents[e].kind);
    while (c->d_table[i] >= 0)
        i = (i + 1) & (c->d_cap - 1);
    c->d_table[i] = e;
}

// Room for one more entry: the entry arrays and a table at most half full.
static bool d_reserve(rp_cache *c)
{
    if ((c->n_disk + 1) * 2 > c->d_cap) {
        size_t cap = c->d_cap ? c->d_cap * 2 : 1024;
        int32_t *t = rp_malloc(cap * sizeof(int32_t));
        if (!t)
            return false;
        for (size_t i = 0; i < cap; i++)
            t[i] = -1;
        rp_free(c->d_table);
        c->d_table = t;
        c->d_cap = cap;
        for (int e = 0; e < c->n_ent; e++)
            if (c->ents[e].live)
                d_place(c, e);
    }
    if (c->n_ent_free == 0 && c->n_ent == c->ent_cap) {
        int cap = c->ent_cap ? c->ent_cap * 2 : 1024;
        disk_ent *ne = rp_realloc(c->ents, (size_t)cap * sizeof(disk_ent));
        if (!ne)
            return false;
        c->ents = ne;
        int32_t *nt = rp_realloc(c->ent_toks, (size_t)cap * c->bs * sizeof(int32_t));
        if (!nt)
            return false;
        c->ent_toks = nt;
        int32_t *nf = rp_realloc(c->ent_free, (size_t)cap * sizeof(int32_t));
        if (!nf)
            return false;
        c->ent_free = nf;
        c->ent_cap = cap;
    }
    return true;
}

// Adds an entry (d_reserve succeeded); the bytes are the caller's to count.
static void d_insert(rp_cache *c, int kind, rp_cache_key key, rp_cache_key parent, const int32_t *toks,
                     uint64_t last_use)
{
    int32_t e = c->n_ent_free ? c->ent_free[--c->n_ent_free] : c->n_ent++;
    c->ents[e] = (disk_ent){key, parent, last_use, true, (uint8_t)kind};
    memcpy(c->ent_toks + (size_t)e * c->bs, toks, (size_t)c->bs * sizeof(int32_t));
    d_place(c, e);
    c->n_disk++;
    c->n_disk_states += kind == KIND_STATE;
}

static void d_remove(rp_cache *c, int32_t e)
{
    const disk_ent *de = &c->ents[e];
    size_t mask = c->d_cap - 1, i = d_home(c, de->key, de->kind);
    while (c->d_table[i] != e)
        i = (i + 1) & mask;
    for (size_t j = (i + 1) & mask; c->d_table[j] >= 0; j = (j + 1) & mask) {
        const disk_ent *dj = &c->ents[c->d_table[j]];
        size_t h = d_home(c, dj->key, dj->kind);
        bool movable = i <= j ? (h <= i || h > j) : (h <= i && h > j);
        if (movable) {
            c->d_table[i] = c->d_table[j];
            i = j;
        }
    }
    c->d_table[i] = -1;
    c->ents[e].live = false;
    c->ent_free[c->n_ent_free++] = e;
    c->n_disk--;
    c->n_disk_states -= c->ents[e].kind == KIND_STATE;
    c->disk_bytes -= file_bytes(c, c->ents[e].kind);
}

// Deletes entry e's file and forgets it.
static void d_drop(rp_cache *c, int32_t e)
{
    char path[PATH_BUF];
    file_path(c, c->ents[e].kind, c->ents[e].key, path);
    unlink(path);
    d_remove(c, e);
}

// Removes least recently used files, all used before `use`, until `more`
// bytes fit the budget; false when that is not enough (a file older than
// everything on disk does not push newer ones out).
static bool d_make_room(rp_cache *c, uint64_t more, uint64_t use)
{
    while (c->disk_bytes + more > c->budget) {
        int32_t lru = -1;
        for (int e = 0; e < c->n_ent; e++)
            if (c->ents[e].live && (lru < 0 || c->ents[e].last_use < c->ents[lru].last_use))
                lru = e;
        if (lru < 0 || c->ents[lru].last_use > use)
            return false;
        d_drop(c, lru);
        c->st.disk_evictions++;
    }
    return true;
}

/* ---- opening the folder ----------------------------------------------------- */

static rp_status mkdir_p(const char *path)
{
    char buf[PATH_BUF];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1;; p++) {
        bool end = *p == 0;
        if (*p == '/' || end) {
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return RP_ERR(RP_ERR_IO, "cannot create the cache folder %s: %s", buf, strerror(errno));
            if (end)
                break;
            *p = '/';
        }
    }
    if (!rp_dir_exists(path))
        return RP_ERR(RP_ERR_IO, "the cache folder %s is not a folder (something else has its name)", path);
    return RP_OK;
}

static bool has_suffix(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

// "<32 hex>.kvb" or "<32 hex>.kvs": the key it names and the kind of file.
static bool parse_file_name(const char *name, rp_cache_key *k, int *kind)
{
    if (strlen(name) != 36 || (!has_suffix(name, ".kvb") && !has_suffix(name, ".kvs")))
        return false;
    *kind = has_suffix(name, ".kvs") ? KIND_STATE : KIND_BLOCK;
    uint64_t part[2] = {0, 0};
    for (int i = 0; i < 32; i++) {
        char ch = name[i];
        int v = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (v < 0)
            return false;
        part[i / 16] = part[i / 16] << 4 | (uint64_t)v;
    }
    k->hi = part[0];
    k->lo = part[1];
    return true;
}

// A temp file "<name>.kvb.tmp.<pid>" (or .kvs) left by a writer process that is gone.
static bool stale_temp(const char *name)
{
    const char *t = strstr(name, ".kvb.tmp.");
    if (!t)
        t = strstr(name, ".kvs.tmp.");
    if (!t)
        return false;
    char *end;
    errno = 0;
    long pid = strtol(t + 9, &end, 10);
    if (errno || end == t + 9 || *end || pid <= 0)
        return true; // not one of ours in any live form
    if (pid == (long)getpid())
        return false; // another cache of this process may be writing it
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

// Deletes a file that failed a check and counts it; false when it could not be deleted.
static bool reject_file(rp_cache *c, const char *path)
{
    if (unlink(path) != 0 && errno != ENOENT)
        return false;
    c->st.disk_rejects++;
    return true;
}

// Indexes one block file (single-threaded, at open); a file failing a check is
// deleted, and the first reason kept in *why for the summary line.
static void index_file(rp_cache *c, const char *name, rp_cache_key k, int kind, uint8_t *hdr_buf, const char **why)
{
    char path[PATH_BUF];
    snprintf(path, sizeof(path), "%s/%s", c->dir, name);
    struct stat sb;
    const char *bad;
    int fd = open_block(path, &sb, &bad);
    const block_header *h = (const block_header *)hdr_buf;
    const int32_t *toks = (const int32_t *)(hdr_buf + sizeof(block_header));
    if (fd >= 0) {
        if (!read_full(fd, hdr_buf, header_bytes(c), 0))
            bad = "wrong size (truncated?)";
        else if (!(bad = header_problem(c, kind, h, toks, (uint64_t)sb.st_size)) &&
                 !key_eq(key_from_bytes(h->key), k))
            bad = "its name is not its key";
        close(fd);
    }
    if (bad) {
        if (reject_file(c, path) && !*why)
            *why = bad;
        return;
    }
    if (fd < 0)
        return; // gone meanwhile, or cannot be opened now: not indexed, left alone
    if (d_find(c, k, kind) >= 0)
        return;
    if (!d_reserve(c))
        return; // out of memory: the file stays, unindexed, until a later start
    uint64_t use = (uint64_t)sb.st_mtim.tv_sec * 1000000000u + (uint64_t)sb.st_mtim.tv_nsec;
    d_insert(c, kind, k, key_from_bytes(h->parent), toks, use);
    c->disk_bytes += file_bytes(c, kind);
}

static rp_status index_dir(rp_cache *c)
{
    DIR *d = opendir(c->dir);
    if (!d)
        return RP_ERR(RP_ERR_IO, "cannot read the cache folder %s: %s", c->dir, strerror(errno));
    uint8_t *hdr = rp_malloc(header_bytes(c));
    if (!hdr) {
        closedir(d);
        return RP_ERR(RP_ERR_NOMEM, "prefix cache: out of memory");
    }
    struct dirent *de;
    const char *why = NULL; // the first rejected file's reason
    while ((de = readdir(d))) {
        rp_cache_key k;
        int kind;
        if (parse_file_name(de->d_name, &k, &kind)) {
            index_file(c, de->d_name, k, kind, hdr, &why);
        } else if (stale_temp(de->d_name)) {
            char path[PATH_BUF];
            snprintf(path, sizeof(path), "%s/%s", c->dir, de->d_name);
            unlink(path);
        }
    }
    closedir(d);
    rp_free(hdr);
    if (c->st.disk_rejects) // one line for the folder, however many
        RP_LOGW("prefix cache: deleted %llu cache file%s in %s that failed a check (the first: %s)",
                (unsigned long long)c->st.disk_rejects, c->st.disk_rejects == 1 ? "" : "s", c->dir, why);
    d_make_room(c, 0, UINT64_MAX); // the budget may have shrunk since the files were written
    return RP_OK;
}

/* ---- the writer thread -------------------------------------------------------- */

// One file of a write batch: a staged block or a snapshot.
typedef struct batch_item {
    int kind;
    stage_slot *s;  // a block's staging slot (KIND_BLOCK)
    int snap;       // a snapshot's index (KIND_STATE)
    rp_cache_key key, parent;
    const int32_t *toks;
    const uint8_t *data;
    uint64_t use;
    uint64_t size; // bytes held in disk_bytes for it while it is written
    rp_file_writer w;
    bool ok;
} batch_item;

// Writes b to its temp file (open in b->w afterwards, not yet synced). The fault hook
// may end the process here.
static bool write_file(rp_cache *c, batch_item *b)
{
    char path[PATH_BUF];
    file_path(c, b->kind, b->key, path);
    size_t bytes = payload_bytes(c, b->kind);
    uint32_t g[4];
    geometry(c, b->kind, g);
    block_header h;
    memset(&h, 0, sizeof(h));
    memcpy(h.magic, b->kind == KIND_STATE ? STATE_MAGIC : BLOCK_MAGIC, sizeof(h.magic));
    h.version = BLOCK_VERSION;
    h.header_bytes = (uint32_t)header_bytes(c);
    memcpy(h.fingerprint, c->fp, 16);
    key_to_bytes(b->key, h.key);
    key_to_bytes(b->parent, h.parent);
    h.n_layer = g[0];
    h.n_kv_head = g[1];
    h.head_dim = g[2];
    h.block_size = (uint32_t)c->bs;
    h.dtype = g[3];
    h.payload_bytes = bytes;
    h.payload_sum = XXH3_64bits(b->data, bytes);
    h.header_sum = header_sum(&h, b->toks, c->bs);
    rp_file_writer *w = &b->w;
    if (rp_file_writer_open(w, path))
        return false;
    rp_file_writer_write(w, &h, sizeof(h));
    rp_file_writer_write(w, b->toks, (size_t)c->bs * sizeof(int32_t));
    if (c->fault == FAULT_MID_WRITE && ++c->n_writes == (uint64_t)c->fault_at) {
        rp_file_writer_write(w, b->data, bytes / 2);
        _exit(RP_CACHE_FAULT_EXIT);
    }
    rp_file_writer_write(w, b->data, bytes);
    struct timespec t[2];
    t[0].tv_sec = t[1].tv_sec = (time_t)(b->use / 1000000000u);
    t[0].tv_nsec = t[1].tv_nsec = (long)(b->use % 1000000000u);
    futimens(w->fd, t); // its recency, for the index of the next start
    return w->st == RP_OK;
}

// Writes the batch's files, syncs them together, renames them into place.
static void write_batch(rp_cache *c, batch_item *b, int n)
{
    for (int i = 0; i < n; i++)
        b[i].ok = write_file(c, &b[i]);
    // One sync for the batch; where the file system cannot (or it fails), each file alone.
    int dfd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    bool synced = dfd >= 0 && syncfs(dfd) == 0;
    for (int i = 0; i < n; i++) {
        if (!b[i].ok) {
            if (b[i].w.path) // opened, then failed: remove the temp file
                rp_file_writer_abort(&b[i].w);
            continue;
        }
        if (!synced && fsync(b[i].w.fd) != 0)
            b[i].w.st = RP_ERR(RP_ERR_IO, "%s: cannot sync: %s", b[i].w.path, strerror(errno));
        if (c->fault == FAULT_BEFORE_RENAME && ++c->n_writes == (uint64_t)c->fault_at)
            _exit(RP_CACHE_FAULT_EXIT);
        b[i].ok = rp_file_writer_publish(&b[i].w) == RP_OK;
    }
    if (dfd >= 0) {
        fsync(dfd); // the renames: without this a crash may lose them (the next start then deletes the temps)
        close(dfd);
    }
}

// Lets go of a batch item's source (dmu held): the slot is free, the snapshot no longer written.
static void item_done(rp_cache *c, const batch_item *b)
{
    if (b->kind == KIND_STATE)
        c->snaps[b->snap].writing = false;
    else
        b->s->state = SLOT_FREE;
    pthread_cond_broadcast(&c->dcv);
}

// Takes the next queued item (dmu held, something queued): blocks first, then snapshots.
static batch_item next_item(rp_cache *c)
{
    batch_item b = {0};
    if (c->q_len > 0) {
        stage_slot *s = &c->slots[c->q[c->q_head]];
        c->q_head = (c->q_head + 1) % c->n_slots;
        c->q_len--;
        b = (batch_item){.kind = KIND_BLOCK, .s = s, .key = s->key, .parent = s->parent, .toks = s->toks,
                         .data = s->data, .use = s->use};
    } else {
        int i = c->sq[c->sq_head];
        c->sq_head = (c->sq_head + 1) % c->n_snap_cap;
        c->sq_len--;
        const state_snap *sn = &c->snaps[i];
        // A snapshot's file is filed as used now: the clock of its memory copy is not a time.
        b = (batch_item){.kind = KIND_STATE, .snap = i, .key = sn->key, .parent = sn->parent, .toks = sn->toks,
                         .data = sn->data, .use = rp_cache_now_ns()};
    }
    return b;
}

static void *writer_main(void *arg)
{
    rp_cache *c = arg;
    bool warned = false;
    batch_item batch[WRITE_BATCH];
    pthread_mutex_lock(&c->dmu);
    for (;;) {
        while (c->q_len == 0 && c->sq_len == 0 && !c->stopping)
            pthread_cond_wait(&c->dcv, &c->dmu);
        if (c->q_len == 0 && c->sq_len == 0)
            break; // stopping, nothing left
        int n = 0;
        while ((c->q_len > 0 || c->sq_len > 0) && n < WRITE_BATCH) {
            batch_item b = next_item(c);
            if (c->stopping && rp_time_s() > c->deadline) { // out of time: drop what is left
                c->st.disk_write_drops++;
                item_done(c, &b);
                continue;
            }
            int32_t e = d_find(c, b.key, b.kind);
            bool twice = false; // the same file queued again while its first copy waits in this batch
            for (int i = 0; i < n && !twice; i++)
                twice = batch[i].kind == b.kind && key_eq(batch[i].key, b.key);
            b.size = file_bytes(c, b.kind);
            if (e >= 0 || twice || !d_reserve(c) || !d_make_room(c, b.size, b.use)) {
                if (e >= 0 && c->ents[e].last_use < b.use)
                    c->ents[e].last_use = b.use;
                else if (e < 0 && !twice)
                    c->st.disk_write_drops++;
                item_done(c, &b);
                continue;
            }
            c->disk_bytes += b.size; // held for this file while it is written
            if (b.kind == KIND_BLOCK)
                b.s->state = SLOT_WRITING;
            batch[n++] = b;
        }
        if (n == 0)
            continue;
        pthread_mutex_unlock(&c->dmu);
        write_batch(c, batch, n);
        pthread_mutex_lock(&c->dmu);
        for (int i = 0; i < n; i++) {
            batch_item *b = &batch[i];
            if (b->ok && d_find(c, b->key, b->kind) < 0 && d_reserve(c)) {
                d_insert(c, b->kind, b->key, b->parent, b->toks, b->use);
                c->st.disk_writes++;
            } else {
                c->disk_bytes -= b->size;
                if (!b->ok) {
                    c->st.disk_write_drops++;
                    if (!warned)
                        RP_LOGW("prefix cache: cannot write a %s to %s: %s (further errors not shown)",
                                b->kind == KIND_STATE ? "state" : "block", c->dir, rp_error_message());
                    warned = true;
                }
            }
            item_done(c, b);
        }
    }
    pthread_mutex_unlock(&c->dmu);
    return NULL;
}

/* ---- the engine thread's side ---------------------------------------------------- */

static void parse_fault(rp_cache *c)
{
    const char *f = getenv("RP_CACHE_FAULT");
    if (!f || !*f)
        return;
    size_t n;
    if (strncmp(f, "mid-write", n = 9) == 0)
        c->fault = FAULT_MID_WRITE;
    else if (strncmp(f, "before-rename", n = 13) == 0)
        c->fault = FAULT_BEFORE_RENAME;
    else
        return;
    c->fault_at = 1;
    if (f[n] == ':')
        c->fault_at = atoi(f + n + 1) > 0 ? atoi(f + n + 1) : 1;
    RP_LOGW("prefix cache: test fault hook armed (%s): this process will end while writing a block", f);
}

rp_status rp_cache_disk_open(rp_cache *c, const char *base, const rp_cache_params *p)
{
    if (strlen(base) > DIR_MAX)
        return RP_ERR(RP_ERR_INVALID, "the cache folder name is too long (%zu bytes, at most %d)", strlen(base),
                      DIR_MAX);
    char buf[PATH_BUF];
    snprintf(buf, sizeof(buf), "%s/%s", base, c->fp_hex);
    rp_status st;
    if ((st = mkdir_p(buf)))
        return st;
    if (access(buf, R_OK | W_OK | X_OK) != 0) // (root passes, but not on a read-only file system)
        return RP_ERR(RP_ERR_IO, "the cache folder %s is not writable: %s", buf, strerror(errno));
    if (!(c->dir = rp_strdup(buf)))
        return RP_ERR(RP_ERR_NOMEM, "prefix cache: out of memory");
    c->budget = p->disk_budget ? p->disk_budget : RP_CACHE_DISK_BUDGET_DEFAULT;
    c->flush_s = p->flush_s == 0 ? RP_CACHE_FLUSH_S_DEFAULT : p->flush_s;
    parse_fault(c);
    if (pthread_mutex_init(&c->dmu, NULL))
        return RP_ERR(RP_ERR_NOMEM, "prefix cache: cannot create a mutex");
    c->dmu_live = true;
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca))
        return RP_ERR(RP_ERR_NOMEM, "prefix cache: cannot create a condition variable");
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); // deadlines come from rp_time_s
    int rc = pthread_cond_init(&c->dcv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc)
        return RP_ERR(RP_ERR_NOMEM, "prefix cache: cannot create a condition variable");
    c->dcv_live = true;

    size_t stage = p->stage_bytes ? p->stage_bytes : STAGE_BYTES_DEFAULT;
    size_t n_slots = stage / c->block_bytes;
    n_slots = n_slots < 2 ? 2 : n_slots > SLOTS_MAX ? SLOTS_MAX : n_slots;
    c->slots = rp_calloc(n_slots, sizeof(stage_slot));
    c->q = rp_malloc(n_slots * sizeof(int));
    if (c->n_snap_cap && !(c->sq = rp_malloc((size_t)c->n_snap_cap * sizeof(int))))
        return RP_ERR(RP_ERR_NOMEM, "prefix cache: out of memory");
    c->stage_data = rp_malloc_aligned(n_slots * c->block_bytes); // n_slots * block_bytes <= max(2 blocks, stage)
    c->stage_toks = rp_malloc(n_slots * (size_t)c->bs * sizeof(int32_t));
    if (!c->slots || !c->q || !c->stage_data || !c->stage_toks)
        return RP_ERR(RP_ERR_NOMEM, "prefix cache: out of memory for %zu staging buffers of %zu bytes", n_slots,
                      c->block_bytes);
    c->n_slots = (int)n_slots;
    for (size_t i = 0; i < n_slots; i++) {
        c->slots[i].data = c->stage_data + i * c->block_bytes;
        c->slots[i].toks = c->stage_toks + i * (size_t)c->bs;
    }
    if ((st = index_dir(c)))
        return st;
    rc = pthread_create(&c->writer, NULL, writer_main, c);
    if (rc)
        return RP_ERR(RP_ERR_NOMEM, "prefix cache: cannot start the writer thread: %s", strerror(rc));
    c->writer_live = true;
    return RP_OK;
}

void rp_cache_disk_close(rp_cache *c)
{
    if (c->writer_live) {
        pthread_mutex_lock(&c->dmu);
        c->stopping = true;
        pthread_cond_broadcast(&c->dcv);
        pthread_mutex_unlock(&c->dmu);
        pthread_join(c->writer, NULL);
        c->writer_live = false;
    }
    rp_free_aligned(c->stage_data);
    c->stage_data = NULL;
    rp_free(c->stage_toks);
    c->stage_toks = NULL;
    rp_free(c->slots);
    c->slots = NULL;
    rp_free(c->q);
    c->q = NULL;
    rp_free(c->sq);
    c->sq = NULL;
    rp_free(c->ents);
    c->ents = NULL;
    rp_free(c->ent_toks);
    c->ent_toks = NULL;
    rp_free(c->ent_free);
    c->ent_free = NULL;
    rp_free(c->d_table);
    c->d_table = NULL;
    c->d_cap = 0;
    if (c->dcv_live)
        pthread_cond_destroy(&c->dcv);
    if (c->dmu_live)
        pthread_mutex_destroy(&c->dmu);
    c->dcv_live = c->dmu_live = false;
    rp_free(c->dir);
    c->dir = NULL;
}

bool rp_cache_disk_has(rp_cache *c, int kind, rp_cache_key key, rp_cache_key parent, const int32_t *toks)
{
    pthread_mutex_lock(&c->dmu);
    int32_t e = d_find(c, key, kind);
    bool ok = e >= 0 && key_eq(c->ents[e].parent, parent) &&
              memcmp(c->ent_toks + (size_t)e * c->bs, toks, (size_t)c->bs * sizeof(int32_t)) == 0;
    pthread_mutex_unlock(&c->dmu);
    return ok;
}

// Reads the file of (kind, key) into dst after checking everything against the index's
// parent and tokens and the payload's checksum; a file that fails a check is deleted and
// unindexed (with a line in the log), one that is gone or cannot be opened now unindexed.
static bool load_file(rp_cache *c, int kind, rp_cache_key key, rp_cache_key parent, const int32_t *toks, void *dst)
{
    char path[PATH_BUF];
    file_path(c, kind, key, path);
    size_t bytes = payload_bytes(c, kind);
    struct stat sb;
    const char *reject; // why the file is bad (it is deleted), or NULL
    int fd = open_block(path, &sb, &reject);
    bool ok = false;
    uint8_t hdr[sizeof(block_header)];
    block_header h;
    if (fd < 0)
        goto done; // gone (another process, or the budget) or unreadable now: just forget it; or not a file
    // The header, then the tokens into the load buffer's head (a block's payload overwrites
    // them after the check).
    int32_t *ftoks = (int32_t *)c->load_buf;
    reject = "wrong size (truncated?)";
    if (!read_full(fd, hdr, sizeof(hdr), 0) ||
        !read_full(fd, ftoks, (size_t)c->bs * sizeof(int32_t), sizeof(block_header)))
        goto done;
    memcpy(&h, hdr, sizeof(h));
    if ((reject = header_problem(c, kind, &h, ftoks, (uint64_t)sb.st_size)))
        goto done;
    reject = "another prefix than its index entry";
    if (!key_eq(key_from_bytes(h.key), key) || !key_eq(key_from_bytes(h.parent), parent) ||
        memcmp(ftoks, toks, (size_t)c->bs * sizeof(int32_t)) != 0)
        goto done;
    reject = "wrong size (truncated?)";
    if (!read_full(fd, dst, bytes, (off_t)header_bytes(c)))
        goto done;
    reject = "payload checksum mismatch";
    if (XXH3_64bits(dst, bytes) != h.payload_sum)
        goto done;
    reject = NULL;
    futimens(fd, NULL); // recency that survives a restart
    ok = true;
done:
    if (fd >= 0)
        close(fd);
    pthread_mutex_lock(&c->dmu);
    int32_t e = d_find(c, key, kind);
    bool dropped = false;
    if (ok && e >= 0) {
        c->ents[e].last_use = rp_cache_now_ns();
    } else if (!ok && e >= 0) {
        if (reject) {
            d_drop(c, e);
            c->st.disk_rejects++;
            dropped = true;
        } else {
            d_remove(c, e);
        }
    }
    pthread_mutex_unlock(&c->dmu);
    if (dropped) // found one at a time, by requests: a line each
        RP_LOGW("prefix cache: deleted the %s file %s: %s", kind == KIND_STATE ? "state" : "block", path, reject);
    return ok;
}

bool rp_cache_disk_load(rp_cache *c, rp_cache_key key, rp_cache_key parent, const int32_t *toks, int32_t b)
{
    return load_file(c, KIND_BLOCK, key, parent, toks, c->load_buf) &&
           rp_kv_block_write(c->pool, b, c->load_buf) == RP_OK;
}

bool rp_cache_disk_load_state(rp_cache *c, rp_cache_key key, rp_cache_key parent, const int32_t *toks, void *dst)
{
    return load_file(c, KIND_STATE, key, parent, toks, dst);
}

void rp_cache_disk_stage(rp_cache *c, int32_t b, uint64_t use, bool wait)
{
    rp_cache_key key = c->m_key[b];
    pthread_mutex_lock(&c->dmu);
    int32_t e = d_find(c, key, KIND_BLOCK);
    if (e >= 0) { // already on disk
        if (c->ents[e].last_use < use)
            c->ents[e].last_use = use;
        pthread_mutex_unlock(&c->dmu);
        return;
    }
    int slot = -1;
    for (;;) {
        for (int i = 0; i < c->n_slots && slot < 0; i++)
            if (c->slots[i].state == SLOT_FREE)
                slot = i;
        if (slot >= 0 || !wait || rp_time_s() >= c->deadline)
            break;
        double d = c->deadline;
        struct timespec ts;
        ts.tv_sec = (time_t)d;
        ts.tv_nsec = (long)((d - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&c->dcv, &c->dmu, &ts);
    }
    if (slot < 0) {
        c->st.disk_write_drops++;
        pthread_mutex_unlock(&c->dmu);
        return;
    }
    stage_slot *s = &c->slots[slot];
    s->state = SLOT_FILLING;
    pthread_mutex_unlock(&c->dmu);
    s->key = key;
    s->use = use;
    s->parent = c->m_parent[b];
    memcpy(s->toks, c->m_toks + (size_t)b * c->bs, (size_t)c->bs * sizeof(int32_t));
    rp_status st = rp_kv_block_read(c->pool, b, s->data);
    pthread_mutex_lock(&c->dmu);
    if (st) {
        c->st.disk_write_drops++;
        s->state = SLOT_FREE;
        pthread_cond_broadcast(&c->dcv);
    } else {
        s->state = SLOT_QUEUED;
        c->q[(c->q_head + c->q_len) % c->n_slots] = slot;
        c->q_len++;
        pthread_cond_broadcast(&c->dcv);
    }
    pthread_mutex_unlock(&c->dmu);
}

void rp_cache_disk_stage_state(rp_cache *c, int i)
{
    state_snap *sn = &c->snaps[i];
    pthread_mutex_lock(&c->dmu);
    int32_t e = d_find(c, sn->key, KIND_STATE);
    if (e >= 0) { // on disk already (made before, or by an earlier run)
        c->ents[e].last_use = rp_cache_now_ns();
    } else if (!sn->writing) { // (sq has room for every snapshot: each is queued at most once)
        sn->writing = true;
        c->sq[(c->sq_head + c->sq_len) % c->n_snap_cap] = i;
        c->sq_len++;
        pthread_cond_broadcast(&c->dcv);
    }
    pthread_mutex_unlock(&c->dmu);
}
