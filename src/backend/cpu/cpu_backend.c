/*
 * cpu_backend.c - the CPU backend: fills the backend vtable for x86-64 CPUs.
 *
 * Buffers are 64-byte aligned heap memory; weight tensors alias the host data
 * they are made from (the model's mmap or its quantized copy). Matmuls go to the
 * kernels in matmul.c (scalar reference + AVX2, chosen at run time), fused
 * groups included (matmul_group, matmul_glu: one pool run for Q/K/V or gate/up,
 * bias and residual adds folded in); the other ops live here. Attention runs
 * the scalar reference (attn_worker) or, with AVX2 and head_dim a multiple of
 * 64, fixed-position key chunks through attn_avx2.c (attn_avx512.c with
 * AVX-512: the same bits) merged in chunk order (a sequence's consecutive
 * tokens through each chunk together), the threads by kv head when they share
 * them evenly. Every op splits its outputs over the
 * thread pool and reduces each output in a fixed order, so results do not
 * depend on the batch or the thread count (see backend.h).
 *
 * Scratch memory (quantized activations, attention scores) grows by doubling
 * when a larger batch or context first appears, and is never freed per step.
 *
 * Threads: driven by one thread; its pool's workers only run inside ops.
 */
#include "cpu_int.h"

#include <emmintrin.h>
#include <math.h>
#include <stdatomic.h>
#include <sys/mman.h>

typedef struct huge_map {
    void *p;
    size_t bytes; // as asked (rp_free_huge rounds it as rp_malloc_huge did)
} huge_map;

typedef struct cpu_backend {
    rp_backend base;
    rp_pool *pool;
    void *mm_scratch; // quantized activations for matmul
    size_t mm_scratch_size;
    bool bf16_act; // BF16 weights take bf16-rounded activations (rp_backend_cpu_set_bf16_act)
    float *scores; // attention scores, scores_per_thread floats per thread
    size_t scores_per_thread;
    void *attn_part; // chunk partials of a split attention (see attn_split)
    size_t attn_part_size;
    void *attn_span; // (n_tokens + 1) ints: the batch's spans (see attn_simd)
    size_t attn_span_size;
    // cpu_rope's cos/sin table of the last call: (rope_n, 2 * rope_half) for positions
    // rope_pos and frequencies rope_freq (every layer of a forward asks for the same)
    void *rope_tab, *rope_pos;
    size_t rope_tab_size, rope_pos_size;
    const float *rope_freq;
    int rope_n, rope_half;
    huge_map *huge; // (n_huge) cpu_alloc's buffers on 2 MiB pages, for cpu_free
    int n_huge, cap_huge;
} cpu_backend;

static cpu_backend *cpu(rp_backend *be)
{
    return (cpu_backend *)be;
}

// Grows a 64-byte aligned scratch buffer to at least `need` bytes.
static rp_status grow(void **buf, size_t *size, size_t need)
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
    rp_free_aligned(c->rope_pos);
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
    size_t row;
    if (!rp_dtype_row_bytes(type, ne0, &row) || ne1 <= 0 || !rp_mul_size(row, (size_t)ne1, &out->nbytes))
        return RP_ERR(RP_ERR_INVALID, "cpu backend: bad tensor shape %lld x %lld of %s", (long long)ne0,
                      (long long)ne1, rp_dtype_name(type));
    out->type = type;
    out->ne[0] = ne0;
    out->ne[1] = ne1;
    out->data = host_data;
    return RP_OK;
}

static void cpu_tensor_deinit(rp_backend *be, rp_tensor *t)
{
    memset(t, 0, sizeof(*t));
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

static rp_status cpu_get_rows(rp_backend *be, const rp_tensor *table, const int32_t *tokens, int n, float *out)
{
    size_t row_bytes;
    rp_dtype_row_bytes(table->type, table->ne[0], &row_bytes);
    for (int t = 0; t < n; t++) {
        if (tokens[t] < 0 || tokens[t] >= table->ne[1])
            return RP_ERR(RP_ERR_RANGE, "token id %d outside the vocabulary (%lld)", tokens[t],
                          (long long)table->ne[1]);
        const uint8_t *row = (const uint8_t *)table->data + (size_t)tokens[t] * row_bytes;
        rp_dequantize(table->type, row, out + (size_t)t * table->ne[0], table->ne[0]);
    }
    return RP_OK;
}

static rp_status cpu_matmul(rp_backend *be, const rp_tensor *w, const float *x, int n, float *y)
{
    cpu_backend *c = cpu(be);
    rp_status st = grow(&c->mm_scratch, &c->mm_scratch_size, rp_cpu_matmul_scratch_bytes(w->type, w->ne[0], n));
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
    rp_status st = grow(&c->mm_scratch, &c->mm_scratch_size, need);
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
    rp_status st = grow(&c->mm_scratch, &c->mm_scratch_size, rp_cpu_matmul_scratch_bytes(gate->type, gate->ne[0], n));
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
    int head_dim, style; // rope
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

// The cos/sin table of n positions for frequencies inv_freq[0, half): the last one made
// when the positions and frequencies are the same (Q and K of every layer), else a new one.
static const float *rope_table(cpu_backend *c, const int32_t *pos, int n, int half, const float *inv_freq)
{
    if (c->rope_tab && c->rope_freq == inv_freq && c->rope_half == half && c->rope_n == n &&
        memcmp(c->rope_pos, pos, (size_t)n * sizeof(*pos)) == 0)
        return c->rope_tab;
    if (grow(&c->rope_tab, &c->rope_tab_size, (size_t)n * 2 * half * sizeof(float)) ||
        grow(&c->rope_pos, &c->rope_pos_size, (size_t)n * sizeof(*pos))) {
        c->rope_freq = NULL;
        return NULL;
    }
    float *tab = c->rope_tab;
    for (int t = 0; t < n; t++)
        for (int i = 0; i < half; i++) {
            // As transformers: the angle is a float32 product, cos/sin of that float.
            float a = (float)pos[t] * inv_freq[i];
            tab[(size_t)t * 2 * half + i] = cosf(a);
            tab[(size_t)t * 2 * half + half + i] = sinf(a);
        }
    memcpy(c->rope_pos, pos, (size_t)n * sizeof(*pos));
    c->rope_freq = inv_freq, c->rope_half = half, c->rope_n = n;
    return tab;
}

static void rope_rows(const row_job *j, int64_t lo, int64_t hi)
{
    int hd = j->head_dim, half = hd / 2, n_head = j->width / hd;
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

static rp_status cpu_rope(rp_backend *be, float *x, const int32_t *pos, int n, int n_head, int head_dim,
                          const float *inv_freq, rp_rope_style style)
{
    const float *tab = rope_table(cpu(be), pos, n, head_dim / 2, inv_freq);
    if (!tab)
        return RP_ERR(RP_ERR_NOMEM, "cpu backend: cannot allocate the rope table");
    row_job j = {.rows = rope_rows,
                 .w = tab,
                 .out = x,
                 .n_rows = n,
                 .width = n_head * head_dim,
                 .head_dim = head_dim,
                 .style = (int)style};
    run_rows(cpu(be), &j);
    return RP_OK;
}

typedef struct attn_job {
    cpu_backend *c;
    const float *q;
    rp_kv_layer *kv;
    const rp_attn_info *info;
    int n_head, n_kv_head, head_dim;
    float scale;
    float *out;
    // SIMD path only
    atomic_long next;   // next work item
    int64_t n_items;    // (span, kv head) pairs, or (span, kv head, chunk) triples when split
    const int *span;    // (n_spans + 1) first token of each span, then n_tokens
    int n_spans;        // spans in the batch
    int64_t *item_base; // split: (n_spans + 1) first item of each span (chunks, then row blocks to merge)
    size_t *part_base;  // split: (n_spans + 1) first float of each span's partials in part
    float *part;        // split: per item, a chunk's m, l, o (attn_part_floats)
    void (*chunk)(const rp_attn_chunk *a); // the kernel: AVX2, or AVX-512 (the same bits)
    const float *k, *v;                    // the batch's new K and V (n_tokens, n_kv_head * head_dim), to store
} attn_job;

// n values as the cache stores them (of type) at dst: copied, or as halves
// (rp_cpu_kv_half: the same bits at every SIMD level).
static void kv_put(void *dst, rp_dtype type, const float *src, size_t n)
{
    if (type == RP_DTYPE_F32) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    uint16_t *h = dst;
    if (rp_cpu_simd_level() >= 1) {
        rp_cpu_f32_to_f16_avx2(src, h, (int64_t)n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        h[i] = rp_cpu_kv_half(src[i]);
}

// Writes kv head kvh's K and V of one token (head_dim each) into its slot: V as a row,
// K scattered to its block's transposed layout (see rp_kv_layer).
static void kv_store_head(rp_kv_layer *kv, size_t slot, int bs, int n_kv_head, int hd, int kvh, const float *k,
                          const float *v)
{
    size_t eb = kv->type == RP_DTYPE_F32 ? 4 : 2, e = rp_kv_k_index(slot, kvh, 0, n_kv_head, hd, bs);
    kv_put((uint8_t *)kv->v + rp_kv_v_index(slot, kvh, 0, n_kv_head, hd) * eb, kv->type, v, (size_t)hd);
    if (kv->type == RP_DTYPE_F32) {
        for (int i = 0; i < hd; i++, e += (size_t)bs)
            ((float *)kv->k)[e] = k[i];
        return;
    }
    uint16_t half[1024]; // head_dim <= 1024 (the config check)
    kv_put(half, kv->type, k, (size_t)hd);
    for (int i = 0; i < hd; i++, e += (size_t)bs)
        ((uint16_t *)kv->k)[e] = half[i];
}

// Writes batch token t's K and V of kv head kvh into its slot.
static void kv_store_token(const attn_job *j, int t, int kvh)
{
    size_t off = ((size_t)t * j->n_kv_head + (size_t)kvh) * j->head_dim;
    kv_store_head(j->kv, (size_t)j->info->slot[t], j->info->block_size, j->n_kv_head, j->head_dim, kvh, j->k + off,
                  j->v + off);
}

// Writes the batch's K and V, every head, into their slots.
static void kv_store_all(const attn_job *j)
{
    for (int t = 0; t < j->info->n_tokens; t++)
        for (int kvh = 0; kvh < j->n_kv_head; kvh++)
            kv_store_token(j, t, kvh);
}

// q . k over n floats: eight running sums (lane i takes elements i, i + 8, ...),
// then the lanes added pairwise, always in this order (whatever the batch), so
// the compiler can keep the lanes in one vector register instead of one chain of
// dependent adds.
static inline float dot8(const float *q, const float *k, int n)
{
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            acc[l] += q[i + l] * k[i + l];
    for (int l = 0; i < n; i++, l++)
        acc[l] += q[i] * k[i];
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

// o += w * v over n floats; o is the worker's own accumulator (no aliasing), so
// the compiler vectorizes it. Each element's sum runs over the positions in
// order, the same sequence of operations as a plain loop.
static inline void axpy(float *restrict o, float w, const float *restrict v, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8) // eight at a time: one or two vector operations
        for (int l = 0; l < 8; l++)
            o[i + l] += w * v[i + l];
    for (; i < n; i++)
        o[i] += w * v[i];
}

// Slot `slot`'s values of kv head kvh in a layer's K array (transposed inside its block,
// so gathered into buf) or V array (in place when the cache holds float32), as float32.
static const float *kv_row(const attn_job *j, bool key, size_t slot, int kvh, float *buf)
{
    int hd = j->head_dim, bs = j->info->block_size;
    bool f32 = j->kv->type == RP_DTYPE_F32;
    if (key) {
        size_t e = rp_kv_k_index(slot, kvh, 0, j->n_kv_head, hd, bs);
        for (int i = 0; i < hd; i++, e += (size_t)bs)
            buf[i] = f32 ? ((const float *)j->kv->k)[e] : rp_fp16_to_f32(((const uint16_t *)j->kv->k)[e]);
        return buf;
    }
    size_t e = rp_kv_v_index(slot, kvh, 0, j->n_kv_head, hd);
    if (f32)
        return (const float *)j->kv->v + e;
    const uint16_t *h = (const uint16_t *)j->kv->v + e;
    for (int i = 0; i < hd; i++)
        buf[i] = rp_fp16_to_f32(h[i]);
    return buf;
}

// The scalar reference: one (token, head) at a time, scores of the whole key range,
// then softmax and the weighted sum of V.
static void attn_worker(void *ctx, int ith, int nth)
{
    attn_job *j = ctx;
    const rp_attn_info *info = j->info;
    int hd = j->head_dim, bs = info->block_size;
    int group = j->n_head / j->n_kv_head;
    float *scores = j->c->scores + (size_t)ith * j->c->scores_per_thread;
    float acc[1024], row[1024]; // head_dim <= 1024 (the config check)
    int64_t lo, hi;
    rp_split_range((int64_t)info->n_tokens * j->n_head, ith, nth, &lo, &hi);
    for (int64_t w = lo; w < hi; w++) {
        int t = (int)(w / j->n_head), h = (int)(w % j->n_head), kvh = h / group;
        const float *q = j->q + ((size_t)t * j->n_head + h) * hd;
        const int32_t *bt = info->block_table[t];
        int len = info->pos[t] + 1;
        float mx = -INFINITY;
        for (int p = 0; p < len; p++) {
            float s = dot8(q, kv_row(j, true, (size_t)bt[p / bs] * bs + p % bs, kvh, row), hd) * j->scale;
            scores[p] = s;
            if (s > mx)
                mx = s;
        }
        float sum = 0;
        for (int p = 0; p < len; p++) {
            scores[p] = expf(scores[p] - mx);
            sum += scores[p];
        }
        for (int i = 0; i < hd; i++)
            acc[i] = 0;
        for (int p = 0; p < len; p++)
            axpy(acc, scores[p], kv_row(j, false, (size_t)bt[p / bs] * bs + p % bs, kvh, row), hd);
        float *o = j->out + ((size_t)t * j->n_head + h) * hd;
        float inv = 1.0f / sum;
        for (int i = 0; i < hd; i++)
            o[i] = acc[i] * inv;
    }
}

/*
 * The SIMD path. A token's keys are cut into chunks of RP_ATTN_CHUNK at fixed
 * positions; a kernel computes one chunk for all query heads of a GQA group
 * (m = max score, l = Σ e^(s-m), o = Σ e^(s-m)·v), and the chunks are merged in
 * chunk order: M' = max(M, m), L = L·e^(M-M') + l·e^(m-M'), O likewise, out = O/L.
 * Tokens of one sequence at consecutive positions (a prefill chunk, a decode
 * token and its drafts) form spans: a run of up to ATTN_SPAN_ONE tokens is one span, a
 * longer run is cut into nearly equal spans of up to ATTN_SPAN; a span goes through
 * each chunk together, so the chunk's K
 * and V are read once for the span, not once per token: chunk c holds the span's
 * tokens at positions >= c·RP_ATTN_CHUNK (a suffix of the span), each with its own
 * end. Work items are (span, kv head) pairs: when the threads share the kv heads
 * evenly, thread i takes heads i, i + nth, ... of every span (attn_head_worker: the
 * same K/V lines at every step, so they stay in its caches; it stores its heads' new
 * K/V itself); else they come from a shared counter (spans of a prompt differ in
 * cost); when there are too few pairs for the threads (decode on
 * many threads) each chunk is its own item (attn_split) and the partials are merged
 * afterwards, by the calling thread or,
 * when there are many rows, on the pool by blocks of rows. All ways run the same kernel on the
 * same chunks and the same merge for every row, so a token's output depends
 * only on its query and its sequence's K/V, whatever its span.
 *
 * Partials of `rows` query rows (span tokens × group): m (rows), l (rows),
 * o (rows, hd). A worker's scratch: scores, two partials, and room for a chunk's
 * K and V rows as packed float32 (rp_attn_chunk.kv_tmp).
 */
#define ATTN_SPAN 16     // most tokens in a span cut from a longer run (a prefill chunk)
#define ATTN_SPAN_ONE 33 // most tokens in a run that is one span (a decode token and 32 drafts:
                         // a verification step reads the context's K/V once, 5-8% faster at
                         // 27 tokens than two spans on 2 threads; prefill keeps the shorter
                         // spans, whose work items balance better over many threads)

static size_t attn_part_floats(int rows, int hd)
{
    return (size_t)rows * (hd + 2);
}

static size_t attn_thread_floats(int group, int hd)
{
    int rows = group * ATTN_SPAN_ONE;
    size_t n = (size_t)rows * RP_ATTN_CHUNK + 2 * attn_part_floats(rows, hd) + 2 * (size_t)RP_ATTN_CHUNK * hd;
    return (n + 15) & ~(size_t)15;
}

static int attn_n_chunks(int pos)
{
    return (pos + RP_ATTN_CHUNK) / RP_ATTN_CHUNK;
}

// Chunk `chunk` of span [t0, t1) for kv head kvh, outputs into part (a partial of
// (t1 - t0) * group rows) at the rows of the tokens it holds; returns its first row.
static int attn_chunk_init(attn_job *j, rp_attn_chunk *a, int t0, int t1, int kvh, int chunk, int *end, float *scores,
                           float *part)
{
    int hd = j->head_dim, group = j->n_head / j->n_kv_head, rows = (t1 - t0) * group;
    const int32_t *pos = j->info->pos;
    int p0 = chunk * RP_ATTN_CHUNK, i0 = 0;
    while (pos[t0 + i0] < p0) // positions ascend: the tokens this chunk holds are a suffix
        i0++;
    int p1 = p0;
    for (int i = i0; i < t1 - t0; i++) {
        int e = pos[t0 + i] + 1 < p0 + RP_ATTN_CHUNK ? pos[t0 + i] + 1 : p0 + RP_ATTN_CHUNK;
        end[i - i0] = e;
        p1 = e > p1 ? e : p1;
    }
    int r0 = i0 * group;
    bool f16 = j->kv->type == RP_DTYPE_F16;
    size_t eb = f16 ? 2 : 4;
    *a = (rp_attn_chunk){
        .q = j->q + ((size_t)(t0 + i0) * j->n_head + (size_t)kvh * group) * hd,
        .q_stride = (size_t)j->n_head * hd,
        .k = (const uint8_t *)j->kv->k + rp_kv_k_index(0, kvh, 0, j->n_kv_head, hd, j->info->block_size) * eb,
        .v = (const uint8_t *)j->kv->v + rp_kv_v_index(0, kvh, 0, j->n_kv_head, hd) * eb,
        .stride = (size_t)j->n_kv_head * hd,
        .f16 = f16,
        .kv_tmp = scores + attn_thread_floats(group, hd) - 2 * (size_t)RP_ATTN_CHUNK * hd,
        .bt = j->info->block_table[t0],
        .bs = j->info->block_size,
        .p0 = p0,
        .p1 = p1,
        .end = end,
        .n_tok = t1 - t0 - i0,
        .n_q = group,
        .hd = hd,
        .scale = j->scale,
        .scores = scores,
        .m = part + r0,
        .l = part + rows + r0,
        .o = part + 2 * (size_t)rows + (size_t)r0 * hd,
    };
    return r0;
}

// n rows of a merged run (the merge of chunks 0..c-1: maxima m, sums l, outputs o of
// n x hd) become the merge of chunks 0..c, whose same rows are pm, pl, po. O is scaled
// by rp_cpu_attn_scale_add_avx2 (the SIMD path's only caller; the same operations as
// the plain loop).
static void attn_merge(int n, int hd, float *m, float *l, float *o, const float *pm, const float *pl,
                       const float *po)
{
    for (int g = 0; g < n; g++) {
        float m0 = m[g], m1 = pm[g], mx = m0 > m1 ? m0 : m1;
        // one of the two is e^0 = 1 (exactly, as expf(0) is): one expf per row, not two
        float a = m0 == mx ? 1.0f : expf(m0 - mx), b = m1 == mx ? 1.0f : expf(m1 - mx);
        m[g] = mx;
        l[g] = l[g] * a + pl[g] * b;
        rp_cpu_attn_scale_add_avx2(o + (size_t)g * hd, a, po + (size_t)g * hd, b, hd);
    }
}

// Rows [g0, g1) of the outputs of span t0.., kv head kvh: O / L of a merged run whose
// rows from g0 on are l and o.
static void attn_finish(const attn_job *j, int t0, int kvh, int g0, int g1, const float *l, const float *o)
{
    int hd = j->head_dim, group = j->n_head / j->n_kv_head;
    for (int g = g0; g < g1; g++) {
        float inv = 1.0f / l[g - g0];
        const float *og = o + (size_t)(g - g0) * hd;
        float *out = j->out + ((size_t)(t0 + g / group) * j->n_head + (size_t)kvh * group + g % group) * hd;
        for (int i = 0; i < hd; i++)
            out[i] = og[i] * inv;
    }
}

// Span s of the unsplit path for kv head kvh: its chunks in order, each merged into
// the run of those before it as it comes, then its outputs.
static void attn_item(attn_job *j, int s, int kvh, int ith)
{
    int hd = j->head_dim, group = j->n_head / j->n_kv_head;
    float *scores = j->c->scores + (size_t)ith * j->c->scores_per_thread;
    float *part = scores + (size_t)group * ATTN_SPAN_ONE * RP_ATTN_CHUNK;
    float *run = part + attn_part_floats(group * ATTN_SPAN_ONE, hd);
    rp_attn_chunk a;
    int end[ATTN_SPAN_ONE];
    int t0 = j->span[s], t1 = j->span[s + 1], rows = (t1 - t0) * group;
    int n_chunks = attn_n_chunks(j->info->pos[t1 - 1]);
    for (int c = 0; c < n_chunks; c++) {
        int r0 = attn_chunk_init(j, &a, t0, t1, kvh, c, end, scores, c == 0 ? run : part);
        j->chunk(&a);
        if (c > 0)
            attn_merge(rows - r0, hd, run + r0, run + rows + r0, run + 2 * (size_t)rows + (size_t)r0 * hd, part + r0,
                       part + rows + r0, part + 2 * (size_t)rows + (size_t)r0 * hd);
    }
    attn_finish(j, t0, kvh, 0, rows, run + rows, run + 2 * (size_t)rows);
}

// Unsplit, items (span, kv head) from the shared counter.
static void attn_simd_worker(void *ctx, int ith, int nth)
{
    attn_job *j = ctx;
    for (;;) {
        int64_t w = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (w >= j->n_items)
            break;
        attn_item(j, (int)(w / j->n_kv_head), (int)(w % j->n_kv_head), ith);
    }
}

// Unsplit, by kv head when the threads share the heads evenly: thread ith takes heads
// ith, ith + nth, ... of every span, first storing their K and V of the batch (see
// attn_simd).
static void attn_head_worker(void *ctx, int ith, int nth)
{
    attn_job *j = ctx;
    for (int kvh = ith; kvh < j->n_kv_head; kvh += nth)
        for (int t = 0; t < j->info->n_tokens; t++)
            kv_store_token(j, t, kvh);
    for (int kvh = ith; kvh < j->n_kv_head; kvh += nth)
        for (int s = 0; s < j->n_spans; s++)
            attn_item(j, s, kvh, ith);
}

// Split runs: takes the next item from the shared counter; false when none is left.
// *s is its span and *r its index among the span's items (from item_base).
static bool attn_next_span_item(attn_job *j, int *s, int64_t *r)
{
    int64_t w = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
    if (w >= j->n_items)
        return false;
    for (*s = 0; j->item_base[*s + 1] <= w;)
        ++*s;
    *r = w - j->item_base[*s];
    return true;
}

// Split: item w is chunk c of (span s, kvh) with w = item_base[s] + kvh * n_chunks(s) + c;
// its partial at part + part_base[s] + (kvh * n_chunks(s) + c) * attn_part_floats(rows(s), hd).
static void attn_split_worker(void *ctx, int ith, int nth)
{
    attn_job *j = ctx;
    int hd = j->head_dim, group = j->n_head / j->n_kv_head;
    float *scores = j->c->scores + (size_t)ith * j->c->scores_per_thread;
    rp_attn_chunk a;
    int end[ATTN_SPAN_ONE], s;
    int64_t r;
    while (attn_next_span_item(j, &s, &r)) {
        int t0 = j->span[s], t1 = j->span[s + 1];
        int n_chunks = attn_n_chunks(j->info->pos[t1 - 1]);
        float *part = j->part + j->part_base[s] + (size_t)r * attn_part_floats((t1 - t0) * group, hd);
        attn_chunk_init(j, &a, t0, t1, (int)(r / n_chunks), (int)(r % n_chunks), end, scores, part);
        j->chunk(&a);
    }
}

#define ATTN_MERGE_ROWS 4 // rows merged together (and per item of the parallel merge)

// Split, after the chunks: rows [g0, g1) of (span s, kv head kvh) merged chunk by chunk
// in order into chunk 0's outputs (in place), then their outputs; ATTN_MERGE_ROWS rows
// at a time, whose maxima and sums are kept here (in the partials they share cache
// lines with the rows other threads merge). The same operations for a row as the
// unsplit path's, whichever rows go together.
static void attn_merge_rows(const attn_job *j, int s, int kvh, int g0, int g1)
{
    int hd = j->head_dim, group = j->n_head / j->n_kv_head;
    int t0 = j->span[s], t1 = j->span[s + 1], rows = (t1 - t0) * group;
    const int32_t *pos = j->info->pos;
    int n_chunks = attn_n_chunks(pos[t1 - 1]);
    size_t pf = attn_part_floats(rows, hd);
    float *run = j->part + j->part_base[s] + (size_t)kvh * n_chunks * pf;
    for (int b0 = g0; b0 < g1; b0 += ATTN_MERGE_ROWS) {
        int b1 = b0 + ATTN_MERGE_ROWS < g1 ? b0 + ATTN_MERGE_ROWS : g1;
        float m[ATTN_MERGE_ROWS], l[ATTN_MERGE_ROWS], *o = run + 2 * (size_t)rows + (size_t)b0 * hd;
        memcpy(m, run + b0, (size_t)(b1 - b0) * sizeof(float));
        memcpy(l, run + rows + b0, (size_t)(b1 - b0) * sizeof(float));
        for (int ch = 1, i0 = 0; ch < n_chunks; ch++) {
            while (pos[t0 + i0] < ch * RP_ATTN_CHUNK) // the rows that have chunk ch: a suffix
                i0++;
            int g = i0 * group > b0 ? i0 * group : b0; // first row of the block with chunk ch
            if (g >= b1)
                continue;
            const float *p = run + (size_t)ch * pf;
            attn_merge(b1 - g, hd, m + (g - b0), l + (g - b0), o + (size_t)(g - b0) * hd, p + g, p + rows + g,
                       p + 2 * (size_t)rows + (size_t)g * hd);
        }
        attn_finish(j, t0, kvh, b0, b1, l, o);
    }
}


// Split, the merge when it is large: item w is ATTN_MERGE_ROWS rows of (span s, kvh),
// w = item_base[s] + kvh * blocks(s) + block.
static void attn_merge_worker(void *ctx, int ith, int nth)
{
    attn_job *j = ctx;
    int group = j->n_head / j->n_kv_head, s;
    int64_t r;
    while (attn_next_span_item(j, &s, &r)) {
        int rows = (j->span[s + 1] - j->span[s]) * group, blocks = (rows + ATTN_MERGE_ROWS - 1) / ATTN_MERGE_ROWS;
        int g0 = (int)(r % blocks) * ATTN_MERGE_ROWS, g1 = g0 + ATTN_MERGE_ROWS < rows ? g0 + ATTN_MERGE_ROWS : rows;
        attn_merge_rows(j, s, (int)(r / blocks), g0, g1);
    }
}

#define ATTN_SPLIT_MAX_SPANS 16

static rp_status attn_simd(cpu_backend *c, attn_job *j, int max_len)
{
    int nth = rp_pool_size(c->pool), hd = j->head_dim, group = j->n_head / j->n_kv_head;
    const rp_attn_info *info = j->info;
    int n_tokens = info->n_tokens;
    size_t per = attn_thread_floats(group, hd);
    if (per > c->scores_per_thread) {
        float *s = rp_malloc_aligned(per * (size_t)nth * sizeof(float));
        if (!s)
            return RP_ERR(RP_ERR_NOMEM, "cpu backend: cannot allocate attention scratch");
        rp_free_aligned(c->scores);
        c->scores = s;
        c->scores_per_thread = per;
    }
    rp_status st = grow(&c->attn_span, &c->attn_span_size, (size_t)(n_tokens + 1) * sizeof(int));
    if (st)
        return st;
    // Spans: each run of a sequence's consecutive positions one span when it is short, else
    // cut into the fewest spans of at most ATTN_SPAN tokens, of nearly equal size (40 tokens:
    // 14 + 13 + 13, not 16 + 16 + 8, whose last span would read the context's K/V for fewer).
    int *span = c->attn_span, n_spans = 0;
    bool cut = false; // a run cut into spans (a prefill chunk)
    for (int t0 = 0, t1; t0 < n_tokens; t0 = t1) {
        for (t1 = t0 + 1; t1 < n_tokens && info->block_table[t1] == info->block_table[t1 - 1] &&
                          info->pos[t1] == info->pos[t1 - 1] + 1;
             t1++)
            ;
        int len = t1 - t0, parts = len <= ATTN_SPAN_ONE ? 1 : (len + ATTN_SPAN - 1) / ATTN_SPAN;
        for (int k = 0, t = t0; k < parts; t += len / parts + (k < len % parts), k++)
            span[n_spans++] = t;
        cut |= parts > 1;
    }
    span[n_spans] = n_tokens;
    j->span = span;
    j->n_spans = n_spans;
    j->chunk = rp_cpu_simd_level() >= 2 ? rp_cpu_attn_chunk_avx512 : rp_cpu_attn_chunk_avx2;
    atomic_init(&j->next, 0);
    // Split over key chunks when the (span, kv head) pairs cannot keep every thread busy
    // or would leave some idle at the end; pairs that share the threads evenly are not
    // split: a worker then merges its chunks while they are in its cache (a verification
    // step on 2 threads: 2 pairs, 10-14% faster than its 40 chunks split, whose merge
    // reads partials from the other core).
    int64_t pairs = (int64_t)n_spans * j->n_kv_head;
    bool split = (pairs < nth || (pairs % nth != 0 && pairs < 4 * nth)) && n_spans <= ATTN_SPLIT_MAX_SPANS &&
                 max_len > RP_ATTN_CHUNK;
    // Unsplit, no prefill chunk, and the threads share the kv heads evenly: by head,
    // every thread the same work, each storing its heads' K/V first (no other thread
    // reads them). The data a thread reads, and the lines it writes, are then its own at
    // every step and layer; from the shared counter a (span, kv head) often went to the
    // other core than the step before, whose caches held it: on the 2-core Zen 5 VM a
    // 3 MB buffer read back on the core that last held it takes 31-37 us, on the other
    // 76-90 us, and decoding 4 sequences at context 256 the 12-20% of items that moved
    // took 20-30% longer. A prefill's chunks are bound by arithmetic, not by memory: its
    // spans stay on the counter, which balances them as the threads go (2,048 tokens on 2
    // threads by head: 2-3% slower). Otherwise the batch's K/V is stored here first.
    if (!split && !cut && j->n_kv_head % nth == 0) {
        rp_pool_run(c->pool, attn_head_worker, j);
        return RP_OK;
    }
    kv_store_all(j);
    if (!split) {
        j->n_items = (int64_t)n_spans * j->n_kv_head;
        rp_pool_run(c->pool, attn_simd_worker, j);
        return RP_OK;
    }
    int64_t base[ATTN_SPLIT_MAX_SPANS + 1];
    size_t part_base[ATTN_SPLIT_MAX_SPANS + 1];
    base[0] = 0;
    part_base[0] = 0;
    for (int s = 0; s < n_spans; s++) {
        int64_t n = (int64_t)j->n_kv_head * attn_n_chunks(info->pos[span[s + 1] - 1]);
        base[s + 1] = base[s] + n;
        part_base[s + 1] = part_base[s] + (size_t)n * attn_part_floats((span[s + 1] - span[s]) * group, hd);
    }
    if ((st = grow(&c->attn_part, &c->attn_part_size, part_base[n_spans] * sizeof(float))))
        return st;
    j->item_base = base;
    j->part_base = part_base;
    j->part = c->attn_part;
    j->n_items = base[n_spans];
    rp_pool_run(c->pool, attn_split_worker, j);
    // The merge: on this thread when it is small (decode: a few rows), else by row blocks
    // on the pool (a verification step's span: its merge alone took 10-20% of the step).
    int64_t row_merges = 0;
    for (int s = 0; s < n_spans; s++)
        row_merges += (int64_t)(span[s + 1] - span[s]) * group * (base[s + 1] - base[s]);
    if (row_merges < 256 || nth == 1) {
        for (int s = 0; s < n_spans; s++)
            for (int kvh = 0; kvh < j->n_kv_head; kvh++)
                attn_merge_rows(j, s, kvh, 0, (span[s + 1] - span[s]) * group);
        return RP_OK;
    }
    for (int s = 0; s < n_spans; s++) {
        int rows = (span[s + 1] - span[s]) * group;
        base[s + 1] = base[s] + (int64_t)j->n_kv_head * ((rows + ATTN_MERGE_ROWS - 1) / ATTN_MERGE_ROWS);
    }
    j->n_items = base[n_spans];
    atomic_store_explicit(&j->next, 0, memory_order_relaxed);
    rp_pool_run(c->pool, attn_merge_worker, j);
    return RP_OK;
}

static rp_status cpu_attention(rp_backend *be, const float *q, const float *k, const float *v, rp_kv_layer *kv,
                               const rp_attn_info *info, int n_head, int n_kv_head, int head_dim, float scale,
                               float *out)
{
    cpu_backend *c = cpu(be);
    int max_len = 0;
    for (int t = 0; t < info->n_tokens; t++)
        if (info->pos[t] + 1 > max_len)
            max_len = info->pos[t] + 1;
    attn_job j = {.c = c,
                  .q = q,
                  .kv = kv,
                  .info = info,
                  .n_head = n_head,
                  .n_kv_head = n_kv_head,
                  .head_dim = head_dim,
                  .scale = scale,
                  .out = out,
                  .k = k,
                  .v = v};
    if (rp_cpu_simd_level() >= 1 && head_dim % 64 == 0)
        return attn_simd(c, &j, max_len); // (stores K and V itself)
    kv_store_all(&j);
    int nth = rp_pool_size(c->pool);
    if ((size_t)max_len > c->scores_per_thread) {
        size_t per = c->scores_per_thread ? c->scores_per_thread : 1024;
        while (per < (size_t)max_len)
            per *= 2;
        float *s = rp_malloc_aligned(per * (size_t)nth * sizeof(float));
        if (!s)
            return RP_ERR(RP_ERR_NOMEM, "cpu backend: cannot allocate attention scratch");
        rp_free_aligned(c->scores);
        c->scores = s;
        c->scores_per_thread = per;
    }
    rp_pool_run(c->pool, attn_worker, &j);
    return RP_OK;
}

static rp_status cpu_silu_mul(rp_backend *be, const float *gate, const float *up, size_t count, float *out)
{
    rp_cpu_silu_mul(out, gate, up, (int64_t)count);
    return RP_OK;
}

static rp_status cpu_add(rp_backend *be, float *y, const float *x, size_t count)
{
    for (size_t i = 0; i < count; i++)
        y[i] += x[i];
    return RP_OK;
}

static rp_status cpu_synchronize(rp_backend *be)
{
    return RP_OK;
}

static const rp_backend_ops cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .tensor_init = cpu_tensor_init,
    .tensor_deinit = cpu_tensor_deinit,
    .supports_type = cpu_supports_type,
    .get_rows = cpu_get_rows,
    .matmul = cpu_matmul,
    .matmul_group = cpu_matmul_group,
    .matmul_glu = cpu_matmul_glu,
    .add_bias = cpu_add_bias,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .attention = cpu_attention,
    .silu_mul = cpu_silu_mul,
    .add = cpu_add,
    .synchronize = cpu_synchronize,
};

rp_status rp_backend_cpu_create(int n_threads, rp_backend **out)
{
    *out = NULL;
    if (n_threads <= 0)
        n_threads = rp_cpu_count();
    cpu_backend *c = rp_calloc(1, sizeof(*c));
    if (!c)
        return RP_ERR(RP_ERR_NOMEM, "cpu backend: out of memory");
    c->base.ops = &cpu_ops;
    rp_status st = rp_pool_create(n_threads, &c->pool);
    if (st) {
        rp_free(c);
        return st;
    }
    *out = &c->base;
    return RP_OK;
}

bool rp_backend_cpu_set_bf16_act(rp_backend *be, bool on)
{
    cpu(be)->bf16_act = on && rp_cpu_bf16_act_pays();
    return cpu(be)->bf16_act;
}

bool rp_backend_cpu_bf16_act(const rp_backend *be)
{
    return ((const cpu_backend *)be)->bf16_act;
}

int rp_backend_cpu_threads(const rp_backend *be)
{
    return rp_pool_size(((const cpu_backend *)be)->pool);
}

rp_pool *rp_backend_cpu_pool(rp_backend *be)
{
    return cpu(be)->pool;
}

void rp_backend_destroy(rp_backend *be)
{
    if (be)
        be->ops->destroy(be);
}
