#include "tensor.h"

#include <stdlib.h>

ilab_status tl_tensor_alloc(tl_tensor *t, size_t rows, size_t cols)
{
    *t = tl_tensor_view(NULL, rows, cols);
    /* 64-byte alignment keeps vector loads on whole cache lines. */
    size_t bytes = (rows * cols * sizeof(float) + 63) & ~(size_t)63;
    t->data = aligned_alloc(64, bytes ? bytes : 64);
    if (!t->data)
        return ILAB_OUT_OF_MEMORY;
    for (size_t i = 0; i < rows * cols; i++)
        t->data[i] = 0.0f;
    t->owns_data = 1;
    return ILAB_OK;
}

void tl_tensor_free(tl_tensor *t)
{
    if (t->owns_data)
        free(t->data);
    t->data = NULL;
    t->owns_data = 0;
}

tl_tensor tl_tensor_view(const float *data, size_t rows, size_t cols)
{
    tl_tensor t = {0};
    t.data = (float *)data; /* weights are read-only by convention, never written */
    t.ndim = 2;
    t.shape[0] = rows;
    t.shape[1] = cols;
    t.stride[0] = cols;
    t.stride[1] = 1;
    return t;
}

tl_tensor tl_tensor_rows(const tl_tensor *t, size_t begin, size_t n)
{
    tl_tensor v = *t;
    v.data = t->data + begin * t->stride[0];
    v.shape[0] = n;
    v.owns_data = 0;
    return v;
}

float *tl_tensor_row(const tl_tensor *t, size_t i)
{
    return t->data + i * t->stride[0];
}

size_t tl_tensor_rows_of(const tl_tensor *t)
{
    return t->shape[0];
}

size_t tl_tensor_cols_of(const tl_tensor *t)
{
    return t->shape[1];
}
