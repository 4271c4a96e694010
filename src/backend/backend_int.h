/*
 * backend_int.h - the backend vtable, included only by backends (backend/cpu/,
 * backend/cuda/) and by backend.c, whose wrappers (backend.h) are what everyone
 * else calls.
 *
 * Every entry has the contract of its wrapper in backend.h. Entries marked
 * optional may be NULL; the wrapper then does the documented fallback or returns
 * RP_ERR_UNSUPPORTED. A backend's create function is listed in backend.c's
 * registry (under its build option).
 */
#ifndef RP_BACKEND_INT_H
#define RP_BACKEND_INT_H

#include "backend.h"

typedef struct rp_backend_ops {
    const char *name; // "cpu", "cuda"

    void (*destroy)(rp_backend *be);
    void (*get_info)(rp_backend *be, rp_backend_info *out);
    const char *(*numerics)(rp_backend *be, rp_dtype wtype);
    const char *(*numerics_note)(rp_backend *be, rp_dtype wtype); // optional: ""
    rp_pool *(*host_pool)(rp_backend *be);                        // optional: NULL
    int (*threads)(rp_backend *be);                               // optional: 0
    const char *(*lost)(rp_backend *be);                          // optional: never lost

    // Memory.
    rp_status (*alloc)(rp_backend *be, size_t bytes, void **out);
    void (*free)(rp_backend *be, void *ptr);
    rp_status (*host_alloc)(rp_backend *be, size_t bytes, void **out); // optional: rp_malloc_aligned + zero
    void (*host_free)(rp_backend *be, void *ptr);                      // with host_alloc
    rp_status (*upload)(rp_backend *be, void *dst, const void *src, size_t bytes);
    rp_status (*download)(rp_backend *be, void *dst, const void *src, size_t bytes);
    rp_status (*copy)(rp_backend *be, void *dst, const void *src, size_t bytes);
    rp_status (*copy_2d)(rp_backend *be, void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                         size_t row_bytes, size_t rows); // optional: one copy per row
    rp_status (*synchronize)(rp_backend *be);

    // Weights.
    rp_status (*tensor_init)(rp_backend *be, rp_dtype type, int64_t ne0, int64_t ne1, const void *host_data,
                             rp_tensor *out);
    void (*tensor_deinit)(rp_backend *be, rp_tensor *t);
    bool (*supports_type)(rp_backend *be, rp_dtype type);
    void (*group_weights)(rp_backend *be, rp_tensor *const *w, int n); // optional

    // The KV cache. The wrapper checks the geometry and block ids before calling.
    rp_status (*kv_layer_init)(rp_backend *be, rp_kv_layer *kv); // kv's geometry and type set; fills k, v
    void (*kv_layer_deinit)(rp_backend *be, rp_kv_layer *kv);
    rp_status (*kv_block_export)(rp_backend *be, const rp_kv_layer *kv, int32_t b, void *host);
    rp_status (*kv_block_import)(rp_backend *be, rp_kv_layer *kv, int32_t b, const void *host);
    rp_status (*kv_block_copy)(rp_backend *be, rp_kv_layer *kv, int32_t dst, int32_t src);

    // One forward.
    rp_status (*begin_batch)(rp_backend *be, const rp_batch_desc *desc);
    rp_status (*get_rows)(rp_backend *be, const rp_tensor *table, float *out);
    rp_status (*gather_rows)(rp_backend *be, rp_row_set set, const float *src, int width, float *dst);
    rp_status (*matmul)(rp_backend *be, const rp_tensor *w, const float *x, int n, float *y);
    rp_status (*matmul_group)(rp_backend *be, const rp_matmul_desc *mm, int count, const float *x, int n);
    rp_status (*matmul_glu)(rp_backend *be, const rp_tensor *gate, const rp_tensor *up, const float *x, int n,
                            float *up_out, float *out);
    rp_status (*add_bias)(rp_backend *be, float *y, const float *b, int n, int width);
    rp_status (*rmsnorm)(rp_backend *be, const float *x, const float *w, float eps, int rows, int width, float *out);
    rp_status (*rope)(rp_backend *be, float *x, int n_head, int head_dim, int rot_dim, const float *inv_freq,
                      rp_rope_style style);
    rp_status (*attention)(rp_backend *be, const float *q, const float *k, const float *v, rp_kv_layer *kv,
                           int n_head, int n_kv_head, int head_dim, float scale, float *out);
    rp_status (*silu_mul)(rp_backend *be, const float *gate, const float *up, size_t count, float *out);
    rp_status (*sigmoid_mul)(rp_backend *be, const float *x, const float *gate, int rows, int width, int gate_width,
                             float *out);
    rp_status (*add)(rp_backend *be, float *y, const float *x, size_t count);
    rp_status (*argmax)(rp_backend *be, const float *x, int rows, int width, int32_t *out);
    // optional (NULL: RP_ERR_UNSUPPORTED), both or neither
    rp_status (*moe_route)(rp_backend *be, const float *logits, int n, int n_expert, int n_used, bool norm,
                           int32_t *ids, float *w);
    rp_status (*moe_ffn)(rp_backend *be, const rp_moe_desc *d, const float *x, int n, float *out);
    rp_status (*gdn)(rp_backend *be, const rp_gdn_desc *d); // optional (NULL: RP_ERR_UNSUPPORTED)
} rp_backend_ops;

struct rp_backend {
    const rp_backend_ops *ops;
    char name[16]; // as opened: "cpu", "cuda:0"
};

// The backends' constructors (backend.c's registry calls them).
rp_status rp_backend_cpu_create(const rp_backend_params *p, rp_backend **out);
#ifdef RP_HAVE_CUDA
// `device` is the GPU's ordinal.
rp_status rp_backend_cuda_create(int device, const rp_backend_params *p, rp_backend **out);
// True when a CUDA device answers (a driver and at least one GPU).
bool rp_backend_cuda_available(void);
#endif

#endif
