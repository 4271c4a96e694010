/*
 * fuzz_gguf.c - libFuzzer driver for the GGUF reader.
 *
 * Each input is opened twice: from an exact-size heap copy (rp_gguf_open_memory,
 * so ASan flags any read past the end, which a page-rounded file mapping would
 * hide) and from a temporary file (rp_gguf_open, the real path). Both must agree.
 * A failure must leave *out NULL and give a message naming the input; a success
 * is walked through every accessor and every tensor byte range. Anything else
 * aborts, which libFuzzer reports as a crash.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "gguf/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[64];

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_gguf: invariant broken: %s (%s)\n", what, rp_error_message());
        abort();
    }
}

static void walk(const rp_gguf *g)
{
    volatile uint64_t sink = 0;
    for (int64_t i = 0; i < rp_gguf_n_keys(g); i++) {
        const char *key = rp_gguf_key_name(g, i);
        check(rp_gguf_find_key(g, key) == i, "find_key(key_name(i)) == i");
        int64_t iv;
        double dv;
        bool bv;
        size_t len;
        rp_gguf_type et;
        uint64_t n;
        sink += rp_gguf_get_int(g, key, &iv) ? (uint64_t)iv : 0;
        sink += rp_gguf_get_float(g, key, &dv) ? (uint64_t)(dv != 0) : 0;
        sink += rp_gguf_get_bool(g, key, &bv) ? bv : 0;
        const char *s = rp_gguf_get_str(g, key, &len);
        if (s && len)
            sink += (uint8_t)s[0] + (uint8_t)s[len - 1];
        if (rp_gguf_get_arr(g, key, &et, &n)) {
            for (uint64_t j = 0; j < n && j < 4096; j++) {
                if (et == RP_GGUF_STRING) {
                    s = rp_gguf_arr_str(g, key, j, &len);
                    check(s != NULL, "string array element");
                    if (len)
                        sink += (uint8_t)s[0] + (uint8_t)s[len - 1];
                } else {
                    sink += (uint64_t)rp_gguf_arr_int(g, key, j);
                    sink += (uint64_t)(rp_gguf_arr_float(g, key, j) != 0);
                }
            }
        }
    }
    for (int64_t i = 0; i < rp_gguf_n_tensors(g); i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        check(rp_gguf_find_tensor(g, t->name) == t, "find_tensor(name) == tensor_at(i)");
        check(t->n_dims >= 1 && t->n_dims <= RP_GGUF_MAX_DIMS, "n_dims");
        size_t row, n_rows = 1;
        check(rp_dtype_row_bytes(t->type, t->ne[0], &row), "row bytes");
        for (int d = 0; d < RP_GGUF_MAX_DIMS; d++) {
            check(t->ne[d] >= 1, "ne >= 1");
            if (d)
                n_rows *= (size_t)t->ne[d];
        }
        check(row * n_rows == t->size, "size == row bytes x rows");
        if (t->size)
            sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->size - 1];
    }
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!path[0])
        snprintf(path, sizeof(path), "/tmp/rp-fuzz-gguf-%ld.gguf", (long)getpid());

    uint8_t *copy = malloc(size ? size : 1);
    if (size)
        memcpy(copy, data, size);
    rp_gguf *g = (rp_gguf *)&g;
    rp_status st = rp_gguf_open_memory(copy, size, "fuzz-input", &g);
    if (st == RP_OK) {
        walk(g);
        rp_gguf_close(g);
    } else {
        check(g == NULL, "*out NULL on error");
        check(strstr(rp_error_message(), "fuzz-input") != NULL, "message names the input");
    }
    free(copy);

    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    if (size && fwrite(data, 1, size, f) != size)
        abort();
    fclose(f);
    rp_gguf *g2 = NULL;
    rp_status st2 = rp_gguf_open(path, &g2);
    check(st2 == st, "file and memory readers agree");
    if (st2 == RP_OK) {
        walk(g2);
        rp_gguf_close(g2);
    } else {
        check(g2 == NULL && strstr(rp_error_message(), path) != NULL, "message names the file");
    }
    return 0;
}
