/*
 * fuzz_hub.c - libFuzzer driver for what src/hub reads from people and files: a model
 * name (the input's first line), a catalog file (the rest, as the user's models.json),
 * and a repo's file list (the rest's lines) for the file choice. A failure must leave no
 * catalog and give a message; a parsed name must be well-formed (a repo id of two valid
 * parts, a revision, a quant only with a GGUF wish); a file choice must keep the file it
 * loads. Anything else aborts, which libFuzzer reports as a crash.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "hub/hub.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_hub: invariant broken: %s (%s)\n", what, rp_error_message());
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[64];
    if (!path[0])
        snprintf(path, sizeof(path), "/tmp/rp-fuzz-hub-%d.json", (int)getpid());
    const uint8_t *nl = memchr(data, '\n', size);
    size_t name_len = nl ? (size_t)(nl - data) : size;
    char *name = malloc(name_len + 1);
    memcpy(name, data, name_len);
    name[name_len] = 0;
    const uint8_t *rest = nl ? nl + 1 : data + size;
    size_t rest_len = size - (size_t)(rest - data);

    FILE *f = fopen(path, "wb");
    check(f != NULL, "temp file");
    fwrite(rest, 1, rest_len, f);
    fclose(f);
    rp_hub_catalog *cat = (rp_hub_catalog *)1;
    rp_status st = rp_hub_catalog_load(NULL, path, &cat);
    check(st ? cat == NULL && *rp_error_message() : cat != NULL, "catalog result");
    for (size_t i = 0; i < rp_hub_catalog_count(cat); i++) {
        rp_hub_entry e;
        rp_hub_catalog_entry(cat, i, &e);
        check(e.repo || e.gguf, "an entry names a repo");
        check(rp_hub_catalog_find(cat, e.alias, &e), "find(entry(i).alias)");
    }
    const char *near[4];
    size_t k = rp_hub_catalog_closest(cat, name, near, 4);
    check(k <= 4, "closest count");

    if (!memchr(name, 0, name_len)) { // a NUL inside is not a command-line argument
        rp_hub_name n;
        if (rp_hub_name_parse(name, cat, &n) == RP_OK && n.kind != RP_HUB_NAME_PATH) {
            const char *slash = strchr(n.repo, '/');
            check(slash && slash != n.repo && slash[1] && !strchr(slash + 1, '/'), "repo id has two parts");
            check(n.rev[0] && !strstr(n.rev, ".."), "revision");
            check(!n.quant[0] || n.gguf, "a quant means GGUF");
        } else {
            check(*rp_error_message() || n.kind == RP_HUB_NAME_PATH, "a parse error has a message");
        }
    }
    rp_hub_catalog_destroy(cat);

    // the rest's lines as a repo's file list
    char *text = malloc(rest_len + 1);
    memcpy(text, rest, rest_len);
    text[rest_len] = 0;
    const char *files[64];
    size_t nf = 0;
    for (char *s = text, *e; nf < 64 && *s; s = e + 1) {
        e = strchr(s, '\n');
        if (!e)
            e = s + strlen(s);
        bool last = !*e;
        *e = 0;
        files[nf++] = s;
        if (last)
            break;
    }
    bool keep[64];
    long main_file = -2;
    const char *quant = name_len < 16 ? name : NULL;
    st = rp_hub_select_files(files, nf, size & 1, quant, keep, &main_file);
    if (st == RP_OK) {
        check(main_file >= -1 && main_file < (long)nf, "main file index");
        check(main_file < 0 || keep[main_file], "the loaded file is kept");
    }
    char hex[65];
    rp_hub_sha256 s;
    rp_hub_sha256_init(&s);
    rp_hub_sha256_update(&s, data, size);
    rp_hub_sha256_final(&s, hex);
    check(strlen(hex) == 64, "digest length");
    free(text);
    free(name);
    return 0;
}
