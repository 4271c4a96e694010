/*
 * backend.c - the backend registry (open by name) and the wrappers of backend.h.
 *
 * The wrappers are thin: they check what a caller may get wrong without a
 * device (geometry, block ids) and fall back where an entry is optional, then
 * call the vtable (backend_int.h). Backends are compiled in by build option
 * (RP_HAVE_CUDA for the CUDA one); "cpu" is always there.
 */
#include "backend_int.h"

#include <stdio.h>
#include <stdlib.h>

static const char *const names[] = {
    "cpu",
#ifdef RP_HAVE_CUDA
    "cuda",
#endif
};

int rp_backend_count(void)
{
    return (int)(sizeof(names) / sizeof(names[0]));
}

const char *rp_backend_name(int i)
{
    return i >= 0 && i < rp_backend_count() ? names[i] : NULL;
}

const char *rp_backend_default_name(void)
{
#ifdef RP_HAVE_CUDA
    if (rp_backend_cuda_available())
        return "cuda";
#endif
    return "cpu";
}

void rp_backend_params_default(rp_backend_params *p)
{
    memset(p, 0, sizeof(*p));
}

// "cuda" -> 0, "cuda:3" -> 3; -1 when name is not "cuda[:N]".
static int cuda_ordinal(const char *name)
{
    if (strncmp(name, "cuda", 4) != 0)
        return -1;
    if (name[4] == '\0')
        return 0;
    if (name[4] != ':' || name[5] < '0' || name[5] > '9')
        return -1;
    char *end;
    long n = strtol(name + 5, &end, 10);
    return *end == '\0' && n >= 0 && n < 1024 ? (int)n : -1;
}

rp_status rp_backend_open(const char *name, const rp_backend_params *p, rp_backend **out)
{
    *out = NULL;
    rp_backend_params def;
    if (!p) {
        rp_backend_params_default(&def);
        p = &def;
    }
    rp_status st;
    if (strcmp(name, "cpu") == 0) {
        if ((st = rp_backend_cpu_create(p, out)))
            return st;
        snprintf((*out)->name, sizeof((*out)->name), "cpu");
        return RP_OK;
    }
    int dev = cuda_ordinal(name);
    if (dev >= 0) {
#ifdef RP_HAVE_CUDA
        if ((st = rp_backend_cuda_create(dev, p, out)))
            return st;
        snprintf((*out)->name, sizeof((*out)->name), "cuda:%d", dev);
        return RP_OK;
#else
        return RP_ERR(RP_ERR_UNSUPPORTED, "device '%s': this build has no CUDA backend (build with -DRP_CUDA=ON)",
                      name);
#endif
    }
    char list[128] = "";
    for (int i = 0; i < rp_backend_count(); i++) {
        size_t n = strlen(list);
        snprintf(list + n, sizeof(list) - n, "%s%s%s", i ? ", " : "", names[i], strcmp(names[i], "cuda") ? "" : "[:N]");
    }
    return RP_ERR(RP_ERR_UNSUPPORTED, "unknown device '%s' (this build has: %s)", name, list);
}

void rp_backend_destroy(rp_backend *be)
{
    if (be)
        be->ops->destroy(be);
}

void rp_backend_get_info(rp_backend *be, rp_backend_info *out)
{
    memset(out, 0, sizeof(*out));
    be->ops->get_info(be, out);
    out->name = be->name;
}

const char *rp_backend_numerics(rp_backend *be, rp_dtype wtype)
{
    return be->ops->numerics(be, wtype);
}

const char *rp_backend_numerics_note(rp_backend *be, rp_dtype wtype)
{
    return be->ops->numerics_note ? be->ops->numerics_note(be, wtype) : "";
}

rp_pool *rp_backend_host_pool(rp_backend *be)
{
    return be->ops->host_pool ? be->ops->host_pool(be) : NULL;
}

int rp_backend_threads(rp_backend *be)
{
    return be->ops->threads ? be->ops->threads(be) : 0;
}

const char *rp_backend_lost(rp_backend *be)
{
    return be->ops->lost ? be->ops->lost(be) : NULL;
}

/* ---- memory ---- */

rp_status rp_backend_alloc(rp_backend *be, size_t bytes, void **out)
{
    return be->ops->alloc(be, bytes, out);
}

void rp_backend_free(rp_backend *be, void *ptr)
{
    if (ptr)
        be->ops->free(be, ptr);
}

rp_status rp_backend_host_alloc(rp_backend *be, size_t bytes, void **out)
{
    if (be->ops->host_alloc)
        return be->ops->host_alloc(be, bytes, out);
    *out = rp_malloc_aligned(bytes ? bytes : 1);
    if (!*out)
        return RP_ERR(RP_ERR_NOMEM, "cannot allocate %zu bytes of host memory", bytes);
    memset(*out, 0, bytes);
    return RP_OK;
}

void rp_backend_host_free(rp_backend *be, void *ptr)
{
    if (!ptr)
        return;
    if (be->ops->host_free)
        be->ops->host_free(be, ptr);
    else
        rp_free_aligned(ptr);
}

rp_status rp_backend_upload(rp_backend *be, void *dst, const void *src, size_t bytes)
{
    return bytes ? be->ops->upload(be, dst, src, bytes) : RP_OK;
}

rp_status rp_backend_download(rp_backend *be, void *dst, const void *src, size_t bytes)
{
    return bytes ? be->ops->download(be, dst, src, bytes) : RP_OK;
}

rp_status rp_backend_copy(rp_backend *be, void *dst, const void *src, size_t bytes)
{
    return bytes && dst != src ? be->ops->copy(be, dst, src, bytes) : RP_OK;
}

rp_status rp_backend_copy_2d(rp_backend *be, void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                             size_t row_bytes, size_t rows)
{
    if (!rows || !row_bytes)
        return RP_OK;
    if (be->ops->copy_2d)
        return be->ops->copy_2d(be, dst, dst_pitch, src, src_pitch, row_bytes, rows);
    rp_status st = RP_OK;
    for (size_t r = 0; r < rows && !st; r++)
        st = be->ops->copy(be, (uint8_t *)dst + r * dst_pitch, (const uint8_t *)src + r * src_pitch, row_bytes);
    return st;
}

rp_status rp_backend_synchronize(rp_backend *be)
{
    return be->ops->synchronize(be);
}

/* ---- weights ---- */

rp_status rp_backend_tensor_init(rp_backend *be, rp_dtype type, int64_t ne0, int64_t ne1, const void *host_data,
                                 rp_tensor *out)
{
    memset(out, 0, sizeof(*out));
    if (!be->ops->supports_type(be, type))
        return RP_ERR(RP_ERR_UNSUPPORTED, "type %s is not supported by the %s backend", rp_dtype_name(type),
                      be->ops->name);
    size_t row;
    if (!rp_dtype_row_bytes(type, ne0, &row) || ne1 <= 0 || !rp_mul_size(row, (size_t)ne1, &out->nbytes))
        return RP_ERR(RP_ERR_INVALID, "%s backend: bad tensor shape %lld x %lld of %s", be->ops->name, (long long)ne0,
                      (long long)ne1, rp_dtype_name(type));
    out->type = type;
    out->ne[0] = ne0;
    out->ne[1] = ne1;
    out->ne[2] = 1;
    return be->ops->tensor_init(be, type, ne0, ne1, host_data, out);
}

void rp_backend_tensor_deinit(rp_backend *be, rp_tensor *t)
{
    if (be->ops->tensor_deinit)
        be->ops->tensor_deinit(be, t);
    memset(t, 0, sizeof(*t));
}

bool rp_backend_supports_type(rp_backend *be, rp_dtype type)
{
    return be->ops->supports_type(be, type);
}

void rp_backend_group_weights(rp_backend *be, rp_tensor *const *w, int n)
{
    rp_tensor *t[RP_BACKEND_GROUP_MAX];
    int k = 0;
    for (int i = 0; i < n && k < RP_BACKEND_GROUP_MAX; i++)
        if (w[i]->data)
            t[k++] = w[i];
    if (be->ops->group_weights && k > 1)
        be->ops->group_weights(be, t, k);
}

/* ---- the KV cache ---- */

size_t rp_kv_layer_block_bytes(const rp_kv_layer *kv)
{
    return 2 * (size_t)kv->block_size * kv->n_kv_head * kv->head_dim * (size_t)rp_dtype_block_bytes(kv->type);
}

rp_status rp_backend_kv_layer_init(rp_backend *be, int n_blocks, int block_size, int n_kv_head, int head_dim,
                                   rp_dtype type, rp_kv_layer *out)
{
    memset(out, 0, sizeof(*out));
    if (n_blocks <= 0 || block_size <= 0 || n_kv_head <= 0 || head_dim <= 0)
        return RP_ERR(RP_ERR_INVALID, "kv layer: invalid geometry");
    if (type != RP_DTYPE_F16 && type != RP_DTYPE_F32)
        return RP_ERR(RP_ERR_INVALID, "kv layer: K and V can be f16 or f32, not %s", rp_dtype_name(type));
    size_t bytes;
    if (!rp_mul_size((size_t)n_blocks, (size_t)block_size * n_kv_head * head_dim * 4, &bytes))
        return RP_ERR(RP_ERR_RANGE, "kv layer: too large");
    *out = (rp_kv_layer){.type = type,
                         .n_blocks = n_blocks,
                         .block_size = block_size,
                         .n_kv_head = n_kv_head,
                         .head_dim = head_dim};
    rp_status st = be->ops->kv_layer_init(be, out);
    if (st)
        memset(out, 0, sizeof(*out));
    return st;
}

void rp_backend_kv_layer_deinit(rp_backend *be, rp_kv_layer *kv)
{
    if (kv->k || kv->v)
        be->ops->kv_layer_deinit(be, kv);
    memset(kv, 0, sizeof(*kv));
}

rp_status rp_backend_kv_block_export(rp_backend *be, const rp_kv_layer *kv, int32_t b, void *host)
{
    RP_ASSERT(b >= 0 && b < kv->n_blocks);
    return be->ops->kv_block_export(be, kv, b, host);
}

rp_status rp_backend_kv_block_import(rp_backend *be, rp_kv_layer *kv, int32_t b, const void *host)
{
    RP_ASSERT(b >= 0 && b < kv->n_blocks);
    return be->ops->kv_block_import(be, kv, b, host);
}

rp_status rp_backend_kv_block_copy(rp_backend *be, rp_kv_layer *kv, int32_t dst, int32_t src)
{
    RP_ASSERT(dst >= 0 && dst < kv->n_blocks && src >= 0 && src < kv->n_blocks);
    return dst == src ? RP_OK : be->ops->kv_block_copy(be, kv, dst, src);
}

/* ---- one forward ---- */

rp_status rp_backend_begin_batch(rp_backend *be, const rp_batch_desc *desc)
{
    return be->ops->begin_batch(be, desc);
}

rp_status rp_backend_get_rows(rp_backend *be, const rp_tensor *table, float *out)
{
    return be->ops->get_rows(be, table, out);
}

rp_status rp_backend_gather_rows(rp_backend *be, rp_row_set set, const float *src, int width, float *dst)
{
    return be->ops->gather_rows(be, set, src, width, dst);
}

rp_status rp_backend_matmul(rp_backend *be, const rp_tensor *w, const float *x, int n, float *y)
{
    return n > 0 ? be->ops->matmul(be, w, x, n, y) : RP_OK;
}

rp_status rp_backend_matmul_group(rp_backend *be, const rp_matmul_desc *mm, int count, const float *x, int n)
{
    return n > 0 ? be->ops->matmul_group(be, mm, count, x, n) : RP_OK;
}

rp_status rp_backend_matmul_glu(rp_backend *be, const rp_tensor *gate, const rp_tensor *up, const float *x, int n,
                                float *up_out, float *out)
{
    return n > 0 ? be->ops->matmul_glu(be, gate, up, x, n, up_out, out) : RP_OK;
}

rp_status rp_backend_add_bias(rp_backend *be, float *y, const float *b, int n, int width)
{
    return n > 0 ? be->ops->add_bias(be, y, b, n, width) : RP_OK;
}

rp_status rp_backend_rmsnorm(rp_backend *be, const float *x, const float *w, float eps, int rows, int width,
                             float *out)
{
    return rows > 0 ? be->ops->rmsnorm(be, x, w, eps, rows, width, out) : RP_OK;
}

rp_status rp_backend_rope(rp_backend *be, float *x, int n_head, int head_dim, int rot_dim, const float *inv_freq,
                          rp_rope_style style)
{
    RP_ASSERT(rot_dim > 0 && rot_dim % 2 == 0 && rot_dim <= head_dim);
    return be->ops->rope(be, x, n_head, head_dim, rot_dim, inv_freq, style);
}

rp_status rp_backend_attention(rp_backend *be, const float *q, const float *k, const float *v, rp_kv_layer *kv,
                               int n_head, int n_kv_head, int head_dim, float scale, float *out)
{
    return be->ops->attention(be, q, k, v, kv, n_head, n_kv_head, head_dim, scale, out);
}

rp_status rp_backend_silu_mul(rp_backend *be, const float *gate, const float *up, size_t count, float *out)
{
    return count ? be->ops->silu_mul(be, gate, up, count, out) : RP_OK;
}

rp_status rp_backend_add(rp_backend *be, float *y, const float *x, size_t count)
{
    return count ? be->ops->add(be, y, x, count) : RP_OK;
}

rp_status rp_backend_argmax(rp_backend *be, const float *x, int rows, int width, int32_t *out)
{
    return rows > 0 ? be->ops->argmax(be, x, rows, width, out) : RP_OK;
}

bool rp_backend_has_moe(rp_backend *be)
{
    return be->ops->moe_route && be->ops->moe_ffn;
}

rp_status rp_backend_moe_route(rp_backend *be, const float *logits, int n, int n_expert, int n_used, bool norm,
                               int32_t *ids, float *w)
{
    if (!rp_backend_has_moe(be))
        return RP_ERR(RP_ERR_UNSUPPORTED, "backend %s has no mixture-of-experts kernels", be->name);
    if (n_used < 1 || n_used > n_expert)
        return RP_ERR(RP_ERR_INVALID, "routing %d of %d experts", n_used, n_expert);
    return n > 0 ? be->ops->moe_route(be, logits, n, n_expert, n_used, norm, ids, w) : RP_OK;
}

rp_status rp_backend_moe_ffn(rp_backend *be, const rp_moe_desc *d, const float *x, int n, float *out)
{
    if (!rp_backend_has_moe(be))
        return RP_ERR(RP_ERR_UNSUPPORTED, "backend %s has no mixture-of-experts kernels", be->name);
    return n > 0 ? be->ops->moe_ffn(be, d, x, n, out) : RP_OK;
}

rp_status rp_backend_sigmoid_mul(rp_backend *be, const float *x, const float *gate, int rows, int width,
                                 int gate_width, float *out)
{
    RP_ASSERT(gate_width == width || gate_width == 1);
    return rows > 0 ? be->ops->sigmoid_mul(be, x, gate, rows, width, gate_width, out) : RP_OK;
}

size_t rp_state_floats(const rp_state_layer *st)
{
    size_t conv_dim = 2 * (size_t)st->n_k_head * st->dk + (size_t)st->n_v_head * st->dv;
    return (size_t)st->n_v_head * st->dk * st->dv + (size_t)(st->kc - 1) * conv_dim;
}

size_t rp_state_log_floats(const rp_state_layer *st)
{
    return 2 * (size_t)st->n_k_head * st->dk + (size_t)st->n_v_head * st->dv + 2 * (size_t)st->n_v_head;
}

bool rp_backend_has_gdn(rp_backend *be)
{
    return be->ops->gdn != NULL;
}

rp_status rp_backend_gdn(rp_backend *be, const rp_gdn_desc *d)
{
    if (!rp_backend_has_gdn(be))
        return RP_ERR(RP_ERR_UNSUPPORTED, "the %s backend has no Gated DeltaNet kernels", be->name);
    return be->ops->gdn(be, d);
}
