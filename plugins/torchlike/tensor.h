/* torchlike — a small eager tensor: fp32 data with a shape and strides, in
 * the spirit of PyTorch but only what a Llama decoder needs. A tensor either
 * owns its data (tl_tensor_alloc) or is a view of someone else's (weights in
 * the mapped checkpoint, a row range of an activation). Views never free. */
#ifndef TORCHLIKE_TENSOR_H
#define TORCHLIKE_TENSOR_H

#include <stddef.h>

#include "inferlab/status.h"

#define TL_MAX_DIMS 3

typedef struct tl_tensor {
    float *data;
    int ndim;
    size_t shape[TL_MAX_DIMS];
    size_t stride[TL_MAX_DIMS]; /* in elements; contiguous = row-major */
    int owns_data;
} tl_tensor;

/* A zero-filled contiguous 2-D tensor [rows][cols]. */
ilab_status tl_tensor_alloc(tl_tensor *t, size_t rows, size_t cols);
void tl_tensor_free(tl_tensor *t);

/* A contiguous 2-D view of borrowed data (e.g. a weight matrix). */
tl_tensor tl_tensor_view(const float *data, size_t rows, size_t cols);

/* Rows [begin, begin + n) of a 2-D tensor, as a view. */
tl_tensor tl_tensor_rows(const tl_tensor *t, size_t begin, size_t n);

/* Pointer to row i of a 2-D tensor. */
float *tl_tensor_row(const tl_tensor *t, size_t i);

size_t tl_tensor_rows_of(const tl_tensor *t);
size_t tl_tensor_cols_of(const tl_tensor *t);

#endif
