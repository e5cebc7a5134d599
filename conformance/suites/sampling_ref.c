/* SMP clauses against a reference: the host sampler (host/runtime/sampler.h,
 * the contract's processor order, SMP-5) run on the plugin's own raw logits.
 *
 * The plugin's generate() (or, for `sampling: host`, the host engine) draws
 * the tokens; the harness replays the same prompt and the tokens drawn
 * through eval() one decode at a time, so it holds the logits every step
 * was drawn from, and asks the reference what that step could draw:
 *
 * - greedy with penalties (SMP-1, SMP-7): every token is the reference's
 *   argmax of the penalised logits given the stream's own history;
 * - first-token draws over many seeds (SMP-5): every draw inside the
 *   reference's support, every token the reference gives weight to drawn,
 *   and a chi-square of the frequencies against the reference's
 *   probabilities (p < 1e-5, so a correct sampler passes run after run);
 * - TOKEN.logprob and the top-k list against log_softmax of the raw logits
 *   (SMP-6).
 *
 * Needs full logits. Boundaries the plugin's float rounding could decide
 * either way (a top-p mass, a min-p threshold, an argmax within TOL) are
 * bracketed, never asserted. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chi_square.h"
#include "runtime/sampler.h"
#include "suites.h"

#define GREEDY_STEPS 24
#define CHI_Z 4.265 /* the 1 - 1e-5 quantile of the standard normal */

static ilab_sampling_t sampling_off(float temperature)
{
    ilab_sampling_t s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    s.temperature = temperature;
    s.top_p = 1.0f;
    s.repetition_penalty = 1.0f;
    s.seed = 1;
    return s;
}

/* "T 0.7, repetition 1.3, top_k 40": the parameters that are not off. */
static void describe(const ilab_sampling_t *s, char *out, size_t cap)
{
    size_t k = (size_t)snprintf(out, cap, "temperature %g", (double)s->temperature);
#define ADD(cond, ...)                                                                             \
    if ((cond) && k < cap)                                                                         \
    k += (size_t)snprintf(out + k, cap - k, __VA_ARGS__)
    ADD(s->repetition_penalty != 1.0f, ", repetition_penalty %g", (double)s->repetition_penalty);
    ADD(s->presence_penalty != 0.0f, ", presence_penalty %g", (double)s->presence_penalty);
    ADD(s->frequency_penalty != 0.0f, ", frequency_penalty %g", (double)s->frequency_penalty);
    ADD(s->top_k != 0, ", top_k %d", s->top_k);
    ADD(s->top_p != 1.0f, ", top_p %g", (double)s->top_p);
    ADD(s->min_p != 0.0f, ", min_p %g", (double)s->min_p);
#undef ADD
}

/* The reference's processed logits for one step: `raw` after the
 * penalties over prompt + output, temperature, top-k, top-p and min-p;
 * removed tokens are -inf. */
static bool ref_process(conf_env *env, const ilab_sampling_t *s, const int32_t *prompt, size_t n_prompt,
                        const int32_t *out, size_t n_out, const float *raw, float *proc, char *msg, size_t cap)
{
    ilab_sampler *smp = NULL;
    char err[256] = "";
    if (ilab_sampler_create(s, env->info.vocab_size, err, sizeof err, &smp) != ILAB_OK) {
        CONF_MSG("the reference sampler refused its own parameters: %s", err);
        return false;
    }
    for (size_t i = 0; i < n_prompt; i++)
        ilab_sampler_accept(smp, prompt[i], false);
    for (size_t i = 0; i < n_out; i++)
        ilab_sampler_accept(smp, out[i], true);
    memcpy(proc, raw, (size_t)env->info.vocab_size * sizeof *proc);
    ilab_sampler_process(smp, proc);
    ilab_sampler_free(smp);
    return true;
}

/* Raw logits row by row for a stream: row i is after prompt + tokens[0..i),
 * prefilled in one call and then decoded a token at a time, as a stream
 * computes them. Returns n_rows * vocab floats (malloc'ed) or NULL. */
static float *stream_rows(conf_env *env, const int32_t *prompt, size_t n_prompt, const int32_t *tokens,
                          size_t n_rows, char *msg, size_t cap)
{
    size_t v = (size_t)env->info.vocab_size;
    float *rows = malloc((n_rows ? n_rows : 1) * v * sizeof *rows);
    ilab_seq_t s = ILAB_SEQ_NONE;
    ilab_status st = env->api->seq_create(env->be, &s);
    if (st == ILAB_OK)
        st = conf_eval1(env, s, prompt, (int32_t)n_prompt, 0, rows);
    for (size_t i = 1; i < n_rows && st == ILAB_OK; i++)
        st = conf_eval1(env, s, &tokens[i - 1], 1, 0, rows + i * v);
    if (s != ILAB_SEQ_NONE)
        env->api->seq_free(env->be, s);
    if (st != ILAB_OK) {
        conf_fail_status(env, st, "eval() replaying the stream", msg, cap);
        free(rows);
        return NULL;
    }
    return rows;
}

/* A prompt whose second half is the model's own greedy continuation of the
 * first: the tokens the model wants next are in the prompt, so a penalty
 * over the prompt decides the next argmax instead of being invisible. */
static bool likely_prompt(conf_env *env, uint64_t seed, int32_t *prompt, int32_t n, char *msg, size_t cap)
{
    int32_t half = n / 2, v = env->info.vocab_size;
    conf_prompt_tokens(env, seed, prompt, half);
    float *l = malloc((size_t)v * sizeof *l);
    ilab_seq_t s = ILAB_SEQ_NONE;
    ilab_status st = env->api->seq_create(env->be, &s);
    if (st == ILAB_OK)
        st = conf_eval1(env, s, prompt, half, 0, l);
    for (int32_t i = half; i < n && st == ILAB_OK; i++) {
        prompt[i] = conf_argmax(l, v);
        if (prompt[i] == env->info.eos_id || prompt[i] == env->info.bos_id)
            conf_prompt_tokens(env, seed + (uint64_t)i, &prompt[i], 1);
        if (i + 1 < n)
            st = conf_eval1(env, s, &prompt[i], 1, 0, l);
    }
    if (s != ILAB_SEQ_NONE)
        env->api->seq_free(env->be, s);
    free(l);
    if (st != ILAB_OK) {
        conf_fail_status(env, st, "eval()", msg, cap);
        return false;
    }
    return true;
}

/* SMP-7: a refusal is one ERROR event, no TOKEN, UNSUPPORTED or
 * INVALID_ARGUMENT, a message naming the parameter. */
static bool refused(const conf_gen *g)
{
    return g->n_tokens == 0 && g->terminal == ILAB_EVENT_ERROR &&
           (g->status == ILAB_UNSUPPORTED || g->status == ILAB_INVALID_ARGUMENT);
}

/* A refusal keeps SMP-7 when its message names one of the parameters that
 * are set; else the message lists those it could have named. */
static conf_result refusal_verdict(const conf_gen *g, const ilab_sampling_t *s, const char *params, char *msg,
                                   size_t cap)
{
    static const struct {
        const char *stem;
        int which;
    } names[] = {{"repetition", 0}, {"presence", 1}, {"frequency", 2}, {"top_k", 3}, {"top_p", 4}, {"min_p", 5}};
    bool set[6] = {s->repetition_penalty != 1.0f, s->presence_penalty != 0.0f, s->frequency_penalty != 0.0f,
                   s->top_k != 0, s->top_p != 1.0f, s->min_p != 0.0f};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (set[names[i].which] && strstr(g->error, names[i].stem))
            return CONF_PASS;
    char missing[120] = "";
    size_t k = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (set[names[i].which] && k < sizeof missing)
            k += (size_t)snprintf(missing + k, sizeof missing - k, "%s%s", k ? " or " : "", names[i].stem);
    CONF_MSG("%s refused with %s but the message does not name the parameter (%s): \"%s\" (SMP-7)", params,
             ilab_status_name(g->status), missing, g->error);
    return CONF_FAIL;
}

typedef struct greedy_outcome {
    int checked;         /* steps compared with the reference */
    int discriminating;  /* of them, steps where the penalties moved the argmax */
    bool was_refused;
} greedy_outcome;

/* One greedy stream with penalties `s` (temperature 0) from `prompt`: each
 * token must be the reference's argmax of the penalised logits given the
 * stream's own history. */
static conf_result greedy_vs_reference(conf_env *env, const ilab_sampling_t *s, const int32_t *prompt,
                                       size_t n_prompt, greedy_outcome *o, char *msg, size_t cap)
{
    int32_t v = env->info.vocab_size;
    char params[200];
    describe(s, params, sizeof params);
    conf_gen_params p;
    conf_gen_params_default(&p, prompt, n_prompt);
    p.sampling = *s;
    p.max_tokens = GREEDY_STEPS;
    p.ignore_eos = true;
    conf_gen g;
    conf_result r = conf_generate(env, &p, &g, msg, cap);
    if (r != CONF_PASS)
        return r;
    if (refused(&g)) {
        r = refusal_verdict(&g, s, params, msg, cap);
        conf_gen_free(&g);
        o->was_refused = true;
        return r;
    }
    if (g.status != ILAB_OK || g.n_tokens == 0) {
        CONF_MSG("%s: generation failed after %zu token(s): %s: %s", params, g.n_tokens,
                 ilab_status_name(g.status), g.error);
        conf_gen_free(&g);
        return CONF_FAIL;
    }
    float *rows = stream_rows(env, prompt, n_prompt, g.tokens, g.n_tokens, msg, cap);
    float *z = malloc((size_t)v * sizeof *z);
    ilab_sampling_t pen = *s;
    pen.temperature = 1.0f; /* the penalised logits themselves, nothing filtered */
    r = rows ? CONF_PASS : CONF_FAIL;
    for (size_t i = 0; i < g.n_tokens && r == CONF_PASS; i++) {
        const float *raw = rows + i * (size_t)v;
        if (!ref_process(env, &pen, prompt, n_prompt, g.tokens, i, raw, z, msg, cap)) {
            r = CONF_ERROR;
            break;
        }
        int32_t want = conf_argmax(z, v), raw_best = conf_argmax(raw, v);
        /* a runner-up within TOL of the maximum: rounding may pick either */
        bool tie = false;
        for (int32_t t = 0; t < v && !tie; t++)
            tie = t != want && fabs((double)z[t] - z[want]) <= 1e-4 + 1e-4 * fabs((double)z[want]);
        if (tie)
            continue;
        o->checked++;
        o->discriminating += want != raw_best;
        if (g.tokens[i] != want) {
            size_t k = (size_t)snprintf(msg, cap,
                "%s, seed %" PRIu64 ", prompt [", params, s->seed);
            for (size_t j = 0; j < n_prompt && k < cap; j++)
                k += (size_t)snprintf(msg + k, cap - k, "%s%d", j ? " " : "", prompt[j]);
            snprintf(msg + k, cap > k ? cap - k : 0,
                     "]: step %zu drew %d; the reference argmax after the penalties (over prompt + the %zu "
                     "tokens before) is %d (penalised logit %.5g vs %.5g for %d); the raw argmax is %d",
                     i, g.tokens[i], i, want, (double)z[want], (double)z[g.tokens[i]], g.tokens[i], raw_best);
            r = CONF_FAIL;
        }
    }
    free(z);
    free(rows);
    conf_gen_free(&g);
    return r;
}

typedef struct greedy_case {
    const char *what;
    float repetition, presence, frequency;
} greedy_case;

static conf_result greedy_cases(conf_env *env, const greedy_case *cases, size_t n, uint64_t salt,
                                const char *clause, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->logits == ILAB_LOGITS_FULL, "logits: full");
    enum { PROMPTS = 3, PROMPT = 16 };
    int checked = 0, moved = 0, refusals = 0;
    for (size_t c = 0; c < n; c++) {
        for (int k = 0; k < PROMPTS; k++) {
            int32_t prompt[PROMPT];
            if (!likely_prompt(env, env->opt->seed + salt + 16 * c + (uint64_t)k, prompt, PROMPT, msg, cap))
                return CONF_FAIL;
            ilab_sampling_t s = sampling_off(0.0f);
            s.repetition_penalty = cases[c].repetition;
            s.presence_penalty = cases[c].presence;
            s.frequency_penalty = cases[c].frequency;
            s.seed = env->opt->seed + (uint64_t)k;
            greedy_outcome o = {0, 0, false};
            conf_result r = greedy_vs_reference(env, &s, prompt, PROMPT, &o, msg, cap);
            if (r != CONF_PASS)
                return r;
            if (o.was_refused) {
                refusals++;
                break;
            }
            checked += o.checked;
            moved += o.discriminating;
        }
    }
    CONF_MSG("%s: %d greedy steps equal the reference's argmax, %d of them moved by the penalties; %d "
             "case(s) refused (seed %" PRIu64 ")", clause, checked, moved, refusals, env->opt->seed);
    return CONF_PASS;
}

/* SMP-1: temperature 0 with penalties is the argmax after the penalties. */
conf_result conf_smp1_greedy_penalties(conf_env *env, char *msg, size_t cap)
{
    static const greedy_case cases[] = {
        {"repetition 1.5", 1.5f, 0, 0},
        {"repetition 0.7", 0.7f, 0, 0},
        {"all penalties", 1.3f, 0.6f, 0.4f},
    };
    return greedy_cases(env, cases, sizeof cases / sizeof cases[0], 200, "SMP-1", msg, cap);
}

/* SMP-7: a plugin that samples itself refuses top_logprobs above its
 * manifest's topk_max (one ERROR event, INVALID_ARGUMENT), never clamps. */
static conf_result topk_cap_refused(conf_env *env, char *msg, size_t cap)
{
    if (env->m->sampling != ILAB_SAMPLING_BACKEND || !env->m->streaming || env->m->topk_max <= 0)
        return CONF_PASS; /* the host samples, or no top-k at all: nothing to refuse here */
    int32_t prompt[4];
    conf_prompt_tokens(env, env->opt->seed + 3100, prompt, 4);
    conf_gen_params p;
    conf_gen_params_default(&p, prompt, 4);
    p.max_tokens = 2;
    p.top_logprobs = env->m->topk_max + 1;
    conf_gen g;
    conf_result r = conf_generate(env, &p, &g, msg, cap);
    if (r != CONF_PASS)
        return r;
    bool refused = g.terminal == ILAB_EVENT_ERROR && g.status == ILAB_INVALID_ARGUMENT && g.n_tokens == 0;
    if (!refused)
        CONF_MSG("top_logprobs %d, above the manifest's topk_max %d: the stream gave %zu TOKEN(s) and ended "
                 "with %s (%s); want one ERROR event, INVALID_ARGUMENT", p.top_logprobs, env->m->topk_max,
                 g.n_tokens, g.terminal == ILAB_EVENT_ERROR ? "ERROR" : "FINISH", ilab_status_name(g.status));
    conf_gen_free(&g);
    return refused ? CONF_PASS : CONF_FAIL;
}

/* SMP-7: each penalty alone, strong enough to move the argmax: honoured
 * (the reference's tokens) or refused, never ignored. */
conf_result conf_smp7_penalties(conf_env *env, char *msg, size_t cap)
{
    static const greedy_case cases[] = {
        {"repetition", 1.8f, 0, 0},
        {"presence", 1, 2.0f, 0},
        {"frequency", 1, 0, 1.5f},
        {"negative presence", 1, -1.0f, 0},
    };
    conf_result r = topk_cap_refused(env, msg, cap);
    if (r != CONF_PASS)
        return r;
    return greedy_cases(env, cases, sizeof cases / sizeof cases[0], 300, "SMP-7", msg, cap);
}

/* ---- first-token draws against the reference distribution (SMP-5) ---- */

typedef struct dist_case {
    float temperature, repetition;
    int32_t top_k;
    float top_p, min_p;
    int boundary_sign; /* +1 / -1: top_k placed at a penalised token of that sign */
    float presence, frequency; /* over the output only: none yet at the first token */
} dist_case;

typedef struct ranked {
    float z;
    int32_t id;
} ranked;

static int by_z_desc(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    return x->z < y->z ? 1 : x->z > y->z ? -1 : (x->id > y->id) - (x->id < y->id);
}

/* The repetition penalty's sign rule (SMP-5.1) only shows where a penalised
 * token sits at a boundary: top_k is put right next to a prompt token t
 * whose raw logit has the given sign, on the side the penalty moved it
 * (just below it for r > 1, so t is out; just after it for r < 1, so t is
 * the last one in). A penalty with the wrong sign rule, or none, moves t
 * across. Returns the top_k, or 0 when no prompt token has clear gaps
 * around it; *which gets t. */
static int32_t boundary_top_k(conf_env *env, const dist_case *c, const int32_t *prompt, size_t n_prompt,
                              const float *raw, float *z, int32_t *which, char *msg, size_t cap)
{
    int32_t v = env->info.vocab_size, best_k = 0;
    ilab_sampling_t pen = sampling_off(1.0f);
    pen.repetition_penalty = c->repetition;
    if (!ref_process(env, &pen, prompt, n_prompt, NULL, 0, raw, z, msg, cap))
        return 0;
    ranked *rk = malloc((size_t)v * sizeof *rk);
    for (int32_t t = 0; t < v; t++)
        rk[t] = (ranked){z[t], t};
    qsort(rk, (size_t)v, sizeof *rk, by_z_desc);
    float best_raw = 0;
    for (size_t j = 0; j < n_prompt; j++) {
        int32_t t = prompt[j];
        if ((c->boundary_sign > 0) != (raw[t] > 0) || raw[t] == 0)
            continue;
        int32_t r = 0;
        while (rk[r].id != t)
            r++;
        int32_t k = c->repetition > 1 ? r : r + 1;
        if (k < 2 || k >= v)
            continue;
        /* the two tokens on either side of the boundary are far apart */
        double a = rk[k - 1].z, b = rk[k].z;
        if (a - b <= 1e-3 + 1e-3 * fabs(a))
            continue;
        /* the token closest to zero: where the sign rule matters most */
        if (!best_k || fabsf(raw[t]) < fabsf(best_raw)) {
            best_k = k;
            best_raw = raw[t];
            *which = t;
        }
    }
    free(rk);
    return best_k;
}

static ilab_sampling_t case_sampling(const dist_case *c)
{
    ilab_sampling_t s = sampling_off(c->temperature);
    s.repetition_penalty = c->repetition;
    s.top_k = c->top_k;
    s.top_p = c->top_p;
    s.min_p = c->min_p;
    s.presence_penalty = c->presence;
    s.frequency_penalty = c->frequency;
    return s;
}

/* The stage of the order that removes token t (the reference's sets after
 * top-k, top-p and min-p in turn), for the message. */
static const char *removed_at(conf_env *env, const ilab_sampling_t *s, const int32_t *prompt, size_t n_prompt,
                              const float *raw, int32_t t, float *scratch, char *msg, size_t cap)
{
    ilab_sampling_t st = *s;
    st.top_p = 1.0f;
    st.min_p = 0.0f;
    if (s->top_k && ref_process(env, &st, prompt, n_prompt, NULL, 0, raw, scratch, msg, cap) &&
        scratch[t] == -INFINITY)
        return "top-k";
    st.top_p = s->top_p;
    if (s->top_p != 1.0f && ref_process(env, &st, prompt, n_prompt, NULL, 0, raw, scratch, msg, cap) &&
        scratch[t] == -INFINITY)
        return "top-p";
    return "min-p";
}

/* Probabilities of the survivors of `proc` (softmax over the finite ones). */
static void softmax_finite(const float *proc, int32_t v, double *p)
{
    double mx = -INFINITY, sum = 0;
    for (int32_t i = 0; i < v; i++)
        if (proc[i] > mx)
            mx = proc[i];
    for (int32_t i = 0; i < v; i++)
        sum += p[i] = proc[i] == -INFINITY ? 0.0 : exp((double)proc[i] - mx);
    for (int32_t i = 0; i < v; i++)
        p[i] /= sum;
}

/* chi-square of counts against n * p, the rare tokens pooled into one bin
 * whenever a draw landed there: the reference gives them almost no weight,
 * so draws on them weigh a lot (expected floored at 1), where SMP-4's plain
 * softmax (sampling.c) expects a few. *df the degrees of freedom, returns
 * the statistic. */
static double chi_square(const int32_t *counts, const double *p, int32_t v, int n, int *df)
{
    conf_chi_square cs = conf_chi_square_by_token(counts, p, v, n);
    double rest_e = cs.rest_expected, rest_o = cs.rest_observed;
    if (rest_e >= 5 || rest_o > 0) {
        double e = rest_e > 1 ? rest_e : 1;
        cs.chi += (rest_o - rest_e) * (rest_o - rest_e) / e;
        cs.bins++;
    }
    *df = cs.bins - 1;
    return cs.chi;
}

typedef struct dist_work {
    float *raw, *proc, *loose, *strict, *scratch;
    double *p;
    int32_t *counts;
} dist_work;

/* One case: n first-token draws with seeds seed..seed+n-1. */
static conf_result one_dist_case(conf_env *env, const dist_case *c, const int32_t *prompt, size_t n_prompt, int n,
                                 double deadline, dist_work *w, bool *was_refused, int *drawn, char *msg, size_t cap)
{
    int32_t v = env->info.vocab_size;
    ilab_sampling_t s = case_sampling(c);
    char params[260];
    if (c->boundary_sign) {
        int32_t t = -1;
        s.top_k = boundary_top_k(env, c, prompt, n_prompt, w->raw, w->scratch, &t, msg, cap);
        if (s.top_k == 0) {
            *was_refused = true; /* nothing to place the boundary at: not run */
            return CONF_PASS;
        }
        describe(&s, params, sizeof params);
        size_t k = strlen(params);
        snprintf(params + k, sizeof params - k, " (top_k at prompt token %d, raw logit %.4g, penalised %.4g)", t,
                 (double)w->raw[t], (double)w->scratch[t]);
    } else {
        describe(&s, params, sizeof params);
    }
    /* the support, bracketed: loose admits what rounding might admit */
    ilab_sampling_t lo = s, hi = s;
    if (s.top_p < 1.0f) {
        lo.top_p = fminf(1.0f, s.top_p * 1.002f + 1e-4f);
        hi.top_p = s.top_p * 0.998f - 1e-4f;
    }
    if (s.min_p > 0.0f) {
        lo.min_p = s.min_p * 0.99f;
        hi.min_p = fminf(1.0f, s.min_p * 1.01f);
    }
    if (!ref_process(env, &s, prompt, n_prompt, NULL, 0, w->raw, w->proc, msg, cap) ||
        !ref_process(env, &lo, prompt, n_prompt, NULL, 0, w->raw, w->loose, msg, cap) ||
        !ref_process(env, &hi, prompt, n_prompt, NULL, 0, w->raw, w->strict, msg, cap))
        return CONF_ERROR;
    softmax_finite(w->proc, v, w->p);
    memset(w->counts, 0, (size_t)v * sizeof *w->counts);
    conf_gen_params gp;
    conf_gen_params_default(&gp, prompt, n_prompt);
    gp.sampling = s;
    gp.max_tokens = 1;
    gp.ignore_eos = true;
    uint64_t seed0 = env->opt->seed * 31 + 7;
    for (int i = 0; i < n; i++) {
        /* a slow machine (a sanitizer build under load) gets fewer draws,
         * not a timeout; the statistics below use the count drawn */
        if (i >= 200 && conf_now_seconds() > deadline) {
            n = i;
            break;
        }
        gp.sampling.seed = seed0 + (uint64_t)i;
        conf_gen g;
        conf_result r = conf_generate(env, &gp, &g, msg, cap);
        if (r != CONF_PASS)
            return r;
        if (i == 0 && refused(&g)) {
            r = refusal_verdict(&g, &s, params, msg, cap);
            conf_gen_free(&g);
            *was_refused = true;
            return r;
        }
        int32_t t = g.n_tokens ? g.tokens[0] : -1;
        bool ok = g.status == ILAB_OK && g.n_tokens == 1 && t >= 0 && t < v;
        if (!ok)
            CONF_MSG("%s, seed %" PRIu64 ": a one-token generation gave %zu token(s), %s: %s", params,
                     gp.sampling.seed, g.n_tokens, ilab_status_name(g.status), g.error);
        conf_gen_free(&g);
        if (!ok)
            return CONF_FAIL;
        if (w->loose[t] == -INFINITY) {
            const char *stage = removed_at(env, &s, prompt, n_prompt, w->raw, t, w->scratch, msg, cap);
            CONF_MSG("%s, seed %" PRIu64 ": drew token %d, which the reference removes at %s (order: "
                     "repetition penalty over the prompt, temperature, top-k, top-p, min-p; its raw logit %.5g, "
                     "raw argmax %d)", params, gp.sampling.seed, t, stage, (double)w->raw[t], conf_argmax(w->raw, v));
            return CONF_FAIL;
        }
        w->counts[t]++;
    }
    *drawn = n;
    /* every token the reference surely keeps, with weight, is drawn */
    for (int32_t t = 0; t < v; t++)
        if (w->strict[t] != -INFINITY && w->p[t] * n >= 15 && w->counts[t] == 0) {
            CONF_MSG("%s, %d draws from seed %" PRIu64 ": token %d has reference probability %.4f (%.0f draws "
                     "expected) and was never drawn: the plugin's support is smaller than the reference's",
                     params, n, seed0, t, w->p[t], w->p[t] * n);
            return CONF_FAIL;
        }
    int df;
    double chi = chi_square(w->counts, w->p, v, n, &df);
    double crit = df >= 1 ? conf_chi_square_quantile(df, CHI_Z) : 0;
    if (df >= 1 && chi > crit) {
        /* name the worst bin */
        int32_t worst = 0;
        double wd = -1;
        for (int32_t t = 0; t < v; t++) {
            double e = w->p[t] * n, d = e > 0 ? (w->counts[t] - e) * (w->counts[t] - e) / (e > 1 ? e : 1) : 0;
            if (d > wd)
                wd = d, worst = t;
        }
        CONF_MSG("%s, %d draws from seed %" PRIu64 ": frequencies do not follow the reference distribution: "
                 "chi-square %.1f > %.1f (df %d, p < 1e-5); worst token %d drawn %d times, expected %.1f",
                 params, n, seed0, chi, crit, df, worst, w->counts[worst], w->p[worst] * n);
        return CONF_FAIL;
    }
    return CONF_PASS;
}

conf_result conf_smp5_reference(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->logits == ILAB_LOGITS_FULL, "logits: full");
    static const dist_case cases[] = {
        {1.0f, 2.0f, 0, 1.0f, 0.0f, 0, 0, 0},    /* the repetition penalty, both signs, over the prompt */
        {1.0f, 0.6f, 0, 1.0f, 0.0f, 0, 0, 0},
        /* the sign rule at a top-k boundary, a temperature high enough that
         * the tokens next to it are drawn */
        {10.0f, 2.0f, 0, 1.0f, 0.0f, -1, 0, 0},
        {10.0f, 0.5f, 0, 1.0f, 0.0f, -1, 0, 0},
        {10.0f, 2.0f, 0, 1.0f, 0.0f, +1, 0, 0},
        {10.0f, 0.5f, 0, 1.0f, 0.0f, +1, 0, 0},
        {0.7f, 1.0f, 12, 1.0f, 0.0f, 0, 0, 0},   /* top-k */
        {1.3f, 1.0f, 0, 0.7f, 0.0f, 0, 0, 0},    /* top-p over the whole vocabulary */
        {0.8f, 1.0f, 30, 0.85f, 0.0f, 0, 0, 0},  /* top-p over what top-k left */
        {0.5f, 1.0f, 0, 1.0f, 0.05f, 0, 0, 0},   /* min-p after a sharpening temperature */
        {1.8f, 1.0f, 0, 1.0f, 0.15f, 0, 0, 0},   /* ... and after a flattening one */
        {1.2f, 1.4f, 40, 0.9f, 0.03f, 0, 0, 0},  /* everything at once */
        /* presence and frequency count output tokens only: the first
         * token's distribution is the plain one */
        {1.0f, 1.0f, 0, 1.0f, 0.0f, 0, 1.5f, 1.0f},
    };
    enum { PROMPT = 16 };
    /* the plugin's own sampler is under test: many draws; the host
     * sampler (sampling: host) is unit-tested, this checks its wiring */
    int n = env->m->sampling == ILAB_SAMPLING_BACKEND ? 2000 : 150;
    if (env->opt->deep)
        n *= 4;
    int32_t v = env->info.vocab_size;
    dist_work w;
    w.raw = malloc((size_t)v * sizeof(float));
    w.proc = malloc((size_t)v * sizeof(float));
    w.loose = malloc((size_t)v * sizeof(float));
    w.strict = malloc((size_t)v * sizeof(float));
    w.scratch = malloc((size_t)v * sizeof(float));
    w.p = malloc((size_t)v * sizeof(double));
    w.counts = malloc((size_t)v * sizeof(int32_t));
    int32_t prompt[PROMPT];
    conf_result r = likely_prompt(env, env->opt->seed + 400, prompt, PROMPT, msg, cap) ? CONF_PASS : CONF_FAIL;
    ilab_status st = r == CONF_PASS ? conf_fresh_logits(env, prompt, PROMPT, w.raw) : ILAB_OK;
    if (st != ILAB_OK) {
        conf_fail_status(env, st, "eval()", msg, cap);
        r = CONF_FAIL;
    }
    int refusals = 0, ran = 0, fewest = n;
    size_t n_cases = sizeof cases / sizeof cases[0];
    /* each setting's share of 0.6 x the test's deadline */
    double t0 = conf_now_seconds(), wall = 0.6 * env->opt->timeout_seconds;
    for (size_t c = 0; c < n_cases && r == CONF_PASS; c++) {
        bool was_refused = false;
        int drawn = n;
        r = one_dist_case(env, &cases[c], prompt, PROMPT, n, t0 + wall * (double)(c + 1) / (double)n_cases, &w,
                          &was_refused, &drawn, msg, cap);
        refusals += was_refused;
        ran += !was_refused;
        if (!was_refused && drawn < fewest)
            fewest = drawn;
    }
    if (r == CONF_PASS)
        CONF_MSG("%d sampler settings x %d first-token draws (at least %d within the time) inside the reference "
                 "support and within chi-square p < 1e-5 of its distribution; %d setting(s) refused or without a "
                 "boundary to place (seed %" PRIu64 ")", ran, n, fewest, refusals, env->opt->seed);
    free(w.raw);
    free(w.proc);
    free(w.loose);
    free(w.strict);
    free(w.scratch);
    free(w.p);
    free(w.counts);
    return r;
}

/* ---- SMP-6: TOKEN.logprob is log_softmax of the raw logits ------------- */

conf_result conf_smp6_raw_logprob(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->logits == ILAB_LOGITS_FULL, "logits: full");
    static const dist_case cases[] = {
        {0.0f, 1.0f, 0, 1.0f, 0.0f, 0, 0, 0},
        {0.0f, 1.6f, 0, 1.0f, 0.0f, 0, 0, 0},
        {0.6f, 1.3f, 20, 0.9f, 0.0f, 0, 0, 0},
        {1.7f, 1.0f, 0, 1.0f, 0.1f, 0, 0, 0},
    };
    enum { PROMPT = 12, STEPS = 12 };
    int32_t v = env->info.vocab_size;
    int32_t topk = env->m->topk_max < CONF_GEN_TOPK ? env->m->topk_max : CONF_GEN_TOPK;
    int checked = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int32_t prompt[PROMPT];
        if (!likely_prompt(env, env->opt->seed + 500 + c, prompt, PROMPT, msg, cap))
            return CONF_FAIL;
        ilab_sampling_t s = case_sampling(&cases[c]);
        s.seed = env->opt->seed + c;
        char params[200];
        describe(&s, params, sizeof params);
        conf_gen_params gp;
        conf_gen_params_default(&gp, prompt, PROMPT);
        gp.sampling = s;
        gp.max_tokens = STEPS;
        gp.ignore_eos = true;
        gp.top_logprobs = topk;
        conf_gen g;
        conf_result r = conf_generate(env, &gp, &g, msg, cap);
        if (r != CONF_PASS)
            return r;
        if (refused(&g)) {
            conf_gen_free(&g);
            continue;
        }
        if (g.status != ILAB_OK || g.n_tokens == 0) {
            CONF_MSG("%s: generation failed: %s: %s", params, ilab_status_name(g.status), g.error);
            conf_gen_free(&g);
            return CONF_FAIL;
        }
        float *rows = stream_rows(env, prompt, PROMPT, g.tokens, g.n_tokens, msg, cap);
        r = rows ? CONF_PASS : CONF_FAIL;
        for (size_t i = 0; i < g.n_tokens && r == CONF_PASS; i++) {
            const float *raw = rows + i * (size_t)v;
            double mx = raw[conf_argmax(raw, v)], sum = 0;
            for (int32_t t = 0; t < v; t++)
                sum += exp((double)raw[t] - mx);
            double lse = mx + log(sum);
            double want = (double)raw[g.tokens[i]] - lse, got = g.logprob[i];
            if (!(fabs(got - want) <= 1e-4 + 1e-4 * fabs(want))) {
                CONF_MSG("%s, seed %" PRIu64 ": TOKEN %zu (id %d) has logprob %.6g; log_softmax of the raw "
                         "logits gives %.6g (SMP-6: before any penalty, temperature or filter)",
                         params, s.seed, i, g.tokens[i], got, want);
                r = CONF_FAIL;
            }
            for (uint32_t k = 0; k < g.n_top[i] && k < CONF_GEN_TOPK && r == CONF_PASS; k++) {
                int32_t id = g.top_id[i * CONF_GEN_TOPK + k];
                double lp = g.top_lp[i * CONF_GEN_TOPK + k];
                double ref = id >= 0 && id < v ? (double)raw[id] - lse : NAN;
                if (!(fabs(lp - ref) <= 1e-4 + 1e-4 * fabs(ref))) {
                    CONF_MSG("%s, seed %" PRIu64 ": TOKEN %zu's top-logprob entry %u (id %d) is %.6g; log_softmax "
                             "of the raw logits gives %.6g (SMP-6)", params, s.seed, i, k, id, lp, ref);
                    r = CONF_FAIL;
                }
            }
            checked++;
        }
        free(rows);
        conf_gen_free(&g);
        if (r != CONF_PASS)
            return r;
    }
    CONF_MSG("%d TOKEN logprobs equal log_softmax of the raw logits (seed %" PRIu64 ")", checked, env->opt->seed);
    return CONF_PASS;
}
