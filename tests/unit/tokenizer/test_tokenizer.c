/*
 * test_tokenizer.c - tokenizer behavior on small hand-made tokenizer.json
 * files: malformed files give clear errors (never a crash), invalid UTF-8 and
 * empty text, special and added tokens (lstrip/rstrip), byte fallback, decode
 * and the incremental detokenizer (split multi-byte characters, never invalid
 * UTF-8 out).
 */
#include "tok_test_util.h"

#include <jansson.h>
#include <unistd.h>

#include "tokenizer/tokenizer_int.h"

static char tmpdir[256];

static const char *write_file(const char *name, const char *text)
{
    static char path[512];
    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static rp_status load_text(const char *json, rp_tokenizer **t)
{
    const char *p = write_file("tokenizer.json", json);
    return rp_tok_load_hf(p, t);
}

static void expect_error(const char *json, rp_status want, const char *needle)
{
    rp_tokenizer *t = NULL;
    rp_status st = load_text(json, &t);
    if (st != want || !strstr(rp_error_message(), needle))
        fail_msg("want %s containing \"%s\", got %s: %s", rp_status_name(want), needle, rp_status_name(st),
                 rp_error_message());
    assert_null(t);
}

#define BPE_HEAD "{\"model\": {\"type\": \"BPE\", \"vocab\": "

static void test_malformed(void **state)
{
    (void)state;
    expect_error("{\"model\": ", RP_ERR_INVALID, "tokenizer.json:1");
    expect_error("[1, 2]", RP_ERR_INVALID, "expected a JSON object");
    expect_error("{}", RP_ERR_INVALID, "missing \"model\"");
    expect_error(BPE_HEAD "[1], \"merges\": []}}", RP_ERR_INVALID, "model.vocab");
    expect_error(BPE_HEAD "{\"a\": \"x\"}, \"merges\": []}}", RP_ERR_INVALID, "not an integer");
    expect_error(BPE_HEAD "{\"a\": 0}, \"merges\": 5}}", RP_ERR_INVALID, "model.merges");
    expect_error(BPE_HEAD "{\"a\": 0, \"b\": 1}, \"merges\": [\"a c\"]}}", RP_ERR_INVALID, "not in the vocabulary");
    expect_error(BPE_HEAD "{\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}", RP_ERR_INVALID, "not in the vocabulary");
    expect_error(BPE_HEAD "{\"a\": 0, \"b\": 1}, \"merges\": [\"ab\"]}}", RP_ERR_INVALID, "is not \"a b\"");
    expect_error(BPE_HEAD "{\"a\": 0, \"b\": 1}, \"merges\": [[\"a\"]]}}", RP_ERR_INVALID, "expected \"a b\"");
    expect_error(BPE_HEAD "{\"a\": 4000000000}, \"merges\": []}}", RP_ERR_INVALID, "out of range");
    expect_error(BPE_HEAD "{\"a\": -1}, \"merges\": []}}", RP_ERR_INVALID, "out of range");
    expect_error(BPE_HEAD "{\"a\": 0, \"b\": 0}, \"merges\": []}}", RP_ERR_INVALID, "used twice");
    expect_error(BPE_HEAD "{\"a\": 0}, \"merges\": []}, \"added_tokens\": [{\"id\": 99999999, \"content\": \"x\"}]}",
                 RP_ERR_INVALID, "out of range");
    expect_error(BPE_HEAD "{\"a\": 0}, \"merges\": []}, \"added_tokens\": [{\"content\": \"x\"}]}", RP_ERR_INVALID,
                 "added_tokens[0]");
    expect_error("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", RP_ERR_UNSUPPORTED, "WordPiece");
    expect_error(BPE_HEAD "{\"a\": 0}, \"merges\": []}, \"normalizer\": {\"type\": \"Foo\"}}", RP_ERR_UNSUPPORTED,
                 "\"Foo\"");
    expect_error(BPE_HEAD "{\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"UnicodeScripts\"}}",
                 RP_ERR_UNSUPPORTED, "UnicodeScripts");
    expect_error(BPE_HEAD "{\"a\": 0}, \"merges\": []}, \"decoder\": {\"type\": \"WordPiece\"}}", RP_ERR_UNSUPPORTED,
                 "WordPiece");
    expect_error(BPE_HEAD "{\"a\": 0}, \"merges\": []}, \"post_processor\": {\"type\": \"Bert2\"}}",
                 RP_ERR_UNSUPPORTED, "Bert2");
    expect_error(BPE_HEAD "{\"a\": 0}, \"merges\": [], \"continuing_subword_prefix\": \"##\"}}", RP_ERR_UNSUPPORTED,
                 "continuing_subword_prefix");
    expect_error(BPE_HEAD "{\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": "
                          "{\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}}",
                 RP_ERR_INVALID, "bad regex");
    expect_error(BPE_HEAD "{\"a\": 0}, \"merges\": []}, \"post_processor\": {\"type\": \"TemplateProcessing\", "
                          "\"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}}], \"special_tokens\": {}}}",
                 RP_ERR_INVALID, "<s>");
    rp_tokenizer *t = NULL;
    char missing[600];
    snprintf(missing, sizeof(missing), "%s/nope/tokenizer.json", tmpdir);
    assert_int_equal(rp_tok_load_hf(missing, &t), RP_ERR_IO);
    assert_int_equal(rp_tok_load_file(missing, &t), RP_ERR_IO);
    assert_null(t);
    // A file that says GGUF but is not one.
    const char *bad = write_file("bad.gguf", "GGUFxxxx");
    assert_true(rp_tok_load_file(bad, &t) != RP_OK);
    assert_null(t);
}

// A byte-level BPE: the 256 byte characters are ids 0..255 (id == byte value).
static char *byte_level_json(void)
{
    json_t *vocab = json_object();
    for (int b = 0; b < 256; b++) {
        char c[3] = {0};
        tok_byte_to_unicode((uint8_t)b, c);
        json_object_set_new(vocab, c, json_integer(b));
    }
    const char *extra[] = {"he", "ll", "hell", "hello", "\xC4\xA0w"};
    for (int i = 0; i < 5; i++)
        json_object_set_new(vocab, extra[i], json_integer(256 + i));
    json_t *merges = json_pack("[s,s,s,s,s]", "h e", "l l", "he ll", "hell o", "\xC4\xA0 w");
    json_t *root = json_pack(
        "{s:{s:s,s:o,s:o,s:b}, s:[{s:i,s:s,s:b,s:b},{s:i,s:s,s:b,s:b,s:b,s:b},{s:i,s:s,s:b}],"
        " s:{s:s,s:b,s:b}, s:{s:s}, s:{s:s,s:[{s:{s:s}},{s:{s:s}}],s:{s:{s:s,s:[i]}}}}",
        "model", "type", "BPE", "vocab", vocab, "merges", merges, "ignore_merges", 0, "added_tokens", "id", 261,
        "content", "<|im_end|>", "special", 1, "normalized", 0, "id", 262, "content", "<tool>", "special", 0,
        "normalized", 0, "lstrip", 1, "rstrip", 1, "id", 263, "content", "<s>", "special", 1, "pre_tokenizer", "type",
        "ByteLevel", "add_prefix_space", 0, "use_regex", 1, "decoder", "type", "ByteLevel", "post_processor", "type",
        "TemplateProcessing", "single", "SpecialToken", "id", "<s>", "Sequence", "id", "A", "special_tokens", "<s>",
        "id", "<s>", "ids", 263);
    assert_non_null(root);
    char *s = json_dumps(root, 0);
    json_decref(root);
    return s;
}

static void encode_expect(const rp_tokenizer *t, const char *text, size_t len, bool add_special, const int32_t *want,
                          size_t n_want)
{
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(rp_tok_encode(t, text, len, add_special, &ids, &n), RP_OK);
    assert_true(tt_same_ids(text, ids, n, want, n_want));
    tt_check_detok(t, ids, n);
    rp_free(ids);
}

static void test_byte_level(void **state)
{
    (void)state;
    char *json = byte_level_json();
    rp_tokenizer *t = NULL;
    if (load_text(json, &t))
        fail_msg("%s", rp_error_message());
    free(json);
    assert_int_equal(rp_tok_n_vocab(t), 264);
    assert_int_equal(rp_tok_bos(t), 263);
    assert_int_equal(rp_tok_find(t, "<|im_end|>"), 261);
    assert_true(rp_tok_is_special(t, 261));
    assert_false(rp_tok_is_special(t, 262));
    assert_true(rp_tok_is_eog(t, 261)); // <|im_end|> by name
    size_t pl;
    const char *p = rp_tok_piece(t, 260, &pl);
    assert_int_equal(pl, 2);
    assert_memory_equal(p, " w", 2);

    encode_expect(t, "hello world", 11, false, (int32_t[]){259, 260, 'o', 'r', 'l', 'd'}, 6);
    encode_expect(t, "hello", 5, true, (int32_t[]){263, 259}, 2);
    encode_expect(t, "", 0, false, NULL, 0);
    encode_expect(t, "", 0, true, (int32_t[]){263}, 1);
    // Only special tokens.
    encode_expect(t, "<|im_end|><|im_end|>", 20, false, (int32_t[]){261, 261}, 2);
    // lstrip/rstrip eat the spaces around <tool>.
    encode_expect(t, "a  <tool>  b", 12, false, (int32_t[]){'a', 262, 'b'}, 3);
    // Partial special token text is plain text.
    encode_expect(t, "<|im_en", 7, false, (int32_t[]){'<', '|', 'i', 'm', '_', 'e', 'n'}, 7);
    // Invalid UTF-8 becomes U+FFFD (EF BF BD) per maximal subpart; a NUL byte is a byte.
    encode_expect(t, "\xFF" "a\xE2\x82", 4, false, (int32_t[]){0xEF, 0xBF, 0xBD, 'a', 0xEF, 0xBF, 0xBD}, 7);
    encode_expect(t, "a\0b", 3, false, (int32_t[]){'a', 0, 'b'}, 3);

    // Multi-byte characters split across byte tokens: the detokenizer holds the tail.
    const char *text = "é漢😀";
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(rp_tok_encode(t, text, strlen(text), false, &ids, &n), RP_OK);
    assert_int_equal(n, 9);
    rp_detok d;
    rp_detok_init(&d, t);
    const char *s;
    size_t len;
    size_t expect_len[9] = {0, 2, 0, 0, 3, 0, 0, 0, 4};
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(rp_detok_push(&d, ids[i], &s, &len), RP_OK);
        assert_int_equal(len, expect_len[i]);
    }
    assert_int_equal(rp_detok_flush(&d, &s, &len), RP_OK);
    assert_int_equal(len, 0);
    // A broken sequence: lead byte then ASCII -> U+FFFD then the ASCII.
    assert_int_equal(rp_detok_push(&d, 0xE6, &s, &len), RP_OK);
    assert_int_equal(len, 0);
    assert_int_equal(rp_detok_push(&d, 'x', &s, &len), RP_OK);
    assert_int_equal(len, 4);
    assert_memory_equal(s, "\xEF\xBF\xBDx", 4);
    assert_int_equal(rp_detok_push(&d, 0xF0, &s, &len), RP_OK);
    assert_int_equal(rp_detok_flush(&d, &s, &len), RP_OK);
    assert_int_equal(len, 3);
    // Special tokens are skipped by default, kept when asked.
    assert_int_equal(rp_detok_push(&d, 261, &s, &len), RP_OK);
    assert_int_equal(len, 0);
    d.skip_special = false;
    assert_int_equal(rp_detok_push(&d, 261, &s, &len), RP_OK);
    assert_int_equal(len, 10);
    assert_int_equal(rp_detok_push(&d, -5, &s, &len), RP_OK);
    assert_int_equal(len, 0);
    rp_detok_deinit(&d);

    char *out = NULL;
    size_t out_len = 0;
    assert_int_equal(rp_tok_decode(t, ids, n, true, &out, &out_len), RP_OK);
    assert_string_equal(out, text);
    rp_free(out);
    // decode of a lone lead byte: U+FFFD; bad ids are skipped.
    int32_t lone[] = {'a', 0xE6, 99999, -1, 263, 'b'};
    assert_int_equal(rp_tok_decode(t, lone, 6, true, &out, &out_len), RP_OK);
    assert_string_equal(out, "a\xEF\xBF\xBD" "b");
    rp_free(out);
    assert_int_equal(rp_tok_decode(t, lone, 6, false, &out, &out_len), RP_OK);
    assert_string_equal(out, "a\xEF\xBF\xBD<s>b");
    rp_free(out);
    rp_free(ids);
    rp_tok_destroy(t);
}

// SentencePiece-style BPE with byte fallback (Llama 2 tokenizer.json layout).
static const char *spm_json =
    "{\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true},"
    " {\"id\": 1, \"content\": \"<s>\", \"special\": true}, {\"id\": 2, \"content\": \"</s>\", \"special\": true}],"
    " \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"\xE2\x96\x81\"},"
    "   {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\xE2\x96\x81\"}]},"
    " \"pre_tokenizer\": null,"
    " \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}},"
    "   {\"Sequence\": {\"id\": \"A\"}}], \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [1]}}},"
    " \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": "
    "\"\xE2\x96\x81\"}, \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"},"
    "   {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]},"
    " \"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"fuse_unk\": true, \"byte_fallback\": true,"
    "   \"vocab\": VOCAB, \"merges\": [\"\xE2\x96\x81 a\"]}}";

static void test_byte_fallback(void **state)
{
    (void)state;
    char vocab[16384];
    size_t off = (size_t)snprintf(vocab, sizeof(vocab), "{\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2");
    for (int b = 0; b < 256; b++)
        off += (size_t)snprintf(vocab + off, sizeof(vocab) - off, ", \"<0x%02X>\": %d", b, 3 + b);
    snprintf(vocab + off, sizeof(vocab) - off, ", \"\xE2\x96\x81\": 259, \"a\": 260, \"b\": 261, \"\xE2\x96\x81" "a\": 262}");
    char json[32768];
    const char *at = strstr(spm_json, "VOCAB");
    snprintf(json, sizeof(json), "%.*s%s%s", (int)(at - spm_json), spm_json, vocab, at + 5);
    rp_tokenizer *t = NULL;
    if (load_text(json, &t))
        fail_msg("%s", rp_error_message());
    encode_expect(t, "a é", 4, true, (int32_t[]){1, 262, 259, 3 + 0xC3, 3 + 0xA9}, 5);
    encode_expect(t, "ab", 2, false, (int32_t[]){262, 261}, 2);
    size_t pl;
    const char *p = rp_tok_piece(t, 3 + 0x41, &pl);
    assert_int_equal(pl, 1);
    assert_int_equal(p[0], 'A');
    char *out;
    size_t len;
    int32_t ids[] = {1, 262, 259, 3 + 0xC3, 3 + 0xA9, 3 + 0xC3, 260};
    assert_int_equal(rp_tok_decode(t, ids, 7, true, &out, &len), RP_OK);
    // HF ByteFallback: a run of byte tokens that is not valid UTF-8 as a whole gives one U+FFFD per byte.
    assert_string_equal(out, "a \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "a");
    rp_free(out);
    rp_detok d;
    rp_detok_init(&d, t);
    const char *s;
    assert_int_equal(rp_detok_push(&d, 262, &s, &len), RP_OK);
    assert_int_equal(len, 1); // leading space stripped
    assert_int_equal(rp_detok_push(&d, 3 + 0xC3, &s, &len), RP_OK);
    assert_int_equal(len, 0);
    assert_int_equal(rp_detok_push(&d, 3 + 0xA9, &s, &len), RP_OK);
    assert_string_equal(s, "\xC3\xA9");
    rp_detok_deinit(&d);
    rp_tok_destroy(t);
}

// Every allocation failure point while loading, encoding and decoding gives an
// error and leaks nothing (ASan checks the leaks).
static void test_out_of_memory(void **state)
{
    (void)state;
    char *json = byte_level_json();
    const char *path = write_file("tokenizer.json", json);
    free(json);
    bool done = false;
    for (long n = 0; n < 100000 && !done; n += 1) {
        rp_alloc_fail_after(n, true);
        rp_tokenizer *t = NULL;
        rp_status st = rp_tok_load_hf(path, &t);
        if (st == RP_OK) {
            int32_t *ids = NULL;
            size_t n_ids = 0;
            char *out = NULL;
            size_t len;
            st = rp_tok_encode(t, "hello <tool> world \xE6\xBC", 20, true, &ids, &n_ids);
            if (st == RP_OK)
                st = rp_tok_decode(t, ids, n_ids, false, &out, &len);
            done = st == RP_OK;
            rp_free(out);
            rp_free(ids);
            rp_tok_destroy(t);
        } else {
            assert_null(t);
        }
        rp_alloc_fail_after(-1, false);
    }
    assert_true(done);
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/rp_tok_test_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_byte_level),
        cmocka_unit_test(test_byte_fallback),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
