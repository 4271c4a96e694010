/*
 * fuzz_safetensors.c - libFuzzer driver for the safetensors reader.
 *
 * Each input is opened from an exact-size heap copy (rp_st_open_memory: ASan
 * flags any read past the end) and from a temporary file (rp_st_open_file); both
 * must agree. A failure must leave *out NULL and name the input; a success is
 * checked (shape x dtype width == size where the width is known, data inside the
 * input) and walked through every accessor.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "safetensors/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[64];

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_safetensors: invariant broken: %s (%s)\n", what, rp_error_message());
        abort();
    }
}

static void walk(const rp_st_set *s, const uint8_t *base, size_t size)
{
    volatile uint64_t sink = 0;
    for (int64_t i = 0; i < rp_st_n_tensors(s); i++) {
        const rp_st_tensor *t = rp_st_tensor_at(s, i), *u;
        check(rp_st_find(s, t->name) == t, "find(name) == tensor_at(i)");
        check(t->n_dims >= 0 && t->n_dims <= RP_ST_MAX_DIMS, "n_dims");
        rp_status st = rp_st_get(s, t->name, &u);
        check(t->supported ? (st == RP_OK && u == t) : (st == RP_ERR_UNSUPPORTED && u == NULL), "get");
        if (t->supported)
            check((size_t)t->n_elems * (size_t)rp_dtype_block_bytes(t->type) == t->size, "size == elems x width");
        if (base)
            check((const uint8_t *)t->data >= base && (const uint8_t *)t->data + t->size <= base + size,
                  "data inside the input");
        if (t->size)
            sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->size - 1];
    }
    const char *v = rp_st_metadata(s, "format");
    sink += v ? (uint8_t)v[0] : 0;
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!path[0])
        snprintf(path, sizeof(path), "/tmp/rp-fuzz-st-%ld.safetensors", (long)getpid());

    uint8_t *copy = malloc(size ? size : 1);
    if (size)
        memcpy(copy, data, size);
    rp_st_set *s = (rp_st_set *)&s;
    rp_status st = rp_st_open_memory(copy, size, "fuzz-input", &s);
    if (st == RP_OK) {
        walk(s, copy, size);
        rp_st_close(s);
    } else {
        check(s == NULL, "*out NULL on error");
        check(strstr(rp_error_message(), "fuzz-input") != NULL, "message names the input");
    }
    free(copy);

    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    if (size && fwrite(data, 1, size, f) != size)
        abort();
    fclose(f);
    rp_st_set *s2 = NULL;
    rp_status st2 = rp_st_open_file(path, &s2);
    check(st2 == st, "file and memory readers agree");
    if (st2 == RP_OK) {
        walk(s2, NULL, 0);
        rp_st_close(s2);
    } else {
        check(s2 == NULL && strstr(rp_error_message(), path) != NULL, "message names the file");
    }
    return 0;
}
