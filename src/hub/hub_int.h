/*
 * hub_int.h - what the hub module's files share and nothing else includes: the
 * checks on names' characters, bounded path formatting, and the folder walk.
 */
#ifndef RP_HUB_INT_H
#define RP_HUB_INT_H

#include "hub.h"

// A repo id "org/name": two non-empty parts of [A-Za-z0-9._-], neither starting with
// '.' or '-' nor holding "..", at most 96 characters each (the hub's limits).
bool rp_hub_repo_valid(const char *s, size_t n);
// An alias: 1-64 characters of [A-Za-z0-9._-], not starting with '.' or '-'.
bool rp_hub_alias_valid(const char *s);
// snprintf into buf that reports whether it fitted.
bool rp_hub_fmt(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// mkdir -p; RP_ERR_IO naming the folder.
rp_status rp_hub_mkdirs(const char *path);

// A growable list of heap strings (zero-initialized is empty).
typedef struct rp_hub_strv {
    char **v;
    size_t n, cap;
} rp_hub_strv;
rp_status rp_hub_strv_add(rp_hub_strv *l, const char *s); // RP_ERR_NOMEM
bool rp_hub_strv_has(const rp_hub_strv *l, const char *s);
void rp_hub_strv_free(rp_hub_strv *l);
// A small file's text without trailing whitespace (a ref, a token) into buf: RP_OK;
// RP_ERR_IO (no message) when it cannot be read, is empty or does not fit; RP_ERR_NOMEM.
rp_status rp_hub_read_line(const char *path, char *buf, size_t cap);

// The files under dir (regular files and symlinks to them), relative to dir, sorted;
// subfolders are walked to a depth of 4. *out: free each and the array with rp_free.
rp_status rp_hub_walk(const char *dir, char ***out, size_t *n);
void rp_hub_free_list(char **list, size_t n);

// Shard of a GGUF file name: "x-00002-of-00003.gguf" -> index 2, count 3; false otherwise.
bool rp_hub_gguf_shard(const char *name, int *index, int *count);

#endif
