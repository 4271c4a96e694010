/*
 * hub.h - models by name: what `MODEL` means on the command line, the Hugging Face
 * hub cache on disk, the catalog of aliases, and downloads.
 *
 * A MODEL is, in this order (rp_hub_name_parse):
 *   - a path that exists (a folder or a .gguf file), or text that can only be a path
 *     (starts with '/', '.', '~', or ends in ".gguf"): used as given;
 *   - a Hugging Face repo id "org/name", with an optional "@REV" (branch, tag or
 *     commit) and, for a GGUF repo, an optional ":QUANT" ("Qwen/Qwen3-8B-GGUF:Q4_K_M");
 *   - an alias from the catalog ("qwen3-8b", "qwen3-8b:Q8_0"): the user's file
 *     (~/.config/rapid/models.json) over the one shipped with Rapid (models/catalog.json).
 * A repo resolves through the hub cache that huggingface_hub, transformers and vLLM use
 * ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub):
 * models--ORG--NAME/{blobs/ETAG, refs/REV (a commit), snapshots/COMMIT/FILE -> ../../blobs/ETAG}.
 * Reading the cache never touches the network; rp_hub_pull (pull.c, the only part that
 * uses libcurl, built as its own library rapid_pull) writes the same layout.
 *
 * A GGUF repo's file is picked as llama-server and Ollama pick it: the .gguf files
 * (not mmproj*) whose name holds the quant as a word ("-Q4_K_M.", "_q4_k_m-"), case
 * ignored; with no quant, Q4_K_M, else Q4_0, Q8_0, else the first; shards
 * ("-00001-of-00003.gguf") are one choice, all of them fetched, the first one loaded.
 *
 * Threads: every function is reentrant; a catalog is read-only once loaded and may be
 * shared. Errors: rp_status with a message (rp_error_message).
 */
#ifndef RP_HUB_H
#define RP_HUB_H

#include "../base/base.h"

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define RP_HUB_REPO_MAX 256 // "org/name" fits, with its NUL
#define RP_HUB_REV_MAX 256  // a branch, tag or 40-hex commit
#define RP_HUB_QUANT_MAX 64
#define RP_HUB_PATH_MAX PATH_MAX

/* ---- the catalog ------------------------------------------------------------ */

typedef struct rp_hub_catalog rp_hub_catalog;

// One alias (plain data; the strings belong to the catalog, NULL when the entry has none).
typedef struct rp_hub_entry {
    const char *alias;  // "qwen3-8b"
    const char *repo;   // safetensors repo: "Qwen/Qwen3-8B"
    const char *rev;    // revision, NULL: main
    const char *gguf;   // GGUF repo for alias:QUANT, "Qwen/Qwen3-8B-GGUF"
    const char *quant;  // the GGUF repo's default quant
    const char *family; // "qwen3"
    const char *description;
    const char *tool_parser;      // --tool-parser default
    const char *reasoning_parser; // --reasoning-parser default
    long context;                 // the model's context length, 0: unknown
    const char *memory;           // "bf16 16.4G, Q4_K_M 5.0G": weights' size per format
    bool user;                    // from the user's file
} rp_hub_entry;

// Loads the shipped catalog (path, NULL: none) then the user's (path, NULL: none; a
// missing user file is no error), the user's entries replacing the shipped ones of
// the same alias. A file is {"models": {ALIAS: {"repo": ..., ...}}}; a malformed one is
// RP_ERR_INVALID naming the file and the field. *out: rp_hub_catalog_destroy it.
rp_status rp_hub_catalog_load(const char *shipped, const char *user, rp_hub_catalog **out);
void rp_hub_catalog_destroy(rp_hub_catalog *c);
size_t rp_hub_catalog_count(const rp_hub_catalog *c);
// Entry i in alias order (i < count).
void rp_hub_catalog_entry(const rp_hub_catalog *c, size_t i, rp_hub_entry *out);
// The entry of alias (case ignored); false when there is none.
bool rp_hub_catalog_find(const rp_hub_catalog *c, const char *alias, rp_hub_entry *out);
// Up to cap aliases closest to text (edit distance, a shared prefix counting as close), best
// first, into out (pointers into the catalog); returns how many.
size_t rp_hub_catalog_closest(const rp_hub_catalog *c, const char *text, const char **out, size_t cap);
// ~/.config/rapid/models.json ($XDG_CONFIG_HOME/rapid/models.json when set) into buf.
// False when there is no home or it does not fit.
bool rp_hub_user_catalog_path(char *buf, size_t cap);

/* ---- names ------------------------------------------------------------------ */

typedef enum rp_hub_name_kind {
    RP_HUB_NAME_PATH = 0,
    RP_HUB_NAME_REPO = 1,
    RP_HUB_NAME_ALIAS = 2,
} rp_hub_name_kind;

typedef struct rp_hub_name {
    rp_hub_name_kind kind;
    char text[RP_HUB_PATH_MAX];   // as given (a PATH's path)
    char repo[RP_HUB_REPO_MAX];   // "org/name" (an ALIAS: its entry's repo, or its GGUF repo with a quant)
    char rev[RP_HUB_REV_MAX];     // "main" unless given
    bool rev_given;               // "@REV" was written (or the alias names a revision)
    char quant[RP_HUB_QUANT_MAX]; // "" unless given (or the alias' default for its GGUF repo)
    bool gguf;                    // a GGUF repo is wanted (a quant was given); a repo may still turn out GGUF
    char alias[128];              // the alias it came through, "" otherwise
} rp_hub_name;

// Parses text as above. cat may be NULL (no aliases). RP_ERR_INVALID for text that is
// no path, no well-formed repo id and no alias: the message lists what was tried and
// the closest aliases.
rp_status rp_hub_name_parse(const char *text, const rp_hub_catalog *cat, rp_hub_name *out);
// True when rev is a full commit (40 lowercase hex digits).
bool rp_hub_is_commit(const char *rev);

/* ---- the cache -------------------------------------------------------------- */

// The hub cache folder by huggingface_hub's rule into buf; false when nothing fits or
// there is no home.
bool rp_hub_cache_dir(char *buf, size_t cap);
// The repo's folder in the cache, cache/models--ORG--NAME.
bool rp_hub_repo_dir(const char *cache, const char *repo, char *buf, size_t cap);
// True when HF_HUB_OFFLINE is set to 1/true/yes/on.
bool rp_hub_offline(void);

// A model found on disk: the path the loaders take (a snapshot folder, or a .gguf file in
// one), with where it came from.
typedef struct rp_hub_resolved {
    char path[RP_HUB_PATH_MAX];
    char commit[RP_HUB_REV_MAX]; // the snapshot's commit, "" for a PATH
    rp_hub_name name;
} rp_hub_resolved;

// Resolves a parsed name on disk, never on the network: a PATH as given (it must exist),
// a repo through the cache (refs/REV or the commit, then snapshots/COMMIT: a folder with
// config.json and its weights, or a GGUF file picked as above, every shard present).
// A miss is RP_ERR_IO with a message of several lines: what was tried (the path, the
// cache folder and the snapshot looked for, the catalog) and the next step
// (`rapid pull NAME`). out->name is n either way.
rp_status rp_hub_resolve(const rp_hub_name *n, const char *cache, rp_hub_resolved *out);

// One model in the cache (plain data).
typedef struct rp_hub_local {
    char repo[RP_HUB_REPO_MAX];
    char commit[RP_HUB_REV_MAX];
    char refs[RP_HUB_REV_MAX]; // the refs naming this commit, comma separated ("main"), "" none
    char format[16];           // "safetensors", "gguf", "other"
    uint64_t bytes;            // the snapshot's files (blobs counted once)
    int n_files;
    char path[RP_HUB_PATH_MAX]; // the snapshot folder
} rp_hub_local;

// Every snapshot in the cache, sorted by repo; *out: rp_free it. An absent cache is no
// error (*n = 0).
rp_status rp_hub_list(const char *cache, rp_hub_local **out, size_t *n);
// Deletes a repo's model from the cache: with a quant, that GGUF's files in the snapshot;
// with a revision, that snapshot; else every snapshot of the repo. Then the blobs no
// remaining snapshot links to, the refs naming removed snapshots, and the repo folder
// when nothing is left. *freed: bytes of blobs deleted. RP_ERR_IO when it is not there.
rp_status rp_hub_remove(const rp_hub_name *n, const char *cache, uint64_t *freed);

// A byte count for people: "512 B", "1.5 KiB", "16.4 GiB".
void rp_hub_format_bytes(double bytes, char *out, size_t cap);

/* ---- files of a repo -------------------------------------------------------- */

// Which of a repo's files (paths relative to its root) a model needs: for a GGUF pick
// (gguf or quant given, or no safetensors in the list) the chosen file and its shards;
// else config, generation config, tokenizer and chat template files and the safetensors
// (with their index), never *.bin / *.pth / subfolders. keep[i] is set for each needed
// file. RP_ERR_INVALID when nothing usable is there (no .gguf matching the quant, with
// the quants there are listed; no safetensors and no GGUF). *main_file: the index of the
// file to load for a GGUF pick, -1 for a folder.
rp_status rp_hub_select_files(const char *const *files, size_t n, bool gguf, const char *quant, bool *keep,
                              long *main_file);

/* ---- sha256 ----------------------------------------------------------------- */

typedef struct rp_hub_sha256 {
    uint32_t h[8];
    uint64_t len;
    uint8_t buf[64];
    size_t n;
} rp_hub_sha256;

void rp_hub_sha256_init(rp_hub_sha256 *s);
void rp_hub_sha256_update(rp_hub_sha256 *s, const void *data, size_t n);
// Writes the digest as 64 lowercase hex digits and a NUL.
void rp_hub_sha256_final(rp_hub_sha256 *s, char hex[65]);
// The sha256 of a file's bytes into hex; RP_ERR_IO naming it.
rp_status rp_hub_sha256_file(const char *path, char hex[65]);

/* ---- downloads (pull.c: link rapid_pull, which brings libcurl) -------------- */

typedef struct rp_hub_pull_params {
    const char *endpoint; // NULL: $HF_ENDPOINT, else https://huggingface.co
    const char *token;    // NULL: $HF_TOKEN (then the token file huggingface_hub writes)
    const char *cache;    // the hub cache folder (rp_hub_cache_dir)
    int stall_s;          // seconds without a byte before giving up; 0: $HF_HUB_DOWNLOAD_TIMEOUT, else 10
    int retries;          // attempts per file after a cut connection (resumed with Range); 0: 5
    int parallel;         // files downloading at once; 0: 4
    FILE *log;            // where progress goes (NULL: stderr)
    bool progress_bar;    // a bar redrawn in place; false: one line per file
} rp_hub_pull_params;

// Downloads the files n needs (rp_hub_select_files over the revision's file list) into the
// cache unless already there, then resolves it (rp_hub_resolve). The protocol is the hub's:
// GET {endpoint}/api/models/REPO/revision/REV?blobs=true for the commit and the files
// (with their LFS sha256), GET {endpoint}/REPO/resolve/COMMIT/FILE following redirects
// (X-Repo-Commit, X-Linked-Etag / ETag read), into blobs/ETAG.incomplete, resumed with
// Range after a cut, the LFS sha256 checked, renamed to blobs/ETAG, linked from the
// snapshot, refs/REV written; up to `parallel` files at once. A lock per blob (.locks/models--ORG--NAME/ETAG.lock,
// flock) makes two pulls of one file download it once. Errors name the repo and the file: 401/403 (the token), 404
// (repo, revision or file), other statuses, timeouts, a sha256 mismatch (the partial file deleted, nothing placed).
// HF_HUB_OFFLINE=1 refuses.
rp_status rp_hub_pull(const rp_hub_name *n, const rp_hub_pull_params *p, rp_hub_resolved *out);

#endif
