/*
 * test_cache_state.c - the prefix cache on a pool with recurrent state layers (no
 * model): snapshots filed under a block's key, lookups cut back to the last block
 * with one, takes that restore the state byte for byte, the memory budget (least
 * recently used first), state files written as they are made and found again after a
 * restart, state files that are corrupt, truncated or misnamed, the disk budget shared
 * with block files, and a take without a free state slot. States are synthetic: each
 * filled from a tag so a state read back can be checked float for float.
 */
#include "cache_harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>


enum { LAYERS = 2, HEADS = 1, HD = 8, BS = 4, SLOTS = 3 };
static const rp_kv_state_geom GEOM = {
    .n_layer = 2, .n_k_head = 1, .n_v_head = 2, .dk = 4, .dv = 4, .kc = 4, .n_slots = SLOTS, .log_cap = 2};
static const uint8_t FP[16] = {7, 7, 7, 7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};

static rp_kv_pool *make_pool(int n_blocks)
{
    rp_kv_pool *p = NULL;
    assert_int_equal(rp_kv_pool_create(BE, LAYERS, HEADS, HD, BS, n_blocks, RP_DTYPE_F32, &p), RP_OK);
    assert_int_equal(rp_kv_pool_add_states(p, &GEOM), RP_OK);
    return p;
}

static rp_cache *make_cache(rp_kv_pool *p, const char *dir, uint64_t disk_budget, uint64_t state_mem)
{
    rp_cache_params cp;
    rp_cache_params_default(&cp);
    cp.dir = dir;
    cp.disk_budget = disk_budget;
    cp.state_mem = state_mem;
    rp_cache *c = NULL;
    if (rp_cache_create(p, FP, &cp, &c))
        fail_msg("rp_cache_create: %s", rp_error_message());
    return c;
}

static size_t state_floats(rp_kv_pool *p)
{
    return rp_kv_pool_state_bytes(p) / sizeof(float);
}

// Gives s (n_blocks whole blocks reserved) the state `tag` at position pos.
static void set_state(rp_kv_pool *p, rp_kv_seq *s, int32_t pos, float tag)
{
    size_t n = state_floats(p);
    float *buf = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        buf[i] = tag + (float)i * 0.5f;
    assert_int_equal(rp_kv_seq_state_write(p, s, pos, buf), RP_OK);
    free(buf);
}

static void check_state(rp_kv_pool *p, const rp_kv_seq *s, int32_t pos, float tag)
{
    assert_int_equal(s->state_pos, pos);
    size_t n = state_floats(p);
    float *buf = malloc(n * sizeof(float));
    assert_int_equal(rp_kv_seq_state_read(p, s, buf), RP_OK);
    for (size_t i = 0; i < n; i++)
        if (buf[i] != tag + (float)i * 0.5f)
            fail_msg("state float %zu: %g, want %g", i, buf[i], tag + (float)i * 0.5f);
    free(buf);
}

// Publishes the first n blocks of a sequence over tokens t with state `tag` at their end.
static void publish(rp_kv_pool *p, rp_cache *c, const int32_t *t, int n, float tag)
{
    rp_kv_seq s;
    rp_kv_seq_init(&s);
    assert_int_equal(rp_kv_seq_reserve(p, &s, n * BS + 1), RP_OK);
    set_state(p, &s, n * BS, tag);
    rp_cache_publish_state(c, t, &s, n);
    rp_kv_seq_deinit(p, &s);
    assert_int_equal(s.state_slot, 0); // (deinit gave the slot back)
}

// Looks t up (at most max blocks) and takes what is found into a fresh sequence; the count.
static int take(rp_cache *c, const int32_t *t, int max, rp_kv_seq *s)
{
    rp_cache_match m;
    rp_cache_lookup(c, t, max, &m);
    rp_kv_seq_init(s);
    int got = -1;
    assert_int_equal(rp_cache_take(c, t, s, &got), RP_OK);
    assert_true(got <= m.n_blocks);
    return got;
}

// The path of the state file at the end of block i of tokens t, in c's folder.
static void state_file(rp_cache *c, const int32_t *t, int i, char *out, size_t cap)
{
    rp_cache_key k = {0, 0};
    for (int j = 0; j <= i; j++)
        k = rp_cache_key_of(c, k, t + (size_t)j * BS);
    char hex[33];
    rp_cache_key_hex(k, hex);
    snprintf(out, cap, "%s/%s.kvs", rp_cache_dir(c), hex);
}

/* ---- memory ------------------------------------------------------------------ */

static void test_states_in_memory(void **state)
{
    (void)state;
    rp_kv_pool *p = make_pool(16);
    rp_cache *c = make_cache(p, NULL, 0, 0);
    assert_true(rp_cache_has_states(c));
    int32_t t[4 * BS], u[4 * BS];
    tokens(t, 4 * BS, 100);
    memcpy(u, t, sizeof(u));
    u[2 * BS] = 7; // u leaves t in its third block

    // Blocks published without a state are not a prefix to resume from.
    rp_kv_seq s;
    rp_kv_seq_init(&s);
    assert_int_equal(rp_kv_seq_reserve(p, &s, 3 * BS), RP_OK);
    rp_cache_publish(c, t, &s, 3);
    rp_kv_seq_deinit(p, &s);
    assert_int_equal(take(c, t, 4, &s), 0);
    assert_int_equal(s.state_slot, 0);
    rp_kv_seq_deinit(p, &s);

    // States at the end of blocks 2 and 3: the longest prefix with one wins.
    publish(p, c, t, 2, 10.0f);
    publish(p, c, t, 3, 20.0f);
    assert_int_equal(take(c, t, 4, &s), 3);
    check_state(p, &s, 3 * BS, 20.0f);
    assert_int_equal(s.log_pos, -1); // nothing to roll back to below a restored state
    rp_kv_seq_deinit(p, &s);
    assert_int_equal(take(c, u, 4, &s), 2); // the third block differs: the state at 2
    check_state(p, &s, 2 * BS, 10.0f);
    rp_kv_seq_deinit(p, &s);
    assert_int_equal(take(c, t, 2, &s), 2); // looking up two blocks at most
    check_state(p, &s, 2 * BS, 10.0f);
    rp_kv_seq_deinit(p, &s);
    assert_int_equal(take(c, t, 1, &s), 0); // no state after one block
    rp_kv_seq_deinit(p, &s);

    // The same prefix's state again is not a second snapshot.
    publish(p, c, t, 3, 20.0f);
    rp_cache_stats st;
    rp_cache_get_stats(c, &st);
    assert_int_equal(st.state_saves, 2);
    assert_int_equal(st.state_snaps, 2);
    assert_int_equal(st.state_mem_bytes, 2 * rp_kv_pool_state_bytes(p));
    assert_int_equal(st.state_hits, 3);
    assert_int_equal(st.state_disk_hits, 0);
    assert_int_equal(rp_kv_pool_free_states(p), SLOTS);

    // A take without a free state slot: an error, nothing held.
    rp_kv_seq hold[SLOTS];
    for (int i = 0; i < SLOTS; i++) {
        rp_kv_seq_init(&hold[i]);
        assert_int_equal(rp_kv_seq_reserve(p, &hold[i], 1), RP_OK);
    }
    int free_blocks = rp_kv_pool_free_blocks(p);
    rp_cache_match m;
    rp_cache_lookup(c, t, 4, &m);
    assert_int_equal(m.n_blocks, 3);
    rp_kv_seq_init(&s);
    int got = -1;
    assert_int_equal(rp_cache_take(c, t, &s, &got), RP_ERR_RANGE);
    assert_int_equal(got, 0);
    assert_int_equal(s.n_blocks, 0);
    assert_int_equal(s.state_slot, 0);
    assert_int_equal(rp_kv_pool_free_blocks(p), free_blocks);
    rp_kv_seq_deinit(p, &s);
    for (int i = 0; i < SLOTS; i++)
        rp_kv_seq_deinit(p, &hold[i]);
    rp_cache_destroy(c);
    rp_kv_pool_destroy(p);
}

static void test_state_memory_budget(void **state)
{
    (void)state;
    rp_kv_pool *p = make_pool(32);
    rp_cache *c = make_cache(p, NULL, 0, 2 * rp_kv_pool_state_bytes(p)); // room for two
    int32_t t[4][2 * BS];
    for (int i = 0; i < 4; i++)
        tokens(t[i], 2 * BS, 1000 * (i + 1));
    rp_kv_seq s;
    publish(p, c, t[0], 2, 1.0f);
    publish(p, c, t[1], 2, 2.0f);
    publish(p, c, t[2], 2, 3.0f); // the least recently used (t[0]'s) goes
    assert_int_equal(take(c, t[0], 2, &s), 0);
    rp_kv_seq_deinit(p, &s);
    assert_int_equal(take(c, t[1], 2, &s), 2); // a hit: t[1]'s is now the most recent
    check_state(p, &s, 2 * BS, 2.0f);
    rp_kv_seq_deinit(p, &s);
    publish(p, c, t[3], 2, 4.0f); // t[2]'s goes
    assert_int_equal(take(c, t[2], 2, &s), 0);
    rp_kv_seq_deinit(p, &s);
    assert_int_equal(take(c, t[1], 2, &s), 2);
    check_state(p, &s, 2 * BS, 2.0f);
    rp_kv_seq_deinit(p, &s);
    assert_int_equal(take(c, t[3], 2, &s), 2);
    check_state(p, &s, 2 * BS, 4.0f);
    rp_kv_seq_deinit(p, &s);
    rp_cache_stats st;
    rp_cache_get_stats(c, &st);
    assert_int_equal(st.state_snaps, 2);
    assert_int_equal(st.state_saves, 4);
    rp_cache_destroy(c);
    rp_kv_pool_destroy(p);
}

/* ---- disk -------------------------------------------------------------------- */

static void test_state_files_restart(void **state)
{
    (void)state;
    const char *dir = rp_test_tmp_path("restart");
    int32_t t[4 * BS];
    tokens(t, 4 * BS, 500);
    char fpd[700];
    {
        rp_kv_pool *p = make_pool(16);
        rp_cache *c = make_cache(p, dir, 0, 0);
        snprintf(fpd, sizeof(fpd), "%s", rp_cache_dir(c));
        publish(p, c, t, 2, 5.0f);
        publish(p, c, t, 3, 6.0f);
        wait_writes(c, 2); // written as they are made, before any block
        assert_int_equal(count_files(fpd, ".kvs"), 2);
        assert_int_equal(count_files(fpd, ".kvb"), 0);
        rp_cache_destroy(c); // the three blocks follow at destroy
        rp_kv_pool_destroy(p);
    }
    assert_int_equal(count_files(fpd, ".kvb"), 3);
    rp_kv_pool *p = make_pool(16);
    rp_cache *c = make_cache(p, dir, 0, 0);
    rp_cache_stats st;
    rp_cache_get_stats(c, &st);
    assert_int_equal(st.disk_states, 2);
    assert_int_equal(st.disk_blocks, 3);
    uint64_t file = sizeof(block_header) + BS * sizeof(int32_t);
    assert_int_equal(st.disk_bytes, 3 * (file + rp_kv_pool_block_bytes(p)) + 2 * (file + rp_kv_pool_state_bytes(p)));
    rp_kv_seq s;
    assert_int_equal(take(c, t, 4, &s), 3);
    check_state(p, &s, 3 * BS, 6.0f);
    rp_kv_seq_deinit(p, &s);
    assert_int_equal(take(c, t, 4, &s), 3); // now from memory
    check_state(p, &s, 3 * BS, 6.0f);
    rp_kv_seq_deinit(p, &s);
    rp_cache_get_stats(c, &st);
    assert_int_equal(st.state_hits, 2);
    assert_int_equal(st.state_disk_hits, 1);
    assert_int_equal(st.disk_hit_blocks, 3);
    rp_cache_destroy(c);
    rp_kv_pool_destroy(p);
}

static void test_bad_state_files(void **state)
{
    (void)state;
    const char *dir = rp_test_tmp_path("bad");
    int32_t t[4 * BS];
    tokens(t, 4 * BS, 700);
    char f2[800], f3[800];
    {
        rp_kv_pool *p = make_pool(16);
        rp_cache *c = make_cache(p, dir, 0, 0);
        publish(p, c, t, 2, 8.0f);
        publish(p, c, t, 3, 9.0f);
        wait_writes(c, 2);
        state_file(c, t, 1, f2, sizeof(f2));
        state_file(c, t, 2, f3, sizeof(f3));
        rp_cache_destroy(c);
        rp_kv_pool_destroy(p);
    }
    off_t payload_at = (off_t)(sizeof(block_header) + BS * sizeof(int32_t));
    // A corrupt payload passes the index and fails at the take: the file is deleted,
    // nothing is taken (no slot held); the next lookup resumes from the shorter prefix.
    flip_byte(f3, payload_at + 5);
    rp_kv_pool *p = make_pool(16);
    rp_cache *c = make_cache(p, dir, 0, 0);
    rp_kv_seq s;
    assert_int_equal(take(c, t, 4, &s), 0);
    assert_int_equal(s.n_blocks, 0);
    assert_int_equal(s.state_slot, 0);
    assert_int_equal(rp_kv_pool_free_states(p), SLOTS);
    assert_int_equal(access(f3, F_OK), -1);
    rp_kv_seq_deinit(p, &s);
    rp_cache_stats st;
    rp_cache_get_stats(c, &st);
    assert_int_equal(st.disk_rejects, 1);
    assert_int_equal(st.disk_states, 1);
    assert_int_equal(take(c, t, 4, &s), 2);
    check_state(p, &s, 2 * BS, 8.0f);
    rp_kv_seq_deinit(p, &s);
    rp_cache_destroy(c);
    rp_kv_pool_destroy(p);

    // Truncated, a header byte changed, or under another key's name: deleted at the index.
    {
        p = make_pool(16);
        c = make_cache(p, dir, 0, 0);
        publish(p, c, t, 3, 9.0f);
        wait_writes(c, 1);
        rp_cache_destroy(c);
        rp_kv_pool_destroy(p);
    }
    for (int kind = 0; kind < 3; kind++) {
        char moved[800];
        snprintf(moved, sizeof(moved), "%s", f3);
        if (kind == 0) {
            assert_int_equal(truncate(f3, payload_at + 8), 0);
        } else if (kind == 1) {
            flip_byte(f3, 40); // inside the key
        } else {
            memcpy(strrchr(moved, '/') + 1, "0000", 4); // another name
            assert_int_equal(rename(f3, moved), 0);
        }
        p = make_pool(16);
        c = make_cache(p, dir, 0, 0);
        rp_cache_get_stats(c, &st);
        assert_int_equal(st.disk_rejects, 1);
        assert_int_equal(st.disk_states, 1); // f2 stays
        assert_int_equal(access(moved, F_OK), -1);
        assert_int_equal(take(c, t, 4, &s), 2);
        check_state(p, &s, 2 * BS, 8.0f);
        rp_kv_seq_deinit(p, &s);
        publish(p, c, t, 3, 9.0f); // made again for the next round
        wait_writes(c, 1);
        rp_cache_destroy(c);
        rp_kv_pool_destroy(p);
    }
}

static void test_state_disk_budget(void **state)
{
    (void)state;
    const char *dir = rp_test_tmp_path("budget");
    rp_kv_pool *p = make_pool(32);
    uint64_t file = sizeof(block_header) + BS * sizeof(int32_t), sf = file + rp_kv_pool_state_bytes(p);
    // Room for two state files, not three: the least recently used goes.
    rp_cache *c = make_cache(p, dir, 2 * sf + sf / 2, 0);
    int32_t t[3][2 * BS];
    for (int i = 0; i < 3; i++) {
        tokens(t[i], 2 * BS, 3000 * (i + 1));
        publish(p, c, t[i], 2, (float)i);
        wait_writes(c, (uint64_t)i + 1);
    }
    rp_cache_stats st;
    rp_cache_get_stats(c, &st);
    assert_int_equal(st.disk_states, 2);
    assert_int_equal(st.disk_evictions, 1);
    assert_true(st.disk_bytes <= 2 * sf + sf / 2);
    char f0[800];
    state_file(c, t[0], 1, f0, sizeof(f0));
    assert_int_equal(access(f0, F_OK), -1);
    rp_cache_destroy(c);
    rp_kv_pool_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_states_in_memory),
        cmocka_unit_test(test_state_memory_budget),
        cmocka_unit_test(test_state_files_restart),
        cmocka_unit_test(test_bad_state_files),
        cmocka_unit_test(test_state_disk_budget),
    };
    return cmocka_run_group_tests(tests, cache_setup, cache_teardown);
}
