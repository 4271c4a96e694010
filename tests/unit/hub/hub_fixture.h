/*
 * hub_fixture.h - writes a model into a hub cache folder with the layout huggingface_hub
 * documents (https://huggingface.co/docs/huggingface_hub/guides/manage-cache):
 *   models--ORG--NAME/blobs/SHA256, refs/REF (the commit, no newline),
 *   snapshots/COMMIT/FILE -> ../../blobs/SHA256 (one more ../ per folder in FILE).
 * Also the checks that a cache has exactly that layout (fx_check_file), used on what
 * rapid pull wrote. (A fixture recorded with huggingface_hub itself is left for the GPU
 * machine, where it is installed.)
 */
#ifndef RP_HUB_FIXTURE_H
#define RP_HUB_FIXTURE_H

#include "test_tmp.h"
#include "hub/hub.h"

#include <errno.h>
#include <unistd.h>

typedef struct fx_file {
    const char *name;
    const char *data;
    size_t len; // 0: strlen(data)
} fx_file;

static inline void fx_mkdirs(const char *path)
{
    char p[4096];
    snprintf(p, sizeof(p), "%s", path);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(p, 0755);
            *s = '/';
        }
    mkdir(p, 0755);
}

static inline void fx_sha(const char *data, size_t n, char hex[65])
{
    rp_hub_sha256 s;
    rp_hub_sha256_init(&s);
    rp_hub_sha256_update(&s, data, n);
    rp_hub_sha256_final(&s, hex);
}

// The repo folder of repo under cache.
static inline const char *fx_repo_dir(const char *cache, const char *repo)
{
    static char buf[4096];
    assert_true(rp_hub_repo_dir(cache, repo, buf, sizeof(buf)));
    return buf;
}

// Writes files into snapshot `commit` of repo (blobs named by their sha256), and refs/ref when ref is set.
static inline void fx_snapshot(const char *cache, const char *repo, const char *commit, const char *ref,
                               const fx_file *files, size_t n)
{
    char dir[4096], p[4096], t[4096];
    snprintf(dir, sizeof(dir), "%s", fx_repo_dir(cache, repo));
    snprintf(p, sizeof(p), "%s/blobs", dir);
    fx_mkdirs(p);
    for (size_t i = 0; i < n; i++) {
        char sha[65];
        size_t len = files[i].len ? files[i].len : strlen(files[i].data);
        fx_sha(files[i].data, len, sha);
        snprintf(p, sizeof(p), "%s/blobs/%s", dir, sha);
        rp_test_write_file(p, files[i].data, len);
        snprintf(p, sizeof(p), "%s/snapshots/%s/%s", dir, commit, files[i].name);
        char parent[4096];
        snprintf(parent, sizeof(parent), "%s", p);
        *strrchr(parent, '/') = 0;
        fx_mkdirs(parent);
        int used = snprintf(t, sizeof(t), "../../");
        for (const char *s = files[i].name; (s = strchr(s, '/')); s++)
            used += snprintf(t + used, sizeof(t) - (size_t)used, "../");
        snprintf(t + used, sizeof(t) - (size_t)used, "blobs/%s", sha);
        unlink(p);
        assert_int_equal(symlink(t, p), 0);
    }
    if (ref) {
        snprintf(p, sizeof(p), "%s/refs", dir);
        fx_mkdirs(p);
        snprintf(p, sizeof(p), "%s/refs/%s", dir, ref);
        rp_test_write_file(p, commit, strlen(commit));
    }
}

// Asserts snapshots/COMMIT/FILE is a relative link to ../../blobs/SHA256-of-data whose blob holds data.
static inline void fx_check_file(const char *cache, const char *repo, const char *commit, const char *file,
                                 const char *data, size_t len)
{
    char p[4096], want[4096], got[4096], sha[65];
    fx_sha(data, len, sha);
    snprintf(p, sizeof(p), "%s/snapshots/%s/%s", fx_repo_dir(cache, repo), commit, file);
    ssize_t l = readlink(p, got, sizeof(got) - 1);
    assert_true(l > 0);
    got[l] = 0;
    int used = snprintf(want, sizeof(want), "../../");
    for (const char *s = file; (s = strchr(s, '/')); s++)
        used += snprintf(want + used, sizeof(want) - (size_t)used, "../");
    snprintf(want + used, sizeof(want) - (size_t)used, "blobs/%s", sha);
    assert_string_equal(got, want);
    char *text;
    size_t n;
    assert_int_equal(rp_file_read(p, &text, &n), RP_OK);
    assert_int_equal(n, len);
    assert_memory_equal(text, data, len);
    rp_free(text);
}

#ifdef MHD_VERSION
// The loopback hub's answer: body (copied), and when etag_header is set that header with
// "etag" quoted and X-Repo-Commit: commit.
static inline enum MHD_Result fx_reply(struct MHD_Connection *c, int status, const void *body, size_t len,
                                       const char *etag_header, const char *etag, const char *commit)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (etag_header) {
        char e[160];
        snprintf(e, sizeof(e), "\"%s\"", etag);
        MHD_add_response_header(r, etag_header, e);
        MHD_add_response_header(r, "X-Repo-Commit", commit);
    }
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}
#endif

#endif
