/* The validation layer over generate(): every stream, whichever test asked
 * for it, has the grammar of STR-1 (TOKEN* then one terminal, every event
 * on the calling thread before generate() returns, with the request's id),
 * a return value that matches its terminal event, a finish reason from the
 * closed set (STR-3), usage that counts what was sent (STR-5), ERROR events
 * with a non-OK status and a message (STR-9), and top-k lists of the size
 * and order LOG-4 gives. */
#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "validate_internal.h"

#define R (val_g.real)

typedef struct gen_watch {
    ilab_event_fn fn;
    void *user;
    pthread_t thread;
    int returned;           /* set once generate() has returned */
    uint64_t id;
    size_t n_prompt;
    int32_t max_tokens, top_logprobs;
    int32_t vocab;
    int topk_max;
    size_t tokens, terminals;
    ilab_event_type terminal;
    ilab_status error_status;
    bool broke;             /* one violation per stream is enough */
} gen_watch;

static void broke(gen_watch *w, const char *clause, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void broke(gen_watch *w, const char *clause, const char *fmt, ...)
{
    if (w->broke)
        return;
    w->broke = true;
    char detail[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    val_violation(clause, "generate", "request %llu: %s", (unsigned long long)w->id, detail);
}

static void check_topk(gen_watch *w, const ilab_event_t *e)
{
    if (w->top_logprobs < 0 || w->top_logprobs > w->topk_max || w->vocab <= 0)
        return;
    long want = w->top_logprobs < w->vocab ? w->top_logprobs : w->vocab;
    val_checked("LOG-4");
    if ((long)e->n_top_logprobs != want || (want > 0 && !e->top_logprobs)) {
        broke(w, "LOG-4", "a TOKEN carries %ld top logprobs, top_logprobs asks %ld",
              (long)e->n_top_logprobs, want);
        return;
    }
    for (uint32_t i = 0; i < e->n_top_logprobs; i++) {
        const ilab_logprob_t *p = &e->top_logprobs[i];
        bool bad = p->token < 0 || p->token >= w->vocab || !isfinite(p->logprob) || p->logprob > 0;
        if (i > 0) {
            const ilab_logprob_t *q = &e->top_logprobs[i - 1];
            bad |= q->logprob < p->logprob || (q->logprob == p->logprob && q->token > p->token);
            for (uint32_t j = 0; j < i; j++)
                bad |= e->top_logprobs[j].token == p->token;
        }
        if (bad) {
            broke(w, "LOG-4", "top-k entry %ld (id %ld) is out of range, not finite, > 0, "
                  "out of order or repeated", (long)i, (long)p->token);
            return;
        }
    }
}

static int on_event(void *user_data, const ilab_event_t *e)
{
    gen_watch *w = user_data;
    val_checked("STR-1");
    if (__atomic_load_n(&w->returned, __ATOMIC_ACQUIRE))
        broke(w, "STR-1", "an event came after generate() returned");
    else if (!pthread_equal(pthread_self(), w->thread))
        broke(w, "STR-1", "an event came on a thread other than the caller's");
    if (!e) {
        broke(w, "STR-1", "the event pointer is NULL");
        return 1;
    }
    if (e->struct_size < sizeof(ilab_event_t))
        broke(w, "STR-1", "event struct_size %ld is below ABI 1.0's %ld", (long)e->struct_size,
              (long)sizeof(ilab_event_t));
    else if (e->request_id != w->id)
        broke(w, "STR-1", "an event carries request id %ld", (long)e->request_id);
    if (w->terminals)
        broke(w, "STR-1", "an event (type %ld) came after the terminal one", (long)e->type);
    if (e->type == ILAB_EVENT_TOKEN) {
        w->tokens++;
        if (w->vocab > 0 && (e->token < 0 || e->token >= w->vocab))
            broke(w, "STR-1", "TOKEN id %ld is outside the vocabulary", (long)e->token);
        if (w->max_tokens > 0 && w->tokens > (size_t)w->max_tokens) {
            val_checked("STR-3");
            broke(w, "STR-3", "TOKEN %ld is past max_tokens %ld", (long)w->tokens, (long)w->max_tokens);
        }
        check_topk(w, e);
    } else if (e->type == ILAB_EVENT_FINISH) {
        w->terminals++;
        w->terminal = e->type;
        val_checked("STR-3");
        val_checked("STR-5");
        if (e->finish_reason != ILAB_FINISH_STOP && e->finish_reason != ILAB_FINISH_LENGTH &&
            e->finish_reason != ILAB_FINISH_CANCELLED)
            broke(w, "STR-3", "FINISH carries the reason %ld", (long)e->finish_reason);
        else if (e->prompt_tokens != w->n_prompt)
            broke(w, "STR-5", "FINISH says prompt_tokens %ld for a prompt of %ld",
                  (long)e->prompt_tokens, (long)w->n_prompt);
        else if (e->completion_tokens != w->tokens)
            broke(w, "STR-5", "FINISH says completion_tokens %ld after %ld TOKEN events",
                  (long)e->completion_tokens, (long)w->tokens);
    } else if (e->type == ILAB_EVENT_ERROR) {
        w->terminals++;
        w->terminal = e->type;
        w->error_status = e->status;
        val_checked("STR-9");
        if (e->status == ILAB_OK || (int)e->status < 0 || (int)e->status >= ILAB_STATUS_COUNT)
            broke(w, "STR-9", "an ERROR event carries the status %ld", (long)e->status);
        else if (!e->message || !e->message[0])
            broke(w, "STR-9", "an ERROR event (%s) has no message", ilab_status_name(e->status));
    } else {
        broke(w, "STR-1", "an event has the unknown type %ld", (long)e->type);
    }
    return w->fn(w->user, e);
}

static ilab_status w_generate(ilab_backend_t *be, const ilab_generate_request_t *req, ilab_event_fn fn,
                              void *user)
{
    val_call c;
    val_enter(&c, "generate", be);
    gen_watch w;
    memset(&w, 0, sizeof w);
    w.fn = fn;
    w.user = user;
    w.thread = pthread_self();
    w.top_logprobs = -1;
    val_lock();
    val_inst *in = val_inst_find(be);
    if (in) {
        in->generated = true;
        w.vocab = in->info_ok ? in->info.vocab_size : 0;
    }
    w.topk_max = val_g.m ? val_g.m->topk_max : 0;
    val_unlock();
    bool full = req && req->struct_size >= sizeof *req;
    if (full) {
        w.id = req->request_id;
        w.n_prompt = req->n_prompt_tokens;
        w.max_tokens = req->max_tokens;
        w.top_logprobs = req->top_logprobs;
    }
    ilab_status st = R->generate(be, req, fn ? on_event : NULL, &w);
    __atomic_store_n(&w.returned, 1, __ATOMIC_RELEASE);
    val_checked("STR-1");
    bool undeclared = val_g.m && val_g.m->sampling != ILAB_SAMPLING_BACKEND;
    if (!req || !fn) {
        val_checked("STR-9");
        if (w.terminals || w.tokens)
            broke(&w, "STR-9", "a NULL %s still got events", req ? "on_event" : "request");
        else if (st != ILAB_INVALID_ARGUMENT && !(undeclared && st == ILAB_UNSUPPORTED))
            broke(&w, "STR-9", "a NULL argument gave %s, not INVALID_ARGUMENT",
                  ilab_status_name(st));
    } else if (undeclared && st == ILAB_UNSUPPORTED && w.terminals == 0 && w.tokens == 0) {
        /* ERR-2: an undeclared generate() may emit nothing */
    } else if (w.terminals != 1) {
        broke(&w, "STR-1", "%ld terminal events", (long)w.terminals);
    } else if ((st == ILAB_OK) != (w.terminal == ILAB_EVENT_FINISH) ||
               (w.terminal == ILAB_EVENT_ERROR && st != w.error_status)) {
        broke(&w, "STR-1", "generate() returned %s after %s", ilab_status_name(st),
              w.terminal == ILAB_EVENT_FINISH ? "FINISH" : "an ERROR event");
    }
    val_leave(&c, st);
    return st;
}

void val_fill_generate(ilab_backend_api_t *t)
{
    if (t->generate) t->generate = w_generate;
}
