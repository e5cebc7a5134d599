/* torchlike — llama2.c checkpoint files: header, validation, mmapped weights.
 *
 * Layout (run.c order): 7 x int32 header (dim, hidden_dim, n_layers, n_heads,
 * n_kv_heads, vocab_size, seq_len; a negative vocab_size means a separate
 * classifier follows), then fp32 token_embedding, rms_att, wq, wk, wv, wo,
 * rms_ffn, w1, w2, w3, rms_final, the legacy RoPE table (skipped), wcls. */
#ifndef TORCHLIKE_CHECKPOINT_H
#define TORCHLIKE_CHECKPOINT_H

#include <stddef.h>

#include "inferlab/status.h"

typedef struct tl_config {
    int dim;
    int hidden_dim;
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int vocab_size;
    int seq_len;
    int shared_classifier; /* 1 when the classifier is the embedding table */
} tl_config;

/* Borrowed pointers into the mapped file; all row-major [out][in]. */
typedef struct tl_weights {
    const float *token_embedding; /* [vocab][dim] */
    const float *rms_att;         /* [layer][dim] */
    const float *wq;              /* [layer][dim][dim] */
    const float *wk;              /* [layer][kv_dim][dim] */
    const float *wv;              /* [layer][kv_dim][dim] */
    const float *wo;              /* [layer][dim][dim] */
    const float *rms_ffn;         /* [layer][dim] */
    const float *w1;              /* [layer][hidden][dim] */
    const float *w2;              /* [layer][dim][hidden] */
    const float *w3;              /* [layer][hidden][dim] */
    const float *rms_final;       /* [dim] */
    const float *wcls;            /* [vocab][dim] */
} tl_weights;

typedef struct tl_checkpoint {
    tl_config cfg;
    tl_weights w;
    const unsigned char *bytes; /* the whole file (mapped or embedded) */
    size_t size;
    void *mapping;              /* non-NULL when we own an mmap */
    char label[256];            /* path, or "<embedded default>", for messages */
} tl_checkpoint;

/* Map and validate `path`. On error writes a message naming the file and the
 * field into `err` and returns ILAB_IO (unreadable) or ILAB_INVALID_ARGUMENT. */
ilab_status tl_checkpoint_open(const char *path, tl_checkpoint *out,
                               char *err, size_t err_cap);

/* Validate bytes owned by someone else (the embedded default). */
ilab_status tl_checkpoint_from_memory(const void *bytes, size_t size, const char *label,
                                      tl_checkpoint *out, char *err, size_t err_cap);

void tl_checkpoint_close(tl_checkpoint *ck);

/* Bytes of weights one decode step reads (every matrix once), for benchmarks. */
size_t tl_checkpoint_weight_bytes(const tl_config *cfg);

#endif
