/*
 * safetensors.h - reading Hugging Face safetensors files and model folders.
 *
 * A safetensors file is an 8-byte little-endian header length N, N bytes of JSON
 * ({"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...,
 * "__metadata__": {"key": "value"}}), then the data area; offsets are relative to
 * the data area. A "set" is what a model loader sees: one file, or the shards a
 * Hugging Face folder lists in model.safetensors.index.json, with one namespace
 * of tensor names across them.
 *
 * Every file is mapped read-only and validated before anything trusts it: header
 * length against the file and a 100 MB cap, the JSON (well-formed, an object, no
 * duplicate names), and every entry's dtype, shape (non-negative integers, at
 * most RP_ST_MAX_DIMS, product without overflow) and offsets (begin <= end <=
 * data area, end - begin == elements x element size). Tensors may overlap or leave
 * gaps (the format does not forbid it and nothing here depends on it).
 *
 * Dtypes: F32, F16 and BF16 are supported. Other dtypes (I8/I16/I32/I64, U8..U64,
 * BOOL, F64, F8_*, F4/F6_*, or a name this reader does not know) do appear in real
 * checkpoints for tensors a model never uses, so they do not fail the open: the
 * tensor is listed with supported == false (sizes still checked where the dtype's
 * width is known), and rp_st_get() reports RP_ERR_UNSUPPORTED naming the tensor,
 * its dtype and its file when a loader actually asks for it.
 *
 * Errors name the file at fault (shard, index or folder). Nothing is copied:
 * tensor data points into the mappings, which live until rp_st_close.
 *
 * Threads: a set is immutable after opening and may be shared.
 */
#ifndef RP_SAFETENSORS_H
#define RP_SAFETENSORS_H

#include "../base/base.h"

#define RP_ST_MAX_DIMS 8
#define RP_ST_MAX_HEADER ((uint64_t)100 << 20) // bytes of JSON header accepted

// One tensor of a set. Plain data owned by the set.
typedef struct rp_st_tensor {
    const char *name;
    const char *dtype_name;        // as written in the file: "BF16", "I64", ...
    rp_dtype type;                 // RP_DTYPE_F32/F16/BF16; meaningful only when supported
    bool supported;                // false: a dtype Rapid does not compute with (see above)
    int n_dims;                    // 0 (a scalar) to RP_ST_MAX_DIMS
    int64_t shape[RP_ST_MAX_DIMS]; // HF order: shape[n_dims-1] is contiguous; unused dims are 1
    int64_t n_elems;               // product of the shape (1 for a scalar)
    const void *data;              // (size) bytes inside the mapping; no alignment promised
    size_t size;
    const char *file; // path of the file that holds it
} rp_st_tensor;

typedef struct rp_st_set rp_st_set;

// Opens a Hugging Face folder: model.safetensors.index.json when present (every
// shard its weight_map names is opened, every listed tensor must be in the shard
// named for it, no name may appear in two shards; tensors a shard holds beyond the
// weight_map are listed too), else model.safetensors. *out is NULL on error:
// RP_ERR_IO (missing/unreadable file), RP_ERR_INVALID (malformed file or index),
// RP_ERR_UNSUPPORTED (more than RP_ST_MAX_DIMS dimensions), RP_ERR_NOMEM.
rp_status rp_st_open_dir(const char *dir, rp_st_set **out);
// Opens one .safetensors file as a set. Errors as rp_st_open_dir.
rp_status rp_st_open_file(const char *path, rp_st_set **out);
// The same over `size` bytes at `data`, which the caller keeps alive and unchanged
// until rp_st_close; `name` stands for the file in messages (tests, fuzzing).
rp_status rp_st_open_memory(const void *data, size_t size, const char *name, rp_st_set **out);
void rp_st_close(rp_st_set *s);

// Tensors in a fixed order: shard by shard (shards in file-name order), and
// within a shard by data offset.
int64_t rp_st_n_tensors(const rp_st_set *s);
const rp_st_tensor *rp_st_tensor_at(const rp_st_set *s, int64_t i); // NULL when out of range
// NULL when absent; includes tensors of unsupported dtypes (check ->supported).
const rp_st_tensor *rp_st_find(const rp_st_set *s, const char *name);
// The loader's lookup: RP_ERR_INVALID when the set has no such tensor,
// RP_ERR_UNSUPPORTED when its dtype is not F32/F16/BF16; messages name the file.
rp_status rp_st_get(const rp_st_set *s, const char *name, const rp_st_tensor **out);
// A "__metadata__" value (the first shard that has the key wins), NULL if absent.
const char *rp_st_metadata(const rp_st_set *s, const char *key);
// The folder or file the set was opened from.
const char *rp_st_path(const rp_st_set *s);

// Writes a safetensors file (tests and tools): tensors in the order given, data
// packed back to back, header padded with spaces to a multiple of 8. Each
// tensor needs name, dtype_name (or NULL to use `type`), n_dims, shape, data and
// size (checked against the shape for known dtypes). `metadata` is NULL or a
// NULL-terminated list of key, value, key, value, ... strings. Written to a temp
// name and renamed over `path`. RP_ERR_INVALID for a bad tensor, RP_ERR_IO.
rp_status rp_st_write(const char *path, const rp_st_tensor *tensors, int64_t n, const char *const *metadata);

#endif
