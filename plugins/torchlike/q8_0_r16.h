/* torchlike — Q8_0 weights with their rows interleaved by 16, the layout
 * the Q8_0 kernels run on (ADR 0016). Same blocks, same bytes per block,
 * other order:
 *
 *   for every group of 16 rows, for every pair of blocks (b, b+1) of 32
 *   columns (the last block alone when a row has an odd number):
 *     qs[b][k][j][0..3] = weights 4k..4k+3 of row j's block b, plus 128
 *     qs[b+1][...]        the same for block b+1
 *     d[b][j], d[b+1][j] = row j's block scales (fp16)
 *
 * so one 64-byte load holds four weights of each of 16 rows, and an
 * integer dot-product instruction (vpdpbusd) multiplies them by the same
 * four activations broadcast: its 16 lanes are 16 rows' sums, with no
 * horizontal additions. The weights are stored offset by 128 (unsigned),
 * the operand vpdpbusd wants unsigned; the offset comes back out as 128
 * times the block's sum of activations, computed once per input.
 *
 * A group takes exactly the bytes its 16 Q8_0 rows took, so a matrix is
 * repacked in place, group by group; rows past the last whole group (when
 * the row count is not a multiple of 16) stay plain Q8_0 rows after the
 * groups. The scales sit right after their weights, so a matrix is one
 * sequential stream (a separate run of scales per group was a second
 * stream whose first line missed at every group); a pair is 1088 bytes,
 * 17 whole cache lines, so the 64-byte loads stay on line boundaries. */
#ifndef TORCHLIKE_Q8_0_R16_H
#define TORCHLIKE_Q8_0_R16_H

#include <stddef.h>
#include <stdint.h>

#include "weights.h"

#define TL_R16_ROWS 16
#define TL_R16_QS_BYTES (TL_R16_ROWS * TL_Q8_0_BLOCK) /* 512 per block of a group */

/* Where block b of a group (of nb blocks per row) keeps its 512 weight
 * bytes and its 16 scales, from the group's start. */
static inline size_t tl_r16_qs_offset(int b)
{
    return (size_t)(b / 2) * (2 * TL_R16_QS_BYTES + 64) + (size_t)(b % 2) * TL_R16_QS_BYTES;
}
static inline size_t tl_r16_d_offset(int nb, int b)
{
    int paired = b / 2 * 2 + 1 < nb;
    return (size_t)(b / 2) * (2 * TL_R16_QS_BYTES + 64) + (paired ? 2 : 1) * TL_R16_QS_BYTES +
           (size_t)(b % 2) * 32;
}

/* Bytes of one group of 16 rows of `cols` columns (a multiple of 32). */
size_t tl_r16_group_bytes(int cols);
/* Start of group g's weights; its scales follow at + nb * 512. */
const unsigned char *tl_r16_group(const tl_matrix *m, int g);
/* Row r of a matrix whose rows past the whole groups are plain Q8_0. */
const tl_block_q8_0 *tl_r16_tail_row(const tl_matrix *m, int r);

/* Weight (r, c) and the scale of its block, from either part. */
int tl_r16_weight(const tl_matrix *m, int r, int c);
uint16_t tl_r16_scale(const tl_matrix *m, int r, int b);

/* Repack a Q8_0 matrix of writable bytes into this layout in place; `m`
 * becomes TL_DTYPE_Q8_0_R16. Returns -1 (and changes nothing) when no
 * scratch memory for one group could be had. */
int tl_r16_repack_inplace(tl_matrix *m);

#endif
