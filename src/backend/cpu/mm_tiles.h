/*
 * mm_tiles.h - the tile dispatcher shared by the SIMD matmul files.
 *
 * Each ISA file (matmul_avx2.c, matmul_avx512.c) defines its own register tiles
 * and instantiates DEFINE_KERNEL with them, so the dispatcher is compiled with
 * that file's instruction set. A tile computes nr rows x nt tokens; the split
 * below keeps the per-(row, token) sequence of operations the same for any nt
 * (the determinism contract in backend.h): decode (nt == 1) takes both rows at
 * once, otherwise one row against up to MAXNT tokens at a time.
 */
#ifndef RP_MM_TILES_H
#define RP_MM_TILES_H

#define DEFINE_KERNEL(name, tile, wt, MAXNT)                                                                           \
    static void name(const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, int64_t ne0, float *y,  \
                     size_t ldy)                                                                                       \
    {                                                                                                                  \
        if (nt == 1) {                                                                                                 \
            if (nr == 2)                                                                                               \
                tile(w, ws, x, xs, ne0, y, ldy, 2, 1, wt);                                                             \
            else                                                                                                       \
                tile(w, ws, x, xs, ne0, y, ldy, 1, 1, wt);                                                             \
            return;                                                                                                    \
        }                                                                                                              \
        for (int r = 0; r < nr; r++) {                                                                                 \
            for (int t = 0; t < nt;) {                                                                                 \
                int m = nt - t < (MAXNT) ? nt - t : (MAXNT);                                                           \
                const uint8_t *wr = w + (size_t)r * ws, *xt = x + (size_t)t * xs;                                      \
                float *yt = y + (size_t)t * ldy + r;                                                                   \
                if (m == 1)                                                                                            \
                    tile(wr, ws, xt, xs, ne0, yt, ldy, 1, 1, wt);                                                      \
                else if (m == 2)                                                                                       \
                    tile(wr, ws, xt, xs, ne0, yt, ldy, 1, 2, wt);                                                      \
                else if (m == 3)                                                                                       \
                    tile(wr, ws, xt, xs, ne0, yt, ldy, 1, 3, wt);                                                      \
                else                                                                                                   \
                    tile(wr, ws, xt, xs, ne0, yt, ldy, 1, 4, wt);                                                      \
                t += m;                                                                                                \
            }                                                                                                          \
        }                                                                                                              \
    }

#endif
