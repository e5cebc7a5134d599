/* Q8_0 weights on the committed default model against its fp32 weights:
 * along the fp32 greedy continuations of 20 prompts (64 tokens each), Q8_0
 * picks the same next token at >= 95% of the positions, and the
 * log-probability of each fp32-greedy token moves little (max and mean
 * printed; the bounds are the documented tolerance). Free-running greedy
 * continuations are counted and printed too: one near-tie flipped anywhere
 * in 64 tokens makes a whole continuation differ, so that count is reported,
 * not bounded. And the batched path (several sequences and a
 * multi-token prefill in one pass) gives the single-token path's logits. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "checkpoint.h"
#include "greedy_prompts.h"
#include "kv_cache.h"
#include "model.h"
#include "thread_pool.h"
#include "tokenizer.h"

#define MODEL TL_DEFAULT_DIR "/model.bin"
#define TOKENIZER TL_DEFAULT_DIR "/tokenizer.bin"
#define N_PROMPTS TL_GREEDY_PROMPTS
#define N_GEN TL_GREEDY_TOKENS

/* Documented in plugins/torchlike/README.md ("Q8_0"). */
#define MAX_LOGPROB_ERROR 0.2   /* nats; measured 0.078 */
#define MEAN_LOGPROB_ERROR 0.025 /* measured 0.012 */
#define MIN_SAME_NEXT 0.95       /* measured 0.987 */

typedef struct runner {
    tl_model model;
    tl_kv_cache kv;
    tl_thread_pool *pool;
    float *logits;
} runner;

static void runner_open(runner *r, tl_dtype quantize, int threads)
{
    char err[512];
    tl_checkpoint ck;
    memset(r, 0, sizeof *r);
    if (tl_checkpoint_open(MODEL, &ck, err, sizeof err) != ILAB_OK)
        fail_msg("%s", err);
    if (tl_model_init(&r->model, &ck, quantize, err, sizeof err) != ILAB_OK)
        fail_msg("%s", err);
    int seq = r->model.cfg.seq_len, per = (seq + TL_KV_BLOCK - 1) / TL_KV_BLOCK;
    assert_int_equal(tl_kv_init(&r->kv, r->model.cfg.n_layers, r->model.kv_dim, seq, per * 4, 4),
                     ILAB_OK);
    assert_int_equal(tl_thread_pool_create(threads, &r->pool), ILAB_OK);
    r->logits = malloc((size_t)4 * (size_t)seq * (size_t)r->model.cfg.vocab_size * sizeof(float));
    assert_non_null(r->logits);
}

static void runner_close(runner *r)
{
    free(r->logits);
    tl_thread_pool_destroy(r->pool);
    tl_kv_destroy(&r->kv);
    tl_model_close(&r->model);
}

/* One pass over n items; item i appends tokens[i][0..counts[i]) to seqs[i]
 * and writes all its logits at out[i]. */
static void forward(runner *r, tl_kv_sequence **seqs, const int32_t *const *tokens,
                    const int *counts, int n, float *const *out)
{
    tl_forward_item items[4];
    for (int i = 0; i < n; i++) {
        tl_kv_prepare_append(&r->kv, seqs[i], counts[i]);
        items[i] = (tl_forward_item){tokens[i], counts[i], seqs[i]->length, seqs[i]->blocks, 1,
                                     out[i]};
    }
    tl_workspace ws;
    assert_int_equal(tl_workspace_alloc(&ws, &r->model, items, n, tl_thread_pool_size(r->pool)),
                     ILAB_OK);
    tl_model_forward(&r->model, &r->kv, items, n, &ws, r->pool);
    tl_workspace_free(&ws);
    for (int i = 0; i < n; i++)
        seqs[i]->length += counts[i];
}

static tl_kv_sequence *new_seq(runner *r)
{
    uint64_t h;
    assert_int_equal(tl_kv_seq_create(&r->kv, &h), ILAB_OK);
    return tl_kv_seq_get(&r->kv, h);
}

static int argmax(const float *v, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b])
            b = i;
    return b;
}

static double log_softmax_at(const float *v, int n, int k)
{
    double mx = v[0], s = 0;
    for (int i = 1; i < n; i++)
        mx = v[i] > mx ? v[i] : mx;
    for (int i = 0; i < n; i++)
        s += exp((double)v[i] - mx);
    return (double)v[k] - mx - log(s);
}

/* Logit of the best token minus the second best's. */
static double top2_margin(const float *v, int n)
{
    int b = argmax(v, n);
    double second = -INFINITY;
    for (int i = 0; i < n; i++)
        if (i != b && v[i] > second)
            second = v[i];
    return (double)v[b] - second;
}


/* Greedy continuation of each prompt with fp32 and with Q8_0 weights. */
static void test_greedy_and_logprobs(void **state)
{
    (void)state;
    tl_tokenizer tok;
    char err[512];
    runner f32, q8;
    runner_open(&f32, TL_DTYPE_F32, 1);
    runner_open(&q8, TL_DTYPE_Q8_0, 1);
    assert_int_equal(tl_tokenizer_load_file(TOKENIZER, f32.model.cfg.vocab_size, MODEL, &tok, err,
                                            sizeof err), ILAB_OK);
    int V = f32.model.cfg.vocab_size, identical = 0, n_err = 0, same_next = 0, near_ties = 0;
    double max_err = 0, sum_err = 0, max_gap_err = 0;
    char where[N_PROMPTS * 48] = "";
    for (int p = 0; p < N_PROMPTS; p++) {
        int32_t ids[64];
        size_t n;
        assert_int_equal(tl_tokenizer_encode(&tok, tl_greedy_prompts[p], strlen(tl_greedy_prompts[p]), 1, 0, ids, 64, &n),
                         ILAB_OK);
        runner *rs[2] = {&f32, &q8};
        int32_t gen[2][N_GEN];
        for (int k = 0; k < 2; k++) {
            tl_kv_sequence *s = new_seq(rs[k]);
            const int32_t *t = ids;
            int c = (int)n;
            float *out = rs[k]->logits;
            forward(rs[k], &s, &t, &c, 1, &out);
            const float *last = rs[k]->logits + (size_t)(n - 1) * (size_t)V;
            for (int g = 0; g < N_GEN; g++) {
                gen[k][g] = argmax(last, V);
                c = 1;
                t = &gen[k][g];
                forward(rs[k], &s, &t, &c, 1, &out);
                last = rs[k]->logits;
            }
            tl_kv_seq_free(&rs[k]->kv, s);
        }
        int first = 0;
        while (first < N_GEN && gen[0][first] == gen[1][first])
            first++;
        identical += first == N_GEN;
        /* Both models scored along the fp32 path: the error of the
         * log-probability Q8_0 gives each fp32-greedy token. */
        int32_t path[64 + N_GEN];
        memcpy(path, ids, n * sizeof *path);
        memcpy(path + n, gen[0], sizeof gen[0]);
        int len = (int)n + N_GEN - 1;
        float *lp[2];
        for (int k = 0; k < 2; k++) {
            tl_kv_sequence *s = new_seq(rs[k]);
            const int32_t *t = path;
            lp[k] = rs[k]->logits;
            forward(rs[k], &s, &t, &len, 1, &lp[k]);
            tl_kv_seq_free(&rs[k]->kv, s);
        }
        for (int j = (int)n - 1; j < len; j++) {
            const float *a = lp[0] + (size_t)j * V, *b = lp[1] + (size_t)j * V;
            double e = fabs(log_softmax_at(a, V, path[j + 1]) - log_softmax_at(b, V, path[j + 1]));
            same_next += argmax(b, V) == path[j + 1];
            /* Where the continuations part: how close fp32's own top two
             * were there, and how far Q8_0 moved the gap between them. */
            double margin = top2_margin(a, V);
            int second = argmax(b, V) == path[j + 1] ? -1 : argmax(b, V);
            if (second >= 0) {
                double gap_err = fabs(((double)a[path[j + 1]] - a[second]) -
                                      ((double)b[path[j + 1]] - b[second]));
                max_gap_err = gap_err > max_gap_err ? gap_err : max_gap_err;
            }
            near_ties += margin < 0.05;
            if (j - ((int)n - 1) == first && first < N_GEN)
                snprintf(where + strlen(where), sizeof where - strlen(where), " #%d@%d (%.3f)", p,
                         first, margin);
            max_err = e > max_err ? e : max_err;
            sum_err += e;
            n_err++;
        }
    }
    print_message("Q8_0 vs fp32 on the default model: %d of %d greedy %d-token continuations "
                  "identical; on the fp32-greedy path, Q8_0's greedy token is the same at %d of %d "
                  "positions (%.1f%%); log-probability of the fp32-greedy token: max error %.4f, mean %.4f "
                  "over %d positions (Q8_0 weights %.2f MB)\n", identical, N_PROMPTS, N_GEN,
                  same_next, n_err, 100.0 * same_next / n_err, max_err, sum_err / n_err, n_err, (double)q8.model.quantized_bytes / 1e6);
    print_message("continuations that part: prompt@token (fp32's top-2 logit margin there):%s; "
                  "positions on the fp32 path with a top-2 margin below 0.05: %d; largest change "
                  "Q8_0 made to the gap between fp32's token and its own pick: %.3f\n", where,
                  near_ties, max_gap_err);
    assert_true((double)same_next / n_err >= MIN_SAME_NEXT);
    assert_true(max_err <= MAX_LOGPROB_ERROR);
    assert_true(sum_err / n_err <= MEAN_LOGPROB_ERROR);
    assert_true(max_err > 0.0); /* the Q8_0 model really ran on other weights */
    tl_tokenizer_free(&tok);
    runner_close(&f32);
    runner_close(&q8);
}

/* Batched Q8_0 (three sequences, one of them a 5-token prefill, with two
 * threads) gives the logits of one token at a time on one thread. */
static void test_batched_matches_single(void **state)
{
    (void)state;
    runner one, many;
    runner_open(&one, TL_DTYPE_Q8_0, 1);
    runner_open(&many, TL_DTYPE_Q8_0, 2);
    int V = one.model.cfg.vocab_size;
    int32_t a[5] = {1, 40, 41, 42, 43}, b[1] = {1}, c[1] = {1};
    tl_kv_sequence *seqs[3] = {new_seq(&many), new_seq(&many), new_seq(&many)};
    const int32_t *toks[3] = {a, b, c};
    int counts[3] = {5, 1, 1};
    float *out[3] = {many.logits, many.logits + 5 * (size_t)V, many.logits + 6 * (size_t)V};
    forward(&many, seqs, toks, counts, 3, out);
    tl_kv_sequence *s = new_seq(&one);
    float *o = one.logits;
    for (int i = 0; i < 5; i++) {
        const int32_t *t = &a[i];
        int n1 = 1;
        forward(&one, &s, &t, &n1, 1, &o);
        for (int v = 0; v < V; v++)
            if (fabsf(one.logits[v] - many.logits[(size_t)i * V + v]) > 1e-3f)
                fail_msg("position %d logit %d: batched %.6g, single %.6g", i, v,
                         many.logits[(size_t)i * V + v], one.logits[v]);
    }
    for (int v = 0; v < V; v++) /* b and c are both BOS at position 0, as a[0] */
        assert_true(fabsf(many.logits[5 * (size_t)V + v] - many.logits[v]) <= 1e-3f &&
                    fabsf(many.logits[6 * (size_t)V + v] - many.logits[v]) <= 1e-3f);
    runner_close(&one);
    runner_close(&many);
}

/* Q8_0 needs rows of a multiple of 32: the tiny fixture (dim 48) is refused
 * with a message naming the model and the row length. */
static void test_refuses_odd_rows(void **state)
{
    (void)state;
    char err[512] = "";
    tl_checkpoint ck;
    tl_model m;
    assert_int_equal(tl_checkpoint_open(TL_TEST_DATA_DIR "/tiny-model.bin", &ck, err, sizeof err),
                     ILAB_OK);
    assert_int_equal(tl_model_init(&m, &ck, TL_DTYPE_Q8_0, err, sizeof err), ILAB_INVALID_ARGUMENT);
    if (!strstr(err, "tiny-model.bin") || !strstr(err, "multiple of 32") || !strstr(err, "48"))
        fail_msg("unclear message: %s", err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_and_logprobs),
        cmocka_unit_test(test_batched_matches_single),
        cmocka_unit_test(test_refuses_odd_rows),
    };
    return cmocka_run_group_tests_name("torchlike Q8_0", tests, NULL, NULL);
}
