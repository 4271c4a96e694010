/*
 * gguf.h - reading and writing GGUF files (the llama.cpp model format).
 *
 * A reader maps the file, parses the header (metadata key/values and tensor
 * infos) and validates every field before anything trusts it: string and array
 * lengths against the bytes left, tensor shapes, types, offsets, alignment and
 * sizes against the file. Tensor data stay in the mapping; nothing is copied.
 * Any problem is one RP_ERR_INVALID/RP_ERR_UNSUPPORTED naming the file and what
 * is wrong.
 *
 * A writer collects key/values and tensors in memory and writes a v3 file
 * (used by tests and by tools that convert models).
 *
 * Threads: a reader is immutable after rp_gguf_open and may be shared.
 */
#ifndef RP_GGUF_H
#define RP_GGUF_H

#include "../base/base.h"

typedef enum rp_gguf_type {
    RP_GGUF_UINT8 = 0,
    RP_GGUF_INT8 = 1,
    RP_GGUF_UINT16 = 2,
    RP_GGUF_INT16 = 3,
    RP_GGUF_UINT32 = 4,
    RP_GGUF_INT32 = 5,
    RP_GGUF_FLOAT32 = 6,
    RP_GGUF_BOOL = 7,
    RP_GGUF_STRING = 8,
    RP_GGUF_ARRAY = 9,
    RP_GGUF_UINT64 = 10,
    RP_GGUF_INT64 = 11,
    RP_GGUF_FLOAT64 = 12,
} rp_gguf_type;

#define RP_GGUF_MAX_DIMS 4

// One tensor of the file. Plain data owned by the reader.
typedef struct rp_gguf_tensor {
    const char *name;
    rp_dtype type;
    int n_dims;
    int64_t ne[RP_GGUF_MAX_DIMS]; // ne[0] is the innermost (contiguous) dimension; unused dims are 1
    const void *data;             // (size) bytes inside the mapping
    size_t size;
} rp_gguf_tensor;

typedef struct rp_gguf rp_gguf;

// Opens and validates `path`. On error returns RP_ERR_IO/INVALID/UNSUPPORTED (or
// RP_ERR_NOMEM) with a message naming the file. *out is NULL on error.
rp_status rp_gguf_open(const char *path, rp_gguf **out);
// The same over `size` bytes at `data`, which the caller keeps alive and unchanged
// until rp_gguf_close; `name` stands for the file in messages. For tests and fuzzing
// (an exact-size heap buffer lets ASan see any read past the end).
rp_status rp_gguf_open_memory(const void *data, size_t size, const char *name, rp_gguf **out);
void rp_gguf_close(rp_gguf *g);
const char *rp_gguf_path(const rp_gguf *g);
uint32_t rp_gguf_version(const rp_gguf *g);

// Metadata. Lookups return -1 / false / NULL when the key is absent or has
// another type; integer getters accept any integer type that fits.
int64_t rp_gguf_n_keys(const rp_gguf *g);
const char *rp_gguf_key_name(const rp_gguf *g, int64_t i);
int64_t rp_gguf_find_key(const rp_gguf *g, const char *key);
rp_gguf_type rp_gguf_key_type(const rp_gguf *g, int64_t i);
bool rp_gguf_get_int(const rp_gguf *g, const char *key, int64_t *out);
bool rp_gguf_get_float(const rp_gguf *g, const char *key, double *out); // float or integer keys
bool rp_gguf_get_bool(const rp_gguf *g, const char *key, bool *out);
const char *rp_gguf_get_str(const rp_gguf *g, const char *key, size_t *len); // not NUL-safe: use len

// Arrays: element type and count; false when absent or not an array.
bool rp_gguf_get_arr(const rp_gguf *g, const char *key, rp_gguf_type *elem_type, uint64_t *n);
// Element i of an array key (caller checked the type and bounds with rp_gguf_get_arr).
const char *rp_gguf_arr_str(const rp_gguf *g, const char *key, uint64_t i, size_t *len);
int64_t rp_gguf_arr_int(const rp_gguf *g, const char *key, uint64_t i);
double rp_gguf_arr_float(const rp_gguf *g, const char *key, uint64_t i);

// Tensors.
int64_t rp_gguf_n_tensors(const rp_gguf *g);
const rp_gguf_tensor *rp_gguf_tensor_at(const rp_gguf *g, int64_t i);
const rp_gguf_tensor *rp_gguf_find_tensor(const rp_gguf *g, const char *name);

/* ---- writer ---- */

// Collects key/values and tensors, then writes a v3 file. Keys are written in the
// order added, then tensor infos in the order added, then the data, each tensor
// padded to the alignment: general.alignment if added (a u32 power of two), else 32.
// Every add copies its arguments; an add that fails leaves the writer unchanged.
// Errors: RP_ERR_INVALID for a duplicate key or tensor name, a bad type or shape;
// RP_ERR_NOMEM. One thread at a time.
typedef struct rp_gguf_writer rp_gguf_writer;

rp_status rp_gguf_writer_create(rp_gguf_writer **out);
void rp_gguf_writer_destroy(rp_gguf_writer *w);
rp_status rp_gguf_writer_add_str(rp_gguf_writer *w, const char *key, const char *val);
rp_status rp_gguf_writer_add_u32(rp_gguf_writer *w, const char *key, uint32_t val);
rp_status rp_gguf_writer_add_i32(rp_gguf_writer *w, const char *key, int32_t val);
rp_status rp_gguf_writer_add_f32(rp_gguf_writer *w, const char *key, float val);
rp_status rp_gguf_writer_add_bool(rp_gguf_writer *w, const char *key, bool val);
// A scalar of any numeric or bool type; *val is that type in host order (uint8_t for bool).
rp_status rp_gguf_writer_add_val(rp_gguf_writer *w, const char *key, rp_gguf_type type, const void *val);
// Array of n strings / of n numbers of elem_type (values packed as that type, little-endian).
rp_status rp_gguf_writer_add_str_arr(rp_gguf_writer *w, const char *key, const char *const *vals, uint64_t n);
rp_status rp_gguf_writer_add_arr(rp_gguf_writer *w, const char *key, rp_gguf_type elem_type, const void *vals,
                                 uint64_t n);
// Adds a tensor; `data` (rows of ne[0] elements of `type`) is copied.
rp_status rp_gguf_writer_add_tensor(rp_gguf_writer *w, const char *name, rp_dtype type, int n_dims,
                                    const int64_t *ne, const void *data);
// Writes the file to a temporary name beside `path`, then renames it over `path`,
// so `path` is never left half-written. RP_ERR_IO names the file on failure.
rp_status rp_gguf_writer_write(rp_gguf_writer *w, const char *path);

#endif
