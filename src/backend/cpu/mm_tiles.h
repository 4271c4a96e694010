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

/* For a tile that holds two rows x two tokens in registers: with more than one token a
 * pair of rows meets the tokens two at a time, so each activation load serves both rows
 * and each weight load two tokens; other requests go to name##_rows, a DEFINE_KERNEL of
 * the same tile. The per-(row, token) sequence is the tile's, the same for every shape. */
#define DEFINE_KERNEL_2ROW(name, tile, wt)                                                                             \
    static void name(const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, int64_t ne0, float *y,  \
                     size_t ldy)                                                                                       \
    {                                                                                                                  \
        if (nr == 2 && nt > 1) {                                                                                       \
            int t = 0;                                                                                                 \
            for (; t + 2 <= nt; t += 2)                                                                                \
                tile(w, ws, x + (size_t)t * xs, xs, ne0, y + (size_t)t * ldy, ldy, 2, 2, wt);                          \
            if (t < nt)                                                                                                \
                tile(w, ws, x + (size_t)t * xs, xs, ne0, y + (size_t)t * ldy, ldy, 2, 1, wt);                          \
            return;                                                                                                    \
        }                                                                                                              \
        name##_rows(w, ws, nr, x, xs, nt, ne0, y, ldy);                                                                \
    }

#endif
