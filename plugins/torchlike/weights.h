/* torchlike — a weight matrix in one of the element types torchlike runs:
 * fp32, fp16, bf16 and ggml's quantised block types (quant_blocks.h). Type
 * ids and blocks are those of GGUF (ggml), so a GGUF file's tensors are used
 * where they are mapped, and a matrix quantised at load is byte for byte
 * what a GGUF Q8_0 file holds. */
#ifndef TORCHLIKE_WEIGHTS_H
#define TORCHLIKE_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "inferlab/status.h"

typedef enum tl_dtype {
    TL_DTYPE_F32 = 0,
    TL_DTYPE_F16 = 1,
    TL_DTYPE_Q4_0 = 2,
    TL_DTYPE_Q4_1 = 3,
    TL_DTYPE_Q5_0 = 6,
    TL_DTYPE_Q5_1 = 7,
    TL_DTYPE_Q8_0 = 8,
    TL_DTYPE_Q2_K = 10,
    TL_DTYPE_Q3_K = 11,
    TL_DTYPE_Q4_K = 12,
    TL_DTYPE_Q5_K = 13,
    TL_DTYPE_Q6_K = 14,
    TL_DTYPE_BF16 = 30,
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

/* The GGUF (ggml) tensor types torchlike runs as weights. A loader accepts a
 * tensor whose type passes tl_weight_type_supported and refuses any other
 * with a message naming tl_weight_type_name(type) and listing
 * TL_WEIGHT_TYPES_SUPPORTED. */
#define TL_WEIGHT_TYPES_SUPPORTED \
    "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K"
int tl_weight_type_supported(uint32_t ggml_type);
/* ggml's name of any type id ("IQ2_XS", "TQ1_0", ...), "unknown" past them. */
const char *tl_weight_type_name(uint32_t ggml_type);
/* Values per block of a supported type (1 for the float types). */
int tl_dtype_block_values(tl_dtype t);

/* Bytes of one row of `cols` elements, or 0 when `t` cannot hold such a
 * row (a quantised type needs a whole number of blocks: 32 values, or 256
 * for the K types). Q8_0_R16 rows take Q8_0's bytes. */
size_t tl_dtype_row_bytes(tl_dtype t, int cols);
/* Start of row r (not for the interleaved groups of a Q8_0_R16 matrix). */
const void *tl_matrix_row(const tl_matrix *m, int r);

float tl_fp16_to_fp32(uint16_t h);
uint16_t tl_fp32_to_fp16(float f); /* round to nearest even */

/* One row of `cols` floats into Q8_0 blocks: scale = max|x| / 127, values
 * rounded to nearest (cols a multiple of 32). */
void tl_quantize_row_q8_0(const float *x, tl_block_q8_0 *out, int cols);
/* `n` values of one row of type `t` (n a whole number of blocks) as
 * floats: ggml's reference dequantisation, bit for bit (dequant_ref.c). */
void tl_dequantize_row(tl_dtype t, const void *src, float *dst, int n);
/* Row `r` of any matrix as floats. */
void tl_matrix_row_f32(const tl_matrix *m, int r, float *out);

#endif
