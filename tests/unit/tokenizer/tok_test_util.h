/*
 * tok_test_util.h - helpers shared by the tokenizer tests: file reading, id
 * list comparison with a readable diff, and the detokenizer cross-check.
 */
#ifndef RP_TOK_TEST_UTIL_H
#define RP_TOK_TEST_UTIL_H

#include "test_util.h"
#include "tokenizer/tokenizer.h"

static inline char *tt_read(const char *path, size_t *len)
{
    char *buf = NULL;
    if (rp_file_read(path, &buf, len))
        return NULL;
    return buf;
}

// Prints both id lists when they differ; returns true when equal.
static inline bool tt_same_ids(const char *what, const int32_t *got, size_t n_got, const int32_t *want, size_t n_want)
{
    bool same = n_got == n_want && (n_got == 0 || memcmp(got, want, n_got * sizeof(int32_t)) == 0);
    if (!same) {
        print_message("MISMATCH %s\n  got: ", what);
        for (size_t i = 0; i < n_got; i++)
            print_message(" %d", (int)got[i]);
        print_message("\n want: ");
        for (size_t i = 0; i < n_want; i++)
            print_message(" %d", (int)want[i]);
        print_message("\n");
    }
    return same;
}

// Streams ids through the detokenizer; checks every chunk is valid UTF-8 and
// that the concatenation equals rp_tok_decode(skip_special=true) when the
// decoded text holds no U+FFFD (where HF's per-run rules may differ).
static inline void tt_check_detok(const rp_tokenizer *t, const int32_t *ids, size_t n)
{
    char *want = NULL;
    size_t want_len = 0;
    assert_int_equal(rp_tok_decode(t, ids, n, true, &want, &want_len), RP_OK);
    rp_detok d;
    rp_detok_init(&d, t);
    char *got = rp_malloc(1);
    size_t got_len = 0;
    assert_non_null(got);
    for (size_t i = 0; i <= n; i++) {
        const char *s;
        size_t len;
        if (i < n)
            assert_int_equal(rp_detok_push(&d, ids[i], &s, &len), RP_OK);
        else
            assert_int_equal(rp_detok_flush(&d, &s, &len), RP_OK);
        // each chunk is complete UTF-8 on its own
        size_t k = 0;
        while (k < len) {
            uint8_t c = (uint8_t)s[k];
            int m = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
            assert_true(m > 0 && k + (size_t)m <= len);
            for (int j = 1; j < m; j++)
                assert_true(((uint8_t)s[k + (size_t)j] & 0xC0) == 0x80);
            k += (size_t)m;
        }
        got = rp_realloc(got, got_len + len + 1);
        assert_non_null(got);
        memcpy(got + got_len, s, len);
        got_len += len;
    }
    if (!memmem(want, want_len, "\xEF\xBF\xBD", 3) && (got_len != want_len || memcmp(got, want, got_len) != 0)) {
        print_message("detok mismatch:\n  decode: [%.*s]\n  detok:  [%.*s]\n", (int)want_len, want, (int)got_len, got);
        fail();
    }
    rp_detok_deinit(&d);
    rp_free(got);
    rp_free(want);
}

#endif
