/*
 * test_vectors.c - ids and decoded text recorded from the Hugging Face
 * `tokenizers` library for small trained tokenizers.
 *
 * tests/data/tokenizer/<name>/ holds tokenizer.json and vectors.json
 * ([{"text", "ids", "add_special_tokens", "decoded"}], written by
 * tools/fixtures/make_tokenizer_vectors.py). Every folder is loaded and every
 * vector checked: ids exact, decode(skip_special_tokens=True) exact, and the
 * detokenizer cross-checked. Skips when the folder has not been generated yet.
 */
#include "tok_test_util.h"

#include <dirent.h>
#include <jansson.h>

static int run_dir(const char *dir, const char *name)
{
    char path[4600];
    snprintf(path, sizeof(path), "%s/vectors.json", dir);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root)
        fail_msg("%s:%d: %s", path, err.line, err.text);
    rp_tokenizer *t = NULL;
    if (rp_tok_load_hf(dir, &t) != RP_OK)
        fail_msg("%s: %s", dir, rp_error_message());
    int bad = 0;
    size_t n_cases = json_array_size(root);
    for (size_t i = 0; i < n_cases; i++) {
        json_t *c = json_array_get(root, i);
        json_t *jt = json_object_get(c, "text"), *jids = json_object_get(c, "ids");
        assert_true(json_is_string(jt) && json_is_array(jids));
        const char *text = json_string_value(jt);
        size_t text_len = json_string_length(jt);
        bool add_special = json_is_true(json_object_get(c, "add_special_tokens"));
        size_t n_want = json_array_size(jids);
        int32_t *want = rp_malloc((n_want + 1) * sizeof(int32_t));
        assert_non_null(want);
        for (size_t k = 0; k < n_want; k++)
            want[k] = (int32_t)json_integer_value(json_array_get(jids, k));
        int32_t *ids = NULL;
        size_t n = 0;
        assert_int_equal(rp_tok_encode(t, text, text_len, add_special, &ids, &n), RP_OK);
        char what[400];
        snprintf(what, sizeof(what), "%s vector %zu [%.60s]", name, i, text);
        if (!tt_same_ids(what, ids, n, want, n_want))
            bad++;
        const char *decoded = json_string_value(json_object_get(c, "decoded"));
        if (decoded) {
            char *out = NULL;
            size_t len = 0;
            assert_int_equal(rp_tok_decode(t, want, n_want, true, &out, &len), RP_OK);
            if (strcmp(out, decoded) != 0) {
                print_message("DECODE MISMATCH %s\n  got:  [%s]\n  want: [%s]\n", what, out, decoded);
                bad++;
            }
            rp_free(out);
        }
        tt_check_detok(t, want, n_want);
        rp_free(ids);
        rp_free(want);
    }
    print_message("%s: %zu/%zu vectors identical\n", name, n_cases - (size_t)bad, n_cases);
    rp_tok_destroy(t);
    json_decref(root);
    return bad;
}

static void test_vectors(void **state)
{
    (void)state;
    char base[4096];
    snprintf(base, sizeof(base), "%s", rp_test_source("tests/data/tokenizer"));
    DIR *d = opendir(base);
    if (!d) {
        print_message("skipping: %s does not exist yet (run tools/fixtures/make_tokenizer_vectors.py)\n", base);
        skip();
    }
    int bad = 0, dirs = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char dir[4400], vec[4500];
        snprintf(dir, sizeof(dir), "%s/%s", base, e->d_name);
        snprintf(vec, sizeof(vec), "%s/vectors.json", dir);
        if (!rp_file_exists(vec))
            continue;
        bad += run_dir(dir, e->d_name);
        dirs++;
    }
    closedir(d);
    if (dirs == 0) {
        print_message("skipping: no vectors under %s\n", base);
        skip();
    }
    assert_int_equal(bad, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
