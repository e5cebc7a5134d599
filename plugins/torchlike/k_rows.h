/* torchlike — what the multi-row K-type kernels share (matmul_k_avx2.c,
 * matmul_k_avx512.c): the software prefetch of interleaved rows and the
 * loop over row groups and tokens. Each file supplies only its pass: nr
 * (1..TL_K_ROWS) rows against one token. */
#ifndef TORCHLIKE_K_ROWS_H
#define TORCHLIKE_K_ROWS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "matmul_quant.h"
#include "quant_blocks.h"

#define TL_K_ROWS 4 /* weight rows a pass */

/* A pass reads its rows interleaved, block by block: four streams, which
 * the hardware prefetchers follow poorly. Without this, one thread streamed
 * a Q6_K model at about 6.6 GB/s (bench/gguf, 110M shape, 73 tokens/s).
 * Each block asks for the block TL_PREFETCH_AHEAD bytes after it, next to
 * the block's own work; a burst of prefetches per pass instead stalled on
 * the fill buffers. Nothing is fetched at or past `stop` (the end of this
 * call's rows: the next rows are usually another thread's), nor when stop
 * is NULL. */
#define TL_PREFETCH_AHEAD 8192
static inline void tl_prefetch_block(const unsigned char *blk, size_t bytes, const unsigned char *stop)
{
    const unsigned char *p = blk + TL_PREFETCH_AHEAD;
    if (!stop || p + bytes > stop)
        return;
#pragma GCC unroll 4
    for (size_t o = 0; o < bytes; o += 64)
        __builtin_prefetch(p + o);
}

/* nr rows of type t from `row` (rows row_bytes apart) against one token's
 * q, d and bs; the nr results to res. A row's float must not depend on nr
 * or on the other rows of its pass. */
typedef void (*tl_k_pass_fn)(tl_dtype t, const unsigned char *row, size_t row_bytes,
                             const unsigned char *stop, int nr, const int8_t *q, const float *d,
                             const int16_t *bs, int nb, float *res);

/* out[t * out_stride + r] = w[r] . a[t] for rows [r0, r1), tokens [0, T),
 * TL_K_ROWS rows a pass: each group of rows is read from memory once (with
 * prefetch, for the first token) and found in L1 by the later tokens. */
static inline void tl_k_rows_drive(tl_k_pass_fn pass, const tl_matrix *w, const tl_q8k_act *a, int T,
                                   float *out, int out_stride, int r0, int r1)
{
    int nb = w->cols / TL_QK_K;
    size_t row_bytes = tl_dtype_row_bytes(w->type, w->cols);
    const unsigned char *stop = (const unsigned char *)w->data + (size_t)r1 * row_bytes;
    for (int r = r0; r < r1; r += TL_K_ROWS) {
        int nr = r1 - r < TL_K_ROWS ? r1 - r : TL_K_ROWS;
        const unsigned char *row = (const unsigned char *)w->data + (size_t)r * row_bytes;
        for (int tok = 0; tok < T; tok++) {
            float res[TL_K_ROWS];
            pass(w->type, row, row_bytes, tok ? NULL : stop, nr, a->q + (size_t)tok * (size_t)w->cols,
                 a->d + (size_t)tok * (size_t)nb, a->bsums + (size_t)tok * (size_t)(w->cols / 16), nb, res);
            memcpy(out + (size_t)tok * (size_t)out_stride + (size_t)r, res, (size_t)nr * sizeof *res);
        }
    }
}

#endif
