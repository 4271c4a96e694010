/*
 * test_draft.c - a draft model must share the target's tokenizer.
 *
 * The bundled model and its draft sibling pass; the qwen3 test model (another
 * vocabulary) fails naming the first differing token; copies of the bundled
 * tokenizer with one change each (two ids swapped, another eos, a token no
 * longer special) fail naming that change; embedding tables too small for the
 * vocabulary fail, padded ones pass.
 */
#define RP_TEST_TMP_PREFIX "rp-test-draft"
#include "test_tmp.h"

#include "spec/spec.h"

#include <jansson.h>

static rp_tokenizer *load(const char *dir)
{
    rp_tokenizer *t;
    if (rp_tok_load_file(dir, &t))
        fail_msg("%s: %s", dir, rp_error_message());
    return t;
}

static rp_tokenizer *tiny(void)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", rp_test_source("models/rapid-tiny"));
    return load(dir);
}

static void expect_error(const rp_tokenizer *t, const rp_tokenizer *d, int32_t nt, int32_t nd, const char *words)
{
    rp_status st = rp_spec_check_draft(t, nt, d, nd);
    if (st != RP_ERR_INVALID)
        fail_msg("expected an error mentioning %s, got status %d", words, st);
    print_message("  %s\n", rp_error_message());
    if (!strstr(rp_error_message(), words))
        fail_msg("the message \"%s\" does not mention \"%s\"", rp_error_message(), words);
}

static void test_sibling_passes(void **state)
{
    (void)state;
    rp_tokenizer *t = tiny();
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", rp_test_source("models/rapid-tiny-draft"));
    rp_tokenizer *d = load(dir);
    assert_int_equal(rp_spec_check_draft(t, 8192, d, 8192), RP_OK);
    assert_int_equal(rp_spec_check_draft(t, 8192, t, 8192), RP_OK);
    // Padded embedding tables (different sizes) are fine; too small is not.
    assert_int_equal(rp_spec_check_draft(t, 8192, d, 8320), RP_OK);
    expect_error(t, d, 8192, 4096, "draft model has only 4096 embedding rows");
    expect_error(t, d, 8000, 8192, "target model has only 8000 embedding rows");
    rp_tok_destroy(t);
    rp_tok_destroy(d);
}

static void test_other_vocabulary_fails(void **state)
{
    (void)state;
    rp_tokenizer *t = tiny();
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", rp_test_source("tests/data/models/qwen3"));
    rp_tokenizer *d = load(dir);
    rp_status st = rp_spec_check_draft(t, 8192, d, 512);
    assert_int_equal(st, RP_ERR_INVALID);
    print_message("  %s\n", rp_error_message());
    assert_non_null(strstr(rp_error_message(), "differs from the target's"));
    rp_tok_destroy(t);
    rp_tok_destroy(d);
}

// A copy of the bundled tokenizer folder with `edit` applied to tokenizer.json
// or tokenizer_config.json.
static rp_tokenizer *edited(const char *name, void (*edit_tok)(json_t *), void (*edit_cfg)(json_t *))
{
    const char *dir = rp_test_tmp_path(name);
    assert_int_equal(mkdir(dir, 0755), 0);
    const char *files[2] = {"tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        char rel[256], dst[4096];
        snprintf(rel, sizeof(rel), "models/rapid-tiny/%s", files[i]);
        json_error_t e;
        json_t *j = json_load_file(rp_test_source(rel), 0, &e);
        assert_non_null(j);
        if (i == 0 && edit_tok)
            edit_tok(j);
        if (i == 1 && edit_cfg)
            edit_cfg(j);
        snprintf(dst, sizeof(dst), "%s/%s", dir, files[i]);
        assert_int_equal(json_dump_file(j, dst, 0), 0);
        json_decref(j);
    }
    return load(dir);
}

// Swaps the ids of the vocabulary entries with ids 1000 and 1001.
static void swap_ids(json_t *tok)
{
    json_t *vocab = json_object_get(json_object_get(tok, "model"), "vocab");
    const char *key, *a = NULL, *b = NULL;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        if (json_integer_value(v) == 1000)
            a = key;
        if (json_integer_value(v) == 1001)
            b = key;
    }
    assert_non_null(a);
    assert_non_null(b);
    json_object_set_new(vocab, a, json_integer(1001));
    json_object_set_new(vocab, b, json_integer(1000));
}

static void other_eos(json_t *cfg)
{
    json_object_set_new(cfg, "eos_token", json_string("<|endoftext|>"));
}

static void not_special(json_t *tok)
{
    json_t *added = json_object_get(tok, "added_tokens");
    size_t i;
    json_t *a;
    json_array_foreach(added, i, a) {
        if (strcmp(json_string_value(json_object_get(a, "content")), "<|im_start|>") == 0)
            json_object_set_new(a, "special", json_false());
    }
}

static void test_single_changes_fail(void **state)
{
    (void)state;
    rp_tokenizer *t = tiny();
    rp_tokenizer *same = edited("same", NULL, NULL);
    assert_int_equal(rp_spec_check_draft(t, 8192, same, 8192), RP_OK);
    rp_tokenizer *d = edited("swapped", swap_ids, NULL);
    expect_error(t, d, 8192, 8192, "token 1000 is");
    rp_tok_destroy(d);
    d = edited("eos", NULL, other_eos);
    expect_error(t, d, 8192, 8192, "eos token is 2 in the target, 0 in the draft");
    rp_tok_destroy(d);
    d = edited("special", not_special, NULL);
    expect_error(t, d, 8192, 8192, "token 1 \"<|im_start|>\" is special in the target only");
    rp_tok_destroy(d);
    rp_tok_destroy(same);
    rp_tok_destroy(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sibling_passes),
        cmocka_unit_test(test_other_vocabulary_fails),
        cmocka_unit_test(test_single_changes_fail),
    };
    return cmocka_run_group_tests(tests, rp_test_tmp_setup, rp_test_tmp_teardown);
}
