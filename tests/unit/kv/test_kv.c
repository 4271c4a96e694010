/*
 * test_kv.c - the KV block pool: allocation order, reference counts, cached
 * blocks on the free list (hits, least-recently-released eviction through the
 * evict hook), adopting and unsharing blocks, block copies to and from host
 * memory, truncation, and allocation failures.
 */
#include "test_util.h"

#include "kv/kv.h"

static rp_backend *BE;

enum { LAYERS = 2, HEADS = 2, HD = 4, BS = 4 };

static int setup(void **state)
{
    return rp_backend_open(rp_test_device(), &(rp_backend_params){.n_threads = 1}, &BE) ? -1 : 0;
}

static int teardown(void **state)
{
    rp_backend_destroy(BE);
    return 0;
}

static rp_kv_pool *make_pool(int n_blocks)
{
    rp_kv_pool *p = NULL;
    assert_int_equal(rp_kv_pool_create(BE, LAYERS, HEADS, HD, BS, n_blocks, RP_DTYPE_F32, &p), RP_OK);
    return p;
}

static size_t block_floats(void)
{
    return rp_kv_block_bytes(LAYERS, HEADS, HD, BS, RP_DTYPE_F32) / sizeof(float);
}

// Fills block b with values derived from tag.
static void fill_block(rp_kv_pool *p, int32_t b, float tag)
{
    size_t n = block_floats();
    float *buf = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        buf[i] = tag + (float)i * 0.5f;
    assert_int_equal(rp_kv_block_write(p, b, buf), RP_OK);
    free(buf);
}

static void check_block(rp_kv_pool *p, int32_t b, float tag)
{
    size_t n = block_floats();
    float *buf = malloc(n * sizeof(float));
    assert_int_equal(rp_kv_block_read(p, b, buf), RP_OK);
    for (size_t i = 0; i < n; i++)
        if (buf[i] != tag + (float)i * 0.5f)
            fail_msg("block %d float %zu is %g, expected %g", b, i, buf[i], tag + (float)i * 0.5f);
    free(buf);
}

static void test_geometry_and_order(void **state)
{
    rp_kv_pool *p = make_pool(6);
    assert_int_equal(rp_kv_pool_n_blocks(p), 6);
    assert_int_equal(rp_kv_pool_block_size(p), BS);
    assert_int_equal(rp_kv_pool_n_layers(p), LAYERS);
    assert_int_equal(rp_kv_pool_n_kv_head(p), HEADS);
    assert_int_equal(rp_kv_pool_head_dim(p), HD);
    assert_int_equal(rp_kv_pool_block_bytes(p), (size_t)LAYERS * 2 * BS * HEADS * HD * sizeof(float));
    assert_int_equal(rp_kv_pool_free_blocks(p), 6);
    rp_kv_seq s;
    rp_kv_seq_init(&s);
    assert_int_equal(rp_kv_seq_reserve(p, &s, 9), RP_OK); // 3 blocks, lowest ids first
    assert_int_equal(s.n_blocks, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(s.blocks[i], i);
        assert_int_equal(rp_kv_block_refs(p, i), 1);
    }
    assert_int_equal(rp_kv_seq_slot(p, &s, 5), 1 * BS + 1);
    assert_int_equal(rp_kv_pool_free_blocks(p), 3);
    // Too many: nothing changes.
    assert_int_equal(rp_kv_seq_reserve(p, &s, 9 + 4 * BS), RP_ERR_RANGE);
    assert_int_equal(s.n_blocks, 3);
    assert_int_equal(s.n_tokens, 9);
    assert_int_equal(rp_kv_pool_free_blocks(p), 3);
    // Truncation gives back what is past the end; freed blocks are handed out again first.
    rp_kv_seq_truncate(p, &s, 4);
    assert_int_equal(s.n_blocks, 1);
    assert_int_equal(rp_kv_pool_free_blocks(p), 5);
    assert_int_equal(rp_kv_seq_reserve(p, &s, 5), RP_OK);
    assert_int_equal(s.blocks[1], 1);
    rp_kv_seq_deinit(p, &s);
    assert_int_equal(rp_kv_pool_free_blocks(p), 6);
    rp_kv_pool_destroy(p);
}

typedef struct evict_log {
    int32_t ids[32];
    int n;
    rp_kv_pool *p;
    float seen; // first float of the last evicted block, read during the hook
} evict_log;

static void on_evict(void *ctx, int32_t b)
{
    evict_log *l = ctx;
    l->ids[l->n++] = b;
    float *buf = malloc(rp_kv_pool_block_bytes(l->p));
    assert_int_equal(rp_kv_block_read(l->p, b, buf), RP_OK);
    l->seen = buf[0];
    free(buf);
}

static void test_cached_blocks_lru(void **state)
{
    rp_kv_pool *p = make_pool(5);
    evict_log log = {.p = p};
    rp_kv_pool_set_evict(p, on_evict, &log);
    // Sequence A takes blocks 0, 1, 2 and marks them cached, as the prefix cache does.
    rp_kv_seq a;
    rp_kv_seq_init(&a);
    assert_int_equal(rp_kv_seq_reserve(p, &a, 3 * BS), RP_OK);
    for (int i = 0; i < 3; i++) {
        fill_block(p, a.blocks[i], 100.0f * (float)(i + 1));
        rp_kv_block_set_cached(p, a.blocks[i], true);
        assert_true(rp_kv_block_is_cached(p, a.blocks[i]));
    }
    assert_int_equal(rp_kv_pool_cached_free(p), 0);
    rp_kv_seq_deinit(p, &a); // released last first: 2, 1, 0 join the cached end in that order
    assert_int_equal(rp_kv_pool_free_blocks(p), 5);
    assert_int_equal(rp_kv_pool_cached_free(p), 3);

    // A hit takes block 1 back with its contents.
    rp_kv_block_ref(p, 1);
    assert_int_equal(rp_kv_block_refs(p, 1), 1);
    assert_int_equal(rp_kv_pool_free_blocks(p), 4);
    assert_int_equal(rp_kv_pool_cached_free(p), 2);
    check_block(p, 1, 200.0f);

    // Allocation takes the plain blocks (3, 4) first, then the cached one released
    // longest ago (2), through the hook, which still sees its contents.
    int32_t b;
    assert_int_equal(rp_kv_block_alloc(p, &b), RP_OK);
    assert_int_equal(b, 3);
    assert_int_equal(rp_kv_block_alloc(p, &b), RP_OK);
    assert_int_equal(b, 4);
    assert_int_equal(log.n, 0);
    assert_int_equal(rp_kv_block_alloc(p, &b), RP_OK);
    assert_int_equal(b, 2);
    assert_int_equal(log.n, 1);
    assert_int_equal(log.ids[0], 2);
    assert_true(log.seen == 300.0f);
    assert_false(rp_kv_block_is_cached(p, 2));
    assert_int_equal(rp_kv_pool_cached_free(p), 1);
    assert_int_equal(rp_kv_block_alloc(p, &b), RP_OK);
    assert_int_equal(b, 0);
    assert_int_equal(rp_kv_block_alloc(p, &b), RP_ERR_RANGE);

    // Released while held by two: free only at the last reference, at the cached end.
    rp_kv_block_ref(p, 1);
    rp_kv_block_unref(p, 1);
    assert_int_equal(rp_kv_pool_free_blocks(p), 0);
    rp_kv_block_unref(p, 1);
    assert_int_equal(rp_kv_pool_free_blocks(p), 1);
    assert_int_equal(rp_kv_pool_cached_free(p), 1);
    // Unmarking a free cached block makes it plain (and first in line, without the hook).
    rp_kv_block_set_cached(p, 1, false);
    assert_int_equal(rp_kv_pool_cached_free(p), 0);
    assert_int_equal(rp_kv_block_alloc(p, &b), RP_OK);
    assert_int_equal(b, 1);
    assert_int_equal(log.n, 2); // 2 and 0 went through the hook, 1 (unmarked) did not
    for (int32_t i = 0; i < 5; i++)
        rp_kv_block_unref(p, i);
    assert_int_equal(rp_kv_pool_free_blocks(p), 5);
    rp_kv_pool_destroy(p);
}

static void test_adopt_and_unshare(void **state)
{
    rp_kv_pool *p = make_pool(6);
    rp_kv_seq a, b;
    rp_kv_seq_init(&a);
    rp_kv_seq_init(&b);
    assert_int_equal(rp_kv_seq_reserve(p, &a, 2 * BS), RP_OK);
    fill_block(p, a.blocks[0], 1.0f);
    fill_block(p, a.blocks[1], 2.0f);
    // b shares a's two blocks: one reference each, handed over.
    int32_t shared[2] = {a.blocks[0], a.blocks[1]};
    rp_kv_block_ref(p, shared[0]);
    rp_kv_block_ref(p, shared[1]);
    assert_int_equal(rp_kv_seq_adopt(p, &b, shared, 2), RP_OK);
    assert_int_equal(b.n_tokens, 2 * BS);
    assert_int_equal(rp_kv_block_refs(p, shared[1]), 2);
    // b writes into its last block: it gets a copy first; a keeps the original.
    assert_int_equal(rp_kv_seq_unshare_last(p, &b), RP_OK);
    assert_int_not_equal(b.blocks[1], a.blocks[1]);
    assert_int_equal(b.blocks[0], a.blocks[0]);
    assert_int_equal(rp_kv_block_refs(p, a.blocks[1]), 1);
    assert_int_equal(rp_kv_block_refs(p, b.blocks[1]), 1);
    check_block(p, b.blocks[1], 2.0f);
    fill_block(p, b.blocks[1], 9.0f);
    check_block(p, a.blocks[1], 2.0f);
    // Already private: nothing happens.
    int32_t own = b.blocks[1];
    assert_int_equal(rp_kv_seq_unshare_last(p, &b), RP_OK);
    assert_int_equal(b.blocks[1], own);
    // A cached block is copied even when held once (its contents belong to the cache).
    rp_kv_block_set_cached(p, own, true);
    assert_int_equal(rp_kv_seq_unshare_last(p, &b), RP_OK);
    assert_int_not_equal(b.blocks[1], own);
    assert_int_equal(rp_kv_block_refs(p, own), 0);
    assert_int_equal(rp_kv_pool_cached_free(p), 1);
    // Growing b then takes fresh blocks after the adopted ones.
    assert_int_equal(rp_kv_seq_reserve(p, &b, 3 * BS - 1), RP_OK);
    assert_int_equal(b.n_blocks, 3);
    // No block free for a copy: RANGE, nothing changed.
    rp_kv_seq c;
    rp_kv_seq_init(&c);
    rp_kv_block_ref(p, a.blocks[0]);
    assert_int_equal(rp_kv_seq_adopt(p, &c, &a.blocks[0], 1), RP_OK);
    int32_t filler[8];
    int nf = 0;
    while (rp_kv_block_alloc(p, &filler[nf]) == RP_OK)
        nf++;
    assert_int_equal(rp_kv_seq_unshare_last(p, &c), RP_ERR_RANGE);
    assert_int_equal(c.blocks[0], a.blocks[0]);
    for (int i = 0; i < nf; i++)
        rp_kv_block_unref(p, filler[i]);
    rp_kv_seq_deinit(p, &a);
    rp_kv_seq_deinit(p, &b);
    rp_kv_seq_deinit(p, &c);
    assert_int_equal(rp_kv_pool_free_blocks(p), 6);
    rp_kv_pool_destroy(p);
}

static void test_block_copy(void **state)
{
    rp_kv_pool *p = make_pool(3);
    fill_block(p, 0, 7.0f);
    fill_block(p, 2, -3.0f);
    assert_int_equal(rp_kv_block_copy(p, 1, 0), RP_OK);
    check_block(p, 1, 7.0f);
    check_block(p, 2, -3.0f); // untouched
    rp_kv_pool_destroy(p);
}

// A pool of halves: blocks of half the bytes, whose host copies (read, write) are
// the cache's own 16-bit values, and copies between blocks keep every bit.
static void test_f16_pool(void **state)
{
    rp_kv_pool *p = NULL;
    assert_int_equal(rp_kv_pool_create(BE, LAYERS, HEADS, HD, BS, 3, RP_DTYPE_F16, &p), RP_OK);
    assert_int_equal(rp_kv_pool_type(p), RP_DTYPE_F16);
    assert_int_equal(rp_kv_pool_block_bytes(p), (size_t)LAYERS * 2 * BS * HEADS * HD * sizeof(uint16_t));
    assert_int_equal(rp_kv_block_bytes(LAYERS, HEADS, HD, BS, RP_DTYPE_F16) * 2,
                     rp_kv_block_bytes(LAYERS, HEADS, HD, BS, RP_DTYPE_F32));
    size_t n = rp_kv_pool_block_bytes(p) / sizeof(uint16_t);
    uint16_t *in = malloc(n * sizeof(uint16_t)), *out = malloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++)
        in[i] = (uint16_t)(i * 40503u + 7);
    assert_int_equal(rp_kv_block_write(p, 2, in), RP_OK);
    assert_int_equal(rp_kv_block_copy(p, 0, 2), RP_OK);
    assert_int_equal(rp_kv_block_read(p, 0, out), RP_OK);
    assert_memory_equal(in, out, n * sizeof(uint16_t));
    // Block 1 was never written: it reads as zeros (the layout inside the layer is the
    // backend's; test_backend_ops checks the canonical one against the ops' own writes).
    rp_kv_layer *L = rp_kv_pool_layer(p, LAYERS - 1);
    assert_int_equal(L->type, RP_DTYPE_F16);
    assert_int_equal(rp_kv_block_read(p, 1, out), RP_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(out[i], 0);
    free(in);
    free(out);
    rp_kv_pool_destroy(p);
}

static void test_alloc_failures(void **state)
{
    // Creation: every allocation in turn fails, cleanly.
    int fails = 0;
    for (long k = 0; k < 64; k++) {
        rp_kv_pool *p = NULL;
        rp_alloc_fail_after(k, false);
        rp_status st = rp_kv_pool_create(BE, LAYERS, HEADS, HD, BS, 4, RP_DTYPE_F32, &p);
        rp_alloc_fail_after(-1, false);
        if (st == RP_OK) {
            rp_kv_pool_destroy(p);
            break;
        }
        assert_int_equal(st, RP_ERR_NOMEM);
        assert_null(p);
        fails++;
    }
    assert_true(fails > 0);
    // The block table cannot grow: reserve and adopt fail, nothing changes.
    rp_kv_pool *p = make_pool(4);
    rp_kv_seq s;
    rp_kv_seq_init(&s);
    rp_alloc_fail_after(0, false);
    assert_int_equal(rp_kv_seq_reserve(p, &s, 1), RP_ERR_NOMEM);
    assert_int_equal(s.n_blocks, 0);
    assert_int_equal(rp_kv_pool_free_blocks(p), 4);
    int32_t b;
    assert_int_equal(rp_kv_block_alloc(p, &b), RP_OK);
    rp_alloc_fail_after(0, false);
    assert_int_equal(rp_kv_seq_adopt(p, &s, &b, 1), RP_ERR_NOMEM);
    assert_int_equal(s.n_tokens, 0);
    assert_int_equal(rp_kv_block_refs(p, b), 1); // still the caller's
    assert_int_equal(rp_kv_seq_adopt(p, &s, &b, 1), RP_OK);
    assert_int_equal(s.n_tokens, BS);
    rp_kv_seq_deinit(p, &s);
    assert_int_equal(rp_kv_pool_free_blocks(p), 4);
    // Bad geometry.
    rp_kv_pool *q = NULL;
    assert_int_equal(rp_kv_pool_create(BE, 0, HEADS, HD, BS, 4, RP_DTYPE_F32, &q), RP_ERR_INVALID);
    assert_int_equal(rp_kv_pool_create(BE, LAYERS, HEADS, HD, BS, 0, RP_DTYPE_F32, &q), RP_ERR_INVALID);
    // K and V are f16 or f32, nothing else.
    assert_int_equal(rp_kv_pool_create(BE, LAYERS, HEADS, HD, BS, 4, RP_DTYPE_BF16, &q), RP_ERR_INVALID);
    assert_int_equal(rp_kv_pool_create(BE, LAYERS, HEADS, HD, BS, 4, RP_DTYPE_Q8_0, &q), RP_ERR_INVALID);
    assert_null(q);
    rp_kv_pool_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_geometry_and_order), cmocka_unit_test(test_cached_blocks_lru),
        cmocka_unit_test(test_adopt_and_unshare),  cmocka_unit_test(test_block_copy),
        cmocka_unit_test(test_f16_pool),           cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
