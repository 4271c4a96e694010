/*
 * cpu_attention.c - the CPU backend's attention op: stores the batch's new K and V
 * into their slots, then attends each token over its own sequence's paged KV.
 *
 * Two paths with the same contract (backend.h): the scalar reference
 * (attn_worker: one (token, head) at a time, every score, softmax, the weighted
 * sum), and, with AVX2 and head_dim a multiple of 64, fixed-position key chunks
 * through the chunk kernels (attn_avx2.c; attn_avx512.c with AVX-512: the same
 * bits) merged in chunk order, a sequence's consecutive tokens going through
 * each chunk together, the threads by KV head when they share them evenly (the
 * design below, at attn_simd). Every output is reduced in an order fixed by its
 * position, so results do not depend on the batch or the thread count.
 *
 * Threads: called on the backend's thread; its pool's workers run the items.
 */
#include "cpu_int.h"

#include <math.h>
#include <stdatomic.h>

typedef struct attn_job {
    cpu_backend *c;
    const float *q;
    rp_kv_layer *kv;
    const cpu_batch *info;
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
    size_t eb = kv->type == RP_DTYPE_F32 ? 4 : 2, e = rp_cpu_kv_k_index(slot, kvh, 0, n_kv_head, hd, bs);
    kv_put((uint8_t *)kv->v + rp_cpu_kv_v_index(slot, kvh, 0, n_kv_head, hd) * eb, kv->type, v, (size_t)hd);
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
        size_t e = rp_cpu_kv_k_index(slot, kvh, 0, j->n_kv_head, hd, bs);
        for (int i = 0; i < hd; i++, e += (size_t)bs)
            buf[i] = f32 ? ((const float *)j->kv->k)[e] : rp_fp16_to_f32(((const uint16_t *)j->kv->k)[e]);
        return buf;
    }
    size_t e = rp_cpu_kv_v_index(slot, kvh, 0, j->n_kv_head, hd);
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
    const cpu_batch *info = j->info;
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
        .k = (const uint8_t *)j->kv->k + rp_cpu_kv_k_index(0, kvh, 0, j->n_kv_head, hd, j->info->block_size) * eb,
        .v = (const uint8_t *)j->kv->v + rp_cpu_kv_v_index(0, kvh, 0, j->n_kv_head, hd) * eb,
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
    const cpu_batch *info = j->info;
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
    rp_status st = rp_cpu_grow(&c->attn_span, &c->attn_span_size, (size_t)(n_tokens + 1) * sizeof(int));
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
    if ((st = rp_cpu_grow(&c->attn_part, &c->attn_part_size, part_base[n_spans] * sizeof(float))))
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

rp_status rp_cpu_attention(cpu_backend *c, const float *q, const float *k, const float *v, rp_kv_layer *kv,
                           int n_head, int n_kv_head, int head_dim, float scale, float *out)
{
    const cpu_batch *info = &c->batch;
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
