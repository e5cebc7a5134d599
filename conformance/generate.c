/* Generation as the host does it, for the STR / SMP / LOG-4 / DIF tests:
 * `sampling: backend` plugins through their own generate(), `sampling: host`
 * plugins through the host engine (host/runtime/engine.h). Every event is
 * recorded so the tests can check the stream's grammar afterwards. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/engine.h"
#include "suite.h"
#include "validate.h"
#include "bytes.h"

/* Where a UTF-8 decoder stands after some bytes: how many continuation
 * bytes the current code point still owes, and the range the next one must
 * be in (RFC 3629's table: E0 A0..BF, ED 80..9F, F0 90..BF, F4 80..8F).
 * Bytes that cannot begin or continue a code point owe nothing. */
typedef struct utf8_state {
    int owed;
    unsigned char lo, hi;
} utf8_state;

static utf8_state utf8_feed(utf8_state st, const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (st.owed > 0 && c >= st.lo && c <= st.hi) {
            st.owed--;
            st.lo = 0x80;
            st.hi = 0xBF;
            continue;
        }
        st.owed = 0;
        st.lo = 0x80;
        st.hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF)
            st.owed = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            st.owed = 2;
            st.lo = c == 0xE0 ? 0xA0 : 0x80;
            st.hi = c == 0xED ? 0x9F : 0xBF;
        } else if (c >= 0xF0 && c <= 0xF4) {
            st.owed = 3;
            st.lo = c == 0xF0 ? 0x90 : 0x80;
            st.hi = c == 0xF4 ? 0x8F : 0xBF;
        }
    }
    return st;
}

bool conf_utf8_ends_inside(const char *s, size_t n)
{
    utf8_state st = {0, 0x80, 0xBF};
    return utf8_feed(st, (const unsigned char *)s, n).owed > 0;
}

typedef struct collector {
    conf_gen *g;
    const conf_gen_params *p;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool terminal_seen;   /* for waiting on the engine */
    bool cancel_now;      /* for the cancelling thread */
    bool canceller_exit;
    bool id_known;        /* the request id is set (after submit returns) */
    bool cancel_done;     /* the other thread has called cancel() */
    size_t cap_tokens;
    size_t text_cap;
    utf8_state utf8;      /* the decoder after the text so far */
    uint64_t id;          /* the request's id, when check_id */
    bool check_id;        /* generate(): every event must carry `id` (STR-1) */
} collector;

static bool text_append(collector *c, conf_gen *g, const ilab_event_t *ev)
{
    return ilab_bytes_append(&g->text, &g->text_len, &c->text_cap, ev->text, ev->text_len);
}

static int on_event(void *user, const ilab_event_t *ev)
{
    collector *c = user;
    conf_gen *g = c->g;
    pthread_mutex_lock(&c->mu);
    int ret = 0;
    if (c->check_id && ev->request_id != c->id)
        g->wrong_id++;
    if (g->n_terminal > 0) {
        g->after_terminal++;
    } else if (ev->type == ILAB_EVENT_TOKEN) {
        if (g->n_tokens == c->cap_tokens) {
            c->cap_tokens = c->cap_tokens ? c->cap_tokens * 2 : 64;
            g->tokens = realloc(g->tokens, c->cap_tokens * sizeof *g->tokens);
            g->logprob = realloc(g->logprob, c->cap_tokens * sizeof *g->logprob);
            g->top_lp = realloc(g->top_lp, c->cap_tokens * CONF_GEN_TOPK * sizeof *g->top_lp);
            g->top_id = realloc(g->top_id, c->cap_tokens * CONF_GEN_TOPK * sizeof *g->top_id);
            g->n_top = realloc(g->n_top, c->cap_tokens * sizeof *g->n_top);
        }
        size_t i = g->n_tokens++;
        g->tokens[i] = ev->token;
        g->logprob[i] = ev->logprob;
        g->n_top[i] = ev->n_top_logprobs;
        for (int k = 0; k < CONF_GEN_TOPK; k++) {
            bool have = ev->top_logprobs && (uint32_t)k < ev->n_top_logprobs;
            g->top_lp[i * CONF_GEN_TOPK + k] = have ? ev->top_logprobs[k].logprob : -INFINITY;
            g->top_id[i * CONF_GEN_TOPK + k] = have ? ev->top_logprobs[k].token : -1;
        }
        if (ev->text && ev->text_len && !text_append(c, g, ev))
            ret = 1; /* out of memory: stop the stream rather than lose text */
        /* split: the previous event ended inside a code point that this
         * event's first byte continues (invalid bytes are not a split) */
        if (c->utf8.owed > 0 && ev->text && ev->text_len) {
            unsigned char first = (unsigned char)ev->text[0];
            if (first >= c->utf8.lo && first <= c->utf8.hi)
                g->split_utf8 = true;
        }
        c->utf8 = utf8_feed(c->utf8, (const unsigned char *)ev->text, ev->text ? ev->text_len : 0);
        if (c->p->cancel_after_tokens > 0 && g->n_tokens >= (size_t)c->p->cancel_after_tokens)
            ret = 1;
        if (c->p->cancel_thread_after > 0 && g->n_tokens == (size_t)c->p->cancel_thread_after) {
            c->cancel_now = true;
            pthread_cond_broadcast(&c->cv);
            /* Hold this token until the other thread's cancel() has been
             * made, so a fast backend cannot finish first: from then on the
             * stream must end within a bounded number of tokens. */
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += 2;
            while (!c->cancel_done && pthread_cond_timedwait(&c->cv, &c->mu, &until) == 0)
                ;
        }
    } else if (ev->type == ILAB_EVENT_FINISH || ev->type == ILAB_EVENT_ERROR) {
        if (ev->type == ILAB_EVENT_FINISH && ev->text && ev->text_len) {
            /* held-back bytes ride on FINISH (STR-2) */
            if (text_append(c, g, ev))
                g->finish_text_len = ev->text_len;
        }
        g->n_terminal++;
        g->terminal = ev->type;
        g->finish_reason = ev->finish_reason;
        g->prompt_tokens = ev->prompt_tokens;
        g->completion_tokens = ev->completion_tokens;
        if (ev->type == ILAB_EVENT_ERROR) {
            g->status = ev->status;
            snprintf(g->error, sizeof g->error, "%s", ev->message ? ev->message : "");
        }
        c->terminal_seen = true;
        pthread_cond_broadcast(&c->cv);
        ret = c->p->nonzero_on_terminal;
    } else {
        g->bad_type++;
    }
    pthread_mutex_unlock(&c->mu);
    return ret;
}

typedef struct canceller {
    collector *c;
    conf_env *env;
    uint64_t id;
} canceller;

static void *cancel_main(void *arg)
{
    canceller *k = arg;
    collector *c = k->c;
    pthread_mutex_lock(&c->mu);
    while (!(c->cancel_now && c->id_known) && !c->canceller_exit)
        pthread_cond_wait(&c->cv, &c->mu);
    bool go = c->cancel_now && c->id_known;
    pthread_mutex_unlock(&c->mu);
    if (go) {
        if (k->env->m->sampling == ILAB_SAMPLING_BACKEND)
            k->env->api->cancel(k->env->be, k->id);
        else
            ilab_engine_cancel(k->env->engine, k->id);
        pthread_mutex_lock(&c->mu);
        c->cancel_done = true;
        c->g->tokens_at_cancel = c->g->n_tokens;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
    }
    return NULL;
}

void conf_gen_params_default(conf_gen_params *p, const int32_t *prompt, size_t n)
{
    memset(p, 0, sizeof *p);
    p->prompt = prompt;
    p->n_prompt = n;
    p->sampling.struct_size = sizeof p->sampling;
    p->sampling.temperature = 0;
    p->sampling.top_k = 0;
    p->sampling.top_p = 1;
    p->sampling.min_p = 0;
    p->sampling.repetition_penalty = 1;
    p->sampling.seed = 1;
    p->max_tokens = 16;
}

void conf_gen_free(conf_gen *g)
{
    free(g->tokens);
    free(g->logprob);
    free(g->top_lp);
    free(g->top_id);
    free(g->n_top);
    free(g->text);
    memset(g, 0, sizeof *g);
}

void conf_engine_release(conf_env *env)
{
    if (env->engine)
        ilab_engine_destroy(env->engine);
    env->engine = NULL;
}

/* A request id from the whole 64-bit domain (STR-1, STR-4: ids are
 * uint64_t): a counter through splitmix64's finaliser, a bijection, so the
 * ids of a run never repeat while nearly all lie above 2^32, where a plugin
 * that keeps them in 32 bits cancels nothing or mixes streams up. */
static uint64_t next_request_id(void)
{
    static uint64_t counter = 1000; /* atomic: THR-2 generates from several threads */
    uint64_t z = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

conf_result conf_generate(conf_env *env, const conf_gen_params *p, conf_gen *g, char *msg, size_t cap)
{
    memset(g, 0, sizeof *g);
    g->text = calloc(1, 1);
    collector c;
    memset(&c, 0, sizeof c);
    c.g = g;
    c.p = p;
    c.text_cap = 1;
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.cv, NULL);
    conf_result r = CONF_PASS;
    bool backend = env->m->sampling == ILAB_SAMPLING_BACKEND;
    canceller k = {&c, env, 0};
    pthread_t thread;
    bool threaded = false;

    if (backend) {
        ilab_generate_request_t req;
        memset(&req, 0, sizeof req);
        req.struct_size = sizeof req;
        req.request_id = k.id = p->request_id ? p->request_id : next_request_id();
        c.id_known = true;
        c.id = req.request_id;
        c.check_id = true;
        req.prompt_tokens = p->prompt;
        req.n_prompt_tokens = p->n_prompt;
        req.sampling = &p->sampling;
        req.max_tokens = p->max_tokens;
        req.stop = p->stop;
        req.n_stop = p->n_stop;
        req.stop_token_ids = p->stop_token_ids;
        req.n_stop_token_ids = p->n_stop_token_ids;
        req.ignore_eos = p->ignore_eos;
        req.top_logprobs = p->top_logprobs;
        if (p->cancel_thread_after > 0)
            threaded = pthread_create(&thread, NULL, cancel_main, &k) == 0;
        ilab_status st = env->api->generate(env->be, &req, on_event, &c);
        g->returned = st;
        if (g->n_terminal == 0 || g->terminal == ILAB_EVENT_FINISH)
            g->status = st;
        if (st != ILAB_OK && !g->error[0])
            conf_last_error(env, g->error, sizeof g->error);
    } else {
        if (!env->engine) {
            ilab_engine_config cfg;
            ilab_engine_config_default(&cfg);
            if (cfg.max_running > env->m->max_batch)
                cfg.max_running = env->m->max_batch;
            /* The harness tests the plugin: no sequences kept alive between
             * requests by the engine's prefix cache (they would use up the
             * plugin's sequence slots that later tests count on). */
            cfg.prefix_cache_positions = 0;
            char err[512] = "";
            ilab_engine *e = NULL;
            conf_validate_foreign(env->be); /* the engine calls it behind the layer */
            ilab_status st = ilab_engine_create(env->plugin, env->be, &cfg, err, sizeof err, &e);
            if (st != ILAB_OK) {
                snprintf(msg, cap, "the host engine could not start: %s %s", ilab_status_name(st), err);
                r = CONF_ERROR;
                goto out;
            }
            env->engine = e;
        }
        ilab_request req;
        memset(&req, 0, sizeof req);
        req.prompt_tokens = p->prompt;
        req.n_prompt_tokens = p->n_prompt;
        req.sampling = p->sampling;
        req.max_tokens = p->max_tokens;
        req.stop = p->stop;
        req.n_stop = p->n_stop;
        req.stop_token_ids = p->stop_token_ids;
        req.n_stop_token_ids = p->n_stop_token_ids;
        req.ignore_eos = p->ignore_eos;
        req.top_logprobs = p->top_logprobs;
        if (p->cancel_thread_after > 0)
            threaded = pthread_create(&thread, NULL, cancel_main, &k) == 0;
        char err[512] = "";
        uint64_t id = 0;
        /* not under c.mu: the scheduler thread may already be in on_event */
        ilab_status st = ilab_engine_submit(env->engine, &req, on_event, &c, err, sizeof err, &id);
        pthread_mutex_lock(&c.mu);
        k.id = id;
        c.id_known = true;
        pthread_cond_broadcast(&c.cv);
        if (st != ILAB_OK) {
            pthread_mutex_unlock(&c.mu);
            g->status = st;
            snprintf(g->error, sizeof g->error, "%s", err);
        } else {
            /* bounded: the supervisor's deadline covers a stuck engine */
            while (!c.terminal_seen)
                pthread_cond_wait(&c.cv, &c.mu);
            pthread_mutex_unlock(&c.mu);
            if (g->terminal == ILAB_EVENT_FINISH)
                g->status = ILAB_OK;
        }
    }
out:
    if (threaded) {
        pthread_mutex_lock(&c.mu);
        c.canceller_exit = true;
        pthread_cond_broadcast(&c.cv);
        pthread_mutex_unlock(&c.mu);
        pthread_join(thread, NULL);
    }
    pthread_mutex_destroy(&c.mu);
    pthread_cond_destroy(&c.cv);
    return r;
}
