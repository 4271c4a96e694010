/*
 * cpu_backend.c - the CPU backend: fills the backend vtable for x86-64 CPUs.
 *
 * Buffers are 64-byte aligned heap memory; weight tensors alias the host data
 * they are made from (the model's mmap or its quantized copy). Matmuls go to the
 * kernels in matmul.c (scalar reference + AVX2/AVX-512, chosen at run time),
 * fused groups included (matmul_group, matmul_glu: one pool run for Q/K/V or
 * gate/up, bias and residual adds folded in); attention is cpu_attention.c's;
 * the other ops, the KV layout (K transposed inside a block: cpu_int.h) with
 * its export to the canonical layout, and the batch live here. Every op splits
 * its outputs over the thread pool and reduces each output in a fixed order, so
 * results do not depend on the batch or the thread count (see backend.h).
 *
 * Backend memory is host memory (rp_backend_info.host_memory): uploads and
 * downloads are copies, and a caller may hand host buffers to the ops.
 *
 * Scratch memory (quantized activations, attention scores) grows by doubling
 * when a larger batch or context first appears, and is never freed per step.
 *
 * Threads: driven by one thread; its pool's workers only run inside ops.
 */
#include "cpu_int.h"
#include "../../quant/quant.h"

#include <emmintrin.h>
#include <math.h>
#include <stdio.h>
#include <sys/mman.h>

static cpu_backend *cpu(rp_backend *be)
{
    return (cpu_backend *)be;
}

rp_status rp_cpu_grow(void **buf, size_t *size, size_t need)
{
    if (need <= *size)
        return RP_OK;
    size_t n = *size ? *size : 4096;
    while (n < need)
        n *= 2;
    void *p = rp_malloc_aligned(n);
    if (!p)
        return RP_ERR(RP_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes of scratch", n);
    rp_free_aligned(*buf);
    *buf = p;
    *size = n;
    return RP_OK;
}

static void cpu_destroy(rp_backend *be)
{
    cpu_backend *c = cpu(be);
    rp_pool_destroy(c->pool);
    rp_free(c->huge);
    rp_free_aligned(c->mm_scratch);
    rp_free_aligned(c->scores);
    rp_free_aligned(c->attn_part);
    rp_free_aligned(c->attn_span);
    rp_free_aligned(c->rope_tab);
    rp_free(c->bt_ptr);
    rp_free(c);
}

/* Backend memory (the KV cache, the model's buffers) is zeroed and committed when it
 * is allocated, so a request never meets memory the machine does not have. Buffers
 * from 2 MiB on are mapped on 2 MiB pages and faulted in by the kernel: the KV cache
 * can be gigabytes (--kv-memory), and with 11.6 GB of it `rapid serve` started in
 * 58-74 s on the 2-core VM when 4 KiB pages were zeroed one fault at a time, 5-6 s
 * now. Those mappings are listed (c->huge: a few per model, KV layers included) so that
 * cpu_free unmaps them with their size; a header in front of the memory would cost a
 * whole extra huge page for a buffer of an exact multiple of 2 MiB, as KV layers are. */
#define ALLOC_HUGE_MIN ((size_t)2 << 20) // buffers from this size on go on huge pages

// Faults in a fresh mapping's pages (zero, from the kernel) without writing them a second
// time; false where the kernel cannot (MADV_POPULATE_WRITE: Linux 5.14): then memset.
static bool commit_pages(void *p, size_t n)
{
#ifdef MADV_POPULATE_WRITE
    return madvise(p, n, MADV_POPULATE_WRITE) == 0;
#else
    (void)p, (void)n;
    return false;
#endif
}

static rp_status cpu_alloc(rp_backend *be, size_t bytes, void **out)
{
    cpu_backend *c = cpu(be);
    *out = NULL;
    if (bytes < ALLOC_HUGE_MIN) {
        void *p = rp_malloc_aligned(bytes);
        if (!p)
            return RP_ERR(RP_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes", bytes);
        memset(p, 0, bytes);
        *out = p;
        return RP_OK;
    }
    if (c->n_huge == c->cap_huge) {
        int cap = c->cap_huge ? 2 * c->cap_huge : 16;
        huge_map *h = rp_realloc(c->huge, (size_t)cap * sizeof(huge_map));
        if (!h)
            return RP_ERR(RP_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes", bytes);
        c->huge = h;
        c->cap_huge = cap;
    }
    void *p = rp_malloc_huge(bytes);
    if (!p)
        return RP_ERR(RP_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes", bytes);
    if (!commit_pages(p, bytes))
        memset(p, 0, bytes);
    c->huge[c->n_huge++] = (huge_map){p, bytes};
    *out = p;
    return RP_OK;
}

static void cpu_free(rp_backend *be, void *ptr)
{
    cpu_backend *c = cpu(be);
    for (int i = 0; ptr && i < c->n_huge; i++)
        if (c->huge[i].p == ptr) {
            rp_free_huge(ptr, c->huge[i].bytes);
            c->huge[i] = c->huge[--c->n_huge];
            return;
        }
    rp_free_aligned(ptr);
}

static rp_status cpu_copy(rp_backend *be, void *dst, const void *src, size_t bytes)
{
    if (bytes)
        memcpy(dst, src, bytes);
    return RP_OK;
}

static rp_status cpu_tensor_init(rp_backend *be, rp_dtype type, int64_t ne0, int64_t ne1, const void *host_data,
                                 rp_tensor *out)
{
    out->data = host_data; // aliased: backend memory is host memory
    return RP_OK;
}

static bool cpu_supports_type(rp_backend *be, rp_dtype type)
{
    switch (type) {
    case RP_DTYPE_F32:
    case RP_DTYPE_F16:
    case RP_DTYPE_BF16:
    case RP_DTYPE_Q8_0:
    case RP_DTYPE_Q4_0:
    case RP_DTYPE_Q5_0:
    case RP_DTYPE_Q4_K:
    case RP_DTYPE_Q5_K:
    case RP_DTYPE_Q6_K: return true;
    default: return false;
    }
}

/* ---- ops ---- */

static rp_status cpu_get_rows(rp_backend *be, const rp_tensor *table, float *out)
{
    const cpu_batch *bt = &cpu(be)->batch;
    size_t row_bytes;
    rp_dtype_row_bytes(table->type, table->ne[0], &row_bytes);
    for (int t = 0; t < bt->n_tokens; t++) {
        if (bt->tokens[t] < 0 || bt->tokens[t] >= table->ne[1])
            return RP_ERR(RP_ERR_RANGE, "token id %d outside the vocabulary (%lld)", bt->tokens[t],
                          (long long)table->ne[1]);
        const uint8_t *row = (const uint8_t *)table->data + (size_t)bt->tokens[t] * row_bytes;
        rp_dequantize(table->type, row, out + (size_t)t * table->ne[0], table->ne[0]);
    }
    return RP_OK;
}

static rp_status cpu_gather_rows(rp_backend *be, rp_row_set set, const float *src, int width, float *dst)
{
    const cpu_batch *bt = &cpu(be)->batch;
    int n = set == RP_ROWS_OUT ? bt->n_rows : bt->n_logit_rows;
    const int32_t *idx = set == RP_ROWS_OUT ? bt->rows : bt->logit_rows;
    size_t w = (size_t)width;
    for (int i = 0; i < n; i++) // ascending indices: in place, rows only move forward
        if (dst + i * w != src + (size_t)idx[i] * w)
            memmove(dst + i * w, src + (size_t)idx[i] * w, w * sizeof(float));
    return RP_OK;
}

static rp_status cpu_matmul(rp_backend *be, const rp_tensor *w, const float *x, int n, float *y)
{
    cpu_backend *c = cpu(be);
    rp_status st = rp_cpu_grow(&c->mm_scratch, &c->mm_scratch_size, rp_cpu_matmul_scratch_bytes(w->type, w->ne[0], n));
    if (st)
        return st;
    rp_cpu_matmul(c->pool, w, x, n, y, c->mm_scratch, c->bf16_act);
    return RP_OK;
}

static rp_status cpu_add_bias(rp_backend *be, float *y, const float *b, int n, int width);
static rp_status cpu_add(rp_backend *be, float *y, const float *x, size_t count);
static rp_status cpu_silu_mul(rp_backend *be, const float *gate, const float *up, size_t count, float *out);

static rp_status cpu_matmul_group(rp_backend *be, const rp_matmul_desc *mm, int count, const float *x, int n)
{
    cpu_backend *c = cpu(be);
    size_t need = 0;
    for (int i = 0; i < count; i++) {
        size_t b = rp_cpu_matmul_scratch_bytes(mm[i].w->type, mm[i].w->ne[0], n);
        need = b > need ? b : need;
    }
    rp_status st = rp_cpu_grow(&c->mm_scratch, &c->mm_scratch_size, need);
    if (st)
        return st;
    if (rp_cpu_matmul_group_fusable(mm, count)) {
        rp_cpu_matmul_group(c->pool, mm, count, false, x, n, c->mm_scratch, c->bf16_act);
        return RP_OK;
    }
    // mixed types (GGUF files mix quantizations): one matmul at a time
    for (int i = 0; i < count; i++)
        rp_cpu_matmul_group(c->pool, &mm[i], 1, false, x, n, c->mm_scratch, c->bf16_act);
    return RP_OK;
}

static rp_status cpu_matmul_glu(rp_backend *be, const rp_tensor *gate, const rp_tensor *up, const float *x, int n,
                                float *up_out, float *out)
{
    cpu_backend *c = cpu(be);
    rp_matmul_desc mm[2] = {{.w = gate, .y = out}, {.w = up, .y = up_out}};
    if (!rp_cpu_matmul_group_fusable(mm, 2) || gate->ne[1] != up->ne[1]) {
        rp_status st;
        if ((st = cpu_matmul_group(be, mm, 2, x, n)))
            return st;
        return cpu_silu_mul(be, out, up_out, (size_t)n * gate->ne[1], out);
    }
    rp_status st = rp_cpu_grow(&c->mm_scratch, &c->mm_scratch_size, rp_cpu_matmul_scratch_bytes(gate->type, gate->ne[0], n));
    if (st)
        return st;
    rp_cpu_matmul_group(c->pool, mm, 2, true, x, n, c->mm_scratch, c->bf16_act);
    return RP_OK;
}

static rp_status cpu_add_bias(rp_backend *be, float *y, const float *b, int n, int width)
{
    for (int t = 0; t < n; t++)
        for (int i = 0; i < width; i++)
            y[(size_t)t * width + i] += b[i];
    return RP_OK;
}

// Σ x² of a row in double: eight running sums (s_l takes elements l, l + 8, ...) in four
// SSE2 registers, then ((s0 + s4) + (s2 + s6)) + ((s1 + s5) + (s3 + s7)), then the tail
// in order. (One sequential sum is a chain of dependent adds: 3x slower.)
static double sum_squares(const float *x, int n)
{
    __m128d a01 = _mm_setzero_pd(), a23 = a01, a45 = a01, a67 = a01;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128 lo = _mm_loadu_ps(x + i), hi = _mm_loadu_ps(x + i + 4);
        __m128d d01 = _mm_cvtps_pd(lo), d23 = _mm_cvtps_pd(_mm_movehl_ps(lo, lo));
        __m128d d45 = _mm_cvtps_pd(hi), d67 = _mm_cvtps_pd(_mm_movehl_ps(hi, hi));
        a01 = _mm_add_pd(a01, _mm_mul_pd(d01, d01));
        a23 = _mm_add_pd(a23, _mm_mul_pd(d23, d23));
        a45 = _mm_add_pd(a45, _mm_mul_pd(d45, d45));
        a67 = _mm_add_pd(a67, _mm_mul_pd(d67, d67));
    }
    __m128d g = _mm_add_pd(_mm_add_pd(a01, a45), _mm_add_pd(a23, a67));
    double ss = _mm_cvtsd_f64(g) + _mm_cvtsd_f64(_mm_unpackhi_pd(g, g));
    for (; i < n; i++)
        ss += (double)x[i] * x[i];
    return ss;
}

/* Row-wise ops (rmsnorm, rope) run on the pool when they are large: their rows were
 * just written by the matmul's threads, and one thread reading them all back waits on
 * the other cores' caches (a 27-token rmsnorm took 16 us on 16 Xeon cores, 6 us on one
 * core of the 2-core VM). Small ones (decode) stay on the calling thread. */
#define ROW_OP_POOL_MIN 4096 // elements from which a row op splits its rows over the pool

typedef struct row_job row_job;
struct row_job {
    void (*rows)(const row_job *j, int64_t lo, int64_t hi); // does rows [lo, hi)
    const float *x, *w; // rmsnorm: input, weight; rope: NULL, the cos/sin table (per token)
    float *out;         // rmsnorm: output; rope: x, rotated in place
    float eps;
    int n_rows, width;   // rmsnorm: rows x width; rope: tokens x (n_head * head_dim)
    int head_dim, rot_dim, style; // rope
};

static void norm_rows(const row_job *j, int64_t lo, int64_t hi)
{
    for (int64_t r = lo; r < hi; r++) {
        const float *xr = j->x + (size_t)r * j->width;
        float *o = j->out + (size_t)r * j->width;
        float inv = (float)(1.0 / sqrt(sum_squares(xr, j->width) / j->width + j->eps));
        for (int i = 0; i < j->width; i++)
            o[i] = (xr[i] * inv) * j->w[i];
    }
}

static void row_task(void *p, int ith, int nth)
{
    const row_job *j = p;
    int64_t lo, hi;
    rp_split_range(j->n_rows, ith, nth, &lo, &hi);
    j->rows(j, lo, hi);
}

// Runs a row job on the calling thread or, when large, split by rows on the pool.
static void run_rows(cpu_backend *c, const row_job *j)
{
    if ((int64_t)j->n_rows * j->width < ROW_OP_POOL_MIN || rp_pool_size(c->pool) == 1)
        j->rows(j, 0, j->n_rows);
    else
        rp_pool_run(c->pool, row_task, (void *)j);
}

static rp_status cpu_rmsnorm(rp_backend *be, const float *x, const float *w, float eps, int rows, int width,
                             float *out)
{
    row_job j = {.rows = norm_rows, .x = x, .w = w, .out = out, .eps = eps, .n_rows = rows, .width = width};
    run_rows(cpu(be), &j);
    return RP_OK;
}

// The cos/sin table of the batch's positions for frequencies inv_freq[0, half): made by
// the first rope of a forward, reused by the others (Q and K of every layer).
static const float *rope_table(cpu_backend *c, int half, const float *inv_freq)
{
    if (c->rope_freq == inv_freq && c->rope_half == half)
        return c->rope_tab;
    const cpu_batch *bt = &c->batch;
    int n = bt->n_tokens;
    if (rp_cpu_grow(&c->rope_tab, &c->rope_tab_size, (size_t)n * 2 * half * sizeof(float) + 1)) {
        c->rope_freq = NULL;
        return NULL;
    }
    float *tab = c->rope_tab;
    for (int t = 0; t < n; t++)
        for (int i = 0; i < half; i++) {
            // As transformers: the angle is a float32 product, cos/sin of that float.
            float a = (float)bt->pos[t] * inv_freq[i];
            tab[(size_t)t * 2 * half + i] = cosf(a);
            tab[(size_t)t * 2 * half + half + i] = sinf(a);
        }
    c->rope_freq = inv_freq, c->rope_half = half;
    return tab;
}

static void rope_rows(const row_job *j, int64_t lo, int64_t hi)
{
    int hd = j->head_dim, half = j->rot_dim / 2, n_head = j->width / hd;
    for (int64_t t = lo; t < hi; t++) {
        const float *cs = j->w + (size_t)t * 2 * half, *sn = cs + half;
        for (int h = 0; h < n_head; h++) {
            float *v = j->out + ((size_t)t * n_head + h) * hd;
            for (int i = 0; i < half; i++) {
                int i0 = j->style == RP_ROPE_NEOX ? i : 2 * i;
                int i1 = j->style == RP_ROPE_NEOX ? i + half : 2 * i + 1;
                float x0 = v[i0], x1 = v[i1];
                v[i0] = x0 * cs[i] - x1 * sn[i];
                v[i1] = x1 * cs[i] + x0 * sn[i];
            }
        }
    }
}

static rp_status cpu_rope(rp_backend *be, float *x, int n_head, int head_dim, int rot_dim, const float *inv_freq,
                          rp_rope_style style)
{
    cpu_backend *c = cpu(be);
    const float *tab = rope_table(c, rot_dim / 2, inv_freq);
    if (!tab)
        return RP_ERR(RP_ERR_NOMEM, "cpu backend: cannot allocate the rope table");
    row_job j = {.rows = rope_rows,
                 .w = tab,
                 .out = x,
                 .n_rows = c->batch.n_tokens,
                 .width = n_head * head_dim,
                 .head_dim = head_dim,
                 .rot_dim = rot_dim,
                 .style = (int)style};
    run_rows(c, &j);
    return RP_OK;
}

static rp_status cpu_attention(rp_backend *be, const float *q, const float *k, const float *v, rp_kv_layer *kv,
                               int n_head, int n_kv_head, int head_dim, float scale, float *out)
{
    return rp_cpu_attention(cpu(be), q, k, v, kv, n_head, n_kv_head, head_dim, scale, out);
}

static rp_status cpu_silu_mul(rp_backend *be, const float *gate, const float *up, size_t count, float *out)
{
    rp_cpu_silu_mul(out, gate, up, (int64_t)count);
    return RP_OK;
}

static rp_status cpu_sigmoid_mul(rp_backend *be, const float *x, const float *gate, int rows, int width,
                                 int gate_width, float *out)
{
    for (int t = 0; t < rows; t++)
        for (int i = 0; i < width; i++) {
            float g = gate[(size_t)t * gate_width + (gate_width == 1 ? 0 : i)];
            out[(size_t)t * width + i] = x[(size_t)t * width + i] * (1.0f / (1.0f + expf(-g)));
        }
    return RP_OK;
}

static rp_status cpu_add(rp_backend *be, float *y, const float *x, size_t count)
{
    for (size_t i = 0; i < count; i++)
        y[i] += x[i];
    return RP_OK;
}

static rp_status cpu_argmax(rp_backend *be, const float *x, int rows, int width, int32_t *out)
{
    for (int r = 0; r < rows; r++) {
        const float *row = x + (size_t)r * width;
        int best = 0;
        for (int i = 1; i < width; i++) // a NaN compares false: it never wins (nor does one at 0 lose)
            if (row[i] > row[best] || (row[best] != row[best] && row[i] == row[i]))
                best = i;
        out[r] = best;
    }
    return RP_OK;
}

static rp_status cpu_synchronize(rp_backend *be)
{
    return RP_OK;
}

/* ---- the batch ---- */

static rp_status cpu_begin_batch(rp_backend *be, const rp_batch_desc *d)
{
    cpu_backend *c = cpu(be);
    if (c->lost[0])
        return RP_ERR(RP_ERR_DEVICE, "cpu backend: %s", c->lost);
    if (d->n_tokens > c->bt_ptr_cap) {
        int cap = d->n_tokens > 2 * c->bt_ptr_cap ? d->n_tokens : 2 * c->bt_ptr_cap;
        const int32_t **p = rp_realloc(c->bt_ptr, (size_t)cap * sizeof(*p));
        if (!p)
            return RP_ERR(RP_ERR_NOMEM, "cpu backend: out of memory for a batch of %d tokens", d->n_tokens);
        c->bt_ptr = p;
        c->bt_ptr_cap = cap;
    }
    for (int t = 0; t < d->n_tokens; t++)
        c->bt_ptr[t] = d->bt + d->bt_start[d->seq[t]]; // one pointer per sequence: spans compare them
    c->batch = (cpu_batch){.n_tokens = d->n_tokens,
                           .block_size = d->block_size,
                           .tokens = d->tokens,
                           .pos = d->pos,
                           .slot = d->slot,
                           .block_table = c->bt_ptr,
                           .n_rows = d->n_rows,
                           .rows = d->rows,
                           .n_logit_rows = d->n_logit_rows,
                           .logit_rows = d->logit_rows,
                           .n_seqs = d->n_seqs,
                           .state_in = d->state_in,
                           .seq_first = d->seq_first,
                           .seq_count = d->seq_count};
    c->rope_freq = NULL; // new positions: the first rope makes the table
    return RP_OK;
}

/* ---- the KV layout (cpu_int.h) and its canonical form ---- */

// Bytes of K (or V) of one block of a layer.
static size_t kv_half_block(const rp_kv_layer *kv)
{
    return rp_kv_layer_block_bytes(kv) / 2;
}

static rp_status cpu_kv_layer_init(rp_backend *be, rp_kv_layer *kv)
{
    size_t bytes;
    if (!rp_mul_size((size_t)kv->n_blocks, kv_half_block(kv), &bytes))
        return RP_ERR(RP_ERR_RANGE, "kv layer: too large");
    rp_status st = cpu_alloc(be, bytes, &kv->k);
    if (!st && (st = cpu_alloc(be, bytes, &kv->v))) {
        cpu_free(be, kv->k);
        kv->k = NULL;
    }
    return st;
}

static void cpu_kv_layer_deinit(rp_backend *be, rp_kv_layer *kv)
{
    cpu_free(be, kv->k);
    cpu_free(be, kv->v);
}

// The canonical K of a block is (block_size, n_kv_head, head_dim): element (o, h, i) is
// the layer's K element i of head h at the block's slot o. V is stored that way already.
static rp_status cpu_kv_block_export(rp_backend *be, const rp_kv_layer *kv, int32_t b, void *host)
{
    size_t half = kv_half_block(kv), eb = (size_t)rp_dtype_block_bytes(kv->type);
    int bs = kv->block_size, nh = kv->n_kv_head, hd = kv->head_dim;
    const uint8_t *k = (const uint8_t *)kv->k + (size_t)b * half;
    uint8_t *dst = host;
    for (int o = 0; o < bs; o++)
        for (int h = 0; h < nh; h++)
            for (int i = 0; i < hd; i++, dst += eb)
                memcpy(dst, k + rp_cpu_kv_k_index((size_t)o, h, i, nh, hd, bs) * eb, eb);
    memcpy(dst, (const uint8_t *)kv->v + (size_t)b * half, half);
    return RP_OK;
}

static rp_status cpu_kv_block_import(rp_backend *be, rp_kv_layer *kv, int32_t b, const void *host)
{
    size_t half = kv_half_block(kv), eb = (size_t)rp_dtype_block_bytes(kv->type);
    int bs = kv->block_size, nh = kv->n_kv_head, hd = kv->head_dim;
    uint8_t *k = (uint8_t *)kv->k + (size_t)b * half;
    const uint8_t *src = host;
    for (int o = 0; o < bs; o++)
        for (int h = 0; h < nh; h++)
            for (int i = 0; i < hd; i++, src += eb)
                memcpy(k + rp_cpu_kv_k_index((size_t)o, h, i, nh, hd, bs) * eb, src, eb);
    memcpy((uint8_t *)kv->v + (size_t)b * half, src, half);
    return RP_OK;
}

static rp_status cpu_kv_block_copy(rp_backend *be, rp_kv_layer *kv, int32_t dst, int32_t src)
{
    size_t half = kv_half_block(kv);
    memcpy((uint8_t *)kv->k + (size_t)dst * half, (const uint8_t *)kv->k + (size_t)src * half, half);
    memcpy((uint8_t *)kv->v + (size_t)dst * half, (const uint8_t *)kv->v + (size_t)src * half, half);
    return RP_OK;
}

/* ---- facts ---- */

static void cpu_get_info(rp_backend *be, rp_backend_info *out)
{
    char model[80] = "x86-64";
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "model name", 10) == 0) {
            const char *v = strchr(line, ':');
            if (v) {
                v += strspn(v + 1, " \t") + 1;
                snprintf(model, sizeof(model), "%.*s", (int)strcspn(v, "\n"), v);
            }
            break;
        }
    if (f)
        fclose(f);
    snprintf(out->device, sizeof(out->device), "%s (%s, %d threads)", model, rp_cpu_simd_name(),
             rp_pool_size(cpu(be)->pool));
    out->host_memory = true;
}

static const char *cpu_numerics(rp_backend *be, rp_dtype wtype)
{
    cpu_backend *c = cpu(be);
    // AMX's bf16 numbers differ from AVX512_BF16's; float32 activations give the same bits
    // at every SIMD level above scalar, but the level is recorded as before.
    snprintf(c->numerics, sizeof(c->numerics), "cpu %s bf16-act:%s", rp_cpu_simd_name(),
             !c->bf16_act ? "off" : rp_cpu_has_amx() ? "amx" : "avx512_bf16");
    return c->numerics;
}

static const char *cpu_numerics_note(rp_backend *be, rp_dtype wtype)
{
    if (wtype != RP_DTYPE_BF16 || !cpu(be)->bf16_act)
        return "";
    return rp_cpu_has_amx() ? " (bf16 activations, AMX)" : " (bf16 activations)";
}

static rp_pool *cpu_host_pool(rp_backend *be)
{
    return cpu(be)->pool;
}

static int cpu_threads(rp_backend *be)
{
    return rp_pool_size(cpu(be)->pool);
}

static const char *cpu_lost(rp_backend *be)
{
    return cpu(be)->lost[0] ? cpu(be)->lost : NULL;
}

static const rp_backend_ops cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .get_info = cpu_get_info,
    .numerics = cpu_numerics,
    .numerics_note = cpu_numerics_note,
    .host_pool = cpu_host_pool,
    .threads = cpu_threads,
    .lost = cpu_lost,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .synchronize = cpu_synchronize,
    .tensor_init = cpu_tensor_init,
    .supports_type = cpu_supports_type,
    .kv_layer_init = cpu_kv_layer_init,
    .kv_layer_deinit = cpu_kv_layer_deinit,
    .kv_block_export = cpu_kv_block_export,
    .kv_block_import = cpu_kv_block_import,
    .kv_block_copy = cpu_kv_block_copy,
    .begin_batch = cpu_begin_batch,
    .get_rows = cpu_get_rows,
    .gather_rows = cpu_gather_rows,
    .matmul = cpu_matmul,
    .matmul_group = cpu_matmul_group,
    .matmul_glu = cpu_matmul_glu,
    .add_bias = cpu_add_bias,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .sigmoid_mul = cpu_sigmoid_mul,
    .gdn = rp_cpu_gdn,
    .attention = cpu_attention,
    .silu_mul = cpu_silu_mul,
    .add = cpu_add,
    .argmax = cpu_argmax,
    .moe_route = rp_cpu_moe_route,
    .moe_ffn = rp_cpu_moe_ffn,
};

rp_status rp_backend_cpu_create(const rp_backend_params *p, rp_backend **out)
{
    *out = NULL;
    int n_threads = p->n_threads > 0 ? p->n_threads : rp_cpu_count();
    cpu_backend *c = rp_calloc(1, sizeof(*c));
    if (!c)
        return RP_ERR(RP_ERR_NOMEM, "cpu backend: out of memory");
    c->base.ops = &cpu_ops;
    c->bf16_act = !p->f32_activations && rp_cpu_bf16_act_pays();
    rp_status st = rp_pool_create(n_threads, &c->pool);
    if (st) {
        rp_free(c);
        return st;
    }
    *out = &c->base;
    return RP_OK;
}

void rp_cpu_test_lose(rp_backend *be, const char *why)
{
    RP_ASSERT(be->ops == &cpu_ops);
    snprintf(cpu(be)->lost, sizeof(cpu(be)->lost), "%s", why && *why ? why : "lost (test hook)");
}

bool rp_backend_cpu_bf16_act(rp_backend *be)
{
    RP_ASSERT(be->ops == &cpu_ops);
    return cpu(be)->bf16_act;
}
