#include "checkpoint.h"

#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Larger dimensions than this are not a model we can run, and keeping every
 * field below it means the size arithmetic below cannot overflow 64 bits. */
#define TL_MAX_DIM (1 << 20)

static const char *const field_names[7] = {
    "dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len",
};

ilab_status tl_config_check(const int32_t h[7], const char *label, tl_config *cfg, char *err,
                            size_t cap)
{
    for (int i = 0; i < 7; i++) {
        int32_t v = (i == 5 && h[i] < 0 && h[i] != INT32_MIN) ? -h[i] : h[i];
        if (v <= 0) {
            snprintf(err, cap, "model %s: header field %s is %d; it must be positive",
                     label, field_names[i], (int)h[i]);
            return ILAB_INVALID_ARGUMENT;
        }
        if (v > TL_MAX_DIM) {
            snprintf(err, cap, "model %s: header field %s is %d; the largest supported is %d",
                     label, field_names[i], (int)h[i], TL_MAX_DIM);
            return ILAB_INVALID_ARGUMENT;
        }
    }
    cfg->dim = h[0];
    cfg->hidden_dim = h[1];
    cfg->n_layers = h[2];
    cfg->n_heads = h[3];
    cfg->n_kv_heads = h[4];
    cfg->shared_classifier = h[5] > 0;
    cfg->vocab_size = h[5] > 0 ? h[5] : -h[5];
    cfg->seq_len = h[6];
    if (cfg->dim % cfg->n_heads != 0) {
        snprintf(err, cap, "model %s: header field n_heads (%d) does not divide dim (%d)",
                 label, cfg->n_heads, cfg->dim);
        return ILAB_INVALID_ARGUMENT;
    }
    if (cfg->n_kv_heads > cfg->n_heads || cfg->n_heads % cfg->n_kv_heads != 0) {
        snprintf(err, cap,
                 "model %s: header field n_kv_heads (%d) must divide n_heads (%d)",
                 label, cfg->n_kv_heads, cfg->n_heads);
        return ILAB_INVALID_ARGUMENT;
    }
    if ((cfg->dim / cfg->n_heads) % 2 != 0) {
        snprintf(err, cap, "model %s: head size dim/n_heads = %d is odd; rotary embeddings need pairs",
                 label, cfg->dim / cfg->n_heads);
        return ILAB_INVALID_ARGUMENT;
    }
    /* llama2.c's model: Llama with rotation of whole heads in adjacent pairs. */
    cfg->arch = TL_ARCH_LLAMA;
    cfg->head_size = cfg->n_rot = cfg->dim / cfg->n_heads;
    cfg->rope_mode = TL_ROPE_NORM;
    cfg->rope_base = 10000.0f;
    cfg->rope_freq_scale = 1.0f;
    cfg->rms_eps = 1e-5f;
    cfg->context_length = cfg->seq_len;
    return ILAB_OK;
}

size_t tl_checkpoint_weight_bytes(const tl_config *c)
{
    size_t dim = (size_t)c->dim, hid = (size_t)c->hidden_dim, L = (size_t)c->n_layers;
    size_t q_dim = (size_t)tl_config_q_dim(c), kv_dim = (size_t)tl_config_kv_dim(c);
    size_t per_layer = 2 * dim + q_dim * dim * 2 + kv_dim * dim * 2 + hid * dim * 3;
    return sizeof(float) * (L * per_layer + dim + (size_t)c->vocab_size * dim);
}

ilab_status tl_checkpoint_from_memory(const void *bytes, size_t size, const char *label,
                                      tl_checkpoint *out, char *err, size_t cap)
{
    tl_checkpoint ck;
    memset(&ck, 0, sizeof ck);
    snprintf(ck.label, sizeof ck.label, "%s", label);
    int32_t h[7];
    if (size < sizeof h) {
        snprintf(err, cap, "model %s: file is %zu bytes, shorter than the 28-byte header",
                 label, size);
        return ILAB_INVALID_ARGUMENT;
    }
    memcpy(h, bytes, sizeof h);
    ilab_status st = tl_config_check(h, label, &ck.cfg, err, cap);
    if (st != ILAB_OK)
        return st;

    const tl_config *c = &ck.cfg;
    uint64_t dim = (uint64_t)c->dim, hid = (uint64_t)c->hidden_dim, L = (uint64_t)c->n_layers;
    uint64_t vocab = (uint64_t)c->vocab_size, head = dim / (uint64_t)c->n_heads;
    uint64_t kv_dim = dim * (uint64_t)c->n_kv_heads / (uint64_t)c->n_heads;
    uint64_t floats = vocab * dim + L * dim + L * dim * dim * 2 + L * kv_dim * dim * 2 +
                      L * dim + L * hid * dim * 3 + dim +
                      (uint64_t)c->seq_len * head /* legacy RoPE cos+sin halves */ +
                      (c->shared_classifier ? 0 : vocab * dim);
    uint64_t expect = sizeof h + floats * sizeof(float);
    if ((uint64_t)size != expect) {
        snprintf(err, cap,
                 "model %s: file is %zu bytes but its header (dim %d, hidden_dim %d, n_layers %d, "
                 "n_heads %d, n_kv_heads %d, vocab_size %d, seq_len %d) needs %llu bytes%s",
                 label, size, c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads,
                 c->shared_classifier ? c->vocab_size : -c->vocab_size, c->seq_len,
                 (unsigned long long)expect,
                 (uint64_t)size < expect ? " (truncated?)" : " (trailing data)");
        return ILAB_INVALID_ARGUMENT;
    }

    const float *p = (const float *)((const unsigned char *)bytes + sizeof h);
    tl_weights *w = &ck.w;
    w->layers = calloc((size_t)L, sizeof *w->layers);
    if (!w->layers) {
        snprintf(err, cap, "model %s: out of memory", label);
        return ILAB_OUT_OF_MEMORY;
    }
    /* run.c's order: each kind of tensor for every layer, then the next kind. */
    int D = c->dim, H = c->hidden_dim, KV = (int)kv_dim;
    w->token_embedding = (tl_matrix){TL_DTYPE_F32, p, c->vocab_size, D};
    p += vocab * dim;
    for (uint64_t l = 0; l < L; l++) w->layers[l].rms_att = p + l * dim;
    p += L * dim;
    for (uint64_t l = 0; l < L; l++) w->layers[l].wq = (tl_matrix){TL_DTYPE_F32, p + l * dim * dim, D, D};
    p += L * dim * dim;
    for (uint64_t l = 0; l < L; l++) w->layers[l].wk = (tl_matrix){TL_DTYPE_F32, p + l * kv_dim * dim, KV, D};
    p += L * kv_dim * dim;
    for (uint64_t l = 0; l < L; l++) w->layers[l].wv = (tl_matrix){TL_DTYPE_F32, p + l * kv_dim * dim, KV, D};
    p += L * kv_dim * dim;
    for (uint64_t l = 0; l < L; l++) w->layers[l].wo = (tl_matrix){TL_DTYPE_F32, p + l * dim * dim, D, D};
    p += L * dim * dim;
    for (uint64_t l = 0; l < L; l++) w->layers[l].rms_ffn = p + l * dim;
    p += L * dim;
    for (uint64_t l = 0; l < L; l++) w->layers[l].w1 = (tl_matrix){TL_DTYPE_F32, p + l * hid * dim, H, D};
    p += L * hid * dim;
    for (uint64_t l = 0; l < L; l++) w->layers[l].w2 = (tl_matrix){TL_DTYPE_F32, p + l * dim * hid, D, H};
    p += L * dim * hid;
    for (uint64_t l = 0; l < L; l++) w->layers[l].w3 = (tl_matrix){TL_DTYPE_F32, p + l * hid * dim, H, D};
    p += L * hid * dim;
    w->rms_final = p;
    p += dim;
    p += (uint64_t)c->seq_len * head; /* freq_cis_real + freq_cis_imag, unused */
    w->wcls = c->shared_classifier ? w->token_embedding
                                   : (tl_matrix){TL_DTYPE_F32, p, c->vocab_size, D};

    ck.bytes = bytes;
    ck.size = size;
    *out = ck;
    return ILAB_OK;
}

ilab_status tl_checkpoint_open(const char *path, tl_checkpoint *out, char *err, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, cap, "model %s: cannot open: %s", path, strerror(errno));
        return ILAB_IO;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        snprintf(err, cap, "model %s: not a regular file", path);
        close(fd);
        return ILAB_IO;
    }
    size_t size = (size_t)sb.st_size;
    if (size < 28) {
        close(fd);
        snprintf(err, cap, "model %s: file is %zu bytes, shorter than the 28-byte header",
                 path, size);
        return ILAB_INVALID_ARGUMENT;
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        snprintf(err, cap, "model %s: mmap failed: %s", path, strerror(errno));
        return ILAB_IO;
    }
    ilab_status st = memcmp(map, "GGUF", 4) == 0
                         ? tl_checkpoint_from_gguf(map, size, path, out, err, cap)
                         : tl_checkpoint_from_memory(map, size, path, out, err, cap);
    if (st != ILAB_OK) {
        munmap(map, size);
        return st;
    }
    out->mapping = map;
    return ILAB_OK;
}

void tl_checkpoint_close(tl_checkpoint *ck)
{
    free(ck->w.layers);
    free(ck->converted);
    tl_gguf_free(ck->gguf);
    if (ck->mapping)
        munmap(ck->mapping, ck->size);
    memset(ck, 0, sizeof *ck);
}
