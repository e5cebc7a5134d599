/* torchlike against llama.cpp on one fixture model (data/gguf/README.md):
 *
 *   gguf_oracle_check MODEL.gguf EXPECTED.logits BOUND GREEDY
 *
 * EXPECTED holds llama.cpp's logits at every position of a fixed prompt and
 * its 64-token greedy continuation (scripts/fixtures/dump_logits.cpp).
 * torchlike evaluates the prompt in one batch; the error at a position is
 * max |torchlike - llama.cpp| / max |llama.cpp| over the vocabulary, and the
 * largest over the positions must be at most BOUND. With GREEDY 1 the
 * continuation, decoded one token at a time, must be the same 64 tokens;
 * with 0 the length of the common prefix is only reported. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "kv_cache.h"
#include "model.h"
#include "thread_pool.h"

typedef struct expected {
    int32_t n_prompt, n_vocab, n_gen;
    int32_t *prompt, *gen;
    float *logits;
} expected;

static int read_expected(const char *path, expected *e)
{
    FILE *f = fopen(path, "rb");
    char magic[4];
    int32_t head[4];
    if (!f || fread(magic, 1, 4, f) != 4 || memcmp(magic, "TLLG", 4) != 0 ||
        fread(head, sizeof head, 1, f) != 1 || head[0] != 1 || head[1] < 1 || head[1] > 4096 ||
        head[2] < 1 || head[2] > 1 << 20 || head[3] < 0 || head[3] > 4096) {
        fprintf(stderr, "%s: not a logits file of version 1\n", path);
        if (f)
            fclose(f);
        return -1;
    }
    e->n_prompt = head[1];
    e->n_vocab = head[2];
    e->n_gen = head[3];
    e->prompt = malloc((size_t)e->n_prompt * sizeof(int32_t));
    e->logits = malloc((size_t)e->n_prompt * (size_t)e->n_vocab * sizeof(float));
    e->gen = malloc((size_t)e->n_gen * sizeof(int32_t) + 1);
    int ok = e->prompt && e->logits && e->gen &&
             fread(e->prompt, sizeof(int32_t), (size_t)e->n_prompt, f) == (size_t)e->n_prompt &&
             fread(e->logits, sizeof(float), (size_t)e->n_prompt * (size_t)e->n_vocab, f) ==
                 (size_t)e->n_prompt * (size_t)e->n_vocab &&
             fread(e->gen, sizeof(int32_t), (size_t)e->n_gen, f) == (size_t)e->n_gen;
    fclose(f);
    if (!ok)
        fprintf(stderr, "%s: truncated\n", path);
    return ok ? 0 : -1;
}

static int argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static int forward(tl_model *m, tl_kv_cache *kv, tl_kv_sequence *s, tl_thread_pool *pool,
                   const int32_t *tokens, int n, int all, float *out)
{
    if (tl_kv_blocks_needed(kv, s, n) > kv->n_free)
        return -1;
    tl_kv_prepare_append(kv, s, n);
    tl_forward_item item = {tokens, n, s->length, s->blocks, all, out};
    tl_workspace ws;
    if (tl_workspace_alloc(&ws, m, &item, 1, 1) != ILAB_OK)
        return -1;
    tl_model_forward(m, kv, &item, 1, &ws, pool);
    tl_workspace_free(&ws);
    s->length += n;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s MODEL.gguf EXPECTED.logits BOUND GREEDY\n", argv[0]);
        return 2;
    }
    double bound = atof(argv[3]);
    int want_greedy = atoi(argv[4]);
    expected e;
    char err[1024];
    tl_checkpoint ck;
    tl_model m;
    if (read_expected(argv[2], &e) != 0)
        return 1;
    if (tl_checkpoint_open(argv[1], &ck, err, sizeof err) != ILAB_OK ||
        tl_model_init(&m, &ck, TL_DTYPE_F32, err, sizeof err) != ILAB_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (m.cfg.vocab_size != e.n_vocab) {
        fprintf(stderr, "vocabulary %d, expected %d\n", m.cfg.vocab_size, e.n_vocab);
        return 1;
    }
    int positions = e.n_prompt + e.n_gen;
    tl_kv_cache kv;
    tl_thread_pool *pool;
    uint64_t h;
    if (tl_kv_init(&kv, m.cfg.n_layers, m.kv_dim, positions, positions / TL_KV_BLOCK + 2, 1) !=
            ILAB_OK ||
        tl_thread_pool_create(1, &pool) != ILAB_OK || tl_kv_seq_create(&kv, &h) != ILAB_OK)
        return 1;
    tl_kv_sequence *s = tl_kv_seq_get(&kv, h);
    size_t V = (size_t)e.n_vocab;
    float *out = malloc((size_t)e.n_prompt * V * sizeof *out);
    if (!out || forward(&m, &kv, s, pool, e.prompt, e.n_prompt, 1, out) != 0)
        return 1;
    double worst = 0.0;
    int worst_pos = 0;
    for (int p = 0; p < e.n_prompt; p++) {
        const float *a = out + (size_t)p * V, *b = e.logits + (size_t)p * V;
        double diff = 0.0, scale = 0.0;
        for (size_t i = 0; i < V; i++) {
            diff = fmax(diff, fabs((double)a[i] - (double)b[i]));
            scale = fmax(scale, fabs((double)b[i]));
        }
        double rel = diff / scale;
        if (rel > worst) {
            worst = rel;
            worst_pos = p;
        }
    }
    /* The continuation, one token per step (the decode path). */
    int same = 0, diverged = 0;
    int32_t next = argmax(out + (size_t)(e.n_prompt - 1) * V, e.n_vocab);
    for (int k = 0; k < e.n_gen; k++) {
        if (!diverged && next == e.gen[k])
            same++;
        else
            diverged = 1;
        if (forward(&m, &kv, s, pool, &next, 1, 0, out) != 0)
            return 1;
        next = argmax(out, e.n_vocab);
    }
    printf("%s: max relative logit error %.3g (position %d; bound %.3g); greedy continuation "
           "%d/%d tokens as llama.cpp\n", argv[1], worst, worst_pos, bound, same, e.n_gen);
    int ok = worst <= bound && (!want_greedy || same == e.n_gen);
    free(out);
    free(e.prompt);
    free(e.logits);
    free(e.gen);
    tl_thread_pool_destroy(pool);
    tl_kv_destroy(&kv);
    tl_model_close(&m);
    return ok ? 0 : 1;
}
