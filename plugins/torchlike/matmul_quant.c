#include "matmul_quant.h"

#include "quant_blocks.h"

/* ---- the float path: a block at a time -------------------------------- */

void tl_matmul_dequant(const tl_matrix *w, const float *x, size_t x_stride, int T, float *out,
                       int out_stride, int r0, int r1)
{
    int per = tl_dtype_block_values(w->type), nb = w->cols / per;
    /* a float row of 1 value per "block" would be dequantised a value at
     * a time: take 256 of them instead (cols is a multiple of per) */
    int step = per == 1 ? 256 : per;
    size_t step_bytes = tl_dtype_row_bytes(w->type, per) * (size_t)(step / per);
    float buf[TL_QK_K];
    for (int r = r0; r < r1; r++) {
        const unsigned char *row = tl_matrix_row(w, r);
        for (int t = 0; t < T; t++)
            out[(size_t)t * (size_t)out_stride + (size_t)r] = 0.0f;
        for (int v = 0; v < nb * per; v += step) {
            int n = nb * per - v < step ? nb * per - v : step;
            tl_dequantize_row(w->type, row + (size_t)(v / step) * step_bytes, buf, n);
            for (int t = 0; t < T; t++) {
                const float *xt = x + (size_t)t * x_stride + v;
                float s = 0.0f;
                for (int i = 0; i < n; i++)
                    s += buf[i] * xt[i];
                out[(size_t)t * (size_t)out_stride + (size_t)r] += s;
            }
        }
    }
}
