/*
 * cpu_int.h - internal interface between the CPU backend's files.
 *
 * cpu_backend.c fills the backend vtable (buffers, the KV layout, the batch, norms,
 * rope, ...) and calls the matmul kernels declared here (matmul.c: scalar reference
 * and dispatch; matmul_avx2.c: AVX2/FMA kernels; matmul_avx512.c: AVX-512/VNNI
 * kernels for some types and the F32 / F16 GEMM; matmul_avx512bf16.c: BF16 weights
 * against bf16 activations; the highest level the CPU has is chosen at run time) and
 * the attention driver (cpu_attention.c) with its chunk kernels (attn_avx2.c,
 * attn_avx512.c); the mixture-of-experts ops are cpu_moe.c.
 */
#ifndef RP_CPU_INT_H
#define RP_CPU_INT_H

#include "../backend_int.h"
#include "cpu.h"

/* ---- the backend object (cpu_backend.c; cpu_attention.c reads its batch and scratch) ---- */

// The batch of the forward under way, as the kernels read it (rp_batch_desc, with each
// token's block table found once at begin_batch).
typedef struct cpu_batch {
    int n_tokens;
    int block_size;
    const int32_t *tokens;             // (n_tokens)
    const int32_t *pos;                // (n_tokens) position of each token in its sequence
    const int32_t *slot;               // (n_tokens) KV slot (block * block_size + offset) to write
    const int32_t *const *block_table; // (n_tokens) block table of each token's sequence
    int n_rows;                        // rp_batch_desc.rows
    const int32_t *rows;
    int n_logit_rows; // rp_batch_desc.logit_rows
    const int32_t *logit_rows;
    int n_seqs;                  // rp_batch_desc's recurrent-state fields (NULL without them)
    const int32_t *state_in, *seq_first, *seq_count;
} cpu_batch;

typedef struct huge_map {
    void *p;
    size_t bytes; // as asked (rp_free_huge rounds it as rp_malloc_huge did)
} huge_map;

typedef struct cpu_backend {
    rp_backend base;
    rp_pool *pool;
    cpu_batch batch;         // the forward under way (rp_backend_begin_batch)
    const int32_t **bt_ptr;  // (bt_ptr_cap) batch.block_table's storage
    int bt_ptr_cap;
    void *mm_scratch; // quantized activations for matmul
    size_t mm_scratch_size;
    bool bf16_act; // BF16 weights take bf16-rounded activations (rp_backend_params.f32_activations off)
    float *scores; // attention scores, scores_per_thread floats per thread
    size_t scores_per_thread;
    void *attn_part; // chunk partials of a split attention (see attn_split)
    size_t attn_part_size;
    void *attn_span; // (n_tokens + 1) ints: the batch's spans (see attn_simd)
    size_t attn_span_size;
    // cpu_rope's cos/sin table of this forward: (batch.n_tokens, 2 * rope_half) for
    // frequencies rope_freq (every layer of a forward asks for the same); NULL freq: none yet
    void *rope_tab;
    size_t rope_tab_size;
    const float *rope_freq;
    int rope_half;
    huge_map *huge; // (n_huge) cpu_alloc's buffers on 2 MiB pages, for cpu_free
    int n_huge, cap_huge;
    char numerics[64]; // rp_backend_numerics' text
    char lost[128];    // rp_cpu_test_lose's reason ("": not lost)
} cpu_backend;

// Grows a 64-byte aligned scratch buffer to at least `need` bytes (cpu_backend.c).
rp_status rp_cpu_grow(void **buf, size_t *size, size_t need);

// The Gated DeltaNet recurrence (cpu_gdn.c; backend.h's rp_backend_gdn).
rp_status rp_cpu_gdn(rp_backend *be, const rp_gdn_desc *d);

// The mixture-of-experts ops (cpu_moe.c; backend.h's rp_backend_moe_route / _ffn).
rp_status rp_cpu_moe_route(rp_backend *be, const float *logits, int n, int n_expert, int n_used, bool norm,
                           int32_t *ids, float *w);
rp_status rp_cpu_moe_ffn(rp_backend *be, const rp_moe_desc *d, const float *x, int n, float *out);

// The attention op (cpu_attention.c): stores the batch's K and V, then attends.
rp_status rp_cpu_attention(cpu_backend *c, const float *q, const float *k, const float *v, rp_kv_layer *kv,
                           int n_head, int n_kv_head, int head_dim, float scale, float *out);

/* ---- the KV layout ---- */

// Inside a block K is transposed: one element of head_dim for the block's tokens lies
// in consecutive slots, so a SIMD register loads 16 keys' values at once and a score is
// one FMA chain per key (no horizontal sums); V keeps a token's values together:
//   k: (n_blocks, n_kv_head, head_dim, block_size) of the layer's type
//   v: (n_blocks, block_size, n_kv_head, head_dim) of the layer's type
// Element index in a layer's K array of element i of KV head kvh at slot
// (block * block_size + offset).
static inline size_t rp_cpu_kv_k_index(size_t slot, int kvh, int i, int n_kv_head, int head_dim, int block_size)
{
    size_t block = slot / (size_t)block_size, off = slot % (size_t)block_size;
    return ((block * (size_t)n_kv_head + (size_t)kvh) * (size_t)head_dim + (size_t)i) * (size_t)block_size + off;
}

// Element index in a layer's V array of element i of KV head kvh at slot.
static inline size_t rp_cpu_kv_v_index(size_t slot, int kvh, int i, int n_kv_head, int head_dim)
{
    return (slot * (size_t)n_kv_head + (size_t)kvh) * (size_t)head_dim + (size_t)i;
}

// Bytes of scratch rp_cpu_matmul needs for n tokens against a weight of this type
// and row length (activations quantized to the weight's partner type: Q8_0 for
// Q4_0/Q5_0/Q8_0, Q8_K for the K-quants, none for float weights) or to a SIMD kernel's own
// layout (BF16 included), whichever is larger, so the size does not depend on the CPU.
size_t rp_cpu_matmul_scratch_bytes(rp_dtype wtype, int64_t ne0, int n);

// y (n, w->ne[1]) = x (n, w->ne[0]) · wᵀ on the pool's threads. scratch holds at
// least rp_cpu_matmul_scratch_bytes(...) bytes, 64-byte aligned. Every output
// element is reduced in the same order whatever n, the token's index and the
// thread count are (see backend.h, Determinism). bf16_act: BF16 weights take their
// activations rounded to bf16 where rp_cpu_has_bf16_dot() (else ignored).
void rp_cpu_matmul(rp_pool *pool, const rp_tensor *w, const float *x, int n, float *y, void *scratch, bool bf16_act);

// Weights per fused group (rp_cpu_matmul_group): Q, K and V; a token's routed experts'
// gate and up matrices (cpu_moe.c), 8 experts a group.
#define RP_MM_MAX_GROUP 16

// True when rp_cpu_matmul_group can run these matmuls as one: 1..RP_MM_MAX_GROUP
// weights of one type and one row length.
bool rp_cpu_matmul_group_fusable(const rp_matmul_desc *mm, int count);

// The matmuls mm[0..count) (see rp_matmul_desc) on x (n, ne0) in one pool run: the
// activations are quantized once (on the calling thread when there are few), then the threads
// take chunks of the union of rows from a shared counter. glu (count == 2, same
// shapes): chunks pair rows of mm[0] (gate) and mm[1] (up), and mm[0].y becomes
// silu(gate) * up (mm[1].y keeps up); bias and residual are ignored. Same scratch as
// rp_cpu_matmul; each output element is bitwise what rp_cpu_matmul gives.
void rp_cpu_matmul_group(rp_pool *pool, const rp_matmul_desc *mm, int count, bool glu, const float *x, int n,
                         void *scratch, bool bf16_act);

// out[i] = silu(gate[i]) · up[i] (out may be gate): silu_avx2.c with AVX2, else
// gate / (1 + expf(-gate)) · up. Each element's result depends only on its inputs.
void rp_cpu_silu_mul(float *out, const float *gate, const float *up, int64_t n);
void rp_cpu_silu_mul_avx2(float *out, const float *gate, const float *up, int64_t n);

// F32 / F16 weights against several tokens on AVX-512 (matmul_avx512.c): y[t * ldy + r] =
// dot(weight row r, activation row t) for rows [0, nr) and tokens [0, n), w rows ws bytes
// apart, x float32 rows xs bytes apart. A GEMM in register tiles of 4 rows x 6 tokens,
// blocked for the caches; each output is bitwise what the type's tile kernel
// (rp_mm_kernel_avx512, and AVX2's) gives it alone (mm_tiles.h, RP_MM_FLT_BLOCK).
typedef void (*rp_mm_gemm_fn)(rp_dtype wtype, const uint8_t *w, size_t ws, int64_t nr, const uint8_t *x, size_t xs,
                              int n, int64_t ne0, float *y, size_t ldy);
void rp_mm_gemm_flt_avx512(rp_dtype wtype, const uint8_t *w, size_t ws, int64_t nr, const uint8_t *x, size_t xs, int n,
                           int64_t ne0, float *y, size_t ldy);

// The instruction-set level the kernels use now (cpuid capped by the test hooks of
// cpu.h): 0 scalar, 1 AVX2+FMA+F16C, 2 AVX-512 (F/BW/VL/DQ/VNNI/VBMI).
int rp_cpu_simd_level(void);

/* ---- attention ---- */

// Keys per attention chunk. A token's keys [0, len) are cut at multiples of this,
// so the chunks (and their merge order) depend only on the token's position.
#define RP_ATTN_CHUNK 128

// One chunk of attention for the query heads of one GQA group of n_tok tokens of
// one paged sequence (a span: consecutive positions, as in a prefill chunk or a
// decode token with its drafts): keys [p0, end[i]) for token i, end[i] - p0 in
// 1..RP_ATTN_CHUNK. Query rows are token-major (row r = i * n_q + g). Read only
// except scores, m, l, o.
typedef struct rp_attn_chunk {
    const float *q;     // token i's n_q heads (n_q, hd) at q + i * q_stride
    size_t q_stride;    // floats between tokens' query rows
    const void *k, *v;  // the KV head's K and V in the cache (rp_kv_layer's layout), as elements:
                        // slot s = b * bs + o has V row v + s * stride and K element i at
                        // k + b * stride * bs + i * bs + o
    size_t stride;      // elements between slots of V (n_kv_head * hd)
    bool f16;           // K and V are IEEE half (else float32)
    float *kv_tmp;      // scratch (2, RP_ATTN_CHUNK, hd): the chunk's K groups and V rows as
                        // float32, packed (converted from halves, or copied), when a kernel
                        // wants them there (rp_cpu_attn_pack)
    const int32_t *bt;  // block table of the sequence
    int bs;             // block size (slots per block)
    int p0, p1;         // key range: p1 = the largest end[i]
    const int *end;     // (n_tok) each token's key range end
    int n_tok, n_q, hd; // tokens, heads in the group, head_dim (a multiple of 64)
    float scale;        // applied to q·k
    float *scores;      // scratch (n_tok * n_q, RP_ATTN_CHUNK)
    float *m, *l;       // out (n_tok * n_q): chunk max of the scaled scores, Σ exp(s - m)
    float *o;           // out (n_tok * n_q, hd): Σ exp(s - m) · v, not normalized
} rp_attn_chunk;

// Keys per K group: a score kernel keeps a group's 16 scores in one AVX-512 register
// (two AVX2 ones) and computes each as one FMA chain over head_dim in order, from
// zero (q[0]·k[0], + q[1]·k[1], ...), then × scale: a score's bits are the same in both
// kernels, whatever the rows, tiles and lanes around it.
#define RP_ATTN_KGROUP 16

// Computes a chunk with AVX2/FMA (attn_avx2.c); a row's bits depend only on its query,
// its key range and the K/V there (not on the other rows, on where the chunk sits or
// on the thread). Thread-safe for distinct outputs.
void rp_cpu_attn_chunk_avx2(const rp_attn_chunk *a);
// The same bits with AVX-512 (attn_avx512.c): the same score chains 16 keys to a
// register, value sums whose lanes follow the AVX2 kernel's operations one for one.
void rp_cpu_attn_chunk_avx512(const rp_attn_chunk *a);
// Groups of the chunk: (p1 - p0) keys in groups of RP_ATTN_KGROUP from p0.
static inline int rp_cpu_attn_n_groups(const rp_attn_chunk *a)
{
    return (a->p1 - a->p0 + RP_ATTN_KGROUP - 1) / RP_ATTN_KGROUP;
}
// Tile [r, r + R) of a chunk's query rows (row r: token r / n_q, head r % n_q): each
// row's query at q[j] and scores at s[j]; returns the key groups the tile's last row
// has (positions ascend, so it has the most: the others' lanes past their end are
// made -inf by the softmax).
static inline int rp_cpu_attn_tile(const rp_attn_chunk *a, int r, int R, const float **q, float **s)
{
    for (int j = 0; j < R; j++) {
        q[j] = a->q + (size_t)((r + j) / a->n_q) * a->q_stride + (size_t)((r + j) % a->n_q) * a->hd;
        s[j] = a->scores + (size_t)(r + j) * RP_ATTN_CHUNK;
    }
    return (a->end[(r + R - 1) / a->n_q] - a->p0 + RP_ATTN_KGROUP - 1) / RP_ATTN_KGROUP;
}
// The chunk's K groups where they are in the cache (of its type), when bs is a
// multiple of RP_ATTN_KGROUP: element i of group g's keys (positions p0 + 16 g ..)
// at kg[g] + i * bs elements; lanes past p1 hold other slots of the block.
void rp_cpu_attn_k_groups(const rp_attn_chunk *a, const void **kg);
// The chunk's V rows where they are in the cache: vrow[p] for key position p0 + p,
// p in [0, p1 - p0).
void rp_cpu_attn_v_rows(const rp_attn_chunk *a, const void **vrow);
// Both as float32 packed into a->kv_tmp (halves converted exactly): K group g at
// kg[g], element i of its keys at kg[g] + 16 i (lanes past p1 hold other slots of
// the block, or zeros when bs is not a multiple of RP_ATTN_KGROUP), V rows at
// vrow[p]; the packing fetches what it reads ahead of it.
void rp_cpu_attn_pack(const rp_attn_chunk *a, const float **kg, const float **vrow);
// The largest finite IEEE half: K and V beyond it are cached as it (not as infinity, which
// would make every score it meets inf or NaN).
#define RP_KV_HALF_MAX 65504.0f
// A K or V value as the cache stores it in halves: clamped to ±RP_KV_HALF_MAX, then rounded
// to nearest even (rp_f32_to_fp16); a NaN stays a NaN.
static inline uint16_t rp_cpu_kv_half(float x)
{
    if (x > RP_KV_HALF_MAX)
        x = RP_KV_HALF_MAX;
    if (x < -RP_KV_HALF_MAX)
        x = -RP_KV_HALF_MAX;
    return rp_f32_to_fp16(x);
}
// dst[i] = rp_cpu_kv_half(src[i]), n >= 0: the same bits for every value but NaN (a NaN
// stays a NaN) (attn_avx2.c, F16C).
void rp_cpu_f32_to_f16_avx2(const float *src, uint16_t *dst, int64_t n);
// The chunk kernels' softmax of one row (attn_avx2.c): scores s[0, n) of the row
// (n <= RP_ATTN_CHUNK) become e = exp(s - m), s[n, n rounded up to 8) zeros (-inf
// first); returns m, the max, and writes l = Σ e (eight lanes, then a fixed sum).
float rp_cpu_attn_softmax_avx2(float *s, int n, float *l);
// o[i] = o[i] * a + p[i] * b (two products rounded, then their sum: no FMA), n a
// multiple of 8 (attn_avx2.c; the chunk merge).
void rp_cpu_attn_scale_add_avx2(float *o, float a, const float *p, float b, int n);
// y[i] = e^x[i] for x[i] <= 0, n a multiple of 8 (attn_avx2.c's exp; for tests).
void rp_cpu_attn_exp_avx2(const float *x, float *y, int n);

#endif
