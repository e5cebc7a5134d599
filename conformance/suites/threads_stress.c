/* THR-1 / THR-2 as stress tests: N threads x M iterations over every entry
 * point the manifest's thread_safety lets overlap, each result compared with
 * the same call made alone beforehand.
 *
 * A race shows only when two calls are inside the plugin at once, so one
 * overlap per run (threads.THR-1.concurrent_sequences) catches it now and
 * then; thousands of overlapping calls, started together behind a barrier,
 * catch it on every run. Every job's serial result is computed first, on
 * this thread; the threads then run the jobs in a thread-specific order.
 *
 * THR-1: each thread works on its own sequences: create, prefill, decodes,
 *   fork and a decode of the child (cache.fork), truncate and re-append
 *   (cache.truncate), seq_length, free.
 * THR-2: calls naming no sequence from every thread at once: tokenize,
 *   detokenize, token_piece, model_info, seq_create/free, and generate()
 *   for different request ids (sampling: backend), beside evals. */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>

#include "suites.h"

enum { THREADS = 4, JOBS = 24, MAX_PROMPT = 128, DECODES = 3, MIN_ITERATIONS = 1 };
/* generate() calls that ran while another was in flight, before the
 * generate phases may end (a loaded machine runs the threads one after
 * another: a time budget alone missed a race in one run of ten) */
enum { MIN_GEN_OVERLAPS = 60 };
/* The same for tokenize() (an instance-wide scratch buffer raced only when
 * two calls overlap; under load 8 a time budget alone missed it once). */
enum { MIN_TOK_OVERLAPS = 200 };

typedef struct seq_job {
    int32_t prompt[MAX_PROMPT];
    int32_t n_prompt;
    int32_t next[DECODES];   /* tokens decoded after the prompt */
    float *rows;             /* DECODES + 2 rows: prefill, decodes, child's decode */
} seq_job;

typedef struct stress {
    conf_env *env;
    double t0, budget;       /* phase p ends at t0 + budget * (p + 1) / phases */
    double hard_until;       /* ... or later, up to this, for MIN_GEN_OVERLAPS */
    atomic_int in_generate;  /* generate() calls in flight */
    atomic_int gen_overlaps; /* calls that had another in flight at their start or end */
    atomic_int in_tokenize;  /* tokenize() calls in flight */
    atomic_int tok_overlaps; /* as gen_overlaps, for tokenize() */
    int iterations[THREADS]; /* done by each thread */
    seq_job jobs[JOBS];
    /* THR-2 references */
    int32_t *tok_ids[JOBS];
    size_t n_tok[JOBS];
    char *text[JOBS];
    size_t text_len[JOBS];
    char *pieces[JOBS];      /* tokenizer: text: the pieces concatenated, alone (TOK-10) */
    size_t pieces_len[JOBS];
    conf_gen gen[JOBS];
    conf_gen_params gen_p[JOBS];
    ilab_model_info_t info;
    bool shared_calls;       /* THR-2: the calls naming no sequence too */
    char long_text[4096];    /* job 0 tokenizes the whole corpus at once */
    pthread_barrier_t start;
    char fail[THREADS][CONF_MSG_CAP];
} stress;

/* Prefill, DECODES decodes, then fork + one decode of the child and a
 * truncate + re-append when declared; rows out[0..DECODES+2). */
static ilab_status run_seq_job(conf_env *env, const seq_job *j, float *out, const char **where)
{
    size_t v = (size_t)env->info.vocab_size;
    ilab_seq_t s = ILAB_SEQ_NONE, child = ILAB_SEQ_NONE;
    *where = "seq_create()";
    ilab_status st = env->api->seq_create(env->be, &s);
    if (st != ILAB_OK)
        return st;
    *where = "eval() of the prompt";
    st = conf_eval1(env, s, j->prompt, j->n_prompt, 0, out);
    for (int i = 0; i < DECODES && st == ILAB_OK; i++) {
        *where = "eval() of a decode";
        st = conf_eval1(env, s, &j->next[i], 1, 0, out + (size_t)(i + 1) * v);
    }
    int32_t len = -1;
    if (st == ILAB_OK) {
        *where = "seq_length()";
        st = env->api->seq_length(env->be, s, &len);
        if (st == ILAB_OK && len != j->n_prompt + DECODES)
            st = ILAB_INTERNAL;
    }
    if (st == ILAB_OK && env->m->cache_fork) {
        *where = "seq_fork()";
        st = env->api->seq_fork(env->be, s, &child);
        if (st == ILAB_OK) {
            *where = "eval() of the fork's child";
            st = conf_eval1(env, child, &j->prompt[0], 1, 0, out + (size_t)(DECODES + 1) * v);
        }
    }
    if (st == ILAB_OK && env->m->cache_truncate) {
        /* back to the prompt and the first decode again: row 1 once more */
        *where = "seq_truncate()";
        st = env->api->seq_truncate(env->be, s, j->n_prompt);
        if (st == ILAB_OK) {
            *where = "eval() after a truncate";
            st = conf_eval1(env, s, &j->next[0], 1, 0, out + (size_t)(DECODES + 2) * v);
        }
    }
    if (child != ILAB_SEQ_NONE)
        env->api->seq_free(env->be, child);
    ilab_status fst = env->api->seq_free(env->be, s);
    if (st == ILAB_OK && fst != ILAB_OK) {
        *where = "seq_free()";
        st = fst;
    }
    return st;
}

static size_t rows_per_job(void)
{
    return DECODES + 3;
}

static bool compare_rows(conf_env *env, const float *got, const float *want, int job, int thread, int iter,
                         char *msg, size_t cap)
{
    size_t v = (size_t)env->info.vocab_size;
    static const char *const names[] = {"after the prompt", "after decode 1", "after decode 2", "after decode 3",
                                        "of the fork's child", "after truncate + re-append"};
    for (size_t r = 0; r < rows_per_job(); r++) {
        if ((r == DECODES + 1 && !env->m->cache_fork) || (r == DECODES + 2 && !env->m->cache_truncate))
            continue;
        char what[200];
        snprintf(what, sizeof what, "thread %d of %d, iteration %d, job %d, logits %s", thread, THREADS, iter,
                 job, names[r]);
        if (!conf_logits_close(got + r * v, want + r * v, (int32_t)v, what, msg, cap))
            return false;
    }
    return true;
}

static int32_t *tokenize_alloc(conf_env *env, const char *s, size_t *n, ilab_status *st)
{
    size_t len = strlen(s), want = len + 16;
    int32_t *t = malloc(want * sizeof *t);
    *st = env->api->tokenize(env->be, s, len, 0, t, want, n);
    return t;
}

/* THR-2 calls of iteration `it` on job j; false with a message on a
 * difference from the serial result. */
enum { CALL_TOKENIZER = 1, CALL_INFO = 2, CALL_GENERATE = 4, CALL_SEQUENCES = 8 };

static bool shared_calls(stress *S, int calls, int thread, int it, int j, char *msg, size_t cap)
{
    conf_env *env = S->env;
    ilab_status st;
    if ((calls & CALL_TOKENIZER) && env->m->tokenizer) {
        const char *s = j == 0 ? S->long_text : conf_corpus[(size_t)j % conf_corpus_count];
        size_t n = 0;
        int before = atomic_fetch_add(&S->in_tokenize, 1);
        int32_t *ids = tokenize_alloc(env, s, &n, &st);
        int after = atomic_fetch_sub(&S->in_tokenize, 1) - 1;
        if (before > 0 || after > 0)
            atomic_fetch_add(&S->tok_overlaps, 1);
        size_t d = 0;
        while (st == ILAB_OK && d < n && d < S->n_tok[j] && ids[d] == S->tok_ids[j][d])
            d++;
        bool same = st == ILAB_OK && n == S->n_tok[j] && d == n;
        int32_t got = d < n ? ids[d] : -1, want = d < S->n_tok[j] ? S->tok_ids[j][d] : -1;
        free(ids);
        if (!same) {
            CONF_MSG("thread %d, iteration %d: tokenize(%s) beside other calls gave %s, %zu ids, alone %zu; "
                     "first difference at id %zu (%d, alone %d): a race in the tokenizer", thread, it,
                     j == 0 ? "the whole corpus" : "a corpus string", ilab_status_name(st), n, S->n_tok[j], d,
                     got, want);
            return false;
        }
        char buf[8192];
        size_t len = 0;
        st = env->api->detokenize(env->be, S->tok_ids[j], S->n_tok[j], buf, sizeof buf, &len);
        if (st != ILAB_OK || len != S->text_len[j] || memcmp(buf, S->text[j], len) != 0) {
            CONF_MSG("thread %d, iteration %d: detokenize of corpus #%zu's ids gave %s, %zu bytes; alone %zu",
                     thread, it, (size_t)j % conf_corpus_count, ilab_status_name(st), len, S->text_len[j]);
            return false;
        }
        /* a text tokenizer's pieces need not make the text (TOK-10): compare
         * with its pieces alone */
        const char *want_text = S->pieces[j] ? S->pieces[j] : S->text[j];
        size_t want_len = S->pieces[j] ? S->pieces_len[j] : S->text_len[j];
        size_t at = 0;
        for (size_t k = 0; k < S->n_tok[j]; k++) {
            size_t plen = 0;
            st = env->api->token_piece(env->be, k ? S->tok_ids[j][k - 1] : -1, S->tok_ids[j][k], buf,
                                       sizeof buf, &plen);
            if (st != ILAB_OK || at + plen > want_len || memcmp(buf, want_text + at, plen) != 0) {
                CONF_MSG("thread %d, iteration %d: token_piece of id %d (corpus #%zu, token %zu) differs from "
                         "the text alone (%s)", thread, it, S->tok_ids[j][k], (size_t)j % conf_corpus_count, k,
                         ilab_status_name(st));
                return false;
            }
            at += plen;
        }
    }
    if (calls & CALL_INFO) {
        ilab_model_info_t info;
        memset(&info, 0, sizeof info);
        info.struct_size = sizeof info;
        st = env->api->model_info(env->be, &info);
        if (st != ILAB_OK || memcmp(&info, &S->info, sizeof info) != 0) {
            CONF_MSG("thread %d, iteration %d: model_info() gave %s and different bytes than alone", thread, it,
                     ilab_status_name(st));
            return false;
        }
        ilab_seq_t q = ILAB_SEQ_NONE;
        st = env->api->seq_create(env->be, &q);
        int32_t len = -1;
        ilab_status lst = st == ILAB_OK ? env->api->seq_length(env->be, q, &len) : st;
        ilab_status fst = st == ILAB_OK ? env->api->seq_free(env->be, q) : st;
        if (st != ILAB_OK || lst != ILAB_OK || fst != ILAB_OK || len != 0) {
            CONF_MSG("thread %d, iteration %d: seq_create/seq_length/seq_free beside other calls gave %s/%s/%s, "
                     "length %d (alone OK and 0)", thread, it, ilab_status_name(st), ilab_status_name(lst),
                     ilab_status_name(fst), len);
            return false;
        }
    }
    if ((calls & CALL_GENERATE) && env->m->sampling == ILAB_SAMPLING_BACKEND && env->m->streaming) {
        conf_gen g;
        int before = atomic_fetch_add(&S->in_generate, 1);
        conf_result r = conf_generate(env, &S->gen_p[j], &g, msg, cap);
        int after = atomic_fetch_sub(&S->in_generate, 1) - 1;
        if (before > 0 || after > 0)
            atomic_fetch_add(&S->gen_overlaps, 1);
        if (r != CONF_PASS)
            return false;
        const conf_gen *want = &S->gen[j];
        bool same = g.status == want->status && g.n_tokens == want->n_tokens &&
                    memcmp(g.tokens, want->tokens, g.n_tokens * sizeof *g.tokens) == 0 &&
                    g.text_len == want->text_len && memcmp(g.text, want->text, g.text_len) == 0;
        if (!same) {
            size_t d = 0;
            while (d < g.n_tokens && d < want->n_tokens && g.tokens[d] == want->tokens[d])
                d++;
            CONF_MSG("thread %d, iteration %d: generate() (prompt job %d, temperature %g, seed %" PRIu64
                     ") beside other generate() calls gave %zu tokens (%s), alone %zu; first difference at token "
                     "%zu", thread, it, j, (double)S->gen_p[j].sampling.temperature, S->gen_p[j].sampling.seed,
                     g.n_tokens, ilab_status_name(g.status), want->n_tokens, d);
        }
        conf_gen_free(&g);
        if (!same)
            return false;
    }
    return true;
}

typedef struct worker_arg {
    stress *S;
    int thread;
} worker_arg;

/* The phases every thread goes through together: each entry point alone
 * first, so that the same call overlaps itself (a shared scratch buffer in
 * one function), then everything mixed (one call's state seen by another). */
static int stress_phases(const conf_env *env, bool shared, int *phases)
{
    int n = 0;
    bool gen = env->m->sampling == ILAB_SAMPLING_BACKEND && env->m->streaming;
    if (shared && env->m->tokenizer)
        phases[n++] = CALL_TOKENIZER;
    if (shared)
        phases[n++] = CALL_INFO;
    if (shared && gen)
        phases[n++] = CALL_GENERATE;
    phases[n++] = CALL_SEQUENCES;
    if (shared)
        phases[n++] = CALL_TOKENIZER | CALL_INFO | CALL_GENERATE | CALL_SEQUENCES;
    return n;
}

static void *stress_main(void *arg)
{
    worker_arg *a = arg;
    stress *S = a->S;
    conf_env *env = S->env;
    char *msg = S->fail[a->thread];
    size_t cap = CONF_MSG_CAP;
    float *rows = malloc(rows_per_job() * (size_t)env->info.vocab_size * sizeof *rows);
    int phases[5];
    int n_phases = stress_phases(env, S->shared_calls, phases);
    int total = 0;
    for (int ph = 0; ph < n_phases; ph++) {
        pthread_barrier_wait(&S->start);
        double until = S->t0 + S->budget * (ph + 1) / n_phases;
        int calls = phases[ph];
        for (int it = 0; !msg[0]; it++, total++) {
            double now = conf_now_seconds();
            bool more_gen = (calls & CALL_GENERATE) && S->shared_calls &&
                            env->m->sampling == ILAB_SAMPLING_BACKEND && env->m->streaming &&
                            atomic_load(&S->gen_overlaps) < MIN_GEN_OVERLAPS * (ph + 1) / n_phases + 1 &&
                            now < S->hard_until;
            bool more_tok = (calls & CALL_TOKENIZER) && env->m->tokenizer &&
                            atomic_load(&S->tok_overlaps) < MIN_TOK_OVERLAPS * (ph + 1) / n_phases + 1 &&
                            now < S->hard_until;
            if (it >= MIN_ITERATIONS && now >= until && !more_gen && !more_tok)
                break;
            int j = (a->thread * 7 + total * 5) % JOBS;
            if ((calls & ~CALL_SEQUENCES) && !shared_calls(S, calls, a->thread, total, j, msg, cap))
                break;
            if (!(calls & CALL_SEQUENCES))
                continue;
            const char *where = "";
            ilab_status st = run_seq_job(env, &S->jobs[j], rows, &where);
            if (st != ILAB_OK) {
                CONF_MSG("thread %d of %d, iteration %d, job %d: %s returned %s concurrently (OK alone)%s",
                         a->thread, THREADS, total, j, where, ilab_status_name(st),
                         st == ILAB_INTERNAL ? " (seq_length() disagreed with the tokens appended)" : "");
                break;
            }
            if (!compare_rows(env, rows, S->jobs[j].rows, j, a->thread, total, msg, cap))
                break;
        }
    }
    S->iterations[a->thread] = total;
    free(rows);
    return NULL;
}

static void stress_free(stress *S)
{
    for (int j = 0; j < JOBS; j++) {
        free(S->jobs[j].rows);
        free(S->tok_ids[j]);
        free(S->text[j]);
        free(S->pieces[j]);
        conf_gen_free(&S->gen[j]);
    }
}

/* The serial references, made on this thread before any overlap. */
static conf_result stress_prepare(stress *S, char *msg, size_t cap)
{
    conf_env *env = S->env;
    size_t v = (size_t)env->info.vocab_size;
    for (size_t i = 0; i < conf_corpus_count; i++)
        strncat(S->long_text, conf_corpus[i], sizeof S->long_text - strlen(S->long_text) - 1);
    for (int j = 0; j < JOBS; j++) {
        seq_job *job = &S->jobs[j];
        /* lengths up to 128 for a third of the jobs: long calls overlap more */
        int32_t longest = conf_max_context(env) - DECODES - 4;
        longest = longest < MAX_PROMPT ? longest : MAX_PROMPT;
        int32_t spread = j % 3 == 0 ? longest - 1 : (longest < 16 ? longest - 1 : 15); /* a third long */
        job->n_prompt = longest <= 2 ? longest : 2 + (j * 37) % spread;
        conf_prompt_tokens(env, env->opt->seed + 900 + (uint64_t)j, job->prompt, job->n_prompt);
        conf_prompt_tokens(env, env->opt->seed + 950 + (uint64_t)j, job->next, DECODES);
        job->rows = calloc(rows_per_job() * v, sizeof *job->rows);
        const char *where = "";
        ilab_status st = run_seq_job(env, job, job->rows, &where);
        if (st != ILAB_OK) {
            conf_fail_status(env, st, where, msg, cap);
            return CONF_FAIL;
        }
        if (!S->shared_calls)
            continue;
        if (env->m->tokenizer) {
            S->tok_ids[j] = conf_tokenize(env, j == 0 ? S->long_text : conf_corpus[(size_t)j % conf_corpus_count],
                                          &S->n_tok[j], msg, cap);
            if (!S->tok_ids[j])
                return CONF_FAIL;
            S->text[j] = conf_detokenize(env, S->tok_ids[j], S->n_tok[j], &S->text_len[j], msg, cap);
            if (!S->text[j])
                return CONF_FAIL;
            if (env->m->tokenizer_text &&
                !(S->pieces[j] = conf_output_text(env, -1, S->tok_ids[j], S->n_tok[j], &S->pieces_len[j], msg, cap)))
                return CONF_FAIL;
        }
        if (env->m->sampling == ILAB_SAMPLING_BACKEND && env->m->streaming) {
            conf_gen_params *p = &S->gen_p[j];
            conf_gen_params_default(p, job->prompt, (size_t)job->n_prompt);
            p->sampling.temperature = j % 3 == 0 ? 0.0f : 0.9f;
            p->sampling.top_k = j % 2 ? 40 : 0;
            p->sampling.seed = env->opt->seed + (uint64_t)j;
            p->max_tokens = 8;
            p->ignore_eos = true;
            conf_result r = conf_generate(env, p, &S->gen[j], msg, cap);
            if (r != CONF_PASS)
                return r;
            if (S->gen[j].status != ILAB_OK) {
                CONF_MSG("generate() alone (job %d) failed: %s: %s", j, ilab_status_name(S->gen[j].status),
                         S->gen[j].error);
                return CONF_FAIL;
            }
        }
    }
    memset(&S->info, 0, sizeof S->info);
    S->info.struct_size = sizeof S->info;
    CONF_CHECK_OK(env, env->api->model_info(env->be, &S->info), "model_info()");
    return CONF_PASS;
}

static conf_result stress_run(conf_env *env, bool shared, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->logits == ILAB_LOGITS_FULL, "logits: full");
    CONF_SKIP_UNLESS(env->m->thread_safety != ILAB_THREADS_NONE, "thread_safety: sequence or full");
    stress *S = calloc(1, sizeof *S);
    S->env = env;
    S->shared_calls = shared;
    double t0 = conf_now_seconds();
    conf_result r = stress_prepare(S, msg, cap);
    /* a time budget, not a count: a fast plugin's calls are short and need
     * many more of them to overlap */
    S->t0 = conf_now_seconds();
    S->budget = env->opt->random_seconds * (env->opt->deep ? 10 : 1);
    /* on a loaded machine a slow plugin's references take long: the
     * threads still end well within the test's deadline */
    double left = t0 + 0.4 * env->opt->timeout_seconds - S->t0;
    if (S->budget > left)
        S->budget = left > 0.1 ? left : 0.1;
    S->hard_until = S->t0 + (left > S->budget ? left : S->budget);
    if (r == CONF_PASS) {
        pthread_barrier_init(&S->start, NULL, THREADS);
        pthread_t th[THREADS];
        worker_arg args[THREADS];
        for (int t = 0; t < THREADS; t++) {
            args[t] = (worker_arg){S, t};
            pthread_create(&th[t], NULL, stress_main, &args[t]);
        }
        for (int t = 0; t < THREADS; t++)
            pthread_join(th[t], NULL);
        pthread_barrier_destroy(&S->start);
        for (int t = 0; t < THREADS && r == CONF_PASS; t++)
            if (S->fail[t][0]) {
                snprintf(msg, cap, "%s (thread_safety: %s, seed %" PRIu64 ")", S->fail[t],
                         ilab_thread_safety_name(env->m->thread_safety), env->opt->seed);
                r = CONF_FAIL;
            }
        int least = S->iterations[0];
        for (int t = 1; t < THREADS; t++)
            least = S->iterations[t] < least ? S->iterations[t] : least;
        char overlaps[128] = "";
        if (shared && env->m->sampling == ILAB_SAMPLING_BACKEND && env->m->streaming)
            snprintf(overlaps, sizeof overlaps, "; %d generate() calls overlapped another",
                     atomic_load(&S->gen_overlaps));
        if (shared && env->m->tokenizer)
            snprintf(overlaps + strlen(overlaps), sizeof overlaps - strlen(overlaps),
                     "; %d tokenize() calls overlapped another", atomic_load(&S->tok_overlaps));
        if (r == CONF_PASS)
            CONF_MSG("%d threads x at least %d iterations (%s), every result equal to the call alone, %.2f s%s",
                     THREADS, least, shared ? "sequence work + tokenizer, model_info, generate" : "sequence work",
                     conf_now_seconds() - t0, overlaps);
    }
    stress_free(S);
    free(S);
    return r;
}

conf_result conf_thr1_stress(conf_env *env, char *msg, size_t cap)
{
    return stress_run(env, false, msg, cap);
}

conf_result conf_thr2_stress(conf_env *env, char *msg, size_t cap)
{
    return stress_run(env, true, msg, cap);
}
