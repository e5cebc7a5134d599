/* torchlike — a weight matrix in one of the element types torchlike runs:
 * fp32, fp16 and Q8_0. Type ids and the Q8_0 block are those of GGUF (ggml),
 * so a GGUF file's tensors are used where they are mapped, and a matrix
 * quantised at load is byte for byte what a GGUF Q8_0 file holds. */
#ifndef TORCHLIKE_WEIGHTS_H
#define TORCHLIKE_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "inferlab/status.h"

typedef enum tl_dtype {
    TL_DTYPE_F32 = 0,
    TL_DTYPE_F16 = 1,
    TL_DTYPE_Q8_0 = 8,
    /* Q8_0 with rows interleaved by 16 (q8_0_r16.h): the layout the Q8_0
     * kernels run on, made at load; not a GGUF type, never in a file. */
    TL_DTYPE_Q8_0_R16 = 0x108,
} tl_dtype;

/* Q8_0: 32 weights as int8 in [-127, 127] times one fp16 scale. */
#define TL_Q8_0_BLOCK 32
typedef struct tl_block_q8_0 {
    uint16_t d;                  /* scale, IEEE fp16 bits */
    int8_t qs[TL_Q8_0_BLOCK];
} tl_block_q8_0;                 /* 34 bytes, 2-byte aligned, as in GGUF */

/* Row-major [rows][cols]; `data` is borrowed (a mapped file or the model's
 * own converted copy) and outlives the matrix. */
typedef struct tl_matrix {
    tl_dtype type;
    const void *data;
    int rows, cols;
} tl_matrix;

const char *tl_dtype_name(tl_dtype t);
/* Bytes of one row of `cols` elements, or 0 when `t` cannot hold such a
 * row (Q8_0 needs a multiple of 32). Q8_0_R16 rows take Q8_0's bytes. */
size_t tl_dtype_row_bytes(tl_dtype t, int cols);
/* Start of row r (not for the interleaved groups of a Q8_0_R16 matrix). */
const void *tl_matrix_row(const tl_matrix *m, int r);

float tl_fp16_to_fp32(uint16_t h);
uint16_t tl_fp32_to_fp16(float f); /* round to nearest even */

/* One row of `cols` floats into Q8_0 blocks: scale = max|x| / 127, values
 * rounded to nearest (cols a multiple of 32). */
void tl_quantize_row_q8_0(const float *x, tl_block_q8_0 *out, int cols);
/* Row `r` of any matrix as floats. */
void tl_matrix_row_f32(const tl_matrix *m, int r, float *out);

#endif
