/* DIF-1 inside one plugin: instances created with different
 * configurations (config_domain.c's sweep) that report the same non-empty
 * digest claim the same weights, so they must agree as two plugins with
 * that digest must: the same greedy tokens and top-5 logprobs within 5e-2.
 * A configuration that changes the weights (a seed, a model file) must
 * change the digest. Each created instance is fingerprinted once: greedy
 * decoding of a fixed prompt through eval(), `logits: full` plugins only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_digest.h"

enum { PROMPT = 4, STEPS = 8, TOP = 5, MAX_PRINTS = 64 };
#define LOGPROB_BOUND 5e-2

typedef struct fingerprint {
    char digest[80];
    char what[128];
    int32_t tokens[STEPS];
    int32_t top_id[STEPS][TOP];
    double top_lp[STEPS][TOP];
} fingerprint;

static fingerprint g_prints[MAX_PRINTS];
static int g_n, g_pairs;

/* top-5 of one row's log_softmax, ties to the lower id */
static void top5(const float *row, int32_t v, double *lp, int32_t *id, double *out)
{
    conf_log_softmax(row, v, lp);
    for (int k = 0; k < TOP; k++) {
        int32_t best = -1;
        for (int32_t i = 0; i < v; i++) {
            bool taken = false;
            for (int j = 0; j < k; j++)
                taken |= id[j] == i;
            if (!taken && (best < 0 || lp[i] > lp[best]))
                best = i;
        }
        id[k] = best;
        out[k] = best >= 0 ? lp[best] : -INFINITY;
    }
}

static bool take(conf_env *env, ilab_backend_t *b, int32_t v, fingerprint *f)
{
    float *logits = malloc((size_t)v * sizeof *logits);
    double *lp = malloc((size_t)v * sizeof *lp);
    int32_t prompt[PROMPT];
    uint64_t rng = 0xD1F1; /* the same prompt for every instance; env's vocabulary may be unknown here */
    for (int i = 0; i < PROMPT; i++)
        prompt[i] = (int32_t)(conf_splitmix64(&rng) % (uint64_t)v);
    ilab_seq_t s = ILAB_SEQ_NONE;
    bool ok = logits && lp && env->api->seq_create(b, &s) == ILAB_OK;
    const int32_t *feed = prompt;
    int32_t n = PROMPT;
    for (int step = 0; ok && step < STEPS; step++) {
        ilab_batch_item_t item = {.struct_size = sizeof item, .seq = s, .tokens = feed, .n_tokens = n,
                                  .logits = logits};
        const ilab_batch_item_t *items[1] = {&item};
        ok = env->api->eval(b, items, 1) == ILAB_OK;
        if (!ok)
            break;
        top5(logits, v, lp, f->top_id[step], f->top_lp[step]);
        f->tokens[step] = f->top_id[step][0];
        feed = &f->tokens[step];
        n = 1;
    }
    if (s != ILAB_SEQ_NONE)
        env->api->seq_free(b, s);
    free(logits);
    free(lp);
    return ok;
}

static bool agree(const fingerprint *a, const fingerprint *b, char *why, size_t cap)
{
    for (int t = 0; t < STEPS; t++) {
        if (a->tokens[t] != b->tokens[t]) {
            snprintf(why, cap, "greedy token %d is %d with %s and %d with %s", t, (int)a->tokens[t], a->what,
                     (int)b->tokens[t], b->what);
            return false;
        }
        for (int k = 0; k < TOP; k++)
            if (a->top_id[t][k] != b->top_id[t][k] || fabs(a->top_lp[t][k] - b->top_lp[t][k]) > LOGPROB_BOUND) {
                snprintf(why, cap, "at step %d the top-5 entry %d is id %d (%.4f) with %s and id %d (%.4f) "
                         "with %s", t, k, (int)a->top_id[t][k], a->top_lp[t][k], a->what,
                         (int)b->top_id[t][k], b->top_lp[t][k], b->what);
                return false;
            }
    }
    return true;
}

void conf_digest_check(conf_env *env, ilab_backend_t *b, const char *what, char *fail, size_t cap)
{
    if (fail[0] || g_n == MAX_PRINTS || env->m->logits != ILAB_LOGITS_FULL)
        return;
    ilab_model_info_t info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    if (env->api->model_info(b, &info) != ILAB_OK || !info.digest[0] || info.vocab_size < TOP)
        return;
    fingerprint *f = &g_prints[g_n];
    memset(f, 0, sizeof *f);
    snprintf(f->digest, sizeof f->digest, "%.*s", (int)sizeof info.digest - 1, info.digest);
    snprintf(f->what, sizeof f->what, "%s", what);
    if (!take(env, b, info.vocab_size, f))
        return;
    char why[CONF_MSG_CAP - 256];
    for (int i = 0; i < g_n; i++)
        if (!strcmp(g_prints[i].digest, f->digest) && (++g_pairs, !agree(&g_prints[i], f, why, sizeof why))) {
            snprintf(fail, cap, "instances created with %s and with %s report the same digest \"%s\" but "
                     "differ: %s (same digest, same weights: DIF-1)", g_prints[i].what, f->what, f->digest, why);
            return;
        }
    g_n++;
}

int conf_digest_pairs(void)
{
    return g_pairs;
}
