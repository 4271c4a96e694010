/*
 * matmul.c - y = x · Wᵀ on the CPU: threading, activation quantization, the scalar
 * reference kernels and the choice of SIMD kernels.
 *
 * A matmul (or a group of matmuls sharing one input: Q, K, V; gate and up) runs
 * in one pool run. For quantized weights the activation rows are first quantized
 * to the weight's partner type (Q8_0 or Q8_K) into the caller's scratch, or
 * into the chosen SIMD kernel's own layout (AVX-512 BF16 takes its float
 * activations there too, split into even and odd halves): on the calling thread
 * for up to 16k elements, else in a pool run that splits the tokens. Kernels are
 * chosen per weight type: the highest instruction-set level the CPU has (cpuid,
 * XGETBV) with a kernel for the type, capped by a test hook. Then the threads split the union of the group's weight
 * rows, in chunks of one tile's rows: each streams its own contiguous share front to back and then takes chunks from
 * the back of the others' shares (a core the machine slows does not hold the run up). Each thread computes its rows for
 * every token through a tile kernel (rp_mm_kernel, quant.h) that handles up to RP_MM_MAX_NR rows × RP_MM_MAX_NT tokens
 * per call, so a weight row is read once per token tile, and finishes them with the element-wise tail (bias, residual
 * add, silu(gate) * up). Decode (n = 1) hands the kernels a chunk's rows, which they walk one at a time (a single
 * sequential stream per core reads DRAM faster than interleaved ones; F32 / F16 walk them in pairs, which from memory
 * measured as fast and keeps a step in cache off the FMA latency); prefill walks a block of rows that fits in L2
 * once per group of tokens (as many as the kernel asks for, rp_mm_tokens_avx512).
 * F32 / F16 weights on AVX-512, from two tokens on, go instead to a GEMM that takes a
 * chunk's rows (about 1 MiB of weights) against every token (rp_mm_gemm_flt_avx512):
 * 4-row x 6-token register tiles, cache-blocked, in the reduction order every float
 * kernel shares (mm_tiles.h), so a token's outputs are its decode outputs bit for bit.
 *
 * BF16 weights meet their activations either as float32 (the kernels above) or, when
 * the caller asks (bf16_act), rounded to bf16: on Intel's AMX tiles where the CPU has
 * them and the rows are a multiple of 32 elements (matmul_amx.c: the activations of all
 * tokens packed together, 16-row chunks), else on the AVX512_BF16 dot product
 * (matmul_avx512bf16.c: up to twice the multiply-adds per cycle of the float kernels).
 * Different numbers from float32 activations, and from each other. Without either the
 * request is ignored: activations stay float32. The backend asks only where that pays
 * (rp_cpu_bf16_act_pays).
 *
 * Determinism: each output y[t][r] is one kernel's dot of row r with token t,
 * and kernels promise the same operation sequence for every (r, t) whatever the
 * tile shape, so results do not depend on n, t or the thread split.
 *
 * The scalar kernels are the reference the SIMD ones are tested against: float
 * weights accumulate in double; quantized weights do ggml's integer block dots
 * and accumulate the scaled block sums in float, in block order.
 */
#include "cpu_int.h"
#include "mm_kernels.h"

#include <cpuid.h>
#include <math.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- scalar reference dots: one weight row · one activation row ---- */

static float dot_f32(const void *w, const void *x, int64_t ne0)
{
    const float *a = w, *b = x;
    double s = 0;
    for (int64_t i = 0; i < ne0; i++)
        s += (double)a[i] * b[i];
    return (float)s;
}

static float dot_f16(const void *w, const void *x, int64_t ne0)
{
    const rp_fp16 *a = w;
    const float *b = x;
    double s = 0;
    for (int64_t i = 0; i < ne0; i++)
        s += (double)rp_fp16_to_f32(a[i]) * b[i];
    return (float)s;
}

static float dot_bf16(const void *w, const void *x, int64_t ne0)
{
    const rp_bf16 *a = w;
    const float *b = x;
    double s = 0;
    for (int64_t i = 0; i < ne0; i++)
        s += (double)rp_bf16_to_f32(a[i]) * b[i];
    return (float)s;
}

static float dot_q8_0(const void *w, const void *x, int64_t ne0)
{
    const rp_block_q8_0 *a = w, *b = x;
    float s = 0;
    for (int64_t i = 0; i < ne0 / RP_QK; i++) {
        int isum = 0;
        for (int j = 0; j < RP_QK; j++)
            isum += a[i].qs[j] * b[i].qs[j];
        s += isum * (rp_fp16_to_f32(a[i].d) * rp_fp16_to_f32(b[i].d));
    }
    return s;
}

static float dot_q4_0(const void *w, const void *x, int64_t ne0)
{
    const rp_block_q4_0 *a = w;
    const rp_block_q8_0 *b = x;
    float s = 0;
    for (int64_t i = 0; i < ne0 / RP_QK; i++) {
        int isum = 0;
        for (int j = 0; j < RP_QK / 2; j++) {
            isum += ((a[i].qs[j] & 0xF) - 8) * b[i].qs[j];
            isum += ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + RP_QK / 2];
        }
        s += isum * (rp_fp16_to_f32(a[i].d) * rp_fp16_to_f32(b[i].d));
    }
    return s;
}

static float dot_q5_0(const void *w, const void *x, int64_t ne0)
{
    const rp_block_q5_0 *a = w;
    const rp_block_q8_0 *b = x;
    float s = 0;
    for (int64_t i = 0; i < ne0 / RP_QK; i++) {
        uint32_t qh;
        memcpy(&qh, a[i].qh, 4);
        int isum = 0;
        for (int j = 0; j < RP_QK / 2; j++) {
            int q0 = (a[i].qs[j] & 0xF) | (int)(((qh >> j) & 1) << 4);
            int q1 = (a[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            isum += (q0 - 16) * b[i].qs[j] + (q1 - 16) * b[i].qs[j + RP_QK / 2];
        }
        s += isum * (rp_fp16_to_f32(a[i].d) * rp_fp16_to_f32(b[i].d));
    }
    return s;
}

// Q4_K and Q5_K: sum_j d*sc[j]*Σq·y - dmin*m[j]*Σy, the Σy from the Q8_K bsums.
static float dot_qk45(const void *w, const void *x, int64_t ne0, bool five)
{
    const rp_block_q8_K *b = x;
    float s = 0;
    for (int64_t i = 0; i < ne0 / RP_QK_K; i++) {
        const uint8_t *scales, *qs, *qh = NULL;
        rp_fp16 d16, dmin16;
        if (five) {
            const rp_block_q5_K *a = (const rp_block_q5_K *)w + i;
            scales = a->scales, qs = a->qs, qh = a->qh, d16 = a->d, dmin16 = a->dmin;
        } else {
            const rp_block_q4_K *a = (const rp_block_q4_K *)w + i;
            scales = a->scales, qs = a->qs, d16 = a->d, dmin16 = a->dmin;
        }
        int sumi = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            rp_q4k_scale_min(j, scales, &sc, &m);
            const uint8_t *q = qs + 32 * (j / 2);
            const int8_t *y = b[i].qs + 32 * j;
            int shift = (j & 1) * 4;
            int dot = 0;
            for (int l = 0; l < 32; l++) {
                int v = (q[l] >> shift) & 0xF;
                if (qh && (qh[l] >> j) & 1)
                    v += 16;
                dot += v * y[l];
            }
            sumi += sc * dot;
            summ += m * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
        }
        float d = b[i].d * rp_fp16_to_f32(d16);
        float dmin = b[i].d * rp_fp16_to_f32(dmin16);
        s += d * sumi - dmin * summ;
    }
    return s;
}

static float dot_q4_K(const void *w, const void *x, int64_t ne0)
{
    return dot_qk45(w, x, ne0, false);
}

static float dot_q5_K(const void *w, const void *x, int64_t ne0)
{
    return dot_qk45(w, x, ne0, true);
}

static float dot_q6_K(const void *w, const void *x, int64_t ne0)
{
    const rp_block_q6_K *a = w;
    const rp_block_q8_K *b = x;
    float s = 0;
    for (int64_t i = 0; i < ne0 / RP_QK_K; i++) {
        int8_t q[RP_QK_K];
        const uint8_t *ql = a[i].ql, *qh = a[i].qh;
        for (int c = 0; c < 2; c++, ql += 64, qh += 32) {
            int8_t *o = q + 128 * c;
            for (int l = 0; l < 32; l++) {
                o[l] = (int8_t)(((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32);
                o[l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
                o[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                o[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
            }
        }
        int sumi = 0;
        for (int j = 0; j < RP_QK_K / 16; j++) {
            int dot = 0;
            for (int l = 0; l < 16; l++)
                dot += q[16 * j + l] * b[i].qs[16 * j + l];
            sumi += a[i].scales[j] * dot;
        }
        s += (b[i].d * rp_fp16_to_f32(a[i].d)) * sumi;
    }
    return s;
}

typedef float (*dot_fn)(const void *w, const void *x, int64_t ne0);

static dot_fn scalar_dot(rp_dtype t)
{
    switch (t) {
    case RP_DTYPE_F32:
        return dot_f32;
    case RP_DTYPE_F16:
        return dot_f16;
    case RP_DTYPE_BF16:
        return dot_bf16;
    case RP_DTYPE_Q8_0:
        return dot_q8_0;
    case RP_DTYPE_Q4_0:
        return dot_q4_0;
    case RP_DTYPE_Q5_0:
        return dot_q5_0;
    case RP_DTYPE_Q4_K:
        return dot_q4_K;
    case RP_DTYPE_Q5_K:
        return dot_q5_K;
    case RP_DTYPE_Q6_K:
        return dot_q6_K;
    default:
        return NULL;
    }
}

/* ---- dispatch ---- */

// Instruction-set levels, each a superset of the one before.
enum { LVL_SCALAR, LVL_AVX2, LVL_AVX512 };
static const char *const level_names[] = {"scalar", "avx2", "avx512"};

static atomic_int g_max_level = LVL_AVX512; // test hook: cap on the level used
static atomic_int g_cpu_level = -1;         // -1 unknown

// AVX2 + FMA + F16C with the YMM state saved by the OS; AVX-512 F/BW/VL/DQ/VNNI/VBMI
// with the opmask and ZMM state saved too (cpuid directly: not every compiler's
// __builtin_cpu_supports knows "f16c").
static int detect_level(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return LVL_SCALAR;
    bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
    if (!(fma && osxsave && avx && f16c))
        return LVL_SCALAR;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 6) != 6) // XMM and YMM state
        return LVL_SCALAR;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & (1u << 5)))
        return LVL_SCALAR;
    bool f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31);
    bool vbmi = c & (1u << 1), vnni = c & (1u << 11);
    if (f && dq && bw && vl && vbmi && vnni && (lo & 0xE6) == 0xE6) // + opmask, ZMM0-15 upper, ZMM16-31
        return LVL_AVX512;
    return LVL_AVX2;
}

static int cpu_level(void)
{
    int v = atomic_load(&g_cpu_level);
    if (v < 0) {
        v = detect_level();
        atomic_store(&g_cpu_level, v);
    }
    return v;
}

static int simd_level(void)
{
    int c = cpu_level(), m = atomic_load(&g_max_level);
    return c < m ? c : m;
}

static atomic_int g_cpu_bf16 = -1; // bit 0: AVX512_BF16, bit 1: an AMD CPU; -1 unknown

static int cpu_bf16(void)
{
    int v = atomic_load(&g_cpu_bf16);
    if (v < 0) {
        unsigned a = 0, b = 0, c = 0, d = 0;
        v = cpu_level() >= LVL_AVX512 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5));
        char vendor[13] = {0};
        if (__get_cpuid(0, &a, &b, &c, &d)) {
            memcpy(vendor, &b, 4), memcpy(vendor + 4, &d, 4), memcpy(vendor + 8, &c, 4);
            v |= strcmp(vendor, "AuthenticAMD") == 0 ? 2 : 0;
        }
        atomic_store(&g_cpu_bf16, v);
    }
    return v;
}

// The AVX512_BF16 dot product (cpuid leaf 7, sub-leaf 1, EAX bit 5), on top of AVX-512.
bool rp_cpu_has_bf16_dot(void)
{
    return (cpu_bf16() & 1) && simd_level() >= LVL_AVX512;
}

static atomic_int g_cpu_amx = -1; // AMX-BF16 usable: CPU, OS tile state, permission; -1 unknown
static atomic_bool g_no_amx;      // test hook

static int cpu_amx(void)
{
    int v = atomic_load(&g_cpu_amx);
    if (v < 0) {
        unsigned a = 0, b = 0, c = 0, d = 0, lo = 0, hi = 0;
        v = (cpu_bf16() & 1) && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 22)) && (d & (1u << 24));
        if (v) { // AMX-BF16 and AMX-TILE; then XTILECFG and XTILEDATA enabled in XCR0
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            v = (lo & (3u << 17)) == (3u << 17);
        }
        // Linux hands tile data to a process that asks (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA),
        // once, for all its threads.
        if (v)
            v = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
        atomic_store(&g_cpu_amx, v);
    }
    return v;
}

bool rp_cpu_has_amx(void)
{
    return !atomic_load(&g_no_amx) && simd_level() >= LVL_AVX512 && cpu_amx();
}

void rp_cpu_force_no_amx(bool off)
{
    atomic_store(&g_no_amx, off);
}

// Measured (bench/RESULTS.md): on Zen 5 vdpbf16ps issues two a cycle, like FMAs, so it
// does twice their multiply-adds (Zen 4, the other AMD CPU with it, is taken to gain
// alike: not measured); on Intel's Xeons it issues one a cycle, and the bf16 kernel ran
// 25-35% slower than the float one. There AMX pays instead: on a 16-core Xeon, prefill
// 2.8x and batched steps 1.5-2x faster, a one-token step slower (a 0.5B model's decode
// by 4-7%, rapid-tiny's step by 40-50%).
bool rp_cpu_bf16_act_pays(void)
{
    return rp_cpu_has_amx() || (rp_cpu_has_bf16_dot() && (cpu_bf16() & 2));
}

int rp_cpu_simd_level(void)
{
    return simd_level();
}

const char *rp_cpu_simd_name(void)
{
    return level_names[simd_level()];
}

void rp_cpu_force_scalar(bool on)
{
    atomic_store(&g_max_level, on ? LVL_SCALAR : LVL_AVX512);
}

bool rp_cpu_force_simd(const char *name)
{
    for (int l = LVL_SCALAR; l <= LVL_AVX512; l++)
        if (strcmp(name, level_names[l]) == 0) {
            if (l > cpu_level())
                return false;
            atomic_store(&g_max_level, l);
            return true;
        }
    return false;
}

// The kernel, activation layout and quantizer one weight type uses at a level: the
// highest level's kernel for the type; act_bytes 0 when the kernel reads the partner type.
typedef struct mm_isa {
    rp_mm_kernel kern;
    size_t act_bytes;
    void (*quantize_act)(const float *x, int64_t ne0, uint8_t *out);
    int tokens;         // tokens per kernel call in prefill (0: RP_MM_MAX_NT)
    bool amx;           // matmul_amx.c instead of a tile kernel
    rp_mm_gemm_fn gemm; // F32 / F16 from MM_GEMM_MIN tokens on: a chunk's rows against every token
} mm_isa;

// F32 / F16 weights take the GEMM from 2 tokens on (the same bits as the tile kernel, which
// keeps decode): measured faster from 2 tokens on, weights in cache or streamed from memory
// (bench/RESULTS.md, issue 21). Its chunks of rows are larger than a tile kernel's: x is
// streamed once per chunk, which a down projection's long rows make costly.
#define MM_GEMM_MIN 2
#define MM_GEMM_TAKE (1u << 20)

// Weights AMX's kernel can take: BF16 rows of whole 32-element chunks.
static bool amx_shape(rp_dtype wtype, int64_t ne0)
{
    return wtype == RP_DTYPE_BF16 && ne0 % 32 == 0;
}

static mm_isa pick_isa(int level, rp_dtype wtype, int64_t ne0, bool bf16_act)
{
    mm_isa m = {0};
    if (bf16_act && amx_shape(wtype, ne0) && rp_cpu_has_amx()) {
        m.amx = true;
    } else if (bf16_act && wtype == RP_DTYPE_BF16 && rp_cpu_has_bf16_dot()) {
        m.kern = rp_mm_kernel_bf16dot();
        m.act_bytes = rp_mm_act_bytes_bf16dot(ne0);
        m.quantize_act = rp_mm_act_bf16dot;
        m.tokens = rp_mm_tokens_bf16dot(ne0);
    } else if (level >= LVL_AVX512 && (m.kern = rp_mm_kernel_avx512(wtype))) {
        m.act_bytes = rp_mm_act_bytes_avx512(wtype, ne0);
        m.quantize_act = rp_mm_act_fn_avx512(wtype);
        m.tokens = rp_mm_tokens_avx512(wtype, ne0);
        if (wtype == RP_DTYPE_F32 || wtype == RP_DTYPE_F16)
            m.gemm = rp_mm_gemm_flt_avx512;
    } else if (level >= LVL_AVX2 && (m.kern = rp_mm_kernel_avx2(wtype))) {
        m.act_bytes = rp_mm_act_bytes_avx2(wtype, ne0);
        m.quantize_act = rp_mm_quantize_act_avx2;
    }
    return m;
}

/* ---- the matmul ---- */

// The activation type a weight type's kernels read: F32 for float weights.
static rp_dtype partner_type(rp_dtype wtype)
{
    switch (wtype) {
    case RP_DTYPE_Q8_0:
    case RP_DTYPE_Q4_0:
    case RP_DTYPE_Q5_0:
        return RP_DTYPE_Q8_0;
    case RP_DTYPE_Q4_K:
    case RP_DTYPE_Q5_K:
    case RP_DTYPE_Q6_K:
        return RP_DTYPE_Q8_K;
    default:
        return RP_DTYPE_F32;
    }
}

// Bytes per quantized activation row: the partner type's row, or a SIMD kernel's layout.
static bool act_row_bytes(rp_dtype wtype, int64_t ne0, size_t simd_bytes, size_t *out)
{
    if (!rp_dtype_row_bytes(partner_type(wtype), ne0, out))
        return false;
    if (simd_bytes)
        *out = simd_bytes;
    return true;
}

// Room for the largest layout of any level, so the answer does not change with the level.
size_t rp_cpu_matmul_scratch_bytes(rp_dtype wtype, int64_t ne0, int n)
{
    size_t a, b, c, total;
    if (partner_type(wtype) == RP_DTYPE_F32) { // float weights: only a SIMD layout of the activations
        size_t r = rp_mm_act_bytes_avx512(wtype, ne0);
        if (n <= 0 || !r || !rp_mul_size(r, (size_t)n, &total))
            return 0;
        if (amx_shape(wtype, ne0) && rp_mm_act_bytes_amx(ne0, n) > total) // AMX: blocks of 16 tokens
            total = rp_mm_act_bytes_amx(ne0, n);
        return total;
    }
    if (n <= 0 || !act_row_bytes(wtype, ne0, 0, &a) ||
        !act_row_bytes(wtype, ne0, rp_mm_act_bytes_avx2(wtype, ne0), &b) ||
        !act_row_bytes(wtype, ne0, rp_mm_act_bytes_avx512(wtype, ne0), &c))
        return 0;
    a = a > b ? a : b;
    a = a > c ? a : c;
    if (!rp_mul_size(a, (size_t)n, &total))
        return 0;
    return total;
}

// One matmul of a job and the chunks of its rows (see rp_cpu_matmul_group).
typedef struct mm_part {
    const rp_matmul_desc *d;
    int64_t rows;
    int64_t chunk0;     // index of the part's first chunk in the job
    int64_t chunk_rows; // rows per chunk (the last one may be short)
} mm_part;

typedef struct mm_range {
    _Alignas(64) _Atomic uint64_t r; // end << 32 | next; one cache line per thread
} mm_range;

#define MM_MAX_STEAL_THREADS 64

typedef struct mm_job {
    mm_part part[RP_MM_MAX_GROUP];
    int count;
    bool glu; // part 0 = gate, part 1 = up, chunks pair their rows
    const float *x;
    int n;
    int64_t ne0;
    uint8_t *xq;    // quantized activations (scratch), or NULL for float weights
    rp_dtype xtype; // partner type
    void (*quantize_act)(const float *x, int64_t ne0, uint8_t *out); // SIMD layout, or NULL: partner type
    size_t xstride;                                                  // bytes per activation row as the kernel reads it
    size_t wstride;     // bytes per weight row (all parts share the type and ne0)
    rp_mm_kernel kern;  // SIMD tile kernel, or NULL for the scalar path
    int tokens;         // tokens per kernel call in prefill (<= RP_MM_MAX_NT)
    bool amx;           // matmul_amx.c: xq holds the tokens packed in blocks of 16
    rp_mm_gemm_fn gemm; // see mm_isa
    dot_fn dot;         // scalar reference dot
    int64_t n_chunks;
    int64_t batch;    // chunks taken at a time
    mm_range *ranges; // (threads) shares of the chunks, or NULL: a static split
} mm_job;

static void quantize_row(const mm_job *j, int64_t t)
{
    const float *src = j->x + t * j->ne0;
    uint8_t *dst = j->xq + (size_t)t * j->xstride;
    if (j->amx)
        rp_mm_act_amx(src, j->ne0, (int)t, j->xq);
    else if (j->quantize_act)
        j->quantize_act(src, j->ne0, dst);
    else if (j->xtype == RP_DTYPE_Q8_0)
        rp_quant_row_q8_0(src, (rp_block_q8_0 *)dst, j->ne0);
    else
        rp_quant_row_q8_K(src, (rp_block_q8_K *)dst, j->ne0);
}

static void quantize_task(void *p, int ith, int nth)
{
    mm_job *j = p;
    int64_t lo, hi;
    if (j->amx) { // whole blocks of 16 tokens: their columns share cache lines
        rp_split_range((j->n + 15) / 16, ith, nth, &lo, &hi);
        lo *= 16, hi = hi * 16 < j->n ? hi * 16 : j->n;
    } else {
        rp_split_range(j->n, ith, nth, &lo, &hi);
    }
    for (int64_t t = lo; t < hi; t++)
        quantize_row(j, t);
}

// y[t][r] = dot(w row r, token t) for rows [lo, hi) of one weight, every token.
static void compute_rows(const mm_job *j, const rp_tensor *wt, float *y, int64_t lo, int64_t hi)
{
    const uint8_t *w = wt->data;
    const uint8_t *x = j->xq ? j->xq : (const uint8_t *)j->x;
    size_t ldy = (size_t)wt->ne[1];
    int64_t ne0 = j->ne0;

    if (j->amx) {
        rp_mm_amx(w + (size_t)lo * j->wstride, j->wstride, hi - lo, x, j->n, ne0, y + lo, ldy);
        return;
    }
    if (j->gemm && j->n >= MM_GEMM_MIN) {
        j->gemm(wt->type, w + (size_t)lo * j->wstride, j->wstride, hi - lo, x, j->xstride, j->n, ne0, y + lo, ldy);
        return;
    }
    if (!j->kern) { // scalar reference: one dot per output
        for (int64_t r = lo; r < hi; r++)
            for (int t = 0; t < j->n; t++)
                y[(size_t)t * ldy + (size_t)r] = j->dot(w + (size_t)r * j->wstride, x + (size_t)t * j->xstride, ne0);
        return;
    }
    if (j->n == 1) { // the kernel walks the rows (in one stream, or several at once: its choice)
        for (int64_t r = lo; r < hi; r += RP_MM_MAX_NR) {
            int nr = (int)(hi - r < RP_MM_MAX_NR ? hi - r : RP_MM_MAX_NR);
            j->kern(w + (size_t)r * j->wstride, j->wstride, nr, x, j->xstride, 1, ne0, y + r, ldy);
        }
        return;
    }
    // Prefill: a block of rows small enough to stay in L2 meets every token group
    // (j->tokens at most, the groups nearly equal: 6 tokens in groups of 4 are 3 + 3),
    // whose activations stay in L1 while it does.
    int64_t rb = (int64_t)((256u << 10) / (j->wstride ? j->wstride : 1));
    if (rb < RP_MM_MAX_NR)
        rb = RP_MM_MAX_NR;
    int groups = (j->n + j->tokens - 1) / j->tokens;
    for (int64_t r0 = lo; r0 < hi; r0 += rb) {
        int64_t r1 = r0 + rb < hi ? r0 + rb : hi;
        for (int g = 0, t0 = 0, nt; g < groups; g++, t0 += nt) {
            nt = j->n / groups + (g < j->n % groups);
            for (int64_t r = r0; r < r1; r += RP_MM_MAX_NR) {
                int nr = (int)(r1 - r < RP_MM_MAX_NR ? r1 - r : RP_MM_MAX_NR);
                j->kern(w + (size_t)r * j->wstride, j->wstride, nr, x + (size_t)t0 * j->xstride, j->xstride, nt, ne0,
                        y + (size_t)t0 * ldy + r, ldy);
            }
        }
    }
}

// The element-wise tail of a part's rows [lo, hi): + bias, then residual += y.
static void finish_rows(const mm_job *j, const rp_matmul_desc *d, int64_t rows, int64_t lo, int64_t hi)
{
    if (!d->bias && !d->residual)
        return;
    for (int t = 0; t < j->n; t++) {
        float *y = d->y + (size_t)t * rows;
        if (d->bias)
            for (int64_t r = lo; r < hi; r++)
                y[r] += d->bias[r];
        if (d->residual) {
            float *res = d->residual + (size_t)t * rows;
            for (int64_t r = lo; r < hi; r++)
                res[r] += y[r];
        }
    }
}

// Computes chunks [c0, c1): within each part they meet, the rows in one stream.
static void run_chunks(const mm_job *j, int64_t c0, int64_t c1)
{
    for (int k = 0; k < j->count; k++) {
        const mm_part *pt = &j->part[k];
        int64_t nc = (pt->rows + pt->chunk_rows - 1) / pt->chunk_rows;
        int64_t a = c0 > pt->chunk0 ? c0 : pt->chunk0, b = c1 < pt->chunk0 + nc ? c1 : pt->chunk0 + nc;
        if (a >= b)
            continue;
        int64_t lo = (a - pt->chunk0) * pt->chunk_rows, hi = (b - pt->chunk0) * pt->chunk_rows;
        hi = hi < pt->rows ? hi : pt->rows;
        if (j->glu) { // gate and up rows [lo, hi), then gate = silu(gate) * up
            const rp_matmul_desc *g = j->part[0].d, *u = j->part[1].d;
            compute_rows(j, g->w, g->y, lo, hi);
            compute_rows(j, u->w, u->y, lo, hi);
            for (int t = 0; t < j->n; t++) {
                float *gy = g->y + (size_t)t * pt->rows;
                rp_cpu_silu_mul(gy + lo, gy + lo, u->y + (size_t)t * pt->rows + lo, hi - lo);
            }
            continue;
        }
        compute_rows(j, pt->d->w, pt->d->y, lo, hi);
        finish_rows(j, pt->d, pt->rows, lo, hi);
    }
}

// A thread's share of the chunks, [next, end) packed as end << 32 | next.
static bool take_front(mm_range *rg, int64_t k, int64_t *c0, int64_t *c1)
{
    uint64_t u = atomic_load_explicit(&rg->r, memory_order_relaxed);
    for (;;) {
        uint64_t next = u & 0xffffffffu, end = u >> 32;
        if (next >= end)
            return false;
        uint64_t take = end - next < (uint64_t)k ? end - next : (uint64_t)k;
        if (atomic_compare_exchange_weak_explicit(&rg->r, &u, end << 32 | (next + take), memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *c0 = (int64_t)next, *c1 = (int64_t)(next + take);
            return true;
        }
    }
}

static bool take_back(mm_range *rg, int64_t k, int64_t *c0, int64_t *c1)
{
    uint64_t u = atomic_load_explicit(&rg->r, memory_order_relaxed);
    for (;;) {
        uint64_t next = u & 0xffffffffu, end = u >> 32;
        if (next >= end)
            return false;
        uint64_t take = (end - next + 1) / 2 < (uint64_t)k ? (end - next + 1) / 2 : (uint64_t)k;
        if (atomic_compare_exchange_weak_explicit(&rg->r, &u, (end - take) << 32 | next, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *c0 = (int64_t)(end - take), *c1 = (int64_t)end;
            return true;
        }
    }
}

// Each thread streams its own contiguous share of the chunks front to back, a few at
// a time; a thread that runs out takes chunks from the back of the others' shares, so
// a core slowed by the machine does not hold the run up. (Handing out every chunk from
// one shared counter measured slower for BF16 decode, 22 vs 33 tok/s: the cores hop
// between regions instead of streaming one.) Which thread computes a chunk changes
// nothing in its results.
static void matmul_task(void *p, int ith, int nth)
{
    mm_job *j = p;
    int64_t c0, c1, k = j->batch;
    if (!j->ranges) {
        rp_split_range(j->n_chunks, ith, nth, &c0, &c1);
        run_chunks(j, c0, c1);
        return;
    }
    while (take_front(&j->ranges[ith], k, &c0, &c1))
        run_chunks(j, c0, c1);
    for (int v = 1; v < nth; v++)
        while (take_back(&j->ranges[(ith + v) % nth], k, &c0, &c1))
            run_chunks(j, c0, c1);
}

void rp_cpu_silu_mul(float *out, const float *gate, const float *up, int64_t n)
{
    if (simd_level() >= LVL_AVX2) {
        rp_cpu_silu_mul_avx2(out, gate, up, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

bool rp_cpu_matmul_group_fusable(const rp_matmul_desc *mm, int count)
{
    if (count < 1 || count > RP_MM_MAX_GROUP)
        return false;
    for (int i = 1; i < count; i++)
        if (mm[i].w->type != mm[0].w->type || mm[i].w->ne[0] != mm[0].w->ne[0])
            return false;
    return true;
}

void rp_cpu_matmul_group(rp_pool *pool, const rp_matmul_desc *mm, int count, bool glu, const float *x, int n,
                         void *scratch, bool bf16_act)
{
    RP_ASSERT(rp_cpu_matmul_group_fusable(mm, count) && (!glu || (count == 2 && mm[0].w->ne[1] == mm[1].w->ne[1])));
    if (n <= 0)
        return;
    const rp_tensor *w = mm[0].w;
    mm_job j = {.count = glu ? 1 : count, .glu = glu, .x = x, .n = n, .ne0 = w->ne[0], .xtype = partner_type(w->type)};
    j.dot = scalar_dot(w->type);
    mm_isa isa = pick_isa(simd_level(), w->type, w->ne[0], bf16_act);
    j.kern = isa.kern;
    j.amx = isa.amx;
    j.gemm = isa.gemm;
    j.tokens = isa.tokens ? isa.tokens : RP_MM_MAX_NT;
    j.quantize_act = isa.act_bytes ? isa.quantize_act : NULL;
    bool ok = rp_dtype_row_bytes(w->type, w->ne[0], &j.wstride) &&
              act_row_bytes(w->type, w->ne[0], isa.act_bytes, &j.xstride);
    RP_ASSERT(ok && j.dot != NULL);

    const int64_t cr = isa.amx ? 16 : RP_MM_MAX_NR; // chunk: the rows of one tile
    for (int i = 0; i < j.count; i++) {
        j.part[i] = (mm_part){.d = &mm[i], .rows = mm[i].w->ne[1], .chunk0 = j.n_chunks, .chunk_rows = cr};
        j.n_chunks += (j.part[i].rows + cr - 1) / cr;
    }
    if (glu)
        j.part[1] = (mm_part){.d = &mm[1], .rows = mm[1].w->ne[1], .chunk0 = j.n_chunks, .chunk_rows = cr};
    // about 32 KiB of weights per take (n == 1), an L2-sized row block (prefill), or the GEMM's larger chunk
    size_t take_bytes = (size_t)cr * j.wstride * (glu ? 2 : 1);
    j.batch = (int64_t)((n == 1                       ? 32u << 10
                         : j.gemm && n >= MM_GEMM_MIN ? MM_GEMM_TAKE
                                                      : 256u << 10) /
                        (take_bytes ? take_bytes : 1));
    j.batch = j.batch < 1 ? 1 : j.batch;
    mm_range ranges[MM_MAX_STEAL_THREADS];
    int nth = rp_pool_size(pool);
    if (nth > 1 && nth <= MM_MAX_STEAL_THREADS && j.n_chunks < INT32_MAX) {
        for (int i = 0; i < nth; i++) {
            int64_t lo, hi;
            rp_split_range(j.n_chunks, i, nth, &lo, &hi);
            atomic_init(&ranges[i].r, (uint64_t)hi << 32 | (uint64_t)lo);
        }
        j.ranges = ranges;
    }

    if (j.xtype != RP_DTYPE_F32 || j.quantize_act || j.amx) {
        RP_ASSERT(scratch != NULL);
        j.xq = scratch;
        if (j.amx)
            rp_mm_act_amx_clear(j.ne0, n, j.xq);
        if (n <= 2 || (int64_t)n * j.ne0 <= 16384) // a pool run costs more than a few rows here
            for (int t = 0; t < n; t++)
                quantize_row(&j, t);
        else
            rp_pool_run(pool, quantize_task, &j);
    }
    rp_pool_run(pool, matmul_task, &j);
}

void rp_cpu_matmul(rp_pool *pool, const rp_tensor *w, const float *x, int n, float *y, void *scratch, bool bf16_act)
{
    if (n <= 0 || w->ne[1] <= 0)
        return;
    rp_matmul_desc d = {.w = w, .y = y};
    rp_cpu_matmul_group(pool, &d, 1, false, x, n, scratch, bf16_act);
}
