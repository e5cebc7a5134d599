/* Sampler tests: SMP-1..5, logprobs. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "ilab_skip.h"
#include "ilab_heap.h"

#include "runtime/rng.h"
#include "runtime/sampler.h"

#define V 8
static const float base_logits[V] = {2.0f, 1.5f, 1.2f, 0.7f, 0.3f, -0.2f, -1.0f, -2.5f};

static ilab_sampling_t params(float t, int k, float p, float minp, float rep, uint64_t seed)
{
    ilab_sampling_t s = {sizeof s, t, k, p, minp, rep, seed, 0.0f, 0.0f};
    return s;
}

static ilab_sampler *make(ilab_sampling_t p, int32_t vocab)
{
    ilab_sampler *s = NULL;
    char err[256];
    assert_int_equal(ilab_sampler_create(&p, vocab, err, sizeof err, &s), ILAB_OK);
    return s;
}

static int32_t draw(ilab_sampler *s)
{
    float l[V];
    memcpy(l, base_logits, sizeof l);
    float lp;
    return ilab_sampler_sample(s, l, &lp, NULL, 0);
}

/* Regularised upper incomplete gamma Q(a, x) by the series for P (fine for
 * the small degrees of freedom used here): the chi-square p-value is
 * Q(df/2, stat/2). */
static double chi2_pvalue(double stat, int df)
{
    double a = df / 2.0, x = stat / 2.0;
    if (x <= 0)
        return 1.0;
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 10000; n++) {
        term *= x / (a + n);
        sum += term;
        if (term < sum * 1e-15)
            break;
    }
    double p_lower = sum * exp(-x + a * log(x) - lgamma(a));
    return 1.0 - p_lower;
}

/* Pearson's statistic of `counts` against probabilities softmax(logits / t)
 * restricted to `mask` (NULL = all). */
static double chi2_stat(const long *counts, long n, const float *logits, float t, const int *mask, int *df)
{
    double w[V], total = 0;
    for (int i = 0; i < V; i++) {
        w[i] = (!mask || mask[i]) ? exp((double)logits[i] / t) : 0.0;
        total += w[i];
    }
    double stat = 0;
    int cells = 0;
    for (int i = 0; i < V; i++) {
        if (w[i] == 0.0) {
            if (counts[i] > 0)
                return INFINITY; /* a token that must never be drawn was */
            continue;
        }
        double e = n * w[i] / total;
        stat += (counts[i] - e) * (counts[i] - e) / e;
        cells++;
    }
    *df = cells - 1;
    return stat;
}

static void smp1_temperature_zero_is_greedy_whatever_the_seed(void **state)
{
    (void)state;
    for (uint64_t seed = 0; seed < 20; seed++) {
        ilab_sampler *s = make(params(0.0f, 0, 1.0f, 0.0f, 1.0f, seed), V);
        for (int i = 0; i < 5; i++)
            assert_int_equal(draw(s), 0);
        ilab_sampler_free(s);
    }
}

static void smp2_same_seed_same_tokens(void **state)
{
    (void)state;
    ilab_sampler *a = make(params(1.0f, 0, 1.0f, 0.0f, 1.0f, 1234), V);
    ilab_sampler *b = make(params(1.0f, 0, 1.0f, 0.0f, 1.0f, 1234), V);
    ilab_sampler *c = make(params(1.0f, 0, 1.0f, 0.0f, 1.0f, 1235), V);
    int differ = 0;
    for (int i = 0; i < 200; i++) {
        int32_t x = draw(a), y = draw(b), z = draw(c);
        assert_int_equal(x, y);
        differ += x != z;
    }
    assert_true(differ > 0); /* a different seed is a different stream */
    ilab_sampler_free(a);
    ilab_sampler_free(b);
    ilab_sampler_free(c);
}

static void smp3_degenerate_filters_equal_greedy(void **state)
{
    (void)state;
    ilab_sampling_t cases[] = {
        params(1.5f, 1, 1.0f, 0.0f, 1.0f, 7),    /* top_k = 1 */
        params(1.5f, 0, 1e-6f, 0.0f, 1.0f, 7),   /* top_p -> 0 */
        params(1.5f, 0, 1.0f, 1.0f, 1.0f, 7),    /* min_p = 1 */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ilab_sampler *s = make(cases[c], V);
        for (int i = 0; i < 100; i++)
            assert_int_equal(draw(s), 0);
        ilab_sampler_free(s);
    }
}

static void smp4_distribution_matches_softmax_over_t(void **state)
{
    (void)state;
    const float t = 0.7f;
    const long n = 20000;
    long counts[V] = {0};
    ilab_sampler *s = make(params(t, 0, 1.0f, 0.0f, 1.0f, 42), V);
    for (long i = 0; i < n; i++)
        counts[draw(s)]++;
    ilab_sampler_free(s);
    int df;
    double stat = chi2_stat(counts, n, base_logits, t, NULL, &df);
    double p = chi2_pvalue(stat, df);
    /* Reject at the 0.1% level: the fixed seed makes the run deterministic,
     * the quantile makes the threshold principled. */
    assert_true(p > 0.001);
    /* Power check: the same draws are clearly NOT softmax(logits / 1). */
    double wrong = chi2_stat(counts, n, base_logits, 1.0f, NULL, &df);
    assert_true(chi2_pvalue(wrong, df) < 0.001);
}

static void smp4_top_k_and_top_p_renormalise_the_kept_tokens(void **state)
{
    (void)state;
    const long n = 20000;
    /* top_k = 3 keeps tokens 0..2 */
    long counts[V] = {0};
    ilab_sampler *s = make(params(1.0f, 3, 1.0f, 0.0f, 1.0f, 9), V);
    for (long i = 0; i < n; i++)
        counts[draw(s)]++;
    ilab_sampler_free(s);
    int mask3[V] = {1, 1, 1, 0, 0, 0, 0, 0}, df;
    double stat = chi2_stat(counts, n, base_logits, 1.0f, mask3, &df);
    assert_true(chi2_pvalue(stat, df) > 0.001);

    /* top_p = 0.65 at T = 1: probabilities 0.380, 0.231, 0.171, ... -> the
     * mass before token 2 is 0.611 < 0.65 (kept), before token 3 0.781
     * (dropped), so tokens 0..2 stay. */
    memset(counts, 0, sizeof counts);
    s = make(params(1.0f, 0, 0.65f, 0.0f, 1.0f, 10), V);
    for (long i = 0; i < n; i++)
        counts[draw(s)]++;
    ilab_sampler_free(s);
    stat = chi2_stat(counts, n, base_logits, 1.0f, mask3, &df);
    assert_true(chi2_pvalue(stat, df) > 0.001);
}

static int kept(const float *l, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        k += l[i] != -INFINITY;
    return k;
}

static void smp5_processor_order_is_hf(void **state)
{
    (void)state;
    /* Repetition penalty before top-k: token 0 (seen) drops below token 1. */
    ilab_sampler *s = make(params(1.0f, 1, 1.0f, 0.0f, 2.0f, 1), 3);
    ilab_sampler_accept(s, 0, false);
    float a[3] = {2.0f, 1.5f, 0.0f};
    ilab_sampler_process(s, a);
    assert_int_equal(kept(a, 3), 1);
    assert_true(a[1] != -INFINITY);
    assert_float_equal(a[1], 0.0f, 1e-6); /* kept logits are shifted: the largest is 0 */
    ilab_sampler_free(s);

    /* Temperature before top-p: at T = 0.5 token 0 alone holds 0.87 >= 0.8;
     * at T = 1 it would need token 1 too. */
    s = make(params(0.5f, 0, 0.8f, 0.0f, 1.0f, 1), 3);
    float b[3] = {2.0f, 1.0f, 0.0f};
    ilab_sampler_process(s, b);
    assert_int_equal(kept(b, 3), 1);
    assert_float_equal(b[0], 0.0f, 1e-6); /* (2 - max) / T */
    ilab_sampler_free(s);

    /* Top-k before top-p: four equal tokens, k = 2 then p = 0.5 keeps one
     * (p first would keep two, then k two). */
    s = make(params(1.0f, 2, 0.5f, 0.0f, 1.0f, 1), 4);
    float c[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    ilab_sampler_process(s, c);
    assert_int_equal(kept(c, 4), 1);
    ilab_sampler_free(s);

    /* Top-p before min-p: p = {0.5, 0.3, 0.2}; top_p 0.6 keeps {0, 1}, then
     * min_p 0.5 (>= 0.25) keeps both. min-p first would leave one. */
    s = make(params(1.0f, 0, 0.6f, 0.5f, 1.0f, 1), 3);
    float d[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    ilab_sampler_process(s, d);
    assert_int_equal(kept(d, 3), 2);
    ilab_sampler_free(s);
}

static ilab_sampling_t with_penalties(float t, float rep, float presence, float frequency)
{
    ilab_sampling_t p = params(t, 0, 1.0f, 0.0f, rep, 1);
    p.presence_penalty = presence;
    p.frequency_penalty = frequency;
    return p;
}

/* OpenAI semantics: logit -= presence * [count > 0] + frequency * count,
 * counting output tokens only; prompt tokens are seen by the repetition
 * penalty alone. */
static void presence_and_frequency_penalties_count_output_only(void **state)
{
    (void)state;
    ilab_sampler *s = make(with_penalties(1.0f, 1.0f, 0.5f, 0.25f), 4);
    ilab_sampler_accept(s, 0, false); /* prompt: no presence/frequency */
    ilab_sampler_accept(s, 1, true);
    ilab_sampler_accept(s, 2, true);
    ilab_sampler_accept(s, 2, true);
    ilab_sampler_accept(s, 2, true);
    float a[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    ilab_sampler_process(s, a);
    /* (kept logits are shifted by the maximum, 1, at T = 1) */
    assert_float_equal(a[0], 1.0f - 1.0f, 1e-6);
    assert_float_equal(a[1], 1.0f - 0.5f - 0.25f - 1.0f, 1e-6);
    assert_float_equal(a[2], 1.0f - 0.5f - 3 * 0.25f - 1.0f, 1e-6);
    assert_float_equal(a[3], 1.0f - 1.0f, 1e-6);
    ilab_sampler_free(s);

    /* Negative values encourage repeats. */
    s = make(with_penalties(1.0f, 1.0f, -1.0f, -0.5f), 2);
    ilab_sampler_accept(s, 1, true);
    ilab_sampler_accept(s, 1, true);
    float b[2] = {0.0f, 0.0f};
    ilab_sampler_process(s, b);
    assert_float_equal(b[1] - b[0], 2.0f, 1e-6);
    ilab_sampler_free(s);
}

/* Order: the repetition penalty (a factor) before the presence/frequency
 * penalties (a subtraction), both before temperature; greedy sees them. */
static void penalties_run_before_temperature_in_order(void **state)
{
    (void)state;
    /* rep 2 then presence 1: 3 -> 1.5 -> 0.5 (the other order: 2 -> 1). */
    ilab_sampler *s = make(with_penalties(0.5f, 2.0f, 1.0f, 0.0f), 2);
    ilab_sampler_accept(s, 0, true);
    float a[2] = {3.0f, 0.6f};
    ilab_sampler_process(s, a);
    /* then shifted by the maximum (0.6) and divided by T = 0.5 */
    assert_float_equal(a[0], (0.5f - 0.6f) / 0.5f, 1e-6);
    assert_float_equal(a[1], 0.0f, 1e-6);
    ilab_sampler_free(s);

    /* Greedy: the frequency penalty moves the argmax; the logprob is raw. */
    s = make(with_penalties(0.0f, 1.0f, 0.0f, 0.6f), 2);
    ilab_sampler_accept(s, 0, true);
    float b[2] = {1.0f, 0.5f}, lp;
    assert_int_equal(ilab_sampler_sample(s, b, &lp, NULL, 0), 1);
    assert_float_equal(lp, 0.5 - log(exp(1.0) + exp(0.5)), 1e-5);
    ilab_sampler_free(s);
}

/* Each processor at the edge of its rule, where an off-by-one shows
 * (scripts/mutations.tsv: sp02 sp03 sp04 sp07 sp08). */
static void processors_at_their_edges(void **state)
{
    (void)state;
    /* The penalty range is closed: +-2 are valid. */
    ilab_sampling_t edge = with_penalties(1.0f, 1.0f, 2.0f, -2.0f);
    ilab_sampler *s = make(edge, 4);
    ilab_sampler_free(s);

    /* Equal logits rank by the lower id: top_k 1 keeps token 0. */
    s = make(params(1.0f, 1, 1.0f, 0.0f, 1.0f, 1), 3);
    float a[3] = {1.0f, 1.0f, 1.0f};
    ilab_sampler_process(s, a);
    assert_int_equal(kept(a, 3), 1);
    assert_true(a[0] != -INFINITY);
    ilab_sampler_free(s);

    /* The repetition penalty makes a negative logit more negative (times r),
     * a positive one smaller (divided by r). */
    s = make(params(1.0f, 0, 1.0f, 0.0f, 2.0f, 1), 3);
    ilab_sampler_accept(s, 0, false);
    ilab_sampler_accept(s, 1, false);
    float b[3] = {-1.0f, 3.0f, 0.5f};
    ilab_sampler_process(s, b);
    /* (shifted by the maximum, 1.5, at T = 1) */
    assert_float_equal(b[0], -2.0f - 1.5f, 1e-6);
    assert_float_equal(b[1], 0.0f, 1e-6);
    assert_float_equal(b[2], 0.5f - 1.5f, 1e-6);
    ilab_sampler_free(s);

    /* Top-p: the second of two equal tokens has exactly top_p = 0.5 of the
     * mass before it, so it goes (HF: kept while the mass before is < p). */
    s = make(params(1.0f, 0, 0.5f, 0.0f, 1.0f, 1), 2);
    float c[2] = {0.0f, 0.0f};
    ilab_sampler_process(s, c);
    assert_int_equal(kept(c, 2), 1);
    ilab_sampler_free(s);

    /* Min-p 1 keeps exactly the tokens at the maximum: the threshold itself
     * passes. */
    s = make(params(1.0f, 0, 1.0f, 1.0f, 1.0f, 1), 3);
    float d[3] = {1.0f, 1.0f, 0.0f};
    ilab_sampler_process(s, d);
    assert_int_equal(kept(d, 3), 2);
    assert_true(d[2] == -INFINITY);
    ilab_sampler_free(s);

    /* Top-p after top-k renormalises over what top-k kept, the top token
     * included: k = 2 leaves {0.6, 0.4} of 1.1; top_p 0.7 of that needs both. */
    s = make(params(1.0f, 2, 0.7f, 0.0f, 1.0f, 1), 3);
    float e[3] = {logf(0.6f), logf(0.4f), logf(0.1f)};
    ilab_sampler_process(s, e);
    assert_int_equal(kept(e, 3), 2);
    ilab_sampler_free(s);

    /* The logprob of a token the penalty lowered is still the raw one. */
    s = make(params(0.0f, 0, 1.0f, 0.0f, 2.0f, 1), 2);
    ilab_sampler_accept(s, 0, false);
    float f[2] = {3.0f, 0.0f}, lp;
    assert_int_equal(ilab_sampler_sample(s, f, &lp, NULL, 0), 0); /* 1.5 still beats 0 */
    assert_float_equal(lp, 3.0 - log(exp(3.0) + 1.0), 1e-5);
    ilab_sampler_free(s);
}

/* The penalties against a direct computation, on token histories with many
 * repeats: a token seen once or five times (prompt or output) is divided or
 * multiplied by the repetition penalty exactly once (HF's processor works on
 * the set of seen tokens), and loses presence + frequency * (its output
 * count). Temperature 1 and no filter: the processed logits are the
 * penalised ones. Histories stay shorter than the vocabulary. */
static uint64_t xorshift(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static float uniform(uint64_t *x, float lo, float hi)
{
    return lo + (hi - lo) * (float)((double)(xorshift(x) >> 11) / (double)(1ull << 53));
}

static void penalties_match_a_direct_computation_on_repeats(void **state)
{
    (void)state;
    enum { VOCAB = 16, HISTORY = 14, TRIALS = 400 };
    static const float reps[] = {1.0f, 0.5f, 1.3f, 2.0f, 3.7f};
    uint64_t x = 0x9e3779b97f4a7c15ull;
    int repeated_trials = 0;
    for (int trial = 0; trial < TRIALS; trial++) {
        float rep = reps[xorshift(&x) % 5];
        float presence = uniform(&x, -2.0f, 2.0f), frequency = uniform(&x, -2.0f, 2.0f);
        if (trial % 4 == 0)
            presence = frequency = 0.0f; /* the repetition penalty alone */
        ilab_sampler *s = make(with_penalties(1.0f, rep, presence, frequency), VOCAB);
        int seen[VOCAB] = {0}, out_count[VOCAB] = {0};
        int n_hist = 1 + (int)(xorshift(&x) % HISTORY);
        int n_prompt = (int)(xorshift(&x) % (unsigned)(n_hist + 1));
        bool repeats = false;
        for (int i = 0; i < n_hist; i++) {
            int32_t tok = (int32_t)(xorshift(&x) % 6); /* few distinct tokens: repeats */
            bool is_output = i >= n_prompt;
            repeats |= seen[tok] > 0;
            seen[tok]++;
            out_count[tok] += is_output;
            ilab_sampler_accept(s, tok, is_output);
        }
        repeated_trials += repeats;
        float logits[VOCAB], want[VOCAB];
        for (int v = 0; v < VOCAB; v++) {
            logits[v] = v % 7 == 3 ? 0.0f : uniform(&x, -6.0f, 6.0f);
            double l = logits[v];
            if (seen[v])
                l = l > 0 ? l / rep : l * rep;
            if (out_count[v])
                l -= presence + frequency * out_count[v];
            want[v] = (float)l;
        }
        /* The sampler hands back (logit - max) / T (T = 1 here): the same
         * distribution, the largest at 0. */
        float top = want[0];
        for (int v = 1; v < VOCAB; v++)
            top = want[v] > top ? want[v] : top;
        for (int v = 0; v < VOCAB; v++)
            want[v] -= top;
        ilab_sampler_process(s, logits);
        for (int v = 0; v < VOCAB; v++)
            if (fabsf(logits[v] - want[v]) > 1e-5f * (1.0f + fabsf(want[v]) + fabsf(top)))
                fail_msg("trial %d token %d (seen %d times, %d in the output; repetition %.2f, "
                         "presence %.3f, frequency %.3f): %.6f, expected %.6f", trial, v,
                         seen[v], out_count[v], (double)rep, (double)presence,
                         (double)frequency, (double)logits[v], (double)want[v]);
        ilab_sampler_free(s);
    }
    assert_true(repeated_trials > TRIALS / 2); /* the histories did repeat tokens */
}

/* Create, use and free give every byte back (scripts/mutations.tsv sp13:
 * a dropped free in ilab_sampler_free). */
static void sampler_cycle(void *ctx)
{
    (void)ctx;
    ilab_sampler *s = make(with_penalties(1.0f, 1.5f, 0.5f, 0.5f), 64);
    ilab_sampler_accept(s, 3, false);
    ilab_sampler_accept(s, 5, true);
    float l[64] = {0};
    ilab_sampler_sample(s, l, NULL, NULL, 0);
    ilab_sampler_free(s);
}

static void create_and_free_leave_no_heap_behind(void **state)
{
    (void)state;
    double per_cycle = ilab_heap_growth(sampler_cycle, NULL, 20, 200);
    print_message("live heap growth per sampler cycle: %.1f bytes\n", per_cycle);
    assert_true(per_cycle < 8.0);
}

/* A writer newer than the host that sets a member the host does not know is
 * refused (fail closed); a zero tail is fine; a size below ABI 1.0's is refused. */
static void sampling_struct_size_is_checked(void **state)
{
    (void)state;
    struct {
        ilab_sampling_t known;
        float future_member;
    } newer;
    memset(&newer, 0, sizeof newer);
    newer.known = params(1.0f, 0, 1.0f, 0.0f, 1.0f, 1);
    newer.known.struct_size = sizeof newer;
    char err[256] = "";
    assert_int_equal(ilab_sampling_validate(&newer.known, err, sizeof err), ILAB_OK);
    newer.future_member = 1.0f;
    assert_int_equal(ilab_sampling_validate(&newer.known, err, sizeof err), ILAB_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "newer"));
    ilab_sampling_t old = params(1.0f, 0, 1.0f, 0.0f, 1.0f, 1);
    old.struct_size = (uint32_t)offsetof(ilab_sampling_t, presence_penalty);
    assert_int_equal(ilab_sampling_validate(&old, err, sizeof err), ILAB_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "struct_size"));
}

static void logprobs_are_raw_log_softmax_sorted(void **state)
{
    (void)state;
    ilab_sampler *s = make(params(0.8f, 3, 0.9f, 0.0f, 1.3f, 5), V);
    ilab_sampler_accept(s, 0, false);
    double lse = 0;
    for (int i = 0; i < V; i++)
        lse += exp(base_logits[i]);
    lse = log(lse);
    for (int round = 0; round < 50; round++) {
        float l[V], lp;
        memcpy(l, base_logits, sizeof l);
        ilab_logprob_t top[5];
        int32_t tok = ilab_sampler_sample(s, l, &lp, top, 5);
        assert_true(tok >= 0 && tok < 3); /* top_k = 3 */
        assert_float_equal(lp, base_logits[tok] - lse, 1e-5);
        for (int i = 0; i < 5; i++) {
            assert_int_equal(top[i].token, i); /* base_logits is sorted */
            assert_float_equal(top[i].logprob, base_logits[i] - lse, 1e-5);
            assert_true(top[i].logprob <= 0.0f);
            if (i)
                assert_true(top[i].logprob <= top[i - 1].logprob);
        }
    }
    ilab_sampler_free(s);
}

/* The raw normaliser over a large vocabulary (vector path plus tail),
 * against a double-precision reference; -inf logits contribute nothing. */
static void logprobs_match_a_double_reference_over_a_large_vocabulary(void **state)
{
    (void)state;
    enum { N = 32003 };
    static float logits[N], copy[N];
    ilab_rng r;
    ilab_rng_seed(&r, 3);
    for (int i = 0; i < N; i++)
        logits[i] = (float)(ilab_rng_uniform(&r) * 40.0 - 25.0);
    logits[17] = -INFINITY;
    logits[N - 1] = 15.5f; /* the max sits in the scalar tail */
    double max = 15.5, sum = 0;
    for (int i = 0; i < N; i++)
        sum += exp((double)logits[i] - max);
    double lse = max + log(sum);
    ilab_sampler *s = make(params(0.0f, 0, 1.0f, 0.0f, 1.0f, 0), N);
    memcpy(copy, logits, sizeof copy);
    float lp;
    ilab_logprob_t top[3];
    int32_t tok = ilab_sampler_sample(s, copy, &lp, top, 3);
    assert_int_equal(tok, N - 1);
    assert_float_equal(lp, 15.5 - lse, 2e-6);
    assert_int_equal(top[0].token, N - 1);
    for (int i = 0; i < 3; i++)
        assert_float_equal(top[i].logprob, (double)logits[top[i].token] - lse, 2e-6);
    ilab_sampler_free(s);
}

static void bad_parameters_are_refused_by_name(void **state)
{
    (void)state;
    struct {
        ilab_sampling_t p;
        const char *name;
    } bad[] = {
        {params(-1.0f, 0, 1.0f, 0.0f, 1.0f, 0), "temperature"},
        {params(1.0f, -2, 1.0f, 0.0f, 1.0f, 0), "top_k"},
        {params(1.0f, -1, 1.0f, 0.0f, 1.0f, 0), "top_k"}, /* -1 is the server's "off", not ours */
        {params(1.0f, 0, 0.0f, 0.0f, 1.0f, 0), "top_p"},
        {params(1.0f, 0, 1.0f, 1.5f, 1.0f, 0), "min_p"},
        {params(1.0f, 0, 1.0f, 0.0f, 0.0f, 0), "repetition_penalty"},
        {params(NAN, 0, 1.0f, 0.0f, 1.0f, 0), "temperature"},
        {with_penalties(1.0f, 1.0f, 2.5f, 0.0f), "presence_penalty"},
        {with_penalties(1.0f, 1.0f, 0.0f, -2.01f), "frequency_penalty"},
        {with_penalties(1.0f, 1.0f, NAN, 0.0f), "presence_penalty"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ilab_sampler *s = NULL;
        char err[256] = "";
        assert_int_equal(ilab_sampler_create(&bad[i].p, V, err, sizeof err, &s), ILAB_INVALID_ARGUMENT);
        assert_null(s);
        assert_non_null(strstr(err, bad[i].name));
    }
}

/* --- numeric edges ------------------------------------------------------------ */

/* The direct computation, in double, of what the processors keep and with
 * what probability (HF's order: top-k, top-p, min-p; equal logits by the
 * lower id): `prob` gets 0 for every token removed. T > 0. */
static void reference_probs(const float *l, int n, double t, int k, double top_p, double min_p,
                            double *prob)
{
    int order[64];
    double max = -INFINITY;
    for (int i = 0; i < n; i++) {
        order[i] = i;
        max = (double)l[i] > max ? (double)l[i] : max;
    }
    for (int i = 0; i < n; i++) /* insertion sort: higher first, ties by id */
        for (int j = i; j > 0 && (l[order[j]] > l[order[j - 1]] ||
                                  (l[order[j]] == l[order[j - 1]] && order[j] < order[j - 1]));
             j--) {
            int x = order[j];
            order[j] = order[j - 1];
            order[j - 1] = x;
        }
    double w[64], total = 0.0;
    for (int i = 0; i < n; i++) {
        w[i] = exp(((double)l[i] - max) / t);
        total += w[i];
    }
    int keep = k > 0 && k < n ? k : n;
    /* top-p over what top-k kept, renormalised: kept while the mass before < p */
    double kept_total = 0.0;
    for (int r = 0; r < keep; r++)
        kept_total += w[order[r]];
    if (top_p < 1.0) {
        double before = 0.0;
        int r = 0;
        while (r < keep && (r == 0 || before < top_p * kept_total))
            before += w[order[r++]];
        keep = r;
    }
    for (int i = 0; i < n; i++)
        prob[i] = 0.0;
    double top = w[order[0]];
    double sum = 0.0;
    for (int r = 0; r < keep; r++) {
        int i = order[r];
        if (min_p > 0.0 && w[i] < min_p * top)
            continue;
        prob[i] = w[i];
        sum += w[i];
    }
    for (int i = 0; i < n; i++)
        prob[i] /= sum;
    (void)total;
}

/* The sampler's own distribution: ilab_sampler_process's kept logits,
 * softmaxed. Checks they are finite, <= 0, with 0 among them. */
static void processed_probs(ilab_sampler *s, const float *logits, int n, double *prob)
{
    float l[64];
    memcpy(l, logits, (size_t)n * sizeof *l);
    ilab_sampler_process(s, l);
    double sum = 0.0;
    bool zero = false;
    for (int i = 0; i < n; i++) {
        assert_false(isnan(l[i]));
        assert_true(l[i] <= 0.0f); /* shifted: nothing overflows */
        zero |= l[i] == 0.0f;
        prob[i] = l[i] == -INFINITY ? 0.0 : exp((double)l[i]);
        sum += prob[i];
    }
    assert_true(zero);
    for (int i = 0; i < n; i++)
        prob[i] /= sum;
}

static void assert_probs_match(const double *got, const double *want, int n, const char *what)
{
    for (int i = 0; i < n; i++)
        if (fabs(got[i] - want[i]) > 1e-6 + 1e-5 * want[i] || (want[i] == 0.0) != (got[i] == 0.0))
            fail_msg("%s: token %d has probability %.9g, the direct computation %.9g", what, i,
                     got[i], want[i]);
}

static const uint64_t edge_seeds[] = {0, 1, 42, UINT64_MAX};

/* Every temperature >= 0 gives greedy or a proper sample: never a token
 * the distribution does not hold, never the same wrong token for every
 * seed. Greedy is exact at T = 0 and, by arithmetic, wherever the gap
 * between the two largest logits over T passes about 104 (exp gives 0
 * for the rest): here the gap is 0.5, so every T below 0.5 / 104 draws
 * token 0 alone, whatever the seed. Above, the draws follow the direct
 * computation of softmax(l / T). */
static void every_temperature_is_greedy_or_a_proper_sample(void **state)
{
    (void)state;
    static const float temps[] = {0.0f,  1e-45f, 1e-44f, 1e-42f, 1e-40f, 1e-39f, 1e-38f,
                                  1.2e-38f, 1e-37f, 1e-35f, 1e-32f, 1e-30f, 1e-20f, 1e-10f,
                                  1e-5f, 1e-3f, 4e-3f, 0.5f, 1.0f, 2.0f, 100.0f, FLT_MAX};
    const double gap = (double)base_logits[0] - (double)base_logits[1];
    for (size_t ti = 0; ti < sizeof temps / sizeof temps[0]; ti++) {
        double t = temps[ti];
        bool greedy = t == 0.0 || gap / t > 104.0;
        double want[V], got[V];
        if (t > 0.0)
            reference_probs(base_logits, V, t, 0, 1.0, 0.0, want);
        for (size_t si = 0; si < sizeof edge_seeds / sizeof edge_seeds[0]; si++) {
            ilab_sampler *s = make(params(temps[ti], 0, 1.0f, 0.0f, 1.0f, edge_seeds[si]), V);
            char what[96];
            snprintf(what, sizeof what, "T = %g, seed %llu", t, (unsigned long long)edge_seeds[si]);
            if (t > 0.0) {
                processed_probs(s, base_logits, V, got);
                assert_probs_match(got, want, V, what);
            }
            long counts[V] = {0};
            for (int i = 0; i < 400; i++) {
                int32_t tok = draw(s);
                assert_true(tok >= 0 && tok < V);
                if (greedy && tok != 0)
                    fail_msg("%s: drew %d where only the argmax can come out", what, tok);
                counts[tok]++;
            }
            if (!greedy && t >= 1.0) {
                int df = 0;
                double stat = chi2_stat(counts, 400, base_logits, temps[ti], NULL, &df);
                if (chi2_pvalue(stat, df) < 1e-4)
                    fail_msg("%s: draws do not follow softmax(l / T)", what);
            }
            ilab_sampler_free(s);
        }
    }
    /* Two tokens tied at the top, a tiny T: the draw is shared between them
     * (a proper sample of the limit), never a third token. */
    const float tied[3] = {1.0f, 1.0f, 0.0f};
    for (size_t si = 0; si < sizeof edge_seeds / sizeof edge_seeds[0]; si++) {
        ilab_sampler *s = make(params(1e-45f, 0, 1.0f, 0.0f, 1.0f, edge_seeds[si]), 3);
        int seen[3] = {0};
        for (int i = 0; i < 200; i++) {
            float l[3];
            memcpy(l, tied, sizeof l);
            seen[ilab_sampler_sample(s, l, NULL, NULL, 0)]++;
        }
        assert_int_equal(seen[2], 0);
        assert_true(seen[0] > 0 && seen[1] > 0);
        ilab_sampler_free(s);
    }
    /* Logits near the float range: the shift is done in double, so a huge T
     * still sees the real differences (their float difference overflows). */
    const float wide[4] = {3e38f, -3e38f, 1e38f, -FLT_MAX};
    for (size_t ti = 0; ti < 3; ti++) {
        float t = (float[]){1e38f, FLT_MAX, 1.0f}[ti];
        ilab_sampler *s = make(params(t, 0, 1.0f, 0.0f, 1.0f, 3), 4);
        double want[4], got[4];
        reference_probs(wide, 4, t, 0, 1.0, 0.0, want);
        processed_probs(s, wide, 4, got);
        assert_probs_match(got, want, 4, "logits near +-FLT_MAX");
        ilab_sampler_free(s);
    }
}

/* top_k, top_p and min_p at and around their bounds against the direct
 * computation, at a temperature where every token counts. */
static void filters_at_their_bounds_match_the_direct_computation(void **state)
{
    (void)state;
    static const struct {
        int k;
        float p, min_p;
    } cases[] = {
        {V - 1, 1.0f, 0.0f}, {V, 1.0f, 0.0f}, {V + 1, 1.0f, 0.0f}, {INT32_MAX, 1.0f, 0.0f},
        {0, 1e-45f, 0.0f},   {0, 1.0f - 1e-7f, 0.0f}, {3, 1e-45f, 0.0f}, {3, 1.0f - 1e-7f, 0.0f},
        {0, 1.0f, 1e-45f},   {0, 1.0f, 1e-30f},       {0, 1.0f, 1.0f},   {0, 1.0f, 1.0f - 1e-7f},
        {V, 1.0f - 1e-7f, 1e-45f},
    };
    /* base_logits, and a vocabulary with a far tail: top_p 1 - 1e-7 drops a
     * token of probability 2e-9 and keeps one of 1e-6; min_p at the
     * smallest float keeps logits within 103.28 of the top and no more. */
    const float tail[6] = {0.0f, -1.0f, -13.8f, -20.0f, -103.0f, -104.0f};
    const float *sets[] = {base_logits, tail};
    const int sizes[] = {V, 6};
    for (size_t k = 0; k < 2; k++) {
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            for (size_t si = 0; si < sizeof edge_seeds / sizeof edge_seeds[0]; si++) {
                ilab_sampler *s = make(params(1.0f, cases[c].k, cases[c].p, cases[c].min_p, 1.0f,
                                              edge_seeds[si]), sizes[k]);
                double want[V], got[V];
                reference_probs(sets[k], sizes[k], 1.0, cases[c].k, cases[c].p, cases[c].min_p,
                                want);
                processed_probs(s, sets[k], sizes[k], got);
                char what[128];
                snprintf(what, sizeof what, "set %zu, top_k %d, top_p %.9g, min_p %g", k,
                         cases[c].k, (double)cases[c].p, (double)cases[c].min_p);
                assert_probs_match(got, want, sizes[k], what);
                for (int i = 0; i < 50; i++) {
                    float l[V];
                    memcpy(l, sets[k], (size_t)sizes[k] * sizeof *l);
                    int32_t tok = ilab_sampler_sample(s, l, NULL, NULL, 0);
                    if (!(tok >= 0 && tok < sizes[k] && want[tok] > 0.0))
                        fail_msg("%s: drew %d, which the filters removed", what, tok);
                }
                ilab_sampler_free(s);
            }
        }
    }
    /* The far tail's expected shapes, so the reference itself is pinned. */
    double want[6];
    reference_probs(tail, 6, 1.0, 0, 1.0f - 1e-7f, 0.0, want);
    assert_true(want[2] > 0.0 && want[3] == 0.0);
    reference_probs(tail, 6, 1.0, 0, 1.0, 1e-45f, want);
    assert_true(want[4] > 0.0 && want[5] == 0.0);
}

/* The penalties at their bounds: the repetition penalty at a subnormal and
 * at FLT_MAX (a seen positive logit divided by 1e-45 is +inf: that token
 * takes all the mass, as the limit says), presence and frequency at +-2
 * over a thousand repeats. Never NaN, never a token outside the vocabulary,
 * and where the result is finite it is the direct computation. */
static void penalties_at_their_bounds(void **state)
{
    (void)state;
    for (size_t si = 0; si < sizeof edge_seeds / sizeof edge_seeds[0]; si++) {
        uint64_t seed = edge_seeds[si];
        ilab_sampler *s = make(params(1.0f, 0, 1.0f, 0.0f, 1e-45f, seed), V);
        ilab_sampler_accept(s, 3, false);  /* logit 0.7 -> +inf */
        ilab_sampler_accept(s, 6, false);  /* logit -1.0 -> -1e-45 */
        double got[V];
        processed_probs(s, base_logits, V, got);
        assert_float_equal(got[3], 1.0, 0.0);
        for (int i = 0; i < 20; i++)
            assert_int_equal(draw(s), 3);
        ilab_sampler_free(s);

        s = make(params(1.0f, 0, 1.0f, 0.0f, FLT_MAX, seed), V);
        ilab_sampler_accept(s, 0, false);  /* 2.0 -> ~0 */
        ilab_sampler_accept(s, 7, false);  /* -2.5 -> -inf: never drawn */
        float pen[V];
        memcpy(pen, base_logits, sizeof pen);
        pen[0] = 2.0f / FLT_MAX;
        pen[7] = -INFINITY;
        double want[V];
        reference_probs(pen, V, 1.0, 0, 1.0, 0.0, want);
        processed_probs(s, base_logits, V, got);
        assert_probs_match(got, want, V, "repetition_penalty FLT_MAX");
        for (int i = 0; i < 100; i++)
            assert_int_not_equal(draw(s), 7);
        ilab_sampler_free(s);

        for (int sign = -1; sign <= 1; sign += 2) {
            ilab_sampling_t p = with_penalties(1.0f, 1.0f, 2.0f * (float)sign, 2.0f * (float)sign);
            p.seed = seed;
            s = make(p, V);
            for (int i = 0; i < 1000; i++)
                ilab_sampler_accept(s, 1, true);
            memcpy(pen, base_logits, sizeof pen);
            pen[1] = base_logits[1] - (2.0f * (float)sign + 2.0f * (float)sign * 1000.0f);
            reference_probs(pen, V, 1.0, 0, 1.0, 0.0, want);
            processed_probs(s, base_logits, V, got);
            assert_probs_match(got, want, V, "presence and frequency at +-2");
            for (int i = 0; i < 50; i++) {
                int32_t tok = draw(s);
                assert_true(sign > 0 ? tok != 1 : tok == 1);
            }
            ilab_sampler_free(s);
        }
    }
}

static void rng_is_uniform_enough_and_seeded(void **state)
{
    (void)state;
    ilab_rng a, b;
    ilab_rng_seed(&a, 99);
    ilab_rng_seed(&b, 99);
    long buckets[10] = {0};
    for (int i = 0; i < 10000; i++) {
        double u = ilab_rng_uniform(&a);
        assert_true(u >= 0.0 && u < 1.0);
        assert_true(u == ilab_rng_uniform(&b));
        buckets[(int)(u * 10)]++;
    }
    double stat = 0;
    for (int i = 0; i < 10; i++)
        stat += (buckets[i] - 1000.0) * (buckets[i] - 1000.0) / 1000.0;
    assert_true(chi2_pvalue(stat, 9) > 0.001);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(smp1_temperature_zero_is_greedy_whatever_the_seed),
        cmocka_unit_test(smp2_same_seed_same_tokens),
        cmocka_unit_test(smp3_degenerate_filters_equal_greedy),
        cmocka_unit_test(smp4_distribution_matches_softmax_over_t),
        cmocka_unit_test(smp4_top_k_and_top_p_renormalise_the_kept_tokens),
        cmocka_unit_test(smp5_processor_order_is_hf),
        cmocka_unit_test(presence_and_frequency_penalties_count_output_only),
        cmocka_unit_test(penalties_run_before_temperature_in_order),
        cmocka_unit_test(processors_at_their_edges),
        cmocka_unit_test(penalties_match_a_direct_computation_on_repeats),
        cmocka_unit_test(create_and_free_leave_no_heap_behind),
        cmocka_unit_test(sampling_struct_size_is_checked),
        cmocka_unit_test(logprobs_are_raw_log_softmax_sorted),
        cmocka_unit_test(logprobs_match_a_double_reference_over_a_large_vocabulary),
        cmocka_unit_test(bad_parameters_are_refused_by_name),
        cmocka_unit_test(rng_is_uniform_enough_and_seeded),
        cmocka_unit_test(every_temperature_is_greedy_or_a_proper_sample),
        cmocka_unit_test(filters_at_their_bounds_match_the_direct_computation),
        cmocka_unit_test(penalties_at_their_bounds),
    };
    return ilab_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
