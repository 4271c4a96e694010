/*
 * fuzz_st_index.c - libFuzzer driver for the sharded-folder reader: the input is
 * model.safetensors.index.json in a folder that holds two valid shards
 * (model-00001-of-00002.safetensors with "a", "b"; model-00002-of-00002 with "c")
 * and one corrupt file (bad.safetensors). rp_st_open_dir must succeed or fail
 * with *out NULL and a message naming the folder or one of its files.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64], index_path[128];

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_st_index: invariant broken: %s (%s)\n", what, rp_error_message());
        abort();
    }
}

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/rp-fuzz-idx-%ld", (long)getpid());
    snprintf(index_path, sizeof(index_path), "%s/model.safetensors.index.json", dir);
    if (mkdir(dir, 0755) != 0 && !rp_dir_exists(dir))
        abort();
    static const float v[4] = {1, 2, 3, 4};
    rp_st_tensor one[] = {
        {.name = "a", .type = RP_DTYPE_F32, .n_dims = 1, .shape = {2}, .data = v, .size = 8},
        {.name = "b", .type = RP_DTYPE_F32, .n_dims = 1, .shape = {1}, .data = v, .size = 4},
    };
    rp_st_tensor two[] = {{.name = "c", .dtype_name = "I32", .n_dims = 1, .shape = {4}, .data = v, .size = 16}};
    char p[160];
    snprintf(p, sizeof(p), "%s/model-00001-of-00002.safetensors", dir);
    check(rp_st_write(p, one, 2, NULL) == RP_OK, "write shard 1");
    snprintf(p, sizeof(p), "%s/model-00002-of-00002.safetensors", dir);
    check(rp_st_write(p, two, 1, NULL) == RP_OK, "write shard 2");
    snprintf(p, sizeof(p), "%s/bad.safetensors", dir);
    FILE *f = fopen(p, "wb");
    if (!f)
        abort();
    fwrite("\x02\0\0\0\0\0\0\0[]", 1, 10, f);
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0])
        setup();
    FILE *f = fopen(index_path, "wb");
    if (!f)
        abort();
    if (size && fwrite(data, 1, size, f) != size)
        abort();
    fclose(f);
    rp_st_set *s = (rp_st_set *)&s;
    rp_status st = rp_st_open_dir(dir, &s);
    if (st == RP_OK) {
        for (int64_t i = 0; i < rp_st_n_tensors(s); i++) {
            const rp_st_tensor *t = rp_st_tensor_at(s, i);
            check(rp_st_find(s, t->name) == t, "find(name) == tensor_at(i)");
        }
        rp_st_close(s);
    } else {
        check(s == NULL, "*out NULL on error");
        check(strstr(rp_error_message(), dir) != NULL, "message names the folder or a file in it");
    }
    return 0;
}
