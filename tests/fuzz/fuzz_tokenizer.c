/*
 * fuzz_tokenizer.c - libFuzzer driver for the tokenizer. The input's first byte
 * picks what the rest is:
 *   even: a tokenizer.json, written to a file and loaded with rp_tok_load_hf,
 *         which must succeed or fail with a message; one that loads encodes a
 *         fixed text (every id in range) and decodes it back;
 *   odd:  text for the bundled model's tokenizer (models/rapid-tiny): encoded
 *         with and without special tokens (every id in range), decoded whole and
 *         streamed id by id, and then the input's bytes taken as ids. Both
 *         decoders' output must be valid UTF-8, whatever the ids.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "tokenizer/tokenizer.h"

// The repository root: $RP_SOURCE_DIR (the unit suite's corpus replay sets it), else
// what the fuzz build compiled in.
#ifndef RP_FUZZ_ROOT
#define RP_FUZZ_ROOT "."
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char json_path[64];
static rp_tokenizer *tiny;

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_tokenizer: invariant broken: %s (%s)\n", what, rp_error_message());
        abort();
    }
}

// Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF.
static bool valid_utf8(const char *s, size_t n)
{
    const uint8_t *p = (const uint8_t *)s;
    for (size_t i = 0; i < n;) {
        uint8_t c = p[i];
        size_t k = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (!k || i + k > n)
            return false;
        uint32_t cp = k == 1 ? c : c & (0x7F >> k);
        for (size_t j = 1; j < k; j++) {
            if ((p[i + j] & 0xC0) != 0x80)
                return false;
            cp = cp << 6 | (p[i + j] & 0x3F);
        }
        static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[k] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += k;
    }
    return true;
}

// Decodes ids whole and streamed; both outputs must be valid UTF-8.
static void decode_both(const rp_tokenizer *t, const int32_t *ids, size_t n)
{
    char *text = NULL;
    size_t len = 0;
    check(rp_tok_decode(t, ids, n, false, &text, &len) == RP_OK, "decode");
    check(valid_utf8(text, len), "decode gives valid UTF-8");
    rp_free(text);
    rp_detok d;
    rp_detok_init(&d, t);
    const char *piece;
    size_t plen;
    for (size_t i = 0; i < n; i++) {
        check(rp_detok_push(&d, ids[i], &piece, &plen) == RP_OK, "detok push");
        check(valid_utf8(piece, plen), "a streamed piece is valid UTF-8");
    }
    check(rp_detok_flush(&d, &piece, &plen) == RP_OK, "detok flush");
    check(valid_utf8(piece, plen), "the flushed tail is valid UTF-8");
    rp_detok_deinit(&d);
}

static void encode_decode(const rp_tokenizer *t, const char *text, size_t len, bool add_special)
{
    int32_t *ids = NULL;
    size_t n = 0;
    rp_status st = rp_tok_encode(t, text, len, add_special, &ids, &n);
    check(st == RP_OK || (st == RP_ERR_INVALID && rp_error_message()[0]), "encode succeeds or says why");
    for (size_t i = 0; i < n; i++)
        check(ids[i] >= 0 && ids[i] < rp_tok_n_vocab(t), "ids in range");
    decode_both(t, ids, n);
    rp_free(ids);
}

static void setup(void)
{
    snprintf(json_path, sizeof(json_path), "/tmp/rp-fuzz-tok-%ld.json", (long)getpid());
    const char *root = getenv("RP_SOURCE_DIR");
    char model[4096];
    snprintf(model, sizeof(model), "%s/models/rapid-tiny", root && *root ? root : RP_FUZZ_ROOT);
    check(rp_tok_load_hf(model, &tiny) == RP_OK, "load models/rapid-tiny");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!tiny)
        setup();
    if (size == 0)
        return 0;
    const char *rest = (const char *)data + 1;
    size_t n = size - 1;
    if (data[0] % 2 == 0) {
        FILE *f = fopen(json_path, "wb");
        if (!f || fwrite(rest, 1, n, f) != n || fclose(f) != 0)
            abort();
        rp_tokenizer *t = NULL;
        rp_status st = rp_tok_load_hf(json_path, &t);
        unlink(json_path);
        check((st == RP_OK) == (t != NULL), "a tokenizer exactly when it loads");
        check(st == RP_OK || rp_error_message()[0], "a failed load says why");
        if (t) {
            static const char sample[] = "Hello world <|im_end|> x=12345; caf\xC3\xA9 \xF0\x9F\x98\x80 \xFF";
            encode_decode(t, sample, sizeof(sample) - 1, true);
            rp_tok_destroy(t);
        }
        return 0;
    }
    encode_decode(tiny, rest, n, false);
    encode_decode(tiny, rest, n, true);
    // the input's bytes as ids: special, unused and out-of-range ones included
    int32_t ids[256];
    size_t k = 0;
    for (size_t i = 0; i + 1 < n && k < 256; i += 2)
        ids[k++] = (int32_t)(data[1 + i] | data[2 + i] << 8) - 64;
    decode_both(tiny, ids, k);
    return 0;
}
