/* Backend-owned generation for the INDEP_GEN family: its own sampler
 * (penalties, temperature, top-k, top-p, min-p in the contract's order,
 * SMP-5), stop strings and UTF-8 hold-back, stop token ids, cancel. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "toy_backend.h"

/* --- the request's checks (STR-9, SMP-5, SMP-7, ABI-3) ------------------------------ */

static ilab_status check_sampling(const ilab_sampling_t *sp, char *msg, size_t cap)
{
    if (!sp) {
        snprintf(msg, cap, "generate: sampling is NULL");
        return ILAB_INVALID_ARGUMENT;
    }
    if (sp->struct_size < sizeof(ilab_sampling_t)) {
        snprintf(msg, cap, "generate: ilab_sampling_t struct_size %u is smaller than ABI 1.0's %zu",
                 sp->struct_size, sizeof(ilab_sampling_t));
        return ILAB_ABI_MISMATCH;
    }
#ifndef BREAK_TAIL_IGNORED
    if (!ilab_struct_tail_is_zero(sp, sizeof *sp)) {
        snprintf(msg, cap, "generate: ilab_sampling_t sets members past this plugin's %zu bytes",
                 sizeof *sp);
        return ILAB_ABI_MISMATCH;
    }
#endif
    const char *bad = NULL;
    if (!isfinite(sp->temperature) || sp->temperature < 0)
        bad = "temperature must be finite and >= 0";
    else if (sp->top_k < 0)
        bad = "top_k must be >= 0";
    else if (!(sp->top_p > 0 && sp->top_p <= 1))
        bad = "top_p must be in (0, 1]";
    else if (!(sp->min_p >= 0 && sp->min_p <= 1))
        bad = "min_p must be in [0, 1]";
    else if (!isfinite(sp->repetition_penalty) || sp->repetition_penalty <= 0)
        bad = "repetition_penalty must be finite and > 0";
#ifndef BREAK_PENALTIES_IGNORED
    else if (!(sp->presence_penalty >= -2 && sp->presence_penalty <= 2))
        bad = "presence_penalty must be in [-2, 2]";
    else if (!(sp->frequency_penalty >= -2 && sp->frequency_penalty <= 2))
        bad = "frequency_penalty must be in [-2, 2]";
#endif
    if (bad) {
        snprintf(msg, cap, "generate: %s", bad);
        return ILAB_INVALID_ARGUMENT;
    }
    return ILAB_OK;
}

static ilab_status check_request(const ilab_generate_request_t *r, char *msg, size_t cap)
{
    if (r->struct_size < sizeof(ilab_generate_request_t)) {
        snprintf(msg, cap, "generate: request struct_size %u is smaller than ABI 1.0's %zu",
                 r->struct_size, sizeof(ilab_generate_request_t));
        return ILAB_ABI_MISMATCH;
    }
    if (!ilab_struct_tail_is_zero(r, sizeof *r)) {
        snprintf(msg, cap, "generate: the request sets members past this plugin's %zu bytes",
                 sizeof *r);
        return ILAB_ABI_MISMATCH;
    }
    if (!r->prompt_tokens || r->n_prompt_tokens == 0) {
        snprintf(msg, cap, "generate: the prompt is empty");
        return ILAB_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < r->n_prompt_tokens; i++)
        if (r->prompt_tokens[i] < 0 || r->prompt_tokens[i] >= TOY_VOCAB) {
            snprintf(msg, cap, "generate: prompt token %zu is %d, outside [0, %d)", i,
                     (int)r->prompt_tokens[i], TOY_VOCAB);
            return ILAB_INVALID_ARGUMENT;
        }
#ifdef BREAK_PROMPT_FULL
    if (r->n_prompt_tokens >= TOY_MAX_CONTEXT) { /* no room left for a token */
#else
    if (r->n_prompt_tokens > TOY_MAX_CONTEXT) {
#endif
        snprintf(msg, cap, "generate: a prompt of %zu tokens is longer than the context of %d",
                 r->n_prompt_tokens, TOY_MAX_CONTEXT);
        return ILAB_CONTEXT_OVERFLOW;
    }
    if (r->max_tokens < 1) {
        snprintf(msg, cap, "generate: max_tokens must be >= 1 (got %d)", (int)r->max_tokens);
        return ILAB_INVALID_ARGUMENT;
    }
#ifdef BREAK_TOPN_CLAMP
    if (r->top_logprobs < 0) { /* more than topk_max is clamped when the list is built */
#else
    if (r->top_logprobs < 0 || r->top_logprobs > TOY_TOPK_MAX) {
#endif
        snprintf(msg, cap, "generate: top_logprobs %d is outside 0..%d (topk_max)",
                 (int)r->top_logprobs, TOY_TOPK_MAX);
        return ILAB_INVALID_ARGUMENT;
    }
    if (r->n_stop && !r->stop) {
        snprintf(msg, cap, "generate: stop is NULL but n_stop is %zu", r->n_stop);
        return ILAB_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < r->n_stop; i++)
        if (!r->stop[i] || !r->stop[i][0]) {
            snprintf(msg, cap, "generate: stop string %zu is NULL or empty", i);
            return ILAB_INVALID_ARGUMENT;
        }
    if (r->n_stop_token_ids && !r->stop_token_ids) {
        snprintf(msg, cap, "generate: stop_token_ids is NULL but n_stop_token_ids is %zu",
                 r->n_stop_token_ids);
        return ILAB_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < r->n_stop_token_ids; i++)
        if (r->stop_token_ids[i] < 0 || r->stop_token_ids[i] >= TOY_VOCAB) {
            snprintf(msg, cap, "generate: stop token id %d is outside [0, %d)",
                     (int)r->stop_token_ids[i], TOY_VOCAB);
            return ILAB_INVALID_ARGUMENT;
        }
    return check_sampling(r->sampling, msg, cap);
}

/* --- the sampler ---------------------------------------------------------------------- */

typedef struct sampler {
    ilab_sampling_t p;
    uint64_t rng;
    unsigned char seen[TOY_VOCAB]; /* prompt + output (repetition penalty) */
    int count[TOY_VOCAB];          /* output only (presence, frequency) */
    float *z;
    int *order;
} sampler;

static double next_unit(uint64_t *state) /* splitmix64 -> [0, 1) */
{
    uint64_t x = (*state += 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    return (double)(x >> 11) * (1.0 / 9007199254740992.0);
}

/* Ids by logit, descending, ties by lower id (an insertion sort: 272 ids). */
static void sort_ids(const float *key, int *order)
{
    for (int i = 0; i < TOY_VOCAB; i++) {
        int id = i, j = i;
        while (j > 0 && (key[order[j - 1]] < key[id] ||
                         (key[order[j - 1]] == key[id] && order[j - 1] > id))) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = id;
    }
}

static int32_t argmax(const float *v)
{
    int32_t best = 0;
    for (int32_t i = 1; i < TOY_VOCAB; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

static int32_t sample(sampler *sm, const float *raw)
{
    float *z = sm->z;
    memcpy(z, raw, TOY_VOCAB * sizeof *z);
    float r = sm->p.repetition_penalty;
    for (int v = 0; v < TOY_VOCAB && r != 1.0f; v++) {
#ifdef BREAK_REP_OUTPUT_ONLY
        if (!sm->count[v])
#else
        if (!sm->seen[v])
#endif
            continue;
#ifdef BREAK_REP_SIGN
        z[v] = z[v] / r;
#else
        z[v] = z[v] > 0 ? z[v] / r : z[v] * r;
#endif
    }
#ifndef BREAK_PENALTIES_IGNORED
    for (int v = 0; v < TOY_VOCAB; v++)
        if (sm->count[v])
            z[v] -= sm->p.presence_penalty + sm->p.frequency_penalty * (float)sm->count[v];
#endif
    if (sm->p.temperature == 0.0f) {
#ifdef BREAK_GREEDY_BEFORE_PENALTY
        return argmax(raw);
#else
        return argmax(z);
#endif
    }
#ifdef BREAK_MINP_BEFORE_TEMP
    float pen_max = z[argmax(z)];
#endif
    /* A temperature as small as 1e-45 overflows z / T to inf, and inf - inf
     * below is NaN: then shift by the maximum first (it scales to 0, the rest
     * to -inf or large negatives, the argmax softmax(z / T) tends to). */
    float zmax = z[argmax(z)], zabs = 0;
    for (int v = 0; v < TOY_VOCAB; v++)
        zabs = fabsf(z[v]) > zabs ? fabsf(z[v]) : zabs;
    bool shift = !isfinite(zabs / sm->p.temperature);
    for (int v = 0; v < TOY_VOCAB; v++)
        z[v] = shift ? (z[v] - zmax) / sm->p.temperature : z[v] / sm->p.temperature;
    int *order = sm->order;
    sort_ids(z, order);
    int keep = TOY_VOCAB;
    if (sm->p.top_k > 0 && sm->p.top_k < keep)
        keep = sm->p.top_k;
    double prob[TOY_VOCAB], total = 0;
    for (int i = 0; i < keep; i++)
        total += prob[i] = exp((double)z[order[i]] - (double)z[order[0]]);
#ifdef BREAK_TOPK_TOPP_MASS
    for (int i = keep; i < TOY_VOCAB; i++) /* the nucleus is a share of the whole distribution */
        total += exp((double)z[order[i]] - (double)z[order[0]]);
#endif
    if (sm->p.top_p < 1.0f) {
        double cum = 0;
        int n = 0;
        while (n < keep) {
#ifdef BREAK_TOPP_EXCLUSIVE
            if (n > 0 && cum + prob[n] / total > sm->p.top_p)
                break;
            cum += prob[n++] / total;
#else
            cum += prob[n++] / total;
            if (cum >= sm->p.top_p)
                break;
#endif
        }
        keep = n;
    }
    if (sm->p.min_p > 0.0f) {
        int n = 1;
#ifdef BREAK_MINP_BEFORE_TEMP
        /* p / p_max = exp(logit - logit_max) */
        while (n < keep && exp((double)(z[order[n]] * sm->p.temperature) - pen_max) >= sm->p.min_p)
#else
        while (n < keep && prob[n] / prob[0] >= sm->p.min_p)
#endif
            n++;
        keep = n;
    }
    total = 0;
    for (int i = 0; i < keep; i++)
        total += prob[i];
    double u = next_unit(&sm->rng) * total;
    for (int i = 0; i < keep; i++) {
        u -= prob[i];
        if (u < 0)
            return order[i];
    }
    return order[keep - 1];
}

static void accept(sampler *sm, int32_t token)
{
    sm->seen[token] = 1;
    sm->count[token]++;
}

/* log_softmax of `v` at `token`, and the `k` largest entries (SMP-6, LOG-4). */
static float log_softmax_at(const float *v, int32_t token)
{
    float mx = v[argmax(v)];
    double sum = 0;
    for (int i = 0; i < TOY_VOCAB; i++)
        sum += exp((double)v[i] - mx);
    return (float)((double)v[token] - mx - log(sum));
}

static void top_logprobs(const float *raw, int k, ilab_logprob_t *out)
{
    float mx = raw[argmax(raw)];
    double sum = 0;
    for (int i = 0; i < TOY_VOCAB; i++)
        sum += exp((double)raw[i] - mx);
    float lse = (float)(mx + log(sum));
    unsigned char taken[TOY_VOCAB] = {0};
#ifdef BREAK_TOPLIST_BYTES
    const int candidates = 256; /* the byte alphabet */
#else
    const int candidates = TOY_VOCAB;
#endif
    for (int n = 0; n < k; n++) {
        int best = -1;
        for (int i = 0; i < candidates; i++)
            if (!taken[i] && (best < 0 || raw[i] > raw[best]))
                best = i;
        taken[best] = 1;
        out[n].token = best;
        out[n].logprob = raw[best] - lse;
    }
}

/* --- text: stop strings and UTF-8 hold-back (STR-6, STR-7) ----------------------------------- */

typedef struct text {
    char *buf;
    size_t len, cap, emitted;
} text;

static int text_push(text *t, const char *bytes, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = (t->len + n + 1) * 2;
        char *grown = realloc(t->buf, cap);
        if (!grown)
            return -1;
        t->buf = grown;
        t->cap = cap;
    }
    memcpy(t->buf + t->len, bytes, n);
    t->len += n;
    return 0;
}

/* Bytes at the end that start a code point still missing bytes. */
static size_t utf8_hold(const char *s, size_t n)
{
    for (size_t back = 1; back <= n && back <= 3; back++) {
        unsigned char c = (unsigned char)s[n - back];
        if ((c & 0xc0) == 0x80)
            continue;
#ifdef BREAK_SPLIT_4BYTE
        size_t need = c >= 0xe0 && c <= 0xf4 ? 3 : c >= 0xc2 && c <= 0xdf ? 2 : 1;
#else
        size_t need = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 && c <= 0xef ? 3
                      : c >= 0xc2 && c <= 0xdf ? 2 : 1;
#endif
        return need > back ? back : 0;
    }
    return 0;
}

/* The longest end of the text that is a proper prefix of some stop string. */
static size_t stop_hold(const text *t, const ilab_generate_request_t *r)
{
    size_t hold = 0;
    for (size_t i = 0; i < r->n_stop; i++) {
        size_t sl = strlen(r->stop[i]);
        for (size_t k = sl - 1; k > hold; k--)
            if (k <= t->len && memcmp(t->buf + t->len - k, r->stop[i], k) == 0) {
                hold = k;
                break;
            }
    }
    return hold;
}

/* Where the output is cut for the first stop string that completed, or -1. */
static long find_stop(const text *t, const ilab_generate_request_t *r)
{
    long best_end = -1, cut = -1;
#ifdef BREAK_STOP_SECOND
    size_t n_stop = r->n_stop ? 1 : 0; /* the first stop string is the one that matters */
#else
    size_t n_stop = r->n_stop;
#endif
    for (size_t i = 0; i < n_stop; i++) {
        size_t sl = strlen(r->stop[i]);
        const char *hit = memmem(t->buf, t->len, r->stop[i], sl);
        if (!hit)
            continue;
        long start = hit - t->buf, end = start + (long)sl;
#ifdef BREAK_STOP_EARLIEST_START
        if (best_end < 0 || start < cut) { /* the occurrence that starts first */
#else
        if (best_end < 0 || end < best_end || (end == best_end && start < cut)) {
#endif
            best_end = end;
            cut = start;
        }
    }
    return cut;
}

/* --- the running table (cancel, STR-4) ------------------------------------------------------ */

#ifdef BREAK_CANCEL_PENDING
static _Atomic uint64_t cancel_pending; /* a cancel that came before its request */
#endif

static toy_running *run_begin(ilab_backend_t *b, uint64_t id)
{
    toy_running *slot = NULL;
    pthread_mutex_lock(&b->lock);
    for (int i = 0; i < TOY_MAX_RUNNING && !slot; i++)
        if (!b->running[i].in_use) {
            slot = &b->running[i];
            slot->in_use = 1;
            slot->id = id;
            atomic_store(&slot->cancel, 0);
#ifdef BREAK_CANCEL_PENDING
            if (atomic_load(&cancel_pending) == id)
                atomic_store(&slot->cancel, 1);
#endif
        }
    pthread_mutex_unlock(&b->lock);
    return slot;
}

static void run_end(ilab_backend_t *b, toy_running *slot)
{
    pthread_mutex_lock(&b->lock);
    slot->in_use = 0;
    pthread_mutex_unlock(&b->lock);
}

ilab_status toy_cancel(ilab_backend_t *b, uint64_t request_id)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    int found = 0;
    pthread_mutex_lock(&b->lock);
    for (int i = 0; i < TOY_MAX_RUNNING; i++)
        if (b->running[i].in_use && b->running[i].id == request_id) {
            atomic_store(&b->running[i].cancel, 1);
            found = 1;
        }
    pthread_mutex_unlock(&b->lock);
#ifdef BREAK_CANCEL_PENDING
    if (!found)
        atomic_store(&cancel_pending, request_id);
#endif
#ifdef BREAK_CANCEL_UNKNOWN
    if (!found)
        return toy_fail(b, ILAB_INVALID_ARGUMENT, "cancel: no request %llu is running",
                        (unsigned long long)request_id);
#endif
    (void)found;
    return ILAB_OK;
}

/* --- generate() -------------------------------------------------------------------------------- */

typedef struct stream {
    ilab_backend_t *b;
    const ilab_generate_request_t *r;
    ilab_event_fn on_event;
    void *user_data;
    uint32_t completion;
} stream;

static ilab_status emit_error(stream *st, ilab_status status, const char *msg)
{
    toy_fail(st->b, status, "%s", msg);
#ifdef BREAK_NO_ERROR_EVENT
    return status; /* the status says it all */
#else
    ilab_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.struct_size = sizeof ev;
    ev.type = ILAB_EVENT_ERROR;
#ifndef BREAK_ERROR_REQID
    ev.request_id = st->r->request_id;
#endif
    ev.finish_reason = ILAB_FINISH_ERROR;
    ev.status = status;
    ev.message = msg;
    st->on_event(st->user_data, &ev);
    return status;
#endif
}

static ilab_status emit_finish(stream *st, ilab_finish_reason reason, const char *txt, size_t len)
{
    ilab_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.struct_size = sizeof ev;
    ev.type = ILAB_EVENT_FINISH;
    ev.request_id = st->r->request_id;
    ev.finish_reason = reason;
    ev.text = txt ? txt : "";
    ev.text_len = txt ? len : 0;
    ev.prompt_tokens = (uint32_t)st->r->n_prompt_tokens;
#ifdef BREAK_PROMPT_BOS
    if (st->r->n_prompt_tokens && st->r->prompt_tokens[0] == TOY_BOS)
        ev.prompt_tokens--; /* BOS is not the user's text */
#endif
    ev.completion_tokens = st->completion;
#ifdef BREAK_FINISH_RC
    if (st->on_event(st->user_data, &ev))
        return ILAB_CANCELLED; /* the caller asked to stop */
#else
    st->on_event(st->user_data, &ev);
#endif
    return ILAB_OK;
}

static int is_stop_token(const ilab_generate_request_t *r, int32_t token)
{
#ifdef BREAK_STOP_ID_LAST
    for (size_t i = 0; i + 1 < r->n_stop_token_ids; i++)
#else
    for (size_t i = 0; i < r->n_stop_token_ids; i++)
#endif
        if (r->stop_token_ids[i] == token)
            return 1;
    return 0;
}

/* The decode loop once the prompt is in `seq` and `logits` holds its last row. */
static ilab_status decode(stream *st, sampler *sm, toy_seq *seq, float *logits,
                          toy_running *run)
{
    const ilab_generate_request_t *r = st->r;
    text t = {0};
    ilab_logprob_t top[TOY_TOPK_MAX];
    ilab_status status = ILAB_OK;
    int finish_after_next = 0;
    for (;;) {
        int32_t token = sample(sm, logits);
        accept(sm, token);
        int eos = token == TOY_EOS && !r->ignore_eos;
#ifdef BREAK_USAGE_STOPTOKEN
        st->completion++; /* every sampled token is a completion token */
#endif
        if (eos || is_stop_token(r, token)) {
#ifdef BREAK_EMIT_STOP_ID
            if (!eos) { /* a stop id is still part of the output */
                ilab_event_t tev;
                memset(&tev, 0, sizeof tev);
                tev.struct_size = sizeof tev;
                tev.type = ILAB_EVENT_TOKEN;
                tev.request_id = r->request_id;
                tev.token = token;
                tev.text = "";
                tev.logprob = log_softmax_at(logits, token);
                st->completion++;
                st->on_event(st->user_data, &tev);
            }
#endif
#ifdef BREAK_HELD_LOST
            status = emit_finish(st, ILAB_FINISH_STOP, NULL, 0);
#else
            status = emit_finish(st, ILAB_FINISH_STOP, t.buf + t.emitted, t.len - t.emitted);
#endif
            break;
        }
        char piece[2];
        size_t plen = toy_piece(token, piece);
        if (text_push(&t, piece, plen) != 0) {
            status = emit_error(st, ILAB_OUT_OF_MEMORY, "generate: out of memory for the text");
            break;
        }
#ifndef BREAK_USAGE_STOPTOKEN
        st->completion++;
#endif
#ifdef BREAK_CONTEXT_ERROR
        int last = st->completion >= (uint32_t)r->max_tokens;
#else
        int last = st->completion >= (uint32_t)r->max_tokens || seq->len >= TOY_MAX_CONTEXT;
#endif
        long cut = find_stop(&t, r);
        size_t from = t.emitted, to;
#ifdef BREAK_CTX_HELD_FINISH
        int release = st->completion >= (uint32_t)r->max_tokens; /* a full context is seen after the event */
#else
        int release = last;
#endif
        if (cut >= 0)
            to = (size_t)cut > from ? (size_t)cut : from;
        else if (release)
            to = t.len;
        else {
            size_t hold = utf8_hold(t.buf, t.len), sh = stop_hold(&t, r);
            hold = sh > hold ? sh : hold;
            to = t.len - hold > from ? t.len - hold : from;
        }
        t.emitted = to;
        ilab_event_t ev;
        memset(&ev, 0, sizeof ev);
        ev.struct_size = sizeof ev;
        ev.type = ILAB_EVENT_TOKEN;
        ev.request_id = r->request_id;
        ev.token = token;
        ev.text = t.buf + from;
        ev.text_len = to - from;
#ifdef BREAK_LOGPROB_PROCESSED
        ev.logprob = log_softmax_at(sm->z, token); /* the distribution it was drawn from */
#else
        ev.logprob = log_softmax_at(logits, token);
#endif
        if (r->top_logprobs > 0) {
            int k = r->top_logprobs;
#ifdef BREAK_TOPN_CLAMP
            if (k > TOY_TOPK_MAX)
                k = TOY_TOPK_MAX; /* all the plugin keeps */
#endif
            top_logprobs(logits, k, top);
            ev.top_logprobs = top;
            ev.n_top_logprobs = (uint32_t)k;
        }
        int rc = st->on_event(st->user_data, &ev);
        if (finish_after_next) {
            status = emit_finish(st, ILAB_FINISH_CANCELLED, NULL, 0);
            break;
        }
        if (rc) {
#ifdef BREAK_CALLBACK_EXTRA
            if (!last && cut < 0) { /* the next token is already on its way */
                finish_after_next = 1;
                goto next;
            }
#endif
            status = emit_finish(st, ILAB_FINISH_CANCELLED, NULL, 0);
            break;
        }
        if (cut >= 0) {
#ifdef BREAK_USAGE_STOPSTR
            st->completion--; /* the stop string is not part of the completion */
#endif
            status = emit_finish(st, ILAB_FINISH_STOP, NULL, 0);
            break;
        }
#ifdef BREAK_CANCEL_LATE
        if (st->completion % 4 == 0 && atomic_load(&run->cancel)) { /* poll every 4 tokens */
#else
        if (atomic_load(&run->cancel)) {
#endif
            status = emit_finish(st, ILAB_FINISH_CANCELLED, NULL, 0);
            break;
        }
        if (last) {
#ifdef BREAK_CTX_HELD_FINISH
            status = emit_finish(st, ILAB_FINISH_LENGTH, t.buf + t.emitted, t.len - t.emitted);
#else
            status = emit_finish(st, ILAB_FINISH_LENGTH, NULL, 0);
#endif
            break;
        }
#ifdef BREAK_CALLBACK_EXTRA
    next:
#endif
#ifdef BREAK_CONTEXT_ERROR
        if (seq->len >= TOY_MAX_CONTEXT) {
            char msg[128];
            snprintf(msg, sizeof msg, "generate: the sequence is full (%d positions)",
                     TOY_MAX_CONTEXT);
            status = emit_error(st, ILAB_CONTEXT_OVERFLOW, msg);
            break;
        }
#endif
        if (toy_eval_one(st->b, seq, &token, 1, logits) != ILAB_OK) {
            status = emit_error(st, ILAB_OUT_OF_MEMORY, "generate: out of memory in the cache");
            break;
        }
    }
    free(t.buf);
    return status;
}

ilab_status toy_generate(ilab_backend_t *b, const ilab_generate_request_t *request,
                         ilab_event_fn on_event, void *user_data)
{
    if (!b)
        return ILAB_INVALID_ARGUMENT;
    if (!request || !on_event)
        return toy_fail(b, ILAB_INVALID_ARGUMENT, "generate: request or on_event is NULL");
    stream st = {b, request, on_event, user_data, 0};
    char msg[256];
    ilab_status status = check_request(request, msg, sizeof msg);
    if (status != ILAB_OK)
        return emit_error(&st, status, msg);
    toy_running *run = run_begin(b, request->request_id);
    if (!run)
        return emit_error(&st, ILAB_OUT_OF_MEMORY, "generate: too many requests running at once");
    sampler *sm = calloc(1, sizeof *sm);
    float *logits = malloc(TOY_VOCAB * sizeof *logits);
    float *z = malloc(TOY_VOCAB * sizeof *z);
    int *order = malloc(TOY_VOCAB * sizeof *order);
    pthread_mutex_lock(&b->lock);
    toy_seq *seq = toy_seq_new(&b->cache);
    pthread_mutex_unlock(&b->lock);
    if (!sm || !logits || !z || !order || !seq) {
        status = emit_error(&st, ILAB_OUT_OF_MEMORY, "generate: out of memory or of sequences");
    } else {
        sm->p = *request->sampling;
        sm->rng = request->sampling->seed;
#ifdef BREAK_SEED_ZERO
        if (sm->rng == 0) /* no seed given: a fresh one */
            sm->rng = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20) ^ (uint64_t)(uintptr_t)sm;
#endif
#ifdef BREAK_GEN_RACE
        sm->z = b->gen_work; /* one scratch per instance: no allocation per request */
        sm->order = b->gen_order;
#else
        sm->z = z;
        sm->order = order;
#endif
        for (size_t i = 0; i < request->n_prompt_tokens; i++) {
            sm->seen[request->prompt_tokens[i]] = 1;
#ifdef BREAK_PRESENCE_PROMPT
            sm->count[request->prompt_tokens[i]]++; /* the prompt is context too */
#endif
        }
        status = toy_eval_one(b, seq, request->prompt_tokens, (int32_t)request->n_prompt_tokens,
                              logits);
        if (status != ILAB_OK)
            status = emit_error(&st, status, "generate: out of memory in the cache");
        else
            status = decode(&st, sm, seq, logits, run);
    }
    if (seq) {
        pthread_mutex_lock(&b->lock);
        toy_seq_release(seq);
        pthread_mutex_unlock(&b->lock);
    }
    free(sm);
    free(logits);
    free(z);
    free(order);
    run_end(b, run);
    return status;
}
