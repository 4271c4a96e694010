/*
 * test_hub.c - models by name without a network: sha256 against FIPS 180-4's vectors;
 * names (paths, repo ids with @rev and :QUANT, aliases, malformed text); the shipped
 * catalog and a user's file over it, malformed catalogs; which files a model needs (GGUF
 * quant picks, shards, mmproj, never *.bin); resolution from a hub cache written with
 * the documented layout (refs, commits, dangling links, missing shards, HF_HUB_OFFLINE);
 * listing and removing with blobs shared between snapshots.
 */
#define RP_TEST_TMP_PREFIX "rp-hub"
#include "hub_fixture.h"

#include "hub/hub.h"

static const char C1[] = "1111111111111111111111111111111111111111";
static const char C2[] = "2222222222222222222222222222222222222222";

static void sha_of(const char *s, size_t n, char hex[65])
{
    fx_sha(s, n, hex);
}

static void test_sha256_vectors(void **state)
{
    char h[65];
    sha_of("", 0, h);
    assert_string_equal(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sha_of("abc", 3, h);
    assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sha_of(two, strlen(two), h);
    assert_string_equal(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    // a million 'a' in uneven pieces: the block boundary handling
    char *a = malloc(1000000);
    memset(a, 'a', 1000000);
    rp_hub_sha256 s;
    rp_hub_sha256_init(&s);
    for (size_t off = 0, step = 1; off < 1000000; off += step, step = step * 3 % 997 + 1)
        rp_hub_sha256_update(&s, a + off, off + step > 1000000 ? 1000000 - off : step);
    rp_hub_sha256_final(&s, h);
    assert_string_equal(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    rp_test_write_file(rp_test_tmp_path("million"), a, 1000000);
    char f[65];
    assert_int_equal(rp_hub_sha256_file(rp_test_tmp_path("million"), f), RP_OK);
    assert_string_equal(f, h);
    assert_int_equal(rp_hub_sha256_file(rp_test_tmp_path("absent"), f), RP_ERR_IO);
    free(a);
}

static rp_hub_catalog *shipped(void)
{
    rp_hub_catalog *c = NULL;
    assert_int_equal(rp_hub_catalog_load(rp_test_source("models/catalog.json"), NULL, &c), RP_OK);
    return c;
}

static void test_names(void **state)
{
    rp_hub_catalog *cat = shipped();
    rp_hub_name n;
    assert_int_equal(rp_hub_name_parse("Qwen/Qwen3-8B", cat, &n), RP_OK);
    assert_int_equal(n.kind, RP_HUB_NAME_REPO);
    assert_string_equal(n.repo, "Qwen/Qwen3-8B");
    assert_string_equal(n.rev, "main");
    assert_false(n.rev_given);
    assert_false(n.gguf);
    assert_int_equal(rp_hub_name_parse("Qwen/Qwen3-8B-GGUF:Q4_K_M", cat, &n), RP_OK);
    assert_string_equal(n.repo, "Qwen/Qwen3-8B-GGUF");
    assert_string_equal(n.quant, "Q4_K_M");
    assert_true(n.gguf);
    assert_int_equal(rp_hub_name_parse("org/model@refs/pr/3:q8_0", cat, &n), RP_OK);
    assert_string_equal(n.repo, "org/model");
    assert_string_equal(n.rev, "refs/pr/3");
    assert_true(n.rev_given);
    assert_string_equal(n.quant, "q8_0");
    assert_int_equal(rp_hub_name_parse("org/model@1111111111111111111111111111111111111111", cat, &n), RP_OK);
    assert_true(rp_hub_is_commit(n.rev));
    // aliases: the safetensors repo, or with a quant the GGUF repo; the default quant
    assert_int_equal(rp_hub_name_parse("qwen3-8b", cat, &n), RP_OK);
    assert_int_equal(n.kind, RP_HUB_NAME_ALIAS);
    assert_string_equal(n.repo, "Qwen/Qwen3-8B");
    assert_string_equal(n.alias, "qwen3-8b");
    assert_int_equal(rp_hub_name_parse("QWEN3-8B:Q8_0", cat, &n), RP_OK);
    assert_string_equal(n.repo, "Qwen/Qwen3-8B-GGUF");
    assert_string_equal(n.quant, "Q8_0");
    // paths: existing, or only a path by their look
    assert_int_equal(rp_hub_name_parse(rp_test_source("models/rapid-tiny"), cat, &n), RP_OK);
    assert_int_equal(n.kind, RP_HUB_NAME_PATH);
    const char *paths[] = {"./nothing/here", "/abs/missing", "~/x", "missing.gguf", "../up"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        assert_int_equal(rp_hub_name_parse(paths[i], cat, &n), RP_OK);
        assert_int_equal(n.kind, RP_HUB_NAME_PATH);
    }
    // not a name: the message says what was tried and the closest aliases
    assert_int_equal(rp_hub_name_parse("qwen3-8", cat, &n), RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "no alias in the catalog"));
    assert_non_null(strstr(rp_error_message(), "closest aliases: qwen3-8b"));
    const char *bad[] = {
        "",          "a/b/c",         "org/",        "org/..x",     "org/-x",     "org/name:", "org/name:Q4 K",
        "org/name@", "org/name@../x", "org/name@/x", "nosuchalias", "bad alias!", "a:b:c",     "org/na me"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_not_equal(rp_hub_name_parse(bad[i], cat, &n), RP_OK);
    // an alias with no GGUF repo asked for a quant
    rp_test_write_file(rp_test_tmp_path("user.json"), "{\"models\":{\"mine\":{\"repo\":\"me/mine\"}}}", 38);
    rp_hub_catalog *u;
    assert_int_equal(rp_hub_catalog_load(NULL, rp_test_tmp_path("user.json"), &u), RP_OK);
    assert_int_equal(rp_hub_name_parse("mine:Q4_K_M", u, &n), RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "no GGUF repo"));
    rp_hub_catalog_destroy(u);
    char big[5000];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    assert_int_equal(rp_hub_name_parse(big, cat, &n), RP_ERR_INVALID);
    rp_hub_catalog_destroy(cat);
}

static void test_catalog(void **state)
{
    rp_hub_catalog *cat = shipped();
    // the families Rapid runs, each with a real repo
    static const char *const want[][2] = {{"llama3.1-8b", "meta-llama/Llama-3.1-8B-Instruct"},
                                          {"mistral-7b", "mistralai/Mistral-7B-Instruct-v0.3"},
                                          {"qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct"},
                                          {"qwen3-8b", "Qwen/Qwen3-8B"}};
    for (size_t i = 0; i < 4; i++) {
        rp_hub_entry e;
        assert_true(rp_hub_catalog_find(cat, want[i][0], &e));
        assert_string_equal(e.repo, want[i][1]);
        assert_non_null(e.gguf);
        assert_false(e.user);
    }
    rp_hub_entry e;
    assert_true(rp_hub_catalog_find(cat, "qwen3-8b", &e));
    assert_string_equal(e.gguf, "Qwen/Qwen3-8B-GGUF");
    assert_string_equal(e.reasoning_parser, "qwen3");
    assert_true(e.context > 0);
    // sorted, every entry readable
    const char *prev = "";
    for (size_t i = 0; i < rp_hub_catalog_count(cat); i++) {
        rp_hub_catalog_entry(cat, i, &e);
        assert_true(strcmp(prev, e.alias) < 0);
        prev = e.alias;
    }
    rp_hub_catalog_destroy(cat);

    // the user's entries replace shipped ones and add their own; a missing user file is fine
    const char *user = "{\"models\":{\"qwen3-8b\":{\"repo\":\"me/my-qwen\",\"revision\":\"v2\"},"
                       "\"tiny\":{\"gguf\":\"me/tiny-GGUF\",\"quant\":\"Q8_0\"}}}";
    rp_test_write_file(rp_test_tmp_path("models.json"), user, strlen(user));
    assert_int_equal(rp_hub_catalog_load(rp_test_source("models/catalog.json"), rp_test_tmp_path("models.json"), &cat),
                     RP_OK);
    assert_true(rp_hub_catalog_find(cat, "qwen3-8b", &e));
    assert_string_equal(e.repo, "me/my-qwen");
    assert_true(e.user);
    rp_hub_name n;
    assert_int_equal(rp_hub_name_parse("qwen3-8b", cat, &n), RP_OK);
    assert_string_equal(n.rev, "v2");
    assert_true(n.rev_given);
    assert_int_equal(rp_hub_name_parse("tiny", cat, &n), RP_OK); // a GGUF-only alias
    assert_string_equal(n.repo, "me/tiny-GGUF");
    assert_string_equal(n.quant, "Q8_0");
    assert_true(n.gguf);
    assert_true(rp_hub_catalog_find(cat, "qwen2.5-7b", &e));
    rp_hub_catalog_destroy(cat);
    assert_int_equal(rp_hub_catalog_load(NULL, rp_test_tmp_path("no-such.json"), &cat), RP_OK);
    assert_int_equal(rp_hub_catalog_count(cat), 0);
    rp_hub_catalog_destroy(cat);
    assert_int_equal(rp_hub_catalog_load(rp_test_tmp_path("no-such.json"), NULL, &cat), RP_ERR_IO);

    // malformed files: one error naming the file
    static const char *const bad[] = {
        "",
        "{",
        "[]",
        "{\"models\":[]}",
        "{\"models\":{\"a\":1}}",
        "{\"models\":{\"a\":{}}}",
        "{\"models\":{\"a\":{\"repo\":3}}}",
        "{\"models\":{\"a\":{\"repo\":\"noslash\"}}}",
        "{\"models\":{\"a\":{\"repo\":\"a/b\",\"gguf\":\"x/../y\"}}}",
        "{\"models\":{\"a\":{\"repo\":\"a/b\",\"context\":\"big\"}}}",
        "{\"models\":{\"a\":{\"repo\":\"a/b\",\"context\":-1}}}",
        "{\"models\":{\"bad alias\":{\"repo\":\"a/b\"}}}",
        "{\"models\":{\"a\":{\"repo\":\"a/b\",\"quant\":[1]}}}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        rp_test_write_file(rp_test_tmp_path("bad.json"), bad[i], strlen(bad[i]));
        cat = NULL;
        assert_int_equal(rp_hub_catalog_load(NULL, rp_test_tmp_path("bad.json"), &cat), RP_ERR_INVALID);
        assert_null(cat);
        assert_non_null(strstr(rp_error_message(), "bad.json"));
    }
}

static void test_closest(void **state)
{
    rp_hub_catalog *cat = shipped();
    const char *out[4];
    size_t k = rp_hub_catalog_closest(cat, "qwen3-b8", out, 4);
    assert_true(k >= 1);
    assert_string_equal(out[0], "qwen3-8b");
    k = rp_hub_catalog_closest(cat, "mistral", out, 4);
    assert_true(k >= 1);
    assert_string_equal(out[0], "mistral-7b");
    assert_int_equal(rp_hub_catalog_closest(cat, "zzzzzzzzzzzzzzzz", out, 4), 0);
    assert_int_equal(rp_hub_catalog_closest(NULL, "qwen", out, 4), 0);
    rp_hub_catalog_destroy(cat);
}

static long sel(const char *const *files, size_t n, bool gguf, const char *quant, bool *keep, rp_status *st)
{
    long m = -2;
    *st = rp_hub_select_files(files, n, gguf, quant, keep, &m);
    return m;
}

static void test_select(void **state)
{
    bool keep[16];
    rp_status st;
    // llama-server's rule: the quant as a word, case ignored; the default Q4_K_M; mmproj never
    const char *g[] = {"README.md",         "mmproj-Q4_K_M.gguf", "model-Q4_K_S.gguf",
                       "model-Q4_K_M.gguf", "model-q8_0.gguf",    "sub/model-Q4_K_M.gguf"};
    assert_int_equal(sel(g, 6, false, NULL, keep, &st), 3);
    assert_int_equal(st, RP_OK);
    assert_true(keep[3] && !keep[1] && !keep[2] && !keep[0] && !keep[5]);
    assert_int_equal(sel(g, 6, true, "Q8_0", keep, &st), 4);
    assert_int_equal(sel(g, 6, true, "q4_k_s", keep, &st), 2);
    assert_int_equal(sel(g, 6, true, "Q4_K", keep, &st), -1); // not a word of any name
    assert_int_equal(st, RP_ERR_INVALID);
    assert_non_null(strstr(rp_error_message(), "Q4_K_S"));
    assert_non_null(strstr(rp_error_message(), "q8_0"));
    // shards: one choice, every shard kept, the first loaded; a missing shard is an error
    const char *s[] = {"x-Q8_0.gguf", "big-Q4_K_M-00002-of-00003.gguf", "big-Q4_K_M-00001-of-00003.gguf",
                       "big-Q4_K_M-00003-of-00003.gguf"};
    assert_int_equal(sel(s, 4, true, "Q4_K_M", keep, &st), 2);
    assert_true(keep[1] && keep[2] && keep[3] && !keep[0]);
    assert_int_equal(sel(s, 3, true, "Q4_K_M", keep, &st), -1);
    assert_non_null(strstr(rp_error_message(), "shard"));
    // no Q4_K_M: Q4_0, then Q8_0, then the first by name
    const char *d[] = {"b-F16.gguf", "a-Q8_0.gguf"};
    assert_int_equal(sel(d, 2, false, NULL, keep, &st), 1);
    const char *e[] = {"b-F16.gguf", "a-BF16.gguf"};
    assert_int_equal(sel(e, 2, false, NULL, keep, &st), 1);
    // a safetensors repo: config, tokenizer, weights; never .bin/.pth or subfolders
    const char *f[] = {".gitattributes",
                       "README.md",
                       "config.json",
                       "generation_config.json",
                       "model-00001-of-00002.safetensors",
                       "model-00002-of-00002.safetensors",
                       "model.safetensors.index.json",
                       "pytorch_model.bin",
                       "original/consolidated.00.pth",
                       "tokenizer.json",
                       "tokenizer_config.json",
                       "original/params.json",
                       "LICENSE"};
    assert_int_equal(sel(f, 13, false, NULL, keep, &st), -1);
    assert_int_equal(st, RP_OK);
    bool want[] = {0, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0};
    for (size_t i = 0; i < 13; i++)
        assert_int_equal(keep[i], want[i]);
    const char *bin[] = {"config.json", "pytorch_model.bin"};
    assert_int_equal(sel(bin, 2, false, NULL, keep, &st), -1);
    assert_int_equal(st, RP_ERR_UNSUPPORTED);
    const char *nocfg[] = {"model.safetensors"};
    sel(nocfg, 1, false, NULL, keep, &st);
    assert_int_equal(st, RP_ERR_UNSUPPORTED);
    sel(nocfg, 0, false, NULL, keep, &st);
    assert_int_not_equal(st, RP_OK);
}

static const char *cache(void)
{
    return rp_test_tmp_path("hub");
}

static const fx_file folder_files[] = {
    {"config.json", "{\"model_type\":\"llama\"}", 0},
    {"tokenizer.json", "{}", 0},
    {"model.safetensors.index.json",
     "{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
     "\"b\":\"model-00002-of-00002.safetensors\"}}",
     0},
    {"model-00001-of-00002.safetensors", "shard one", 0},
    {"model-00002-of-00002.safetensors", "shard two", 0},
};

static void test_resolve(void **state)
{
    fx_snapshot(cache(), "acme/tiny", C1, "main", folder_files, 5);
    rp_hub_name n;
    rp_hub_resolved r;
    assert_int_equal(rp_hub_name_parse("acme/tiny", NULL, &n), RP_OK);
    assert_int_equal(rp_hub_resolve(&n, cache(), &r), RP_OK);
    char want[4096];
    snprintf(want, sizeof(want), "%s/models--acme--tiny/snapshots/%s", cache(), C1);
    assert_string_equal(r.path, want);
    assert_string_equal(r.commit, C1);
    // by commit; a branch never fetched; a repo not there: what was tried, and the next step
    assert_int_equal(rp_hub_name_parse("acme/tiny@1111111111111111111111111111111111111111", NULL, &n), RP_OK);
    assert_int_equal(rp_hub_resolve(&n, cache(), &r), RP_OK);
    assert_int_equal(rp_hub_name_parse("acme/tiny@dev", NULL, &n), RP_OK);
    assert_int_equal(rp_hub_resolve(&n, cache(), &r), RP_ERR_IO);
    assert_non_null(strstr(rp_error_message(), "refs/dev: not there"));
    assert_non_null(strstr(rp_error_message(), "rapid pull acme/tiny@dev"));
    assert_int_equal(rp_hub_name_parse("acme/other", NULL, &n), RP_OK);
    assert_int_equal(rp_hub_resolve(&n, cache(), &r), RP_ERR_IO);
    assert_non_null(strstr(rp_error_message(), "models--acme--other: not there"));
    assert_int_equal(rp_hub_resolve(&n, NULL, &r), RP_ERR_IO);
    // HF_HUB_OFFLINE changes nothing for what is there, and says so for what is not
    setenv("HF_HUB_OFFLINE", "1", 1);
    assert_true(rp_hub_offline());
    assert_int_equal(rp_hub_resolve(&n, cache(), &r), RP_ERR_IO);
    assert_non_null(strstr(rp_error_message(), "HF_HUB_OFFLINE"));
    assert_int_equal(rp_hub_name_parse("acme/tiny", NULL, &n), RP_OK);
    assert_int_equal(rp_hub_resolve(&n, cache(), &r), RP_OK);
    unsetenv("HF_HUB_OFFLINE");
    assert_false(rp_hub_offline());

    // a shard the index names is missing (a dangling link: its blob is gone)
    fx_snapshot(cache(), "acme/broken", C1, "main", folder_files, 5);
    char p[4096], sha[65];
    fx_sha("shard two", 9, sha);
    snprintf(p, sizeof(p), "%s/blobs/%s", fx_repo_dir(cache(), "acme/broken"), sha);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(rp_hub_name_parse("acme/broken", NULL, &n), RP_OK);
    assert_int_equal(rp_hub_resolve(&n, cache(), &r), RP_ERR_IO);
    assert_non_null(strstr(rp_error_message(), "model-00002-of-00002.safetensors"));
    // refs holding junk
    snprintf(p, sizeof(p), "%s/refs/main", fx_repo_dir(cache(), "acme/broken"));
    rp_test_write_file(p, "../../etc", 9);
    assert_int_equal(rp_hub_resolve(&n, cache(), &r), RP_ERR_IO);

    // a GGUF repo: the file for the quant, the default, every shard
    const fx_file g[] = {{"tiny-Q8_0.gguf", "q8", 0},
                         {"tiny-Q4_K_M.gguf", "q4", 0},
                         {"big-Q6_K-00001-of-00002.gguf", "s1", 0},
                         {"big-Q6_K-00002-of-00002.gguf", "s2", 0},
                         {"half-F16-00001-of-00002.gguf", "h1", 0}};
    fx_snapshot(cache(), "acme/tiny-GGUF", C2, "main", g, 5);
    assert_int_equal(rp_hub_name_parse("acme/tiny-GGUF", NULL, &n), RP_OK);
    assert_int_equal(rp_hub_resolve(&n, cache(), &r), RP_OK);
    assert_non_null(strstr(r.path, "/snapshots/2222222222222222222222222222222222222222/tiny-Q4_K_M.gguf"));
    assert_int_equal(rp_hub_name_parse("acme/tiny-GGUF:q8_0", NULL, &n), RP_OK);
    assert_int_equal(rp_hub_resolve(&n, cache(), &r), RP_OK);
    assert_non_null(strstr(r.path, "/tiny-Q8_0.gguf"));
    assert_int_equal(rp_hub_name_parse("acme/tiny-GGUF:Q6_K", NULL, &n), RP_OK);
    assert_int_equal(rp_hub_resolve(&n, cache(), &r), RP_OK);
    assert_non_null(strstr(r.path, "/big-Q6_K-00001-of-00002.gguf"));
    assert_int_equal(rp_hub_name_parse("acme/tiny-GGUF:F16", NULL, &n), RP_OK);
    assert_int_equal(rp_hub_resolve(&n, cache(), &r), RP_ERR_IO);
    assert_non_null(strstr(rp_error_message(), "shard"));
    assert_int_equal(rp_hub_name_parse("acme/tiny-GGUF:Q2_K", NULL, &n), RP_OK);
    assert_int_equal(rp_hub_resolve(&n, cache(), &r), RP_ERR_IO);
    assert_non_null(strstr(rp_error_message(), "no GGUF file for quant Q2_K"));
    // a path as given
    assert_int_equal(rp_hub_name_parse(rp_test_source("models/rapid-tiny"), NULL, &n), RP_OK);
    assert_int_equal(rp_hub_resolve(&n, NULL, &r), RP_OK);
    assert_int_equal(rp_hub_name_parse("./no/such/model", NULL, &n), RP_OK);
    assert_int_equal(rp_hub_resolve(&n, NULL, &r), RP_ERR_IO);
    assert_non_null(strstr(rp_error_message(), "no such file or folder"));
}

static void test_cache_dir(void **state)
{
    char b[4096];
    setenv("HF_HUB_CACHE", "/x/hub-cache", 1);
    setenv("HF_HOME", "/y/hf", 1);
    assert_true(rp_hub_cache_dir(b, sizeof(b)));
    assert_string_equal(b, "/x/hub-cache");
    unsetenv("HF_HUB_CACHE");
    assert_true(rp_hub_cache_dir(b, sizeof(b)));
    assert_string_equal(b, "/y/hf/hub");
    unsetenv("HF_HOME");
    setenv("XDG_CACHE_HOME", "/z/cache", 1);
    assert_true(rp_hub_cache_dir(b, sizeof(b)));
    assert_string_equal(b, "/z/cache/huggingface/hub");
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/home/u", 1);
    assert_true(rp_hub_cache_dir(b, sizeof(b)));
    assert_string_equal(b, "/home/u/.cache/huggingface/hub");
    assert_false(rp_hub_cache_dir(b, 5));
    assert_true(rp_hub_repo_dir("/c", "Org/Name", b, sizeof(b)));
    assert_string_equal(b, "/c/models--Org--Name");
}

static bool exists(const char *p)
{
    struct stat sb;
    return !lstat(p, &sb);
}

static void test_list_remove(void **state)
{
    const char *c = rp_test_tmp_path("hub2");
    // two snapshots of one repo sharing config.json's blob; a GGUF repo with two quants
    fx_snapshot(c, "acme/tiny", C1, "main", folder_files, 5);
    const fx_file newer[] = {{"config.json", "{\"model_type\":\"llama\"}", 0},
                             {"tokenizer.json", "{}", 0},
                             {"model.safetensors", "new weights", 0}};
    fx_snapshot(c, "acme/tiny", C2, "v2", newer, 3);
    const fx_file g[] = {{"t-Q8_0.gguf", "q8 bytes", 0}, {"t-Q4_K_M.gguf", "q4 bytes", 0}};
    fx_snapshot(c, "acme/t-GGUF", C1, "main", g, 2);
    rp_hub_local *l;
    size_t n;
    assert_int_equal(rp_hub_list(c, &l, &n), RP_OK);
    assert_int_equal(n, 3);
    assert_string_equal(l[0].repo, "acme/t-GGUF");
    assert_string_equal(l[0].format, "gguf");
    assert_int_equal(l[0].bytes, 16);
    assert_string_equal(l[1].repo, "acme/tiny");
    assert_string_equal(l[1].commit, C1);
    assert_string_equal(l[1].refs, "main");
    assert_string_equal(l[1].format, "safetensors");
    assert_int_equal(l[1].n_files, 5);
    assert_string_equal(l[2].refs, "v2");
    rp_free(l);
    assert_int_equal(rp_hub_list(rp_test_tmp_path("no-cache"), &l, &n), RP_OK);
    assert_int_equal(n, 0);

    // one snapshot: its own blobs go, the shared config.json stays, refs/main goes
    rp_hub_catalog *cat = NULL;
    rp_hub_name nm;
    uint64_t freed;
    assert_int_equal(rp_hub_name_parse("acme/tiny@main", cat, &nm), RP_OK);
    assert_int_equal(rp_hub_remove(&nm, c, &freed), RP_OK);
    assert_int_equal(freed, strlen("shard one") + strlen("shard two") + strlen(folder_files[2].data));
    char p[4096], sha[65];
    const char *dir = fx_repo_dir(c, "acme/tiny");
    snprintf(p, sizeof(p), "%s/refs/main", dir);
    assert_false(exists(p));
    snprintf(p, sizeof(p), "%s/refs/v2", dir);
    assert_true(exists(p));
    fx_sha(folder_files[0].data, strlen(folder_files[0].data), sha);
    snprintf(p, sizeof(p), "%s/blobs/%s", dir, sha);
    assert_true(exists(p));
    assert_int_equal(rp_hub_name_parse("acme/tiny", cat, &nm), RP_OK);
    rp_hub_resolved r;
    assert_int_equal(rp_hub_resolve(&nm, c, &r), RP_ERR_IO); // main is gone
    assert_int_equal(rp_hub_name_parse("acme/tiny@v2", cat, &nm), RP_OK);
    assert_int_equal(rp_hub_resolve(&nm, c, &r), RP_OK);
    // one quant of a GGUF repo
    assert_int_equal(rp_hub_name_parse("acme/t-GGUF:Q8_0", cat, &nm), RP_OK);
    assert_int_equal(rp_hub_remove(&nm, c, &freed), RP_OK);
    assert_int_equal(freed, 8);
    assert_int_equal(rp_hub_name_parse("acme/t-GGUF", cat, &nm), RP_OK);
    assert_int_equal(rp_hub_resolve(&nm, c, &r), RP_OK);
    assert_non_null(strstr(r.path, "t-Q4_K_M.gguf"));
    // the whole repo: nothing of it left
    assert_int_equal(rp_hub_remove(&nm, c, &freed), RP_OK);
    assert_int_equal(freed, 8);
    assert_false(exists(fx_repo_dir(c, "acme/t-GGUF")));
    assert_int_equal(rp_hub_name_parse("acme/tiny", cat, &nm), RP_OK);
    assert_int_equal(rp_hub_remove(&nm, c, &freed), RP_OK);
    assert_false(exists(fx_repo_dir(c, "acme/tiny")));
    assert_int_equal(rp_hub_remove(&nm, c, &freed), RP_ERR_IO);
    assert_int_equal(rp_hub_name_parse("./a/path", cat, &nm), RP_OK);
    assert_int_equal(rp_hub_remove(&nm, c, &freed), RP_ERR_INVALID);
    assert_int_equal(rp_hub_list(c, &l, &n), RP_OK);
    assert_int_equal(n, 0);
    rp_free(l);
}

// Each of the module's own allocations fails in turn (jansson's are its own): a clean error
// (RP_ERR_NOMEM, nothing half-made) every time, then success.
static void test_out_of_memory(void **state)
{
    const char *c = rp_test_tmp_path("hub-oom");
    fx_snapshot(c, "acme/tiny", C1, "main", folder_files, 5);
    const fx_file g[] = {{"t-Q8_0.gguf", "q8", 0}, {"t-Q4_K_M.gguf", "q4", 0}};
    fx_snapshot(c, "acme/t-GGUF", C2, "main", g, 2);
    bool done = false;
    for (long n = 0; !done; n++) {
        assert_true(n < 10000);
        rp_hub_catalog *cat = NULL;
        rp_hub_name nm;
        rp_hub_resolved r;
        rp_hub_local *l = NULL;
        size_t nl = 0;
        char sha[65];
        rp_alloc_fail_after(n, false);
        rp_status st = rp_hub_catalog_load(rp_test_source("models/catalog.json"), NULL, &cat);
        if (!st)
            st = rp_hub_name_parse("qwen3-8b:Q8_0", cat, &nm);
        if (!st && !(st = rp_hub_name_parse("acme/tiny", cat, &nm)))
            st = rp_hub_resolve(&nm, c, &r);
        if (!st && !(st = rp_hub_name_parse("acme/t-GGUF:Q8_0", cat, &nm)))
            st = rp_hub_resolve(&nm, c, &r);
        if (!st)
            st = rp_hub_list(c, &l, &nl);
        if (!st)
            st = rp_hub_sha256_file(rp_test_source("models/catalog.json"), sha);
        rp_alloc_fail_after(-1, false);
        assert_true(st == RP_OK || st == RP_ERR_NOMEM);
        if (st)
            assert_null(l);
        done = st == RP_OK;
        if (done)
            assert_int_equal(nl, 2);
        rp_free(l);
        rp_hub_catalog_destroy(cat);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_vectors), cmocka_unit_test(test_names),       cmocka_unit_test(test_catalog),
        cmocka_unit_test(test_closest),        cmocka_unit_test(test_select),      cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_cache_dir),      cmocka_unit_test(test_list_remove), cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, rp_test_tmp_setup, rp_test_tmp_teardown);
}
