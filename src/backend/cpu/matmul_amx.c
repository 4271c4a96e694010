/*
 * matmul_amx.c - BF16 weights against activations rounded to bf16, on Intel's AMX tile
 * unit (tdpbf16ps): the bf16 arithmetic of Xeons from Sapphire Rapids on.
 *
 * A tile is up to 16 rows of 64 bytes. tdpbf16ps multiplies a 16 x 32 bf16 tile A by a
 * 32 x 16 bf16 tile B (stored as 16 rows of 16 element pairs) into a 16 x 16 float tile
 * C: 8,192 multiply-adds an instruction. Here C holds 16 weight rows x 16 tokens, so
 * the weights load as they lie in memory (A: 16 rows of 32 elements at the row stride)
 * and the activations are packed once per matmul into B's layout (rp_mm_act_amx):
 *
 *   token block b (tokens 16b..16b+15), chunk k (elements 32k..32k+31), 1,024 bytes:
 *   row p (0..15) holds, for each token c of the block, the bf16 pair (x[32k+2p],
 *   x[32k+2p+1]) at byte 64p + 4c; tokens past the last one are zero.
 *
 * Rounding as in matmul_avx512bf16.c (vcvtne2ps2bf16, nearest even); products of bf16
 * values are exact in float. Order: an output's C element accumulates chunk 0, 1, 2, ...
 * in turn, each chunk's 32 products summed inside the instruction in its own fixed
 * order (the hardware's: DAZ/FTZ, round to nearest even). Nothing depends on the other
 * rows or tokens of a tile, so every (row, token) gets the same operations whatever
 * the batch (quant.h's determinism contract); short tiles are padded, never cut.
 *
 * Requirements, checked by the caller (matmul.c): AMX-TILE and AMX-BF16, AVX512_BF16
 * for the packing, the OS's permission for tile data (arch_prctl), rows a multiple of
 * 32 elements. Every thread configures its tiles once (eight tiles of 16 x 64 bytes).
 */
#include "mm_kernels.h"

#include <immintrin.h>
#include <string.h>

enum { TILE_BYTES = 1024, BLOCK = 16 };

// Chunks ahead that a pass prefetches into L1. Without it a tile load's 16 strided lines
// come from L2 or farther at the loop's pace: on a Xeon the kernel ran at a third of
// the speed. (Measured, not kept: 8 or 12 ahead, prefetching the next pass into L2 row by
// row or in memory order, larger shares per thread: none moved a one-token step.)
enum { PF_AHEAD = 4 };

size_t rp_mm_act_bytes_amx(int64_t ne0, int n)
{
    return (size_t)((n + BLOCK - 1) / BLOCK) * (size_t)(ne0 / 32) * TILE_BYTES;
}

// Zeros the last block's columns, those past the n tokens included.
void rp_mm_act_amx_clear(int64_t ne0, int n, uint8_t *out)
{
    if (n % BLOCK) {
        size_t bs = (size_t)(ne0 / 32) * TILE_BYTES;
        memset(out + (size_t)(n / BLOCK) * bs, 0, bs);
    }
}

// Token t's column of the packed activations.
void rp_mm_act_amx(const float *x, int64_t ne0, int t, uint8_t *out)
{
    int64_t nk = ne0 / 32;
    uint8_t *col = out + (size_t)(t / BLOCK) * (size_t)nk * TILE_BYTES + (size_t)(t % BLOCK) * 4;
    const __m512i rows = _mm512_setr_epi32(0, 64, 128, 192, 256, 320, 384, 448, 512, 576, 640, 704, 768, 832, 896,
                                           960); // byte offsets of B's 16 rows
    for (int64_t k = 0; k < nk; k++) {
        __m512i v = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 32 * k + 16), _mm512_loadu_ps(x + 32 * k));
        _mm512_i32scatter_epi32(col + (size_t)k * TILE_BYTES, rows, v, 1);
    }
}

typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

// Tiles 0-3: C (16 rows x 16 floats); 4, 5: A (weights); 6, 7: B (activations).
static void configure_tiles(void)
{
    static _Thread_local bool done;
    if (done)
        return;
    tile_config c = {.palette = 1};
    for (int i = 0; i < 8; i++)
        c.colsb[i] = 64, c.rows[i] = BLOCK;
    _tile_loadconfig(&c);
    done = true;
}

// The part of a 16 x 16 C tile that is real: rows [0, nr) x tokens [0, nt) into y.
static void store_c(const float c[BLOCK][BLOCK], int nr, int nt, float *y, size_t ldy)
{
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++)
            y[(size_t)t * ldy + (size_t)r] = c[r][t];
}

// A weight tile of fewer than 16 rows: the rows copied into pad (rows past them zero).
static const uint8_t *pad_rows(uint8_t pad[TILE_BYTES], const uint8_t *w, size_t ws, int nr)
{
    for (int r = 0; r < nr; r++)
        memcpy(pad + 64 * r, w + (size_t)r * ws, 64);
    return pad;
}

// Weight rows [0, nr) (nr <= 32: one or two row blocks) against token blocks xb and, when
// two, xb + bs (nt <= 32 real tokens): C tiles (row block, token block) 0: (0, 0),
// 1: (0, 1), 2: (1, 0), 3: (1, 1). Chunk k prefetches chunk k + PF_AHEAD of the pass's
// weights and activations, or past the rows' end chunk k + PF_AHEAD - nk of the npf rows
// at pf (the next pass's, NULL for none).
static void tile_pass(const uint8_t *w, size_t ws, int nr, const uint8_t *xb, size_t bs, int nt, int64_t nk, float *y,
                      size_t ldy, const uint8_t *pf, int npf)
{
    _Alignas(64) uint8_t pad[2][TILE_BYTES];
    _Alignas(64) float c[BLOCK][BLOCK];
    int r0 = nr < BLOCK ? nr : BLOCK, r1 = nr - r0;
    bool two = nt > BLOCK;
    if (r0 < BLOCK || (r1 && r1 < BLOCK))
        memset(pad, 0, sizeof pad);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t k = 0; k < nk; k++) {
        const uint8_t *a = w + k * 64, *b = xb + (size_t)k * TILE_BYTES;
        int64_t kp = k + PF_AHEAD;
        if (kp < nk) {
            for (int i = 0; i < nr; i++)
                _mm_prefetch((const char *)a + (size_t)i * ws + PF_AHEAD * 64, _MM_HINT_T0);
            for (int i = 0; i < BLOCK * 64; i += 64) {
                _mm_prefetch((const char *)b + PF_AHEAD * TILE_BYTES + i, _MM_HINT_T0);
                if (two)
                    _mm_prefetch((const char *)b + bs + PF_AHEAD * TILE_BYTES + i, _MM_HINT_T0);
            }
        } else if (pf && kp - nk < nk) {
            for (int i = 0; i < npf; i++)
                _mm_prefetch((const char *)pf + (size_t)i * ws + (kp - nk) * 64, _MM_HINT_T0);
        }
        if (r0 < BLOCK)
            _tile_loadd(4, pad_rows(pad[0], a, ws, r0), 64);
        else
            _tile_loadd(4, a, ws);
        _tile_loadd(6, b, 64);
        _tile_dpbf16ps(0, 4, 6);
        if (two) {
            _tile_loadd(7, b + bs, 64);
            _tile_dpbf16ps(1, 4, 7);
        }
        if (r1) {
            if (r1 < BLOCK)
                _tile_loadd(5, pad_rows(pad[1], a + BLOCK * ws, ws, r1), 64);
            else
                _tile_loadd(5, a + BLOCK * ws, ws);
            _tile_dpbf16ps(2, 5, 6);
            if (two)
                _tile_dpbf16ps(3, 5, 7);
        }
    }
    int t0 = nt < BLOCK ? nt : BLOCK, t1 = nt - t0;
    _tile_stored(0, c, 64);
    store_c(c, r0, t0, y, ldy);
    if (two) {
        _tile_stored(1, c, 64);
        store_c(c, r0, t1, y + BLOCK * ldy, ldy);
    }
    if (r1) {
        _tile_stored(2, c, 64);
        store_c(c, r1, t0, y + BLOCK, ldy);
        if (two) {
            _tile_stored(3, c, 64);
            store_c(c, r1, t1, y + BLOCK * ldy + BLOCK, ldy);
        }
    }
}

// y[t * ldy + r] for rows [0, nr) of w and tokens [0, n) of the packed activations x: a
// block of rows that stays in L2 meets the tokens two blocks at a time, 32 rows a pass.
void rp_mm_amx(const uint8_t *w, size_t ws, int64_t nr, const uint8_t *x, int n, int64_t ne0, float *y, size_t ldy)
{
    configure_tiles();
    int64_t nk = ne0 / 32;
    size_t bs = (size_t)nk * TILE_BYTES;
    int64_t rb = (int64_t)((256u << 10) / ws) / 32 * 32;
    rb = rb < 32 ? 32 : rb;
    for (int64_t r0 = 0; r0 < nr; r0 += rb) {
        int64_t r1 = r0 + rb < nr ? r0 + rb : nr;
        for (int t = 0; t < n; t += 2 * BLOCK) {
            int nt = n - t < 2 * BLOCK ? n - t : 2 * BLOCK;
            for (int64_t r = r0; r < r1; r += 2 * BLOCK) {
                int64_t next = r + 2 * BLOCK; // the next pass's rows, in memory order
                int npf = next < nr ? (int)(nr - next < 2 * BLOCK ? nr - next : 2 * BLOCK) : 0;
                tile_pass(w + (size_t)r * ws, ws, (int)(r1 - r < 2 * BLOCK ? r1 - r : 2 * BLOCK),
                          x + (size_t)(t / BLOCK) * bs, bs, nt, nk, y + (size_t)t * ldy + r, ldy,
                          npf ? w + (size_t)next * ws : NULL, npf);
            }
        }
    }
}
