/*
 * quant.c - reference quantization and dequantization of GGML block formats.
 *
 * Quantizers follow ggml's reference ones (quantize_row_*_ref in ggml-quants.c)
 * operation for operation, so a tensor quantized here has the bytes llama.cpp's
 * llama-quantize writes without an importance matrix:
 *   - Q8_0: d = amax/127, q = roundf(x/d).
 *   - Q4_0, Q5_0: d = (signed value of largest magnitude) / -8 (-16), q = trunc(x/d + 8.5)
 *     clamped (the largest-magnitude value lands exactly on -8 / -16).
 *   - Q4_K, Q5_K: per 32-element sub-block a weighted least-squares fit of scale and
 *     min over a small grid of candidate scales (make_qkx2_quants), then the
 *     scales and mins are quantized to 6 bits against the super-block maxima and
 *     the elements re-quantized with the rounded scales.
 *   - Q6_K: per 16-element sub-block an x²-weighted search of the scale
 *     (make_qx_quants, rmse_type 1), scales to int8 against the largest one.
 *   - Q8_K (activations): d = max/-127 with the signed max, plus per-16 sums.
 * Rounding uses nearest_int (round half to even by the 1.5*2^23 trick) where ggml
 * does, and roundf (half away from zero) where ggml does.
 *
 * Dequantizers compute each value with the same float operations as ggml's
 * dequantize_row_*, so results are bitwise equal to llama.cpp's.
 */
#include "quant.h"

#include <float.h>
#include <math.h>

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

// Round to nearest, ties to even, for |f| <= 2^22 (ggml's nearest_int).
static inline int nearest_int(float f)
{
    float v = f + 12582912.f;
    int32_t i;
    memcpy(&i, &v, sizeof(i));
    return (i & 0x007fffff) - 0x00400000;
}

/* ---- legacy 32-element blocks ---- */

void rp_quant_row_q8_0(const float *x, rp_block_q8_0 *y, int64_t n)
{
    int64_t nb = n / RP_QK;
    for (int64_t i = 0; i < nb; i++, x += RP_QK) {
        float amax = 0.0f;
        for (int j = 0; j < RP_QK; j++)
            amax = MAX(amax, fabsf(x[j]));
        float d = amax / 127;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = rp_f32_to_fp16(d);
        for (int j = 0; j < RP_QK; j++)
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

static void quant_row_q4_0(const float *x, rp_block_q4_0 *y, int64_t n)
{
    int64_t nb = n / RP_QK;
    for (int64_t i = 0; i < nb; i++, x += RP_QK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < RP_QK; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        float d = max / -8;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = rp_f32_to_fp16(d);
        for (int j = 0; j < RP_QK / 2; j++) {
            float x0 = x[j] * id;
            float x1 = x[j + RP_QK / 2] * id;
            uint8_t q0 = (uint8_t)MIN(15, (int8_t)(x0 + 8.5f));
            uint8_t q1 = (uint8_t)MIN(15, (int8_t)(x1 + 8.5f));
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void quant_row_q5_0(const float *x, rp_block_q5_0 *y, int64_t n)
{
    int64_t nb = n / RP_QK;
    for (int64_t i = 0; i < nb; i++, x += RP_QK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < RP_QK; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        float d = max / -16;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = rp_f32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < RP_QK / 2; j++) {
            float x0 = x[j] * id;
            float x1 = x[j + RP_QK / 2] * id;
            uint8_t q0 = (uint8_t)MIN(31, (int8_t)(x0 + 16.5f));
            uint8_t q1 = (uint8_t)MIN(31, (int8_t)(x1 + 16.5f));
            y[i].qs[j] = (uint8_t)((q0 & 0xF) | ((q1 & 0xF) << 4));
            qh |= (uint32_t)((q0 >> 4) & 1) << j;
            qh |= (uint32_t)((q1 >> 4) & 1) << (j + RP_QK / 2);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

/* ---- K-quants ---- */

// Weighted fit of x ≈ scale*L + min (min <= 0, L in [0, nmax]) over candidate inverse
// scales (rmin + rdelta*k + nmax)/(max - min), k = 0..nstep; returns scale, *neg_min = -min.
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min, float rmin,
                           float rdelta, int nstep)
{
    uint8_t Laux[32];
    float min = x[0], max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0)
        min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *neg_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)MAX(0, MIN(nmax, l));
        float diff = scale * L[i] + min - x[i];
        diff = diff * diff;
        best_error += w[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * (x[i] - min));
            l = MAX(0, MIN(nmax, l));
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = diff * diff;
                cur_error += w[i] * diff;
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *neg_min = -min;
    return scale;
}

// Q4_K / Q5_K share everything but the bit width (nmax 15 or 31) and the fit's grid.
// Fills d, dmin, scales[12] and L[256] (the quantized values).
static void quant_k_scales(const float *x, int nmax, float rmin, int nstep, rp_fp16 *d_out, rp_fp16 *dmin_out,
                           uint8_t scales[12], uint8_t L[RP_QK_K])
{
    float w[32], mins[RP_QK_K / 32], sc[RP_QK_K / 32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < RP_QK_K / 32; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++)
            sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++)
            w[l] = av_x + fabsf(x[32 * j + l]);
        sc[j] = fit_scale_min(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], rmin, 0.1f, nstep);
        if (sc[j] > max_scale)
            max_scale = sc[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    memset(scales, 0, 12);
    for (int j = 0; j < RP_QK_K / 32; j++) {
        uint8_t ls = (uint8_t)nearest_int(inv_scale * sc[j]);
        uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
        ls = MIN(63, ls);
        lm = MIN(63, lm);
        if (j < 4) {
            scales[j] = ls;
            scales[j + 4] = lm;
        } else {
            scales[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
            scales[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d_out = rp_f32_to_fp16(max_scale / 63.f);
    *dmin_out = rp_f32_to_fp16(max_min / 63.f);
    float d = rp_fp16_to_f32(*d_out), dmin = rp_fp16_to_f32(*dmin_out);
    for (int j = 0; j < RP_QK_K / 32; j++) {
        uint8_t s, m;
        rp_q4k_scale_min(j, scales, &s, &m);
        float ds = d * s;
        if (ds == 0.0f)
            continue;
        float dm = dmin * m;
        for (int i = 0; i < 32; i++) {
            int l = nearest_int((x[32 * j + i] + dm) / ds);
            L[32 * j + i] = (uint8_t)MAX(0, MIN(nmax, l));
        }
    }
}

static void quant_row_q4_K(const float *x, rp_block_q4_K *y, int64_t n)
{
    uint8_t L[RP_QK_K];
    for (int64_t i = 0; i < n / RP_QK_K; i++, x += RP_QK_K) {
        quant_k_scales(x, 15, -1.f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
        uint8_t *q = y[i].qs;
        for (int j = 0; j < RP_QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; l++)
                q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

static void quant_row_q5_K(const float *x, rp_block_q5_K *y, int64_t n)
{
    uint8_t L[RP_QK_K];
    for (int64_t i = 0; i < n / RP_QK_K; i++, x += RP_QK_K) {
        quant_k_scales(x, 31, -0.5f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        uint8_t *qh = y[i].qh, *ql = y[i].qs;
        memset(qh, 0, RP_QK_K / 8);
        uint8_t m1 = 1, m2 = 2;
        for (int c = 0; c < RP_QK_K; c += 64, ql += 32, m1 <<= 2, m2 <<= 2) {
            for (int j = 0; j < 32; j++) {
                int l1 = L[c + j], l2 = L[c + j + 32];
                if (l1 > 15) {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                if (l2 > 15) {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
        }
    }
}

// x²-weighted search of a symmetric scale for n values into L in [0, 2*nmax) (offset nmax).
static float fit_scale_sym(int n, int nmax, const float *x, int8_t *L)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * x[i]);
        l = MAX(-nmax, MIN(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0)
            continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * x[i]);
            l = MAX(-nmax, MIN(nmax - 1, l));
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) {
                int l = nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + MAX(-nmax, MIN(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

static void quant_row_q6_K(const float *x, rp_block_q6_K *y, int64_t n)
{
    int8_t L[RP_QK_K];
    float scales[RP_QK_K / 16];
    for (int64_t i = 0; i < n / RP_QK_K; i++, x += RP_QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < RP_QK_K / 16; ib++) {
            scales[ib] = fit_scale_sym(16, 32, x + 16 * ib, L + 16 * ib);
            if (fabsf(scales[ib]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        if (max_abs_scale < 1e-15f) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        float iscale = -128.f / max_scale;
        y[i].d = rp_f32_to_fp16(1 / iscale);
        for (int ib = 0; ib < RP_QK_K / 16; ib++)
            y[i].scales[ib] = (int8_t)MIN(127, nearest_int(iscale * scales[ib]));
        float d = rp_fp16_to_f32(y[i].d);
        for (int j = 0; j < RP_QK_K / 16; j++) {
            float ds = d * y[i].scales[j];
            if (ds == 0.0f)
                continue;
            for (int ii = 0; ii < 16; ii++) {
                int l = nearest_int(x[16 * j + ii] / ds);
                L[16 * j + ii] = (int8_t)(MAX(-32, MIN(31, l)) + 32);
            }
        }
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < RP_QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                uint8_t q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
                uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
                ql[l] = (uint8_t)(q1 | (q3 << 4));
                ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                  ((L[j + l + 96] >> 4) << 6));
            }
        }
    }
}

void rp_quant_row_q8_K(const float *x, rp_block_q8_K *y, int64_t n)
{
    for (int64_t i = 0; i < n / RP_QK_K; i++, x += RP_QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < RP_QK_K; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        float iscale = -127.f / max;
        for (int j = 0; j < RP_QK_K; j++)
            y[i].qs[j] = (int8_t)MIN(127, nearest_int(iscale * x[j]));
        for (int j = 0; j < RP_QK_K / 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++)
                sum += y[i].qs[16 * j + l];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

/* ---- dequantization ---- */

static void dequant_q8_0(const rp_block_q8_0 *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n / RP_QK; i++, y += RP_QK) {
        float d = rp_fp16_to_f32(x[i].d);
        for (int j = 0; j < RP_QK; j++)
            y[j] = x[i].qs[j] * d;
    }
}

static void dequant_q4_0(const rp_block_q4_0 *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n / RP_QK; i++, y += RP_QK) {
        float d = rp_fp16_to_f32(x[i].d);
        for (int j = 0; j < RP_QK / 2; j++) {
            y[j] = ((x[i].qs[j] & 0xF) - 8) * d;
            y[j + RP_QK / 2] = ((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void dequant_q5_0(const rp_block_q5_0 *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n / RP_QK; i++, y += RP_QK) {
        float d = rp_fp16_to_f32(x[i].d);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < RP_QK / 2; j++) {
            int h0 = (int)((qh >> j) & 1) << 4;
            int h1 = (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = (((x[i].qs[j] & 0xF) | h0) - 16) * d;
            y[j + RP_QK / 2] = (((x[i].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

static void dequant_q4_K(const rp_block_q4_K *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n / RP_QK_K; i++) {
        float d = rp_fp16_to_f32(x[i].d), dmin = rp_fp16_to_f32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int c = 0; c < 4; c++, q += 32) {
            uint8_t sc, m;
            rp_q4k_scale_min(2 * c, x[i].scales, &sc, &m);
            float d1 = d * sc, m1 = dmin * m;
            rp_q4k_scale_min(2 * c + 1, x[i].scales, &sc, &m);
            float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

static void dequant_q5_K(const rp_block_q5_K *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n / RP_QK_K; i++) {
        float d = rp_fp16_to_f32(x[i].d), dmin = rp_fp16_to_f32(x[i].dmin);
        const uint8_t *ql = x[i].qs, *qh = x[i].qh;
        for (int c = 0; c < 4; c++, ql += 32) {
            uint8_t sc, m;
            rp_q4k_scale_min(2 * c, x[i].scales, &sc, &m);
            float d1 = d * sc, m1 = dmin * m;
            rp_q4k_scale_min(2 * c + 1, x[i].scales, &sc, &m);
            float d2 = d * sc, m2 = dmin * m;
            uint8_t u1 = (uint8_t)(1u << (2 * c)), u2 = (uint8_t)(2u << (2 * c));
            for (int l = 0; l < 32; l++)
                *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

static void dequant_q6_K(const rp_block_q6_K *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n / RP_QK_K; i++) {
        float d = rp_fp16_to_f32(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int c = 0; c < 2; c++, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

static void dequant_q8_K(const rp_block_q8_K *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n / RP_QK_K; i++, y += RP_QK_K)
        for (int j = 0; j < RP_QK_K; j++)
            y[j] = x[i].d * x[i].qs[j];
}

/* ---- whole rows (quant.h) ---- */

bool rp_quantize_supported(rp_dtype type)
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
    case RP_DTYPE_Q6_K:
    case RP_DTYPE_Q8_K:
        return true;
    default:
        return false;
    }
}

rp_status rp_quantize(rp_dtype type, const float *src, void *dst, int64_t n)
{
    if (!rp_quantize_supported(type))
        return RP_ERR(RP_ERR_UNSUPPORTED, "quantize: type %s (%d) is not supported", rp_dtype_name(type), (int)type);
    size_t bytes;
    if (!rp_dtype_row_bytes(type, n, &bytes))
        return RP_ERR(RP_ERR_INVALID, "quantize: %lld elements is not a whole number of %s blocks of %d",
                      (long long)n, rp_dtype_name(type), rp_dtype_block(type));
    if (n > 0 && (!src || !dst))
        return RP_ERR(RP_ERR_INVALID, "quantize: NULL buffer");
    switch (type) {
    case RP_DTYPE_F32:
        memmove(dst, src, (size_t)n * sizeof(float));
        break;
    case RP_DTYPE_F16:
        for (int64_t i = 0; i < n; i++)
            ((rp_fp16 *)dst)[i] = rp_f32_to_fp16(src[i]);
        break;
    case RP_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            ((rp_bf16 *)dst)[i] = rp_f32_to_bf16(src[i]);
        break;
    case RP_DTYPE_Q8_0:
        rp_quant_row_q8_0(src, dst, n);
        break;
    case RP_DTYPE_Q4_0:
        quant_row_q4_0(src, dst, n);
        break;
    case RP_DTYPE_Q5_0:
        quant_row_q5_0(src, dst, n);
        break;
    case RP_DTYPE_Q4_K:
        quant_row_q4_K(src, dst, n);
        break;
    case RP_DTYPE_Q5_K:
        quant_row_q5_K(src, dst, n);
        break;
    case RP_DTYPE_Q6_K:
        quant_row_q6_K(src, dst, n);
        break;
    case RP_DTYPE_Q8_K:
        rp_quant_row_q8_K(src, dst, n);
        break;
    default:
        break;
    }
    return RP_OK;
}

void rp_dequantize(rp_dtype type, const void *src, float *dst, int64_t n)
{
    RP_ASSERT(rp_dtype_valid((int)type) && n >= 0 && n % rp_dtype_block(type) == 0);
    if (n == 0)
        return;
    switch (type) {
    case RP_DTYPE_F32:
        memmove(dst, src, (size_t)n * sizeof(float));
        break;
    case RP_DTYPE_F16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = rp_fp16_to_f32(((const rp_fp16 *)src)[i]);
        break;
    case RP_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = rp_bf16_to_f32(((const rp_bf16 *)src)[i]);
        break;
    case RP_DTYPE_Q8_0:
        dequant_q8_0(src, dst, n);
        break;
    case RP_DTYPE_Q4_0:
        dequant_q4_0(src, dst, n);
        break;
    case RP_DTYPE_Q5_0:
        dequant_q5_0(src, dst, n);
        break;
    case RP_DTYPE_Q4_K:
        dequant_q4_K(src, dst, n);
        break;
    case RP_DTYPE_Q5_K:
        dequant_q5_K(src, dst, n);
        break;
    case RP_DTYPE_Q6_K:
        dequant_q6_K(src, dst, n);
        break;
    case RP_DTYPE_Q8_K:
        dequant_q8_K(src, dst, n);
        break;
    default:
        RP_ASSERT(!"rp_dequantize: unhandled type");
    }
}
