/* The host sampler (see sampler.h for the order of processors and which
 * distribution logprobs come from). Plain loops over the vocabulary, in the
 * spirit of llama2.c's run.c. */
#include "sampler.h"

#include <math.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct candidate {
    float logit;
    int32_t id;
} candidate;

struct ilab_sampler {
    ilab_sampling_t params;
    int32_t vocab_size;
    ilab_rng rng;
    uint8_t *seen;    /* vocab_size flags: token in prompt or output */
    int32_t *history; /* the distinct seen tokens, for the penalty pass */
    int32_t n_history;
    int32_t *out_count;   /* vocab_size: times each token was output */
    int32_t *out_history; /* the distinct output tokens, for presence/frequency */
    int32_t n_out_history;
    float *raw;       /* copy of the raw logits, for logprobs */
    candidate *cand;  /* workspace: tokens still in the running */
    candidate *sorted; /* workspace: the head of the order, popped off the heap */
    int32_t n_cand;
};

void ilab_sampling_default(ilab_sampling_t *params)
{
    memset(params, 0, sizeof *params);
    params->struct_size = sizeof *params;
    params->temperature = ILAB_SAMPLING_DEFAULT_TEMPERATURE;
    params->top_k = 0;
    params->top_p = ILAB_SAMPLING_DEFAULT_TOP_P;
    params->min_p = 0.0f;
    params->repetition_penalty = 1.0f;
    params->seed = ILAB_SAMPLING_DEFAULT_SEED;
    params->presence_penalty = 0.0f;
    params->frequency_penalty = 0.0f;
}

/* The smallest valid writer: ABI 1.0's struct ends with frequency_penalty. */
#define SAMPLING_SIZE_ABI_1_0 (offsetof(ilab_sampling_t, frequency_penalty) + sizeof(float))

/* `in` as the host's own struct: members a (future, smaller) writer did not
 * have are off, i.e. zero. */
static ilab_sampling_t sampling_as_known(const ilab_sampling_t *in)
{
    ilab_sampling_t s;
    memset(&s, 0, sizeof s);
    memcpy(&s, in, in->struct_size < sizeof s ? in->struct_size : sizeof s);
    s.struct_size = sizeof s;
    return s;
}

static bool penalty_in_range(float v)
{
    return v >= -2.0f && v <= 2.0f; /* false for NaN */
}

/* What is wrong with the values of `p`, or NULL. */
static const char *range_error(const ilab_sampling_t *p)
{
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
        return "temperature must be a finite number >= 0";
    if (p->top_k < 0)
        return "top_k must be >= 0 (0 = off)";
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return "top_p must be in (0, 1] (1 = off)";
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return "min_p must be in [0, 1] (0 = off)";
    if (!(p->repetition_penalty > 0.0f) || !isfinite(p->repetition_penalty))
        return "repetition_penalty must be a finite number > 0 (1 = off)";
    if (!penalty_in_range(p->presence_penalty))
        return "presence_penalty must be in [-2, 2] (0 = off)";
    if (!penalty_in_range(p->frequency_penalty))
        return "frequency_penalty must be in [-2, 2] (0 = off)";
    return NULL;
}

ilab_status ilab_sampling_validate(const ilab_sampling_t *params, char *err, size_t err_cap)
{
    const char *bad = NULL;
    if (!params) {
        bad = "no sampling parameters";
    } else if (params->struct_size < SAMPLING_SIZE_ABI_1_0) {
        bad = "struct_size is smaller than ABI 1.0's ilab_sampling_t";
    } else if (!ilab_struct_tail_is_zero(params, sizeof *params)) {
        bad = "a member past this host's ilab_sampling_t is set (the writer is newer)";
    } else {
        ilab_sampling_t known = sampling_as_known(params);
        bad = range_error(&known);
    }
    if (bad) {
        if (err && err_cap)
            snprintf(err, err_cap, "invalid sampling parameter: %s", bad);
        return ILAB_INVALID_ARGUMENT;
    }
    return ILAB_OK;
}

ilab_status ilab_sampler_create(const ilab_sampling_t *params, int32_t vocab_size,
                                char *err, size_t err_cap, ilab_sampler **out)
{
    if (!out || vocab_size <= 0) {
        if (err && err_cap)
            snprintf(err, err_cap, "sampler needs an out pointer and a vocabulary size > 0");
        return ILAB_INVALID_ARGUMENT;
    }
    ilab_status st = ilab_sampling_validate(params, err, err_cap);
    if (st != ILAB_OK)
        return st;
    ilab_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return ILAB_OUT_OF_MEMORY;
    s->params = sampling_as_known(params);
    s->vocab_size = vocab_size;
    s->seen = calloc((size_t)vocab_size, 1);
    s->history = malloc((size_t)vocab_size * sizeof *s->history);
    s->out_count = calloc((size_t)vocab_size, sizeof *s->out_count);
    s->out_history = malloc((size_t)vocab_size * sizeof *s->out_history);
    s->raw = malloc((size_t)vocab_size * sizeof *s->raw);
    s->cand = malloc((size_t)vocab_size * sizeof *s->cand);
    s->sorted = malloc((size_t)vocab_size * sizeof *s->sorted);
    if (!s->seen || !s->history || !s->out_count || !s->out_history || !s->raw || !s->cand ||
        !s->sorted) {
        ilab_sampler_free(s);
        if (err && err_cap)
            snprintf(err, err_cap, "out of memory for a sampler over %d tokens", vocab_size);
        return ILAB_OUT_OF_MEMORY;
    }
    ilab_rng_seed(&s->rng, params->seed);
    *out = s;
    return ILAB_OK;
}

void ilab_sampler_free(ilab_sampler *s)
{
    if (!s)
        return;
    free(s->seen);
    free(s->history);
    free(s->out_count);
    free(s->out_history);
    free(s->raw);
    free(s->cand);
    free(s->sorted);
    free(s);
}

void ilab_sampler_accept(ilab_sampler *s, int32_t token, bool is_output)
{
    if (token < 0 || token >= s->vocab_size)
        return;
    if (!s->seen[token]) {
        s->seen[token] = 1;
        s->history[s->n_history++] = token;
    }
    if (is_output && s->out_count[token]++ == 0)
        s->out_history[s->n_out_history++] = token;
}

static int32_t argmax(const float *x, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* The sampler's total order: higher logit first, equal logits by lower id,
 * so results never depend on the order ties happen to be visited in. */
static bool ranks_before(const candidate *x, const candidate *y)
{
    return x->logit > y->logit || (x->logit == y->logit && x->id < y->id);
}

/* Max-heap (by ranks_before) sift-down of element i in h[0..n). */
static void sift_down(candidate *h, int32_t n, int32_t i)
{
    for (;;) {
        int32_t best = i, l = 2 * i + 1, r = l + 1;
        if (l < n && ranks_before(&h[l], &h[best]))
            best = l;
        if (r < n && ranks_before(&h[r], &h[best]))
            best = r;
        if (best == i)
            return;
        candidate t = h[i];
        h[i] = h[best];
        h[best] = t;
        i = best;
    }
}

/* HF RepetitionPenaltyLogitsProcessor: a seen token's logit is divided by the
 * penalty when positive, multiplied when negative — both make it less likely. */
static void apply_repetition_penalty(ilab_sampler *s, float *logits)
{
    float r = s->params.repetition_penalty;
    if (r == 1.0f)
        return;
    for (int32_t i = 0; i < s->n_history; i++) {
        float *l = &logits[s->history[i]];
        *l = *l > 0.0f ? *l / r : *l * r;
    }
}

/* OpenAI's presence and frequency penalties, over output tokens only:
 * logit -= presence (once it has appeared) + frequency * count. */
static void apply_presence_frequency(ilab_sampler *s, float *logits)
{
    float presence = s->params.presence_penalty, frequency = s->params.frequency_penalty;
    if (presence == 0.0f && frequency == 0.0f)
        return;
    for (int32_t i = 0; i < s->n_out_history; i++) {
        int32_t t = s->out_history[i];
        logits[t] -= presence + frequency * (float)s->out_count[t];
    }
}

static void apply_penalties(ilab_sampler *s, float *logits)
{
    apply_repetition_penalty(s, logits);
    apply_presence_frequency(s, logits);
}

/* Runs every processor after the penalties and leaves the surviving tokens,
 * with logits divided by T, in s->cand[0..n_cand). Temperature > 0. */
static void select_candidates(ilab_sampler *s, const float *logits)
{
    const ilab_sampling_t *p = &s->params;
    int32_t n = s->vocab_size;
    float inv_t = 1.0f / p->temperature;
    float max_logit = -INFINITY, max_abs = 0.0f;
    for (int32_t i = 0; i < n; i++) {
        if (logits[i] > max_logit)
            max_logit = logits[i];
        if (isfinite(logits[i]) && fabsf(logits[i]) > max_abs)
            max_abs = fabsf(logits[i]);
    }
    /* A temperature so small (down to 1e-45) that logit / T overflows would
     * give inf - inf = NaN below: shift by the maximum first, so the maximum
     * scales to 0 and the rest to large negatives or -inf (the argmax, as
     * softmax(z / T) tends to). Other temperatures keep the plain product. */
    bool shifted = isfinite(max_logit) && (!isfinite(inv_t) || !isfinite(max_abs * inv_t));
    float shift = max_logit;
    max_logit = shifted ? 0.0f : max_logit * inv_t;
    /* (float exps throughout: glibc's expf is several times faster than exp;
     * sums are kept in double.) */

    bool use_top_k = p->top_k > 0 && p->top_k < n;
    bool use_top_p = p->top_p < 1.0f;
    bool p_over_all = use_top_p && !use_top_k; /* nucleus mass over the whole vocabulary */
    int32_t m = 0;
    double total = 0.0;
    for (int32_t i = 0; i < n; i++) {
        float l = shifted ? (logits[i] - shift) / p->temperature : logits[i] * inv_t;
        if (l == -INFINITY)
            continue;
        s->cand[m].logit = l;
        s->cand[m].id = i;
        m++;
        if (p_over_all)
            total += (double)expf(l - max_logit);
    }
    if (m == 0) { /* every logit -inf: fall back to the first token */
        s->cand[0].logit = 0.0f;
        s->cand[0].id = argmax(logits, n);
        s->n_cand = 1;
        return;
    }

    if (use_top_k || use_top_p) {
        /* Only the head of the order matters (k tokens, or the nucleus), so
         * pop it off a heap instead of sorting the whole vocabulary. */
        for (int32_t i = m / 2 - 1; i >= 0; i--)
            sift_down(s->cand, m, i);
        int32_t limit = use_top_k ? p->top_k : m, heap_n = m, kept = 0;
        double before = 0.0, target = (double)p->top_p * total;
        while (kept < limit && heap_n > 0) {
            /* HF's TopPLogitsWarper in descending order: token i stays while
             * the mass strictly before it is < top_p; at least one stays. */
            if (p_over_all && kept > 0 && before >= target)
                break;
            candidate top = s->cand[0];
            s->cand[0] = s->cand[--heap_n];
            sift_down(s->cand, heap_n, 0);
            s->sorted[kept++] = top;
            if (p_over_all)
                before += (double)expf(top.logit - max_logit);
        }
        memcpy(s->cand, s->sorted, (size_t)kept * sizeof *s->cand);
        m = kept;
    }
    if (use_top_p && use_top_k) {
        /* Top-p over what top-k left, renormalised (HF order: k, then p). */
        double sub = 0.0;
        for (int32_t i = 0; i < m; i++)
            sub += (double)expf(s->cand[i].logit - s->cand[0].logit);
        double before = 0.0;
        int32_t keep = 0;
        while (keep < m && (keep == 0 || before < (double)p->top_p * sub)) {
            before += (double)expf(s->cand[keep].logit - s->cand[0].logit);
            keep++;
        }
        m = keep;
    }
    if (p->min_p > 0.0f) {
        /* p_i >= min_p * p_max  <=>  l_i >= l_max + log(min_p) */
        float top = -INFINITY;
        for (int32_t i = 0; i < m; i++)
            if (s->cand[i].logit > top)
                top = s->cand[i].logit;
        float threshold = top + logf(p->min_p);
        int32_t w = 0;
        for (int32_t i = 0; i < m; i++)
            if (s->cand[i].logit >= threshold)
                s->cand[w++] = s->cand[i];
        m = w;
    }
    s->n_cand = m;
}

void ilab_sampler_process(ilab_sampler *s, float *logits)
{
    int32_t n = s->vocab_size;
    apply_penalties(s, logits);
    if (s->params.temperature == 0.0f) {
        int32_t a = argmax(logits, n);
        float keep = logits[a];
        for (int32_t i = 0; i < n; i++)
            logits[i] = -INFINITY;
        logits[a] = keep;
        return;
    }
    select_candidates(s, logits);
    for (int32_t i = 0; i < n; i++)
        logits[i] = -INFINITY;
    for (int32_t i = 0; i < s->n_cand; i++)
        logits[s->cand[i].id] = s->cand[i].logit;
}

/* sum_i exp(x[i] - max), every x[i] <= max: the normaliser of the raw
 * logprobs, computed for every token of every request, so it is the one
 * loop here written for speed. Eight lanes at a time with GCC/Clang vector
 * extensions (lowered to whatever SIMD the target has): exp(d) = 2^k * e^u
 * with k = round(d / ln 2) and |u| <= ln(2) / 2, e^u by its Taylor series to
 * u^6 (error < 2e-7 relative, like expf), 2^k built in the exponent bits.
 * Sums are kept in double. */
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef double v8d __attribute__((vector_size(64)));

static double sum_exp_shifted(const float *x, int32_t n, float max)
{
    const v8f zero = {0};
    v8d acc = {0};
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        v8f d;
        memcpy(&d, x + i, sizeof d);
        d = d - max;
        v8f t = d * 1.44269504088896341f;                   /* d / ln 2 */
        v8i low = t < -126.0f;                              /* 2^-126 is as small as we go */
        t = (v8f)(((v8i)t & ~low) | ((v8i)(zero - 126.0f) & low));
        v8i k = __builtin_convertvector(t - 0.5f, v8i);     /* t <= 0: round to nearest */
        v8f u = (t - __builtin_convertvector(k, v8f)) * 0.693147180559945309f;
        v8f p = 1.0f + u * (1.0f + u * (0.5f + u * (1.0f / 6 + u * (1.0f / 24 + u * (1.0f / 120 + u * (1.0f / 720))))));
        v8f e = p * (v8f)((k + 127) << 23);                 /* times 2^k */
        acc += __builtin_convertvector(e, v8d);
    }
    double sum = 0.0;
    for (int j = 0; j < 8; j++)
        sum += acc[j];
    for (; i < n; i++)
        sum += (double)expf(x[i] - max);
    return sum;
}

/* The n most likely tokens of `x`, sorted descending, as logprobs. */
static void top_logprobs(const float *x, int32_t n, double lse, ilab_logprob_t *top, int k)
{
    int filled = 0;
    for (int32_t i = 0; i < n; i++) {
        float v = x[i];
        if (filled == k && !(v > top[k - 1].logprob))
            continue;
        int j = filled < k ? filled++ : k - 1;
        while (j > 0 && v > top[j - 1].logprob) {
            top[j] = top[j - 1];
            j--;
        }
        top[j].token = i;
        top[j].logprob = v;
    }
    for (int i = 0; i < filled; i++)
        top[i].logprob = (float)((double)top[i].logprob - lse);
}

int32_t ilab_sampler_sample(ilab_sampler *s, float *logits, float *logprob,
                            ilab_logprob_t *top, int n_top)
{
    int32_t n = s->vocab_size;

    /* The raw distribution first: its normaliser and top list. */
    int32_t raw_best = argmax(logits, n);
    float max_raw = logits[raw_best];
    double lse = (double)max_raw + log(sum_exp_shifted(logits, n, max_raw));
    if (n_top > 0 && top)
        top_logprobs(logits, n, lse, top, n_top > n ? n : n_top);
    /* Only the penalties write into `logits`; keep the raw values aside
     * only when one will. */
    bool penalised = (s->params.repetition_penalty != 1.0f && s->n_history > 0) ||
                     ((s->params.presence_penalty != 0.0f || s->params.frequency_penalty != 0.0f) &&
                      s->n_out_history > 0);
    const float *raw = logits;
    if (penalised) {
        memcpy(s->raw, logits, (size_t)n * sizeof *logits);
        raw = s->raw;
    }

    int32_t token;
    apply_penalties(s, logits);
    if (s->params.temperature == 0.0f) {
        token = penalised ? argmax(logits, n) : raw_best;
    } else {
        select_candidates(s, logits);
        float best = -INFINITY;
        for (int32_t i = 0; i < s->n_cand; i++)
            if (s->cand[i].logit > best)
                best = s->cand[i].logit;
        double total = 0.0;
        for (int32_t i = 0; i < s->n_cand; i++)
            total += (double)expf(s->cand[i].logit - best);
        double u = ilab_rng_uniform(&s->rng) * total;
        double acc = 0.0;
        token = s->cand[s->n_cand - 1].id; /* rounding: the last one */
        for (int32_t i = 0; i < s->n_cand; i++) {
            acc += (double)expf(s->cand[i].logit - best);
            if (u < acc) {
                token = s->cand[i].id;
                break;
            }
        }
    }
    if (logprob)
        *logprob = (float)((double)raw[token] - lse);
    return token;
}
