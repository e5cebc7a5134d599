#include "q8_0_r16.h"

#include <stdlib.h>
#include <string.h>

size_t tl_r16_group_bytes(int cols)
{
    return TL_R16_ROWS * tl_dtype_row_bytes(TL_DTYPE_Q8_0, cols);
}

const unsigned char *tl_r16_group(const tl_matrix *m, int g)
{
    return (const unsigned char *)m->data + (size_t)g * tl_r16_group_bytes(m->cols);
}

const tl_block_q8_0 *tl_r16_tail_row(const tl_matrix *m, int r)
{
    return (const tl_block_q8_0 *)((const unsigned char *)m->data +
                                   (size_t)r * tl_dtype_row_bytes(TL_DTYPE_Q8_0, m->cols));
}

static int in_groups(const tl_matrix *m, int r)
{
    return r < m->rows / TL_R16_ROWS * TL_R16_ROWS;
}

int tl_r16_weight(const tl_matrix *m, int r, int c)
{
    int b = c / TL_Q8_0_BLOCK, i = c % TL_Q8_0_BLOCK;
    if (!in_groups(m, r))
        return tl_r16_tail_row(m, r)[b].qs[i];
    const unsigned char *qs = tl_r16_group(m, r / TL_R16_ROWS) + tl_r16_qs_offset(b);
    return (int)qs[(i / 4) * 64 + (r % TL_R16_ROWS) * 4 + i % 4] - 128;
}

uint16_t tl_r16_scale(const tl_matrix *m, int r, int b)
{
    if (!in_groups(m, r))
        return tl_r16_tail_row(m, r)[b].d;
    int nb = m->cols / TL_Q8_0_BLOCK;
    const unsigned char *d = tl_r16_group(m, r / TL_R16_ROWS) + tl_r16_d_offset(nb, b);
    uint16_t h;
    memcpy(&h, d + 2 * (size_t)(r % TL_R16_ROWS), 2);
    return h;
}

int tl_r16_repack_inplace(tl_matrix *m)
{
    size_t gb = tl_r16_group_bytes(m->cols);
    int nb = m->cols / TL_Q8_0_BLOCK;
    unsigned char *tmp = malloc(gb ? gb : 1);
    if (!tmp)
        return -1;
    for (int g = 0; g < m->rows / TL_R16_ROWS; g++) {
        unsigned char *dst = (unsigned char *)m->data + (size_t)g * gb; /* data is ours */
        memcpy(tmp, dst, gb);
        const tl_block_q8_0 *rows = (const tl_block_q8_0 *)(void *)tmp;
        for (int b = 0; b < nb; b++) {
            unsigned char *qs = dst + tl_r16_qs_offset(b), *scales = dst + tl_r16_d_offset(nb, b);
            for (int j = 0; j < TL_R16_ROWS; j++) {
                const tl_block_q8_0 *blk = &rows[(size_t)j * (size_t)nb + (size_t)b];
                for (int i = 0; i < TL_Q8_0_BLOCK; i++)
                    qs[(i / 4) * 64 + j * 4 + i % 4] = (unsigned char)(blk->qs[i] + 128);
                memcpy(scales + 2 * (size_t)j, &blk->d, 2);
            }
        }
    }
    free(tmp);
    m->type = TL_DTYPE_Q8_0_R16;
    return 0;
}
