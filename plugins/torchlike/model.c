#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "q8_0_r16.h"

/* Every matrix of the model, for one pass over them. */
static int model_matrices(tl_weights *w, int n_layers, tl_matrix **out)
{
    int n = 0;
    out[n++] = &w->token_embedding;
    for (int l = 0; l < n_layers; l++) {
        tl_layer_weights *L = &w->layers[l];
        tl_matrix *ms[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w1, &L->w2, &L->w3};
        for (int i = 0; i < 7; i++)
            out[n++] = ms[i];
    }
    out[n++] = &w->wcls;
    return n;
}

/* The layer table as the model's own copy, so its matrices can be
 * replaced without touching the checkpoint's. */
static int own_layers(tl_model *m)
{
    if (m->layers)
        return 0;
    m->layers = malloc((size_t)m->cfg.n_layers * sizeof *m->layers);
    if (!m->layers)
        return -1;
    memcpy(m->layers, m->ck.w.layers, (size_t)m->cfg.n_layers * sizeof *m->layers);
    m->w.layers = m->layers;
    return 0;
}

/* Matrices start on a cache line in the model's own buffers: the kernels'
 * 64-byte loads then split no lines (groups of 16 rows are 64-byte
 * multiples at the usual widths). */
static size_t line_up(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* Replace every fp32/fp16 matrix by a Q8_0 copy in one owned buffer,
 * repacked for the kernels (q8_0_r16.h). A shared classifier stays shared
 * (the embedding's copy; an embedding row is gathered from its group). */
static ilab_status quantize_model(tl_model *m, char *err, size_t cap)
{
    int L = m->cfg.n_layers, n_max = 2 + 7 * L;
    tl_matrix **ms = malloc((size_t)n_max * sizeof *ms);
    if (!ms || own_layers(m) != 0) {
        free(ms);
        snprintf(err, cap, "model %s: out of memory for quantisation", m->ck.label);
        return ILAB_OUT_OF_MEMORY;
    }
    int shared = m->w.wcls.data == m->w.token_embedding.data;
    int n = model_matrices(&m->w, L, ms) - (shared ? 1 : 0);
    size_t total = 0, weights = 0;
    for (int i = 0; i < n; i++) {
        if (ms[i]->type == TL_DTYPE_Q8_0)
            continue; /* a GGUF file's Q8_0: repacked by repack_mapped */
        size_t rb = tl_dtype_row_bytes(TL_DTYPE_Q8_0, ms[i]->cols);
        if (rb == 0) {
            snprintf(err, cap, "model %s: quantize q8_0 needs rows of a multiple of %d values; "
                     "a matrix has rows of %d (dim %d, hidden_dim %d)", m->ck.label,
                     TL_Q8_0_BLOCK, ms[i]->cols, m->cfg.dim, m->cfg.hidden_dim);
            free(ms);
            return ILAB_INVALID_ARGUMENT;
        }
        total += line_up(rb * (size_t)ms[i]->rows);
        weights += rb * (size_t)ms[i]->rows;
    }
    unsigned char *buf = aligned_alloc(64, total ? total : 64);
    int widest = m->cfg.dim > m->cfg.hidden_dim ? m->cfg.dim : m->cfg.hidden_dim;
    float *row = malloc((size_t)(widest > m->q_dim ? widest : m->q_dim) * sizeof *row);
    if (!buf || !row) {
        free(buf);
        free(row);
        free(ms);
        snprintf(err, cap, "model %s: out of memory for %zu bytes of Q8_0 weights", m->ck.label,
                 total);
        return ILAB_OUT_OF_MEMORY;
    }
    size_t off = 0;
    ilab_status st = ILAB_OK;
    for (int i = 0; i < n && st == ILAB_OK; i++) {
        if (ms[i]->type == TL_DTYPE_Q8_0)
            continue;
        size_t rb = tl_dtype_row_bytes(TL_DTYPE_Q8_0, ms[i]->cols);
        for (int r = 0; r < ms[i]->rows; r++) {
            tl_matrix_row_f32(ms[i], r, row);
            tl_quantize_row_q8_0(row, (tl_block_q8_0 *)(void *)(buf + off + rb * (size_t)r),
                                 ms[i]->cols);
        }
        *ms[i] = (tl_matrix){TL_DTYPE_Q8_0, buf + off, ms[i]->rows, ms[i]->cols};
        if (tl_r16_repack_inplace(ms[i]) != 0) {
            snprintf(err, cap, "model %s: out of memory repacking Q8_0 weights", m->ck.label);
            st = ILAB_OUT_OF_MEMORY;
        }
        off += line_up(rb * (size_t)ms[i]->rows);
    }
    if (shared)
        m->w.wcls = m->w.token_embedding;
    free(row);
    free(ms);
    m->quantized = buf;
    m->quantized_bytes = weights;
    return st;
}

/* A GGUF file's Q8_0 matrices lie in a read-only mapping: copied into one
 * owned buffer and repacked there (the same bytes; the mapped pages are
 * not read again). A shared classifier stays shared. */
static ilab_status repack_mapped(tl_model *m, char *err, size_t cap)
{
    int L = m->cfg.n_layers;
    tl_matrix **all = malloc((size_t)(2 + 7 * L) * sizeof *all);
    if (!all || own_layers(m) != 0) {
        free(all);
        goto oom;
    }
    int shared = m->w.wcls.data == m->w.token_embedding.data;
    int n = model_matrices(&m->w, L, all) - (shared ? 1 : 0);
    size_t total = 0;
    for (int i = 0; i < n; i++)
        if (all[i]->type == TL_DTYPE_Q8_0)
            total += line_up(tl_dtype_row_bytes(TL_DTYPE_Q8_0, all[i]->cols) * (size_t)all[i]->rows);
    if (total == 0) {
        free(all);
        return ILAB_OK;
    }
    unsigned char *buf = aligned_alloc(64, total);
    size_t off = 0;
    int failed = !buf;
    for (int i = 0; i < n && !failed; i++) {
        if (all[i]->type != TL_DTYPE_Q8_0)
            continue;
        size_t bytes = tl_dtype_row_bytes(TL_DTYPE_Q8_0, all[i]->cols) * (size_t)all[i]->rows;
        memcpy(buf + off, all[i]->data, bytes);
        all[i]->data = buf + off;
        failed = tl_r16_repack_inplace(all[i]) != 0;
        off += line_up(bytes);
    }
    if (shared)
        m->w.wcls = m->w.token_embedding;
    free(all);
    m->repacked = buf;
    m->repacked_bytes = buf ? total : 0;
    if (!failed)
        return ILAB_OK;
oom:
    snprintf(err, cap, "model %s: out of memory repacking the file's Q8_0 weights", m->ck.label);
    return ILAB_OUT_OF_MEMORY;
}

ilab_status tl_model_init(tl_model *m, const tl_checkpoint *ck, tl_dtype quantize, char *err,
                          size_t err_cap)
{
    memset(m, 0, sizeof *m);
    m->ck = *ck;
    m->cfg = ck->cfg;
    m->w = ck->w;
    m->head_size = m->cfg.head_size;
    m->q_dim = tl_config_q_dim(&m->cfg);
    m->kv_dim = tl_config_kv_dim(&m->cfg);
    tl_rope_params rope = {m->cfg.n_rot, m->cfg.rope_base, m->cfg.rope_freq_scale,
                           m->w.rope_factors};
    ilab_status st = tl_rope_table(m->cfg.seq_len, &rope, &m->rope_cos, &m->rope_sin);
    if (st != ILAB_OK)
        snprintf(err, err_cap, "model %s: out of memory for the rotary tables", ck->label);
    if (st == ILAB_OK && quantize == TL_DTYPE_Q8_0)
        st = quantize_model(m, err, err_cap);
    if (st == ILAB_OK)
        st = repack_mapped(m, err, err_cap);
    if (st != ILAB_OK)
        tl_model_close(m);
    return st;
}

void tl_model_close(tl_model *m)
{
    free(m->rope_cos);
    free(m->rope_sin);
    free(m->layers);
    free(m->quantized);
    free(m->repacked);
    tl_checkpoint_close(&m->ck);
    memset(m, 0, sizeof *m);
}

void tl_workspace_free(tl_workspace *ws)
{
    tl_tensor *all[] = {&ws->x, &ws->xb, &ws->xb2, &ws->q, &ws->k, &ws->v, &ws->att,
                        &ws->hb, &ws->hb2, &ws->xr, &ws->logits, &ws->scores};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        tl_tensor_free(all[i]);
    free(ws->token_item);
    free(ws->token_pos);
    free(ws->token_id);
    free(ws->act.q);
    free(ws->act.scale);
    free(ws->act.sum);
    memset(ws, 0, sizeof *ws);
}

ilab_status tl_workspace_alloc(tl_workspace *ws, const tl_model *m,
                               const tl_forward_item *items, int n_items, int n_threads)
{
    memset(ws, 0, sizeof *ws);
    const tl_config *c = &m->cfg;
    size_t T = 0, R = 0;
    for (int i = 0; i < n_items; i++) {
        T += (size_t)items[i].n_tokens;
        if (items[i].logits)
            R += items[i].all_logits ? (size_t)items[i].n_tokens : 1;
    }
    ws->n_tokens = (int)T;
    ws->n_logit_rows = (int)R;
    ws->n_threads = n_threads;
    ilab_status st = ILAB_OK;
#define ALLOC(t, rows, cols) \
    if (st == ILAB_OK) st = tl_tensor_alloc(&ws->t, (rows), (cols))
    ALLOC(x, T, (size_t)c->dim);
    ALLOC(xb, T, (size_t)c->dim);
    ALLOC(xb2, T, (size_t)c->dim);
    ALLOC(q, T, (size_t)m->q_dim);
    ALLOC(att, T, (size_t)m->q_dim);
    ALLOC(k, T, (size_t)m->kv_dim);
    ALLOC(v, T, (size_t)m->kv_dim);
    ALLOC(hb, T, (size_t)c->hidden_dim);
    ALLOC(hb2, T, (size_t)c->hidden_dim);
    ALLOC(xr, R ? R : 1, (size_t)c->dim);
    ALLOC(logits, R ? R : 1, (size_t)c->vocab_size);
    ALLOC(scores, (size_t)n_threads, (size_t)c->seq_len);
#undef ALLOC
    ws->token_item = malloc(T * sizeof(int));
    ws->token_pos = malloc(T * sizeof(int));
    ws->token_id = malloc(T * sizeof(int));
    /* The widest input of a product: dim, hidden_dim, q_dim (the output
     * projection's), and dim again for the classifier's rows. */
    size_t widest = (size_t)(c->dim > c->hidden_dim ? c->dim : c->hidden_dim);
    if ((size_t)m->q_dim > widest)
        widest = (size_t)m->q_dim;
    ws->act.cap = (T > R ? T : R) * widest;
    ws->act.q = malloc(ws->act.cap);
    ws->act.scale = malloc((ws->act.cap / TL_Q8_0_BLOCK + 1) * sizeof(float));
    ws->act.sum = malloc((ws->act.cap / TL_Q8_0_BLOCK + 1) * sizeof(int32_t));
    if (st != ILAB_OK || !ws->token_item || !ws->token_pos || !ws->token_id || !ws->act.q ||
        !ws->act.scale || !ws->act.sum) {
        tl_workspace_free(ws);
        return ILAB_OUT_OF_MEMORY;
    }
    int t = 0;
    for (int i = 0; i < n_items; i++)
        for (int j = 0; j < items[i].n_tokens; j++, t++) {
            ws->token_item[t] = i;
            ws->token_pos[t] = items[i].start_pos + j;
            ws->token_id[t] = items[i].tokens[j];
        }
    return ILAB_OK;
}

/* One head's slices of successive cache rows sit a whole kv_dim apart, a
 * stride the hardware prefetcher follows poorly (the cache is usually out of
 * the CPU caches after a step's weights went by): fetch a few positions
 * ahead. Measured on the 110M shape: attention 1.85 -> 0.73 ms per step. */
#define KV_PREFETCH_AHEAD 8

static void prefetch_head(const float *row, int hs)
{
    for (int j = 0; j < hs; j += 16)
        __builtin_prefetch(row + j);
}

/* Attention of one layer, parallel over (token, head) pairs. */
typedef struct attention_job {
    const tl_model *m;
    const tl_kv_cache *kv;
    const tl_forward_item *items;
    tl_workspace *ws;
    int layer;
} attention_job;

static void attention_task(void *ctxp, int begin, int end, int thread)
{
    const attention_job *job = ctxp;
    const tl_model *m = job->m;
    tl_workspace *ws = job->ws;
    int hs = m->head_size, kv_dim = m->kv_dim;
    int group = m->cfg.n_heads / m->cfg.n_kv_heads;
    float scale = 1.0f / sqrtf((float)hs);
    float *att = tl_tensor_row(&ws->scores, (size_t)thread);
    for (int i = begin; i < end; i++) {
        int t = i / m->cfg.n_heads, h = i % m->cfg.n_heads;
        const int *blocks = job->items[ws->token_item[t]].blocks;
        int pos = ws->token_pos[t];
        const float *q = tl_tensor_row(&ws->q, (size_t)t) + h * hs;
        size_t head_off = (size_t)(h / group) * (size_t)hs;
        for (int p = 0; p <= pos; p++) {
            int ahead = p + KV_PREFETCH_AHEAD;
            if (ahead <= pos)
                prefetch_head(tl_kv_keys(job->kv, blocks[ahead / TL_KV_BLOCK], job->layer) +
                                  (size_t)(ahead % TL_KV_BLOCK) * (size_t)kv_dim + head_off, hs);
            const float *key = tl_kv_keys(job->kv, blocks[p / TL_KV_BLOCK], job->layer) +
                               (size_t)(p % TL_KV_BLOCK) * (size_t)kv_dim + head_off;
            att[p] = tl_dot(q, key, hs) * scale;
        }
        tl_softmax(att, pos + 1);
        float *out = tl_tensor_row(&ws->att, (size_t)t) + h * hs;
        memset(out, 0, (size_t)hs * sizeof(float));
        for (int p = 0; p <= pos; p++) {
            int ahead = p + KV_PREFETCH_AHEAD;
            if (ahead <= pos)
                prefetch_head(tl_kv_values(job->kv, blocks[ahead / TL_KV_BLOCK], job->layer) +
                                  (size_t)(ahead % TL_KV_BLOCK) * (size_t)kv_dim + head_off, hs);
            const float *val = tl_kv_values(job->kv, blocks[p / TL_KV_BLOCK], job->layer) +
                               (size_t)(p % TL_KV_BLOCK) * (size_t)kv_dim + head_off;
            tl_axpy(out, att[p], val, hs);
        }
    }
}

static void add_bias(float *x, const float *b, int n)
{
    for (int i = 0; i < n; i++)
        x[i] += b[i];
}

/* Where the architectures differ within a layer, before rotation: qwen2's
 * (and any file's) Q/K/V biases, qwen3's RMSNorm of each head of Q and K.
 * Everything else (fused tensors, the rotation's pairing and frequencies,
 * head size) was settled at load. */
static void prepare_qkv(const tl_model *m, const tl_layer_weights *lw, float *q, float *k,
                        float *v)
{
    if (lw->bq)
        add_bias(q, lw->bq, m->q_dim);
    if (lw->bk)
        add_bias(k, lw->bk, m->kv_dim);
    if (lw->bv)
        add_bias(v, lw->bv, m->kv_dim);
    if (lw->q_norm) {
        tl_rmsnorm_slices(q, m->q_dim, m->head_size, lw->q_norm, m->cfg.rms_eps);
        tl_rmsnorm_slices(k, m->kv_dim, m->head_size, lw->k_norm, m->cfg.rms_eps);
    }
}

void tl_model_forward(const tl_model *m, tl_kv_cache *kv, const tl_forward_item *items,
                      int n_items, tl_workspace *ws, tl_thread_pool *pool)
{
    const tl_config *c = &m->cfg;
    const tl_weights *w = &m->w;
    size_t dim = (size_t)c->dim, kv_dim = (size_t)m->kv_dim;
    int T = ws->n_tokens;

    tl_embedding(&ws->x, &w->token_embedding, ws->token_id);
    tl_act_scratch *act = &ws->act;

    for (int l = 0; l < c->n_layers; l++) {
        const tl_layer_weights *lw = &w->layers[l];
        tl_rmsnorm(&ws->xb, &ws->x, lw->rms_att, c->rms_eps);
        if (T == 1) {
            float *outs[3] = {ws->q.data, ws->k.data, ws->v.data};
            const tl_matrix *mats[3] = {&lw->wq, &lw->wk, &lw->wv};
            tl_matvec_multi(outs, mats, 3, ws->xb.data, act, pool);
        } else {
            tl_matmul(&ws->q, &ws->xb, &lw->wq, act, pool);
            tl_matmul(&ws->k, &ws->xb, &lw->wk, act, pool);
            tl_matmul(&ws->v, &ws->xb, &lw->wv, act, pool);
        }
        for (int t = 0; t < T; t++) {
            int pos = ws->token_pos[t];
            float *q = tl_tensor_row(&ws->q, (size_t)t), *k = tl_tensor_row(&ws->k, (size_t)t);
            prepare_qkv(m, lw, q, k, tl_tensor_row(&ws->v, (size_t)t));
            const float *cr = m->rope_cos + (size_t)pos * (size_t)(c->n_rot / 2);
            const float *sr = m->rope_sin + (size_t)pos * (size_t)(c->n_rot / 2);
            int neox = c->rope_mode == TL_ROPE_NEOX;
            tl_rope_row(q, m->q_dim, m->head_size, c->n_rot, neox, cr, sr);
            tl_rope_row(k, m->kv_dim, m->head_size, c->n_rot, neox, cr, sr);
            const int *blocks = items[ws->token_item[t]].blocks;
            size_t off = (size_t)(pos % TL_KV_BLOCK) * kv_dim;
            memcpy(tl_kv_keys(kv, blocks[pos / TL_KV_BLOCK], l) + off,
                   tl_tensor_row(&ws->k, (size_t)t), kv_dim * sizeof(float));
            memcpy(tl_kv_values(kv, blocks[pos / TL_KV_BLOCK], l) + off,
                   tl_tensor_row(&ws->v, (size_t)t), kv_dim * sizeof(float));
        }

        attention_job job = {m, kv, items, ws, l};
        /* Only the first few positions are cheaper than a hand-off: the
         * workers are still spinning after the products above, and from
         * there on a single thread's attention would leave the other cores
         * idle while it grows with every position. */
        long work = 0;
        for (int t = 0; t < T; t++)
            work += (long)(ws->token_pos[t] + 1) * c->n_heads * m->head_size;
        if (work < (1L << 14))
            attention_task(&job, 0, T * c->n_heads, 0);
        else
            tl_parallel_for(pool, T * c->n_heads, 1, attention_task, &job);

        tl_matmul(&ws->xb2, &ws->att, &lw->wo, act, pool);
        tl_add(&ws->x, &ws->xb2);

        tl_rmsnorm(&ws->xb, &ws->x, lw->rms_ffn, c->rms_eps);
        if (T == 1) {
            float *outs[2] = {ws->hb.data, ws->hb2.data};
            const tl_matrix *mats[2] = {&lw->w1, &lw->w3};
            tl_matvec_multi(outs, mats, 2, ws->xb.data, act, pool);
        } else {
            tl_matmul(&ws->hb, &ws->xb, &lw->w1, act, pool);
            tl_matmul(&ws->hb2, &ws->xb, &lw->w3, act, pool);
        }
        tl_swiglu(&ws->hb, &ws->hb2, pool);
        tl_matmul(&ws->xb2, &ws->hb, &lw->w2, act, pool);
        tl_add(&ws->x, &ws->xb2);
    }

    if (ws->n_logit_rows == 0)
        return;
    /* Only the rows whose logits were asked for reach the classifier. */
    int r = 0, t = 0;
    for (int i = 0; i < n_items; i++) {
        int n = items[i].n_tokens;
        if (items[i].logits) {
            int first = items[i].all_logits ? 0 : n - 1;
            for (int j = first; j < n; j++)
                memcpy(tl_tensor_row(&ws->xr, (size_t)r++), tl_tensor_row(&ws->x, (size_t)(t + j)),
                       dim * sizeof(float));
        }
        t += n;
    }
    tl_tensor xr = tl_tensor_rows(&ws->xr, 0, (size_t)r);
    tl_rmsnorm(&xr, &xr, w->rms_final, c->rms_eps);
    tl_tensor logits = tl_tensor_rows(&ws->logits, 0, (size_t)r);
    tl_matmul(&logits, &xr, &w->wcls, act, pool);
    r = 0;
    for (int i = 0; i < n_items; i++) {
        if (!items[i].logits)
            continue;
        int rows = items[i].all_logits ? items[i].n_tokens : 1;
        memcpy(items[i].logits, tl_tensor_row(&logits, (size_t)r),
               (size_t)rows * (size_t)c->vocab_size * sizeof(float));
        r += rows;
    }
}
