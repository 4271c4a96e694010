/*
 * test_cache.c - the prefix cache on a bare KV pool (no model): hash-chained
 * keys, publish / lookup / take, collisions and duplicates, eviction from
 * memory, the disk tier (eviction to disk, flush at destroy, restart from
 * the folder), files that are corrupt, truncated, foreign or half written,
 * the byte budget, the fault hook killing a forked writer, allocation
 * failures. Block contents are synthetic: each block is filled from a tag so
 * a block read back can be checked float for float.
 */
#include "cache_harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY // the streaming state on the stack, as disk.c has it
#include <xxhash.h>


enum { LAYERS = 2, HEADS = 1, HD = 8, BS = 4 };

static const uint8_t FP_A[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
static const uint8_t FP_B[16] = {16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1};

static rp_kv_pool *make_pool(int n_blocks)
{
    rp_kv_pool *p = NULL;
    assert_int_equal(rp_kv_pool_create(BE, LAYERS, HEADS, HD, BS, n_blocks, RP_DTYPE_F32, &p), RP_OK);
    return p;
}

static rp_cache *make_cache(rp_kv_pool *p, const uint8_t *fp, const char *dir, uint64_t budget)
{
    rp_cache_params cp;
    rp_cache_params_default(&cp);
    cp.dir = dir;
    cp.disk_budget = budget;
    rp_cache *c = NULL;
    if (rp_cache_create(p, fp, &cp, &c))
        fail_msg("rp_cache_create: %s", rp_error_message());
    return c;
}

static size_t block_floats(void)
{
    return rp_kv_block_bytes(LAYERS, HEADS, HD, BS, RP_DTYPE_F32) / sizeof(float);
}

static void fill_block(rp_kv_pool *p, int32_t b, float tag)
{
    size_t n = block_floats();
    float *buf = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        buf[i] = tag + (float)i;
    assert_int_equal(rp_kv_block_write(p, b, buf), RP_OK);
    free(buf);
}

static void check_block(rp_kv_pool *p, int32_t b, float tag)
{
    size_t n = block_floats();
    float *buf = malloc(n * sizeof(float));
    assert_int_equal(rp_kv_block_read(p, b, buf), RP_OK);
    for (size_t i = 0; i < n; i++)
        if (buf[i] != tag + (float)i)
            fail_msg("block %d float %zu is %g, expected %g", b, i, buf[i], tag + (float)i);
    free(buf);
}

// A sequence of n whole blocks of tokens toks, block i filled from tag + 1000 i.
static void make_seq(rp_kv_pool *p, rp_kv_seq *s, int n, float tag)
{
    rp_kv_seq_init(s);
    assert_int_equal(rp_kv_seq_reserve(p, s, n * BS), RP_OK);
    for (int i = 0; i < n; i++)
        fill_block(p, s->blocks[i], tag + 1000.0f * (float)i);
}

// A fresh folder under the test's temp folder.
static const char *fresh_dir(const char *name)
{
    const char *d = rp_test_tmp_path(name);
    assert_int_equal(mkdir(d, 0755), 0);
    return d;
}

// What the code under test writes to stderr (its log lines) between
// capture_begin and capture_end, NUL-terminated.
// (The file's name is not one of rp_test_tmp_path's rotating buffers: callers hold those.)
static int saved_stderr = -1;
static char captured[16384], capture_path[600];

static void capture_begin(void)
{
    fflush(stderr);
    saved_stderr = dup(2);
    snprintf(capture_path, sizeof(capture_path), "%s/stderr.txt", rp_test_tmpdir);
    int fd = open(capture_path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    assert_true(saved_stderr >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
}

static const char *capture_end(void)
{
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    FILE *f = fopen(capture_path, "r");
    assert_non_null(f);
    size_t n = fread(captured, 1, sizeof(captured) - 1, f);
    captured[n] = 0;
    fclose(f);
    return captured;
}

// How many lines of s contain needle.
static int lines_with(const char *s, const char *needle)
{
    int n = 0;
    for (const char *l = s; *l;) {
        const char *end = strchr(l, '\n');
        size_t len = end ? (size_t)(end - l) : strlen(l);
        char line[4096];
        snprintf(line, sizeof(line), "%.*s", (int)(len < sizeof(line) - 1 ? len : sizeof(line) - 1), l);
        n += strstr(line, needle) != NULL;
        l += len + (end != NULL);
    }
    return n;
}

/* ---- keys and the memory table --------------------------------------------- */

static void test_keys_chain(void **state)
{
    rp_kv_pool *p = make_pool(8);
    rp_cache *a = make_cache(p, FP_A, NULL, 0);
    int32_t t[2 * BS];
    tokens(t, 2 * BS, 10);
    rp_cache_key root = {0, 0};
    rp_cache_key k0 = rp_cache_key_of(a, root, t), k1 = rp_cache_key_of(a, k0, t + BS);
    assert_false(key_eq(k0, k1));
    assert_true(key_eq(k0, rp_cache_key_of(a, root, t))); // deterministic
    // The same tokens after another parent, or another token, or another fingerprint: another key.
    assert_false(key_eq(k1, rp_cache_key_of(a, root, t + BS)));
    int32_t u[BS];
    memcpy(u, t, sizeof(u));
    u[BS - 1]++;
    assert_false(key_eq(k0, rp_cache_key_of(a, root, u)));
    rp_cache_destroy(a);
    rp_cache *b = make_cache(p, FP_B, NULL, 0);
    assert_false(key_eq(k0, rp_cache_key_of(b, root, t)));
    char hex[33];
    rp_cache_key_hex((rp_cache_key){0x1122, 0xaabb}, hex);
    assert_string_equal(hex, "000000000000aabb0000000000001122");
    rp_cache_destroy(b);
    rp_kv_pool_destroy(p);
}

static void test_publish_lookup_take(void **state)
{
    rp_kv_pool *p = make_pool(10);
    rp_cache *c = make_cache(p, FP_A, NULL, 0);
    int32_t t[3 * BS + 2];
    tokens(t, 3 * BS + 2, 100);
    rp_kv_seq a;
    make_seq(p, &a, 3, 1.0f);
    rp_cache_match m;
    rp_cache_lookup(c, t, 3, &m);
    assert_int_equal(m.n_blocks, 0);
    rp_cache_publish(c, t, &a, 3);
    rp_cache_stats st;
    rp_cache_get_stats(c, &st);
    assert_int_equal(st.mem_blocks, 3);
    assert_int_equal(st.mem_bytes, 3 * rp_kv_pool_block_bytes(p));
    assert_false(st.disk);
    for (int i = 0; i < 3; i++)
        assert_true(rp_kv_block_is_cached(p, a.blocks[i]));
    // Found while a holds them: live, free to take.
    rp_cache_lookup(c, t, 3, &m);
    assert_int_equal(m.n_blocks, 3);
    assert_int_equal(m.n_live, 3);
    assert_int_equal(m.n_idle + m.n_disk, 0);
    rp_kv_seq s;
    rp_kv_seq_init(&s);
    int got;
    assert_int_equal(rp_cache_take(c, t, &s, &got), RP_OK);
    assert_int_equal(got, 3);
    assert_int_equal(s.n_tokens, 3 * BS);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(s.blocks[i], a.blocks[i]);
        assert_int_equal(rp_kv_block_refs(p, a.blocks[i]), 2);
    }
    rp_kv_seq_deinit(p, &s);
    rp_kv_seq_deinit(p, &a);
    // Nobody holds them: idle, still found (and counted as free by the pool).
    assert_int_equal(rp_kv_pool_free_blocks(p), 10);
    assert_int_equal(rp_kv_pool_cached_free(p), 3);
    rp_cache_lookup(c, t, 3, &m);
    assert_int_equal(m.n_idle, 3);
    // The walk stops at the limit and at the first block that differs.
    rp_cache_lookup(c, t, 2, &m);
    assert_int_equal(m.n_blocks, 2);
    int32_t u[3 * BS];
    memcpy(u, t, sizeof(u));
    u[BS + 1] = 7;
    rp_cache_lookup(c, u, 3, &m);
    assert_int_equal(m.n_blocks, 1);
    u[0] = 7;
    rp_cache_lookup(c, u, 3, &m);
    assert_int_equal(m.n_blocks, 0);
    // A later block of the same tokens after a different first block is not found either
    // (the key chains the whole prefix).
    memcpy(u, t, sizeof(u));
    u[0] = 7;
    rp_cache_lookup(c, u + 0, 3, &m);
    assert_int_equal(m.n_blocks, 0);
    // Take from idle: the blocks come back with their contents.
    rp_cache_lookup(c, t, 3, &m);
    rp_kv_seq_init(&s);
    assert_int_equal(rp_cache_take(c, t, &s, &got), RP_OK);
    assert_int_equal(got, 3);
    for (int i = 0; i < 3; i++)
        check_block(p, s.blocks[i], 1.0f + 1000.0f * (float)i);
    assert_int_equal(rp_kv_pool_free_blocks(p), 7);
    rp_kv_seq_deinit(p, &s);
    rp_cache_get_stats(c, &st);
    assert_int_equal(st.hit_blocks, 6);
    assert_int_equal(st.miss_blocks, 0);
    assert_int_equal(st.disk_hit_blocks, 0);
    // Takes count misses against the blocks looked for.
    rp_cache_lookup(c, u, 3, &m);
    rp_kv_seq_init(&s);
    assert_int_equal(rp_cache_take(c, u, &s, &got), RP_OK);
    assert_int_equal(got, 0);
    rp_cache_get_stats(c, &st);
    assert_int_equal(st.miss_blocks, 3);
    rp_kv_seq_deinit(p, &s);
    rp_cache_destroy(c);
    // Destroying the cache unmarks its blocks.
    assert_int_equal(rp_kv_pool_cached_free(p), 0);
    rp_kv_pool_destroy(p);
}

static void test_collision_and_duplicates(void **state)
{
    rp_kv_pool *p = make_pool(10);
    rp_cache *c = make_cache(p, FP_A, NULL, 0);
    int32_t t[2 * BS];
    tokens(t, 2 * BS, 5);
    rp_kv_seq a, b;
    make_seq(p, &a, 2, 1.0f);
    make_seq(p, &b, 2, 1.0f); // the same prefix computed twice
    rp_cache_publish(c, t, &a, 2);
    rp_cache_publish(c, t, &b, 2); // a's copy stays; b's blocks stay plain
    for (int i = 0; i < 2; i++) {
        assert_true(rp_kv_block_is_cached(p, a.blocks[i]));
        assert_false(rp_kv_block_is_cached(p, b.blocks[i]));
    }
    rp_cache_publish(c, t, &a, 2); // again: nothing changes
    rp_cache_stats st;
    rp_cache_get_stats(c, &st);
    assert_int_equal(st.mem_blocks, 2);
    rp_kv_seq_deinit(p, &b);
    assert_int_equal(rp_kv_pool_cached_free(p), 0);
    // A key whose entry holds other tokens or another parent (what a collision
    // would look like) is a miss: the entries are compared, not just the keys.
    rp_cache_match m;
    int32_t blk0 = a.blocks[0], blk1 = a.blocks[1];
    c->m_toks[(size_t)blk1 * BS + 2] ^= 1;
    rp_cache_lookup(c, t, 2, &m);
    assert_int_equal(m.n_blocks, 1);
    c->m_toks[(size_t)blk1 * BS + 2] ^= 1;
    c->m_parent[blk1].lo ^= 1;
    rp_cache_lookup(c, t, 2, &m);
    assert_int_equal(m.n_blocks, 1);
    c->m_parent[blk1].lo ^= 1;
    rp_cache_lookup(c, t, 2, &m);
    assert_int_equal(m.n_blocks, 2);
    (void)blk0;
    rp_kv_seq_deinit(p, &a);
    rp_cache_destroy(c);
    rp_kv_pool_destroy(p);
}

static void test_memory_eviction(void **state)
{
    rp_kv_pool *p = make_pool(4);
    rp_cache *c = make_cache(p, FP_A, NULL, 0);
    int32_t t[3 * BS];
    tokens(t, 3 * BS, 1);
    rp_kv_seq a;
    make_seq(p, &a, 3, 1.0f);
    rp_cache_publish(c, t, &a, 3);
    rp_kv_seq_deinit(p, &a);
    // A sequence of 2 blocks takes the plain block, then the end of the cached prefix.
    rp_kv_seq s;
    rp_kv_seq_init(&s);
    assert_int_equal(rp_kv_seq_reserve(p, &s, 2 * BS), RP_OK);
    rp_cache_stats st;
    rp_cache_get_stats(c, &st);
    assert_int_equal(st.mem_evictions, 1);
    assert_int_equal(st.mem_blocks, 2);
    rp_cache_match m;
    rp_cache_lookup(c, t, 3, &m);
    assert_int_equal(m.n_blocks, 2); // the prefix's beginning survived
    rp_kv_seq_deinit(p, &s);
    assert_int_equal(rp_kv_seq_reserve(p, &s, 4 * BS), RP_OK);
    rp_cache_lookup(c, t, 3, &m);
    assert_int_equal(m.n_blocks, 0);
    rp_cache_get_stats(c, &st);
    assert_int_equal(st.mem_blocks, 0);
    assert_int_equal(st.mem_evictions, 3);
    rp_kv_seq_deinit(p, &s);
    rp_cache_destroy(c);
    rp_kv_pool_destroy(p);
}

/* ---- the disk tier ------------------------------------------------------------ */

static void test_disk_evict_and_load(void **state)
{
    const char *dir = fresh_dir("evict");
    rp_kv_pool *p = make_pool(4);
    rp_cache *c = make_cache(p, FP_A, dir, 0);
    assert_non_null(rp_cache_dir(c));
    assert_non_null(strstr(rp_cache_dir(c), dir));
    int32_t t[3 * BS];
    tokens(t, 3 * BS, 40);
    rp_kv_seq a;
    make_seq(p, &a, 3, 5.0f);
    rp_cache_publish(c, t, &a, 3);
    rp_kv_seq_deinit(p, &a);
    // Taking every block evicts the three cached ones to disk.
    rp_kv_seq s;
    rp_kv_seq_init(&s);
    assert_int_equal(rp_kv_seq_reserve(p, &s, 4 * BS), RP_OK);
    for (int i = 0; i < 4; i++)
        fill_block(p, s.blocks[i], -1.0f); // overwrite what the blocks held
    wait_writes(c, 3);
    assert_int_equal(count_files(rp_cache_dir(c), ".kvb"), 3);
    rp_cache_match m;
    rp_cache_lookup(c, t, 3, &m);
    assert_int_equal(m.n_blocks, 3);
    assert_int_equal(m.n_disk, 3);
    // No free block to read them into: nothing taken.
    rp_kv_seq r;
    rp_kv_seq_init(&r);
    int got;
    assert_int_equal(rp_cache_take(c, t, &r, &got), RP_OK);
    assert_int_equal(got, 0);
    rp_kv_seq_deinit(p, &s);
    rp_cache_lookup(c, t, 3, &m);
    assert_int_equal(rp_cache_take(c, t, &r, &got), RP_OK);
    assert_int_equal(got, 3);
    for (int i = 0; i < 3; i++)
        check_block(p, r.blocks[i], 5.0f + 1000.0f * (float)i);
    rp_cache_stats st;
    rp_cache_get_stats(c, &st);
    assert_int_equal(st.disk_hit_blocks, 3);
    assert_int_equal(st.mem_blocks, 3); // read back, they are cached in memory again
    assert_int_equal(st.disk_blocks, 3);
    assert_true(st.disk);
    assert_int_equal(st.disk_budget, RP_CACHE_DISK_BUDGET_DEFAULT);
    rp_kv_seq_deinit(p, &r);
    rp_cache_destroy(c); // they are on disk already: nothing more is written
    assert_int_equal(count_files(dir, ".tmp."), 0);
    rp_kv_pool_destroy(p);
}

// Publishes n blocks (tokens from base, contents from tag) and lets go of them.
static void publish_idle(rp_kv_pool *p, rp_cache *c, const int32_t *t, int n, float tag)
{
    rp_kv_seq a;
    make_seq(p, &a, n, tag);
    rp_cache_publish(c, t, &a, n);
    rp_kv_seq_deinit(p, &a);
}

// A cache restarted on dir finds n of the `avail` blocks of t on disk and reads
// them back as made from tag.
static void check_restart(const char *dir, const int32_t *t, int avail, int n, float tag)
{
    rp_kv_pool *p = make_pool(8);
    rp_cache *c = make_cache(p, FP_A, dir, 0);
    rp_cache_match m;
    rp_cache_lookup(c, t, avail, &m);
    assert_int_equal(m.n_blocks, n);
    assert_int_equal(m.n_disk, n);
    rp_kv_seq s;
    rp_kv_seq_init(&s);
    int got;
    assert_int_equal(rp_cache_take(c, t, &s, &got), RP_OK);
    assert_int_equal(got, n);
    for (int i = 0; i < n; i++)
        check_block(p, s.blocks[i], tag + 1000.0f * (float)i);
    rp_kv_seq_deinit(p, &s);
    rp_cache_destroy(c);
    rp_kv_pool_destroy(p);
}

static void test_flush_and_restart(void **state)
{
    const char *dir = fresh_dir("restart");
    int32_t t[4 * BS];
    tokens(t, 4 * BS, 300);
    rp_kv_pool *p = make_pool(8);
    rp_cache *c = make_cache(p, FP_A, dir, 0);
    publish_idle(p, c, t, 4, 2.0f);
    assert_int_equal(count_files(rp_cache_dir(c), ".kvb"), 0); // nothing evicted yet
    rp_cache_destroy(c);                                       // the flush writes them
    rp_kv_pool_destroy(p);
    check_restart(dir, t, 4, 4, 2.0f);
    // A different fingerprint has its own folder: nothing found there.
    p = make_pool(8);
    c = make_cache(p, FP_B, dir, 0);
    rp_cache_match m;
    rp_cache_lookup(c, t, 4, &m);
    assert_int_equal(m.n_blocks, 0);
    rp_cache_stats st;
    rp_cache_get_stats(c, &st);
    assert_int_equal(st.disk_blocks, 0);
    rp_cache_destroy(c);
    rp_kv_pool_destroy(p);
    // So has a pool that stores K and V as halves: the same model's f32 blocks are not its.
    assert_int_equal(rp_kv_pool_create(BE, LAYERS, HEADS, HD, BS, 8, RP_DTYPE_F16, &p), RP_OK);
    c = make_cache(p, FP_A, dir, 0);
    rp_cache_lookup(c, t, 4, &m);
    assert_int_equal(m.n_blocks, 0);
    rp_cache_get_stats(c, &st);
    assert_int_equal(st.disk_blocks, 0);
    rp_cache_destroy(c);
    rp_kv_pool_destroy(p);
    // flush_s < 0: nothing written at destroy.
    const char *dir2 = fresh_dir("noflush");
    p = make_pool(8);
    rp_cache_params cp;
    rp_cache_params_default(&cp);
    cp.dir = dir2;
    cp.flush_s = -1;
    assert_int_equal(rp_cache_create(p, FP_A, &cp, &c), RP_OK);
    publish_idle(p, c, t, 2, 2.0f);
    char fpdir[600];
    snprintf(fpdir, sizeof(fpdir), "%s", rp_cache_dir(c));
    rp_cache_destroy(c);
    assert_int_equal(count_files(fpdir, ".kvb"), 0);
    rp_kv_pool_destroy(p);
}

// A flush of more blocks than one write batch: every block lands on disk, whole,
// and a restart serves the whole prefix.
static void test_flush_many(void **state)
{
    enum { N = 150 }; // > WRITE_BATCH: several batches, each one sync
    const char *dir = fresh_dir("many");
    static int32_t t[N * BS];
    tokens(t, N * BS, 5000);
    rp_kv_pool *p = make_pool(N + 8);
    rp_cache *c = make_cache(p, FP_A, dir, 0);
    publish_idle(p, c, t, N, 7.0f);
    char fpd[600];
    snprintf(fpd, sizeof(fpd), "%s", rp_cache_dir(c));
    rp_cache_destroy(c);
    assert_int_equal(count_files(fpd, ".kvb"), N);
    assert_int_equal(count_files(fpd, ".tmp."), 0);
    rp_kv_pool_destroy(p);
    p = make_pool(N + 8);
    c = make_cache(p, FP_A, dir, 0);
    rp_cache_stats st;
    rp_cache_get_stats(c, &st);
    assert_int_equal(st.disk_blocks, N);
    rp_cache_match m;
    rp_cache_lookup(c, t, N, &m);
    assert_int_equal(m.n_disk, N);
    rp_kv_seq s;
    rp_kv_seq_init(&s);
    int got;
    assert_int_equal(rp_cache_take(c, t, &s, &got), RP_OK);
    assert_int_equal(got, N);
    for (int i = 0; i < N; i++)
        check_block(p, s.blocks[i], 7.0f + 1000.0f * (float)i);
    rp_kv_seq_deinit(p, &s);
    rp_cache_destroy(c);
    rp_kv_pool_destroy(p);
}

// The path of the fingerprint folder under dir for FP_A (made by a throwaway cache).
static void fp_dir(const char *dir, const uint8_t *fp, char *out, size_t cap)
{
    rp_kv_pool *p = make_pool(2);
    rp_cache *c = make_cache(p, fp, dir, 0);
    snprintf(out, cap, "%s", rp_cache_dir(c));
    rp_cache_destroy(c);
    rp_kv_pool_destroy(p);
}

// The name of block i's file of tokens t.
static void block_file(const char *fpd, const int32_t *t, int i, char *out, size_t cap)
{
    rp_kv_pool *p = make_pool(2);
    rp_cache *c = make_cache(p, FP_A, NULL, 0);
    rp_cache_key k = {0, 0};
    for (int j = 0; j <= i; j++)
        k = rp_cache_key_of(c, k, t + (size_t)j * BS);
    char hex[33];
    rp_cache_key_hex(k, hex);
    snprintf(out, cap, "%s/%s.kvb", fpd, hex);
    rp_cache_destroy(c);
    rp_kv_pool_destroy(p);
}

static rp_cache_stats restart_stats(const char *dir)
{
    rp_kv_pool *p = make_pool(8);
    rp_cache *c = make_cache(p, FP_A, dir, 0);
    rp_cache_stats st;
    rp_cache_get_stats(c, &st);
    rp_cache_destroy(c);
    rp_kv_pool_destroy(p);
    return st;
}

static void test_bad_files(void **state)
{
    const char *dir = fresh_dir("bad");
    int32_t t[4 * BS];
    tokens(t, 4 * BS, 900);
    char fpd[600], f[4][700];
    fp_dir(dir, FP_A, fpd, sizeof(fpd));
    for (int i = 0; i < 4; i++)
        block_file(fpd, t, i, f[i], sizeof(f[i]));
    size_t payload = rp_kv_block_bytes(LAYERS, HEADS, HD, BS, RP_DTYPE_F32),
           head = sizeof(block_header) + BS * sizeof(int32_t);

    // A corrupt payload passes the index (headers only) and fails at load: the
    // file is deleted, the walk stops there, the blocks before it still serve.
    {
        rp_kv_pool *p = make_pool(8);
        rp_cache *c = make_cache(p, FP_A, dir, 0);
        publish_idle(p, c, t, 4, 3.0f);
        rp_cache_destroy(c);
        rp_kv_pool_destroy(p);
    }
    for (int i = 0; i < 4; i++)
        assert_true(rp_file_exists(f[i]));
    flip_byte(f[2], (off_t)(head + payload / 2));
    {
        rp_kv_pool *p = make_pool(8);
        rp_cache *c = make_cache(p, FP_A, dir, 0);
        rp_cache_match m;
        rp_cache_lookup(c, t, 4, &m);
        assert_int_equal(m.n_disk, 4);
        rp_kv_seq s;
        rp_kv_seq_init(&s);
        int got;
        capture_begin();
        assert_int_equal(rp_cache_take(c, t, &s, &got), RP_OK);
        capture_end();
        assert_int_equal(got, 2);
        check_block(p, s.blocks[0], 3.0f);
        check_block(p, s.blocks[1], 1003.0f);
        rp_cache_stats st;
        rp_cache_get_stats(c, &st);
        assert_int_equal(st.disk_rejects, 1);
        assert_int_equal(st.disk_blocks, 3);
        assert_false(rp_file_exists(f[2]));
        // Logged: one line naming the file and why.
        if (lines_with(captured, "prefix cache: deleted the block file ") != 1 || lines_with(captured, f[2]) != 1 ||
            lines_with(captured, "payload checksum mismatch") != 1)
            fail_msg("the load's log: [%s]", captured);
        rp_kv_seq_deinit(p, &s);
        rp_cache_destroy(c); // blocks 0 and 1 are on disk already: nothing written
        rp_kv_pool_destroy(p);
    }
    assert_false(rp_file_exists(f[2]));

    // Truncated, a header field changed, tokens changed, foreign fingerprint, a
    // name that does not match the key, garbage: all deleted at the index.
    {
        rp_kv_pool *p = make_pool(8);
        rp_cache *c = make_cache(p, FP_A, dir, 0);
        publish_idle(p, c, t, 4, 3.0f); // block 2 again
        rp_cache_destroy(c);
        rp_kv_pool_destroy(p);
    }
    assert_int_equal(count_files(fpd, ".kvb"), 4);
    assert_int_equal(truncate(f[0], (off_t)(head + payload - 1)), 0);
    flip_byte(f[1], offsetof(block_header, block_size));
    flip_byte(f[2], sizeof(block_header) + 1); // a token
    flip_byte(f[3], offsetof(block_header, fingerprint));
    char junk[4][700];
    snprintf(junk[0], sizeof(junk[0]), "%s/00000000000000000000000000000000.kvb", fpd);
    rp_test_write_file(junk[0], "garbage", 7);
    snprintf(junk[1], sizeof(junk[1]), "%s/0123.kvb", fpd); // not a key name: left alone
    rp_test_write_file(junk[1], "x", 1);
    capture_begin();
    rp_cache_stats st = restart_stats(dir);
    capture_end();
    assert_int_equal(st.disk_blocks, 0);
    assert_int_equal(st.disk_rejects, 5);
    // One line for the folder, with the count and the folder's name.
    if (lines_with(captured, "prefix cache: deleted 5 cache files in ") != 1 || lines_with(captured, fpd) != 1)
        fail_msg("the index's log: [%s]", captured);
    for (int i = 0; i < 4; i++)
        assert_false(rp_file_exists(f[i]));
    assert_false(rp_file_exists(junk[0]));
    assert_true(rp_file_exists(junk[1]));
    unlink(junk[1]);

    // A valid file of another fingerprint copied into this folder.
    char fpd_b[600];
    fp_dir(dir, FP_B, fpd_b, sizeof(fpd_b));
    {
        rp_kv_pool *p = make_pool(8);
        rp_cache *c = make_cache(p, FP_B, dir, 0);
        publish_idle(p, c, t, 1, 3.0f);
        rp_cache_destroy(c);
        rp_kv_pool_destroy(p);
    }
    DIR *d = opendir(fpd_b);
    struct dirent *de;
    char src[800] = "", dst[800] = "";
    while ((de = readdir(d)))
        if (strstr(de->d_name, ".kvb")) {
            snprintf(src, sizeof(src), "%s/%s", fpd_b, de->d_name);
            snprintf(dst, sizeof(dst), "%s/%s", fpd, de->d_name);
        }
    closedir(d);
    assert_true(*src);
    assert_int_equal(link(src, dst), 0);
    st = restart_stats(dir);
    assert_int_equal(st.disk_blocks, 0);
    assert_int_equal(st.disk_rejects, 1);
    assert_false(rp_file_exists(dst));
    assert_true(rp_file_exists(src)); // its own folder is untouched

    // A file of the previous format version (K by token, not transposed in the block),
    // valid in every other way (its header checksum made again): deleted at the index.
    {
        rp_kv_pool *p = make_pool(8);
        rp_cache *c = make_cache(p, FP_A, dir, 0);
        publish_idle(p, c, t, 1, 3.0f);
        rp_cache_destroy(c);
        rp_kv_pool_destroy(p);
    }
    assert_int_equal(restart_stats(dir).disk_blocks, 1); // as written: indexed
    {
        block_header h;
        int32_t toks[BS];
        int fd = open(f[0], O_RDWR);
        assert_true(fd >= 0);
        assert_int_equal(pread(fd, &h, sizeof(h), 0), sizeof(h));
        assert_int_equal(pread(fd, toks, sizeof(toks), sizeof(h)), sizeof(toks));
        h.version = BLOCK_VERSION - 1;
        XXH3_state_t xs;
        XXH3_INITSTATE(&xs);
        XXH3_64bits_reset(&xs);
        XXH3_64bits_update(&xs, &h, offsetof(block_header, header_sum));
        XXH3_64bits_update(&xs, toks, sizeof(toks));
        h.header_sum = XXH3_64bits_digest(&xs);
        assert_int_equal(pwrite(fd, &h, sizeof(h), 0), sizeof(h));
        close(fd);
    }
    st = restart_stats(dir);
    assert_int_equal(st.disk_blocks, 0);
    assert_int_equal(st.disk_rejects, 1);
    assert_false(rp_file_exists(f[0]));

    // Temp files: of a process that is gone, or not ours at all: deleted; of a
    // live process (this one): kept.
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    assert_true(child > 0);
    waitpid(child, NULL, 0);
    char tmp[3][800];
    snprintf(tmp[0], sizeof(tmp[0]), "%s.tmp.%d", f[0], (int)child);
    snprintf(tmp[1], sizeof(tmp[1]), "%s.tmp.%d", f[1], (int)getpid());
    snprintf(tmp[2], sizeof(tmp[2]), "%s.tmp.x", f[2]);
    for (int i = 0; i < 3; i++)
        rp_test_write_file(tmp[i], "partial", 7);
    restart_stats(dir);
    assert_false(rp_file_exists(tmp[0]));
    assert_true(rp_file_exists(tmp[1]));
    assert_false(rp_file_exists(tmp[2]));
    unlink(tmp[1]);
}

static void test_budget(void **state)
{
    const char *dir = fresh_dir("budget");
    uint64_t file =
        sizeof(block_header) + BS * sizeof(int32_t) + rp_kv_block_bytes(LAYERS, HEADS, HD, BS, RP_DTYPE_F32);
    int32_t t[6 * BS], u[6 * BS];
    tokens(t, 6 * BS, 2000);
    tokens(u, 6 * BS, 3000);
    // Budget of 3 files; a flush of 6 blocks (one prefix) keeps its first 3:
    // the most recent first, and a prefix's first block counts as its most recent.
    {
        rp_kv_pool *p = make_pool(16);
        rp_cache *c = make_cache(p, FP_A, dir, 3 * file);
        publish_idle(p, c, t, 6, 1.0f);
        rp_cache_destroy(c);
        rp_kv_pool_destroy(p);
    }
    {
        rp_kv_pool *p = make_pool(16);
        rp_cache *c = make_cache(p, FP_A, dir, 3 * file);
        rp_cache_stats st;
        rp_cache_get_stats(c, &st);
        assert_int_equal(st.disk_blocks, 3);
        assert_true(st.disk_bytes <= 3 * file);
        rp_cache_match m;
        rp_cache_lookup(c, t, 6, &m);
        assert_int_equal(m.n_disk, 3);
        // A newer prefix pushes the old files out, least recently used first.
        publish_idle(p, c, u, 2, 7.0f);
        rp_cache_destroy(c);
        rp_kv_pool_destroy(p);
    }
    {
        rp_kv_pool *p = make_pool(16);
        rp_cache *c = make_cache(p, FP_A, dir, 3 * file);
        rp_cache_stats st;
        rp_cache_get_stats(c, &st);
        assert_int_equal(st.disk_blocks, 3);
        rp_cache_match m;
        rp_cache_lookup(c, u, 2, &m);
        assert_int_equal(m.n_disk, 2);
        rp_cache_lookup(c, t, 6, &m);
        assert_int_equal(m.n_disk, 1); // the old prefix's first block was its most recent
        rp_cache_destroy(c);
        rp_kv_pool_destroy(p);
    }
    // A smaller budget at the next start trims the folder at once.
    {
        rp_kv_pool *p = make_pool(16);
        rp_cache *c = make_cache(p, FP_A, dir, file);
        rp_cache_stats st;
        rp_cache_get_stats(c, &st);
        assert_int_equal(st.disk_blocks, 1);
        assert_int_equal(st.disk_evictions, 2);
        assert_int_equal(st.disk_budget, file);
        rp_cache_match m;
        rp_cache_lookup(c, u, 2, &m);
        assert_int_equal(m.n_disk, 1);
        rp_cache_destroy(c);
        rp_kv_pool_destroy(p);
    }
    // A budget below one file: nothing is ever written.
    {
        rp_kv_pool *p = make_pool(16);
        rp_cache *c = make_cache(p, FP_A, dir, file - 1);
        publish_idle(p, c, t, 2, 1.0f);
        rp_cache_destroy(c);
        rp_kv_pool_destroy(p);
    }
    assert_int_equal(restart_stats(dir).disk_blocks, 0);
}

// Prefetch reads a lookup's disk blocks a few at a time into the memory cache,
// where the next lookup finds them idle; a bad file ends the prefix there.
static void test_prefetch(void **state)
{
    const char *dir = fresh_dir("prefetch");
    int32_t t[6 * BS];
    tokens(t, 6 * BS, 7000);
    rp_kv_pool *p = make_pool(8);
    rp_cache *c = make_cache(p, FP_A, dir, 0);
    publish_idle(p, c, t, 6, 3.0f);
    rp_cache_destroy(c); // flushed
    rp_kv_pool_destroy(p);
    p = make_pool(8);
    c = make_cache(p, FP_A, dir, 0);
    rp_cache_match m;
    rp_cache_lookup(c, t, 6, &m);
    assert_int_equal(m.n_disk, 6);
    assert_int_equal(rp_cache_prefetch(c, t, 4), 2);
    assert_int_equal(rp_kv_pool_free_blocks(p), 8); // read into the memory cache, held by nobody
    assert_int_equal(rp_kv_pool_cached_free(p), 4);
    rp_cache_lookup(c, t, 6, &m);
    assert_int_equal(m.n_idle, 4);
    assert_int_equal(m.n_disk, 2);
    assert_int_equal(rp_cache_prefetch(c, t, 4), 0);
    rp_cache_lookup(c, t, 6, &m);
    assert_int_equal(m.n_idle, 6);
    assert_int_equal(m.n_disk, 0);
    rp_kv_seq s;
    rp_kv_seq_init(&s);
    int got;
    assert_int_equal(rp_cache_take(c, t, &s, &got), RP_OK);
    assert_int_equal(got, 6);
    for (int i = 0; i < 6; i++)
        check_block(p, s.blocks[i], 3.0f + 1000.0f * (float)i);
    rp_kv_seq_deinit(p, &s);
    rp_cache_stats st;
    rp_cache_get_stats(c, &st);
    assert_int_equal(st.disk_hit_blocks, 6);
    rp_cache_destroy(c);
    rp_kv_pool_destroy(p);

    // A bad third file: the reading stops there, and the prefix ends before it.
    const char *dir2 = fresh_dir("prefetch-bad");
    char fpd[600], f[700];
    p = make_pool(8);
    c = make_cache(p, FP_A, dir2, 0);
    publish_idle(p, c, t, 6, 3.0f);
    snprintf(fpd, sizeof(fpd), "%s", rp_cache_dir(c));
    rp_cache_destroy(c);
    rp_kv_pool_destroy(p);
    block_file(fpd, t, 2, f, sizeof(f));
    struct stat sb;
    assert_int_equal(stat(f, &sb), 0);
    assert_int_equal(truncate(f, sb.st_size - 1), 0); // fails the size check at load
    p = make_pool(8);
    c = make_cache(p, FP_A, dir2, 0);
    rp_cache_lookup(c, t, 6, &m);
    if (m.n_disk == 6) { // (the index may already have dropped the file: then the prefix ends at 2)
        assert_int_equal(rp_cache_prefetch(c, t, 16), 0);
        rp_cache_lookup(c, t, 6, &m);
    }
    assert_int_equal(m.n_blocks, 2);
    assert_int_not_equal(access(f, F_OK), 0); // deleted
    rp_cache_destroy(c);
    rp_kv_pool_destroy(p);
}

/* ---- the fault hook ------------------------------------------------------------ */

// In a child: a cache on dir with RP_CACHE_FAULT=fault publishes 3 blocks and is
// destroyed (the flush writes them). Returns the child's exit status.
static int run_faulty_child(const char *dir, const char *fault, const int32_t *t)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("RP_CACHE_FAULT", fault, 1);
        rp_log_set_level(RP_LOG_ERROR);
        rp_kv_pool *p = NULL;
        rp_cache *c = NULL;
        rp_cache_params cp;
        rp_cache_params_default(&cp);
        cp.dir = dir;
        if (rp_kv_pool_create(BE, LAYERS, HEADS, HD, BS, 8, RP_DTYPE_F32, &p) || rp_cache_create(p, FP_A, &cp, &c))
            _exit(1);
        rp_kv_seq a;
        rp_kv_seq_init(&a);
        if (rp_kv_seq_reserve(p, &a, 3 * BS))
            _exit(1);
        size_t n = block_floats();
        float *buf = malloc(n * sizeof(float));
        for (int b = 0; b < 3; b++) {
            for (size_t i = 0; i < n; i++)
                buf[i] = 4.0f + 1000.0f * (float)b + (float)i;
            rp_kv_block_write(p, a.blocks[b], buf);
        }
        rp_cache_publish(c, t, &a, 3);
        rp_kv_seq_deinit(p, &a);
        rp_cache_destroy(c);
        _exit(0); // the hook did not fire
    }
    assert_true(pid > 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_fault_hook_kills(void **state)
{
    int32_t t[3 * BS];
    tokens(t, 3 * BS, 4000);
    // The writer writes the queued blocks in batches: each file of a batch under
    // its temp name, one sync, then the renames. Which blocks share a batch
    // depends on when the writer woke, so a fault leaves a range of outcomes;
    // whatever it left, the next start keeps exactly the renamed files (the
    // prefix's first blocks: the flush writes them first) and deletes the rest.
    struct {
        const char *fault;
        int whole_min, whole_max; // files in place (renamed) the child may leave
        int temp_min, temp_max;   // temp files
    } cases[] = {
        {"mid-write", 0, 0, 1, 1},       // dies halfway through the first file's payload
        {"before-rename", 0, 0, 1, 3},   // before the first rename: its batch whole, under temp names
        {"mid-write:3", 0, 2, 1, 3},     // the third file half written; the files of earlier batches in place
        {"before-rename:2", 1, 1, 1, 2}, // the first file in place, the second (and a third in its batch) not
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        char name[32];
        snprintf(name, sizeof(name), "fault%zu", k);
        const char *dir = fresh_dir(name);
        assert_int_equal(run_faulty_child(dir, cases[k].fault, t), RP_CACHE_FAULT_EXIT);
        char fpd[600];
        {
            rp_kv_pool *p = make_pool(2);
            rp_cache *c = make_cache(p, FP_A, NULL, 0);
            snprintf(fpd, sizeof(fpd), "%s/%s", dir, c->fp_hex);
            rp_cache_destroy(c);
            rp_kv_pool_destroy(p);
        }
        int temps = count_files(fpd, ".tmp."), whole = count_files(fpd, ".kvb") - temps;
        if (whole < cases[k].whole_min || whole > cases[k].whole_max || temps < cases[k].temp_min ||
            temps > cases[k].temp_max || whole + temps > 3)
            fail_msg("%s: the child left %d whole files and %d temp files", cases[k].fault, whole, temps);
        fp_dir(dir, FP_A, fpd, sizeof(fpd)); // a throwaway start: this cleans the folder
        assert_int_equal(count_files(fpd, ".tmp."), 0);
        assert_int_equal(count_files(fpd, ".kvb"), whole);
        if (whole)
            check_restart(dir, t, 3, whole, 4.0f);
        else
            assert_int_equal(restart_stats(dir).disk_blocks, 0);
    }
    // An unknown value is ignored: the child ends normally and its files are whole.
    const char *dir = fresh_dir("fault-none");
    assert_int_equal(run_faulty_child(dir, "sometimes", t), 0);
    check_restart(dir, t, 3, 3, 4.0f);
}

/* ---- what is in the folder -------------------------------------------------------- */

// In a forked child with an alarm (a regression hangs on a FIFO's open: the
// child is killed and the test fails instead of hanging): a cache over dir
// whose FP_A folder holds a FIFO and a symbolic link under block names, next
// to a valid block file, then a take after that file too was replaced by a
// FIFO. Exit 0 when everything came out as it should, else the failed step.
static int not_regular_child(const char *dir, const char *fifo, const char *valid, const int32_t *t)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(60);
        rp_log_set_level(RP_LOG_ERROR);
        rp_kv_pool *p = NULL;
        rp_cache *c = NULL;
        rp_cache_params cp;
        rp_cache_params_default(&cp);
        cp.dir = dir;
        if (rp_kv_pool_create(BE, LAYERS, HEADS, HD, BS, 8, RP_DTYPE_F32, &p) || rp_cache_create(p, FP_A, &cp, &c))
            _exit(10);
        rp_cache_stats st;
        rp_cache_get_stats(c, &st);
        if (st.disk_blocks != 1 || st.disk_rejects != 2 || rp_file_exists(fifo))
            _exit(11); // the valid file indexed, the FIFO and the link deleted
        // The indexed file turns into a FIFO before a request reads it.
        if (unlink(valid) || mkfifo(valid, 0644))
            _exit(12);
        rp_cache_match m;
        rp_cache_lookup(c, t, 1, &m);
        if (m.n_disk != 1)
            _exit(13);
        rp_kv_seq s;
        rp_kv_seq_init(&s);
        int got = -1;
        if (rp_cache_take(c, t, &s, &got) || got != 0)
            _exit(14);
        rp_cache_get_stats(c, &st);
        if (st.disk_blocks != 0 || st.disk_rejects != 3 || rp_file_exists(valid))
            _exit(15);
        rp_cache_destroy(c);
        rp_kv_pool_destroy(p);
        _exit(0);
    }
    assert_true(pid > 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status))
        fail_msg("the child was killed by signal %d (%s): it hung on a file that is not a regular file",
                 WTERMSIG(status), WTERMSIG(status) == SIGALRM ? "its alarm" : "?");
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_not_regular_files(void **state)
{
    const char *dir = fresh_dir("fifo");
    int32_t t[3 * BS];
    tokens(t, 3 * BS, 6000);
    char fpd[600], f[3][700];
    fp_dir(dir, FP_A, fpd, sizeof(fpd));
    for (int i = 0; i < 3; i++)
        block_file(fpd, t, i, f[i], sizeof(f[i]));
    {
        rp_kv_pool *p = make_pool(8);
        rp_cache *c = make_cache(p, FP_A, dir, 0);
        publish_idle(p, c, t, 1, 3.0f);
        rp_cache_destroy(c); // block 0's file
        rp_kv_pool_destroy(p);
    }
    assert_true(rp_file_exists(f[0]));
    // Block 1's name is a FIFO (nothing ever writes it: opened for reading
    // without O_NONBLOCK, it blocks forever); block 2's a link to block 0's file.
    assert_int_equal(mkfifo(f[1], 0644), 0);
    char target[800];
    snprintf(target, sizeof(target), "%s.elsewhere", dir);
    {
        int in = open(f[0], O_RDONLY), out = open(target, O_CREAT | O_TRUNC | O_WRONLY, 0644);
        assert_true(in >= 0 && out >= 0);
        char buf[4096];
        ssize_t k;
        while ((k = read(in, buf, sizeof(buf))) > 0)
            assert_int_equal(write(out, buf, (size_t)k), k);
        close(in);
        close(out);
    }
    assert_int_equal(symlink(target, f[2]), 0);
    int rc = not_regular_child(dir, f[1], f[0], t);
    if (rc != 0)
        fail_msg("the child failed at step %d", rc);
    struct stat sb;
    assert_int_equal(lstat(f[2], &sb), -1); // the link is gone...
    assert_true(rp_file_exists(target));      // ...not what it pointed at
    unlink(target);
}

// The folder cannot be used: the cache is made without its disk tier, and one
// warning names the folder and the reason.
static void test_unusable_folder(void **state)
{
    rp_kv_pool *p = make_pool(4);
    // A file where the model's folder (dir/<fingerprint>) should be.
    const char *dir = fresh_dir("file-in-the-way");
    char fpd[600];
    fp_dir(dir, FP_A, fpd, sizeof(fpd));
    assert_int_equal(rmdir(fpd), 0);
    rp_test_write_file(fpd, "x", 1);
    // And a file given as the base folder itself.
    char file_path[600];
    snprintf(file_path, sizeof(file_path), "%s", rp_test_tmp_path("a-file"));
    rp_test_write_file(file_path, "x", 1);
    const char *bases[] = {dir, file_path};
    const char *named[] = {fpd, file_path};
    for (int k = 0; k < 2; k++) {
        rp_cache_params cp;
        rp_cache_params_default(&cp);
        cp.dir = bases[k];
        rp_cache *c = NULL;
        capture_begin();
        rp_status st = rp_cache_create(p, FP_A, &cp, &c);
        capture_end();
        assert_int_equal(st, RP_OK);
        assert_non_null(c);
        assert_null(rp_cache_dir(c));
        rp_cache_stats cs;
        rp_cache_get_stats(c, &cs);
        assert_false(cs.disk);
        if (lines_with(captured, "prefix cache: the disk tier is off") != 1 || lines_with(captured, named[k]) != 1 ||
            lines_with(captured, "memory") != 1)
            fail_msg("case %d: the warning: [%s]", k, captured);
        // It serves from memory.
        int32_t t[2 * BS];
        tokens(t, 2 * BS, 7000);
        publish_idle(p, c, t, 2, 5.0f);
        rp_cache_match m;
        rp_cache_lookup(c, t, 2, &m);
        assert_int_equal(m.n_idle, 2);
        rp_cache_destroy(c);
    }
    assert_true(rp_file_exists(fpd)); // left as it was
    rp_kv_pool_destroy(p);
}

/* ---- the rest ----------------------------------------------------------------- */

static void test_alloc_failures(void **state)
{
    const char *dir = fresh_dir("oom");
    rp_kv_pool *p = make_pool(8);
    for (int with_dir = 0; with_dir < 2; with_dir++) {
        int fails = 0;
        for (long k = 0; k < 200; k++) {
            rp_cache_params cp;
            rp_cache_params_default(&cp);
            cp.dir = with_dir ? dir : NULL;
            cp.stage_bytes = 1; // the fewest staging buffers (2)
            rp_cache *c = NULL;
            rp_alloc_fail_after(k, false);
            rp_status st = rp_cache_create(p, FP_A, &cp, &c);
            rp_alloc_fail_after(-1, false);
            if (st == RP_OK) {
                rp_cache_destroy(c);
                break;
            }
            assert_int_equal(st, RP_ERR_NOMEM);
            assert_null(c);
            fails++;
        }
        assert_true(fails > 0);
    }
    // take: the block table cannot grow; the blocks stay cached, nothing is held.
    rp_cache *c = make_cache(p, FP_A, NULL, 0);
    int32_t t[2 * BS];
    tokens(t, 2 * BS, 1);
    publish_idle(p, c, t, 2, 1.0f);
    rp_cache_match m;
    rp_cache_lookup(c, t, 2, &m);
    rp_kv_seq s;
    rp_kv_seq_init(&s);
    int got = -1;
    rp_alloc_fail_after(0, false);
    assert_int_equal(rp_cache_take(c, t, &s, &got), RP_ERR_NOMEM);
    rp_alloc_fail_after(-1, false);
    assert_int_equal(got, 0);
    assert_int_equal(s.n_blocks, 0);
    assert_int_equal(rp_kv_pool_free_blocks(p), 8);
    assert_int_equal(rp_kv_pool_cached_free(p), 2);
    rp_cache_destroy(c);
    rp_kv_pool_destroy(p);
}

static void test_default_dir(void **state)
{
    char *old_xdg = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
    char *old_home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    setenv("XDG_CACHE_HOME", "/x/cache", 1);
    char *d = rp_cache_default_dir();
    assert_string_equal(d, "/x/cache/rapid/kv");
    rp_free(d);
    setenv("XDG_CACHE_HOME", "relative", 1); // not absolute: ignored, as the XDG spec says
    setenv("HOME", "/home/u", 1);
    d = rp_cache_default_dir();
    assert_string_equal(d, "/home/u/.cache/rapid/kv");
    rp_free(d);
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    assert_null(rp_cache_default_dir());
    if (old_xdg)
        setenv("XDG_CACHE_HOME", old_xdg, 1);
    if (old_home)
        setenv("HOME", old_home, 1);
    free(old_xdg);
    free(old_home);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys_chain),
        cmocka_unit_test(test_publish_lookup_take),
        cmocka_unit_test(test_collision_and_duplicates),
        cmocka_unit_test(test_memory_eviction),
        cmocka_unit_test(test_disk_evict_and_load),
        cmocka_unit_test(test_flush_and_restart),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_fault_hook_kills),
        cmocka_unit_test(test_not_regular_files),
        cmocka_unit_test(test_unusable_folder),
        cmocka_unit_test(test_flush_many),
        cmocka_unit_test(test_prefetch),
        cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_default_dir),
    };
    return cmocka_run_group_tests(tests, cache_setup, cache_teardown);
}
