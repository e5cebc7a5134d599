#include "convert_gguf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_writer.h"

/* general.file_type values (llama.cpp's LLAMA_FTYPE_*). */
static uint32_t file_type(tl_dtype t)
{
    return t == TL_DTYPE_F16 ? 1 : t == TL_DTYPE_Q8_0 ? 7 : 0;
}

/* A matrix of the checkpoint (fp32) converted to `type`. */
static int put_matrix(tl_gguf_writer *w, const char *name, const tl_matrix *m, tl_dtype type)
{
    size_t rb = tl_dtype_row_bytes(type, m->cols);
    unsigned char *buf = malloc(rb * (size_t)m->rows + 1);
    float *row = malloc((size_t)m->cols * sizeof *row);
    if (!buf || !row || rb == 0) {
        free(buf);
        free(row);
        return -1;
    }
    for (int r = 0; r < m->rows; r++) {
        tl_matrix_row_f32(m, r, row);
        unsigned char *dst = buf + rb * (size_t)r;
        if (type == TL_DTYPE_F32) {
            memcpy(dst, row, rb);
        } else if (type == TL_DTYPE_F16) {
            for (int i = 0; i < m->cols; i++) {
                uint16_t h = tl_fp32_to_fp16(row[i]);
                memcpy(dst + 2 * (size_t)i, &h, 2);
            }
        } else {
            tl_quantize_row_q8_0(row, (tl_block_q8_0 *)(void *)dst, m->cols);
        }
    }
    uint64_t ne[2] = {(uint64_t)m->cols, (uint64_t)m->rows};
    tl_gw_tensor(w, name, 2, ne, (uint32_t)type, buf, rb * (size_t)m->rows);
    free(buf);
    free(row);
    return 0;
}

static void put_norm(tl_gguf_writer *w, const char *name, const float *v, int dim)
{
    uint64_t ne[1] = {(uint64_t)dim};
    tl_gw_tensor(w, name, 1, ne, 0, v, (size_t)dim * sizeof(float));
}

static void put_metadata(tl_gguf_writer *w, const tl_config *c, tl_dtype type, const char *name)
{
    tl_gw_string(w, "general.architecture", "llama");
    tl_gw_string(w, "general.name", name);
    tl_gw_u32(w, "general.file_type", file_type(type));
    tl_gw_u32(w, "llama.vocab_size", (uint32_t)c->vocab_size);
    tl_gw_u32(w, "llama.context_length", (uint32_t)c->seq_len);
    tl_gw_u32(w, "llama.embedding_length", (uint32_t)c->dim);
    tl_gw_u32(w, "llama.block_count", (uint32_t)c->n_layers);
    tl_gw_u32(w, "llama.feed_forward_length", (uint32_t)c->hidden_dim);
    tl_gw_u32(w, "llama.rope.dimension_count", (uint32_t)(c->dim / c->n_heads));
    tl_gw_u32(w, "llama.attention.head_count", (uint32_t)c->n_heads);
    tl_gw_u32(w, "llama.attention.head_count_kv", (uint32_t)c->n_kv_heads);
    tl_gw_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    tl_gw_f32(w, "llama.rope.freq_base", 10000.0f);
}

/* SentencePiece's pieces: a space is U+2581; llama2.c's BOS/EOS pieces
 * ("\n<s>\n") are SentencePiece's "<s>" and "</s>". Token types: 1 normal,
 * 2 unknown, 3 control, 6 byte. */
static int put_vocabulary(tl_gguf_writer *w, const tl_tokenizer *t)
{
    int n = t->vocab_size;
    char **pieces = calloc((size_t)n, sizeof *pieces);
    int *lens = calloc((size_t)n, sizeof *lens);
    int32_t *types = calloc((size_t)n, sizeof *types);
    int ok = pieces && lens && types;
    for (int i = 0; ok && i < n; i++) {
        const char *p = t->pieces[i];
        int len = t->piece_len[i];
        pieces[i] = malloc((size_t)len * 3 + 8);
        if (!pieces[i]) {
            ok = 0;
            break;
        }
        if (i == t->bos_id || i == t->eos_id) {
            lens[i] = sprintf(pieces[i], "%s", i == t->bos_id ? "<s>" : "</s>");
            types[i] = 3;
            continue;
        }
        int o = 0;
        for (int k = 0; k < len; k++) {
            if (p[k] == ' ') {
                memcpy(pieces[i] + o, "\xe2\x96\x81", 3);
                o += 3;
            } else {
                pieces[i][o++] = p[k];
            }
        }
        lens[i] = o;
        int is_byte = len == 6 && memcmp(p, "<0x", 3) == 0 && p[5] == '>';
        types[i] = i == t->unk_id ? 2 : is_byte ? 6 : 1;
    }
    if (ok) {
        tl_gw_string(w, "tokenizer.ggml.model", "llama");
        tl_gw_strings(w, "tokenizer.ggml.tokens", (uint64_t)n, (const char *const *)pieces, lens);
        tl_gw_f32s(w, "tokenizer.ggml.scores", (uint64_t)n, t->scores);
        tl_gw_i32s(w, "tokenizer.ggml.token_type", (uint64_t)n, types);
        tl_gw_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)t->bos_id);
        tl_gw_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)t->eos_id);
        tl_gw_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)t->unk_id);
    }
    for (int i = 0; pieces && i < n; i++)
        free(pieces[i]);
    free(pieces);
    free(lens);
    free(types);
    return ok ? 0 : -1;
}

int tl_convert_to_gguf(const tl_checkpoint *ck, const tl_tokenizer *tok, tl_dtype type,
                       const char *name, const char *out_path, char *err, size_t cap)
{
    const tl_config *c = &ck->cfg;
    if (type == TL_DTYPE_Q8_0 && (c->dim % 32 || c->hidden_dim % 32)) {
        snprintf(err, cap, "%s: Q8_0 needs dim and hidden_dim to be multiples of 32 (%d, %d)",
                 ck->label, c->dim, c->hidden_dim);
        return -1;
    }
    tl_gguf_writer w;
    tl_gw_init(&w);
    put_metadata(&w, c, type, name);
    int bad = put_vocabulary(&w, tok);
    const tl_weights *wt = &ck->w;
    bad |= put_matrix(&w, "token_embd.weight", &wt->token_embedding, type);
    put_norm(&w, "output_norm.weight", wt->rms_final, c->dim);
    if (!c->shared_classifier)
        bad |= put_matrix(&w, "output.weight", &wt->wcls, type);
    for (int l = 0; l < c->n_layers && !bad; l++) {
        const tl_layer_weights *L = &wt->layers[l];
        char n[64];
#define NAME(suffix) (snprintf(n, sizeof n, "blk.%d." suffix, l), n)
        put_norm(&w, NAME("attn_norm.weight"), L->rms_att, c->dim);
        bad |= put_matrix(&w, NAME("attn_q.weight"), &L->wq, type);
        bad |= put_matrix(&w, NAME("attn_k.weight"), &L->wk, type);
        bad |= put_matrix(&w, NAME("attn_v.weight"), &L->wv, type);
        bad |= put_matrix(&w, NAME("attn_output.weight"), &L->wo, type);
        put_norm(&w, NAME("ffn_norm.weight"), L->rms_ffn, c->dim);
        bad |= put_matrix(&w, NAME("ffn_gate.weight"), &L->w1, type);
        bad |= put_matrix(&w, NAME("ffn_down.weight"), &L->w2, type);
        bad |= put_matrix(&w, NAME("ffn_up.weight"), &L->w3, type);
#undef NAME
    }
    if (bad) {
        tl_gw_free(&w);
        snprintf(err, cap, "%s: out of memory while converting", ck->label);
        return -1;
    }
    int rc = tl_gw_write(&w, out_path);
    if (rc != 0)
        snprintf(err, cap, "%s: cannot write: %s", out_path, strerror(errno));
    tl_gw_free(&w);
    return rc;
}
