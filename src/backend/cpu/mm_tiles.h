/*
 * mm_tiles.h - the tile dispatcher shared by the SIMD matmul files.
 *
 * Each ISA file (matmul_avx2.c, matmul_avx512.c) defines its own register tiles
 * and instantiates DEFINE_KERNEL_FIT (or DEFINE_KERNEL) with them, so the
 * dispatcher is compiled with that file's instruction set. A tile computes NR rows
 * x NT tokens; the split below keeps the per-(row, token) sequence of operations
 * the same for any nr and nt (the determinism contract in quant.h): decode (nt == 1)
 * walks the rows one at a time (one weight stream per core), otherwise one row
 * against up to MAXNT tokens at a time (or two rows against two, see below).
 * (AVX-512 BF16 has a dispatcher of its own, in matmul_avx512.c.)
 */
#ifndef RP_MM_TILES_H
#define RP_MM_TILES_H

// The largest tile these dispatchers instantiate (the tiles' register arrays).
#define MM_TILE_NR 2
#define MM_TILE_NT 8

/* F32 / F16 weights, every kernel at every level (matmul_avx2.c, matmul_avx512.c): the
 * reduction order. A row is cut into blocks of RP_MM_FLT_BLOCK elements from its start
 * (the last one may be shorter); in a block, slot s (the 16 elements from 16 s; past the
 * row's end zeros) is multiplied-added, s = 0, 1, ... in order, into one 16-lane
 * accumulator from zero (AVX2 keeps it as two 8-lane halves), and the block's sum is
 * hsum16 of it (avx512_util.h's order); the output is the blocks' sums added in order,
 * (b0 + b1) + b2 ... So a prefill GEMM can visit a row a block at a time and keep the
 * partial sums in y, and each output is the same for any tile or token count. */
#define RP_MM_FLT_BLOCK 1024

/* For tiles that keep every (row, token) sum in registers without reloading the weights:
 * a pass over one row takes as many tokens as keep their activation rows within BUDGET
 * bytes (XBYTES(ne0): one activation row's bytes; from 2 up to MAXNT, at most 8), so
 * each weight load serves them all. Where only two fit (long rows), two-row tiles take
 * the rows in pairs so that each activation load serves both rows too. Decode (one
 * token) goes straight to its tile, in a function of its own (the batched path's stack
 * frame would cost it). */
#define DEFINE_KERNEL_FIT(name, tile, wt, MAXNT, XBYTES, BUDGET)                                                       \
    static __attribute__((noinline)) void name##_multi(const uint8_t *w, size_t ws, int nr, const uint8_t *x,          \
                                                       size_t xs, int nt, int64_t ne0, float *y, size_t ldy)           \
    {                                                                                                                  \
        int64_t fit = (BUDGET) / XBYTES(ne0);                                                                          \
        int maxnt = fit < 2 ? 2 : fit > (MAXNT) ? (MAXNT) : (int)fit;                                                  \
        int r = 0;                                                                                                     \
        for (; maxnt == 2 && r + 2 <= nr; r += 2) {                                                                    \
            const uint8_t *wr = w + (size_t)r * ws;                                                                    \
            int t = 0;                                                                                                 \
            for (; t + 2 <= nt; t += 2)                                                                                \
                tile(wr, ws, x + (size_t)t * xs, xs, ne0, y + (size_t)t * ldy + r, ldy, 2, 2, wt);                     \
            if (t < nt)                                                                                                \
                tile(wr, ws, x + (size_t)t * xs, xs, ne0, y + (size_t)t * ldy + r, ldy, 2, 1, wt);                     \
        }                                                                                                              \
        for (; r < nr; r++) {                                                                                          \
            const uint8_t *wr = w + (size_t)r * ws;                                                                    \
            for (int t = 0; t < nt;) {                                                                                 \
                int m = nt - t < maxnt ? nt - t : maxnt;                                                               \
                const uint8_t *xt = x + (size_t)t * xs;                                                                \
                float *yt = y + (size_t)t * ldy + r;                                                                   \
                switch (m) { /* cases past MAXNT are never taken and compile to nothing */                             \
                case 1:                                                                                                \
                    tile(wr, ws, xt, xs, ne0, yt, ldy, 1, 1, wt);                                                      \
                    break;                                                                                             \
                case 2:                                                                                                \
                    tile(wr, ws, xt, xs, ne0, yt, ldy, 1, 2, wt);                                                      \
                    break;                                                                                             \
                case 3:                                                                                                \
                    tile(wr, ws, xt, xs, ne0, yt, ldy, 1, 3, wt);                                                      \
                    break;                                                                                             \
                case 4:                                                                                                \
                    tile(wr, ws, xt, xs, ne0, yt, ldy, 1, 4, wt);                                                      \
                    break;                                                                                             \
                case 5:                                                                                                \
                    if ((MAXNT) >= 5)                                                                                  \
                        tile(wr, ws, xt, xs, ne0, yt, ldy, 1, 5, wt);                                                  \
                    break;                                                                                             \
                case 6:                                                                                                \
                    if ((MAXNT) >= 6)                                                                                  \
                        tile(wr, ws, xt, xs, ne0, yt, ldy, 1, 6, wt);                                                  \
                    break;                                                                                             \
                case 7:                                                                                                \
                    if ((MAXNT) >= 7)                                                                                  \
                        tile(wr, ws, xt, xs, ne0, yt, ldy, 1, 7, wt);                                                  \
                    break;                                                                                             \
                default:                                                                                               \
                    if ((MAXNT) >= 8)                                                                                  \
                        tile(wr, ws, xt, xs, ne0, yt, ldy, 1, 8, wt);                                                  \
                    break;                                                                                             \
                }                                                                                                      \
                t += m;                                                                                                \
            }                                                                                                          \
        }                                                                                                              \
    }                                                                                                                  \
    static void name(const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, int64_t ne0, float *y,  \
                     size_t ldy)                                                                                       \
    {                                                                                                                  \
        if (nt > 1) {                                                                                                  \
            name##_multi(w, ws, nr, x, xs, nt, ne0, y, ldy);                                                           \
            return;                                                                                                    \
        }                                                                                                              \
        for (int r = 0; r < nr; r++)                                                                                   \
            tile(w + (size_t)r * ws, ws, x, xs, ne0, y + r, ldy, 1, 1, wt);                                            \
    }

/* One row against up to MAXNT tokens per pass, whatever the row length. */
#define MM_ROW_UNBOUNDED(ne0) ((int64_t)1)
#define DEFINE_KERNEL(name, tile, wt, MAXNT) DEFINE_KERNEL_FIT(name, tile, wt, MAXNT, MM_ROW_UNBOUNDED, (int64_t)(MAXNT))

#endif
