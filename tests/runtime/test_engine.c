/* Engine tests against real plugins loaded with dlopen: the test-only
 * counting_backend and generate_backend, and torchlike on its embedded
 * (trained) default model. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "ilab_skip.h"

#include "loader/plugin_loader.h"
#include "opened_backend.h"
#include "runtime/engine.h"
#include "runtime/metrics.h"

/* ---- an engine over an opened backend (tests/support/opened_backend.h) - */

static ilab_engine *start(opened *o, int max_running, int max_waiting)
{
    ilab_engine_config cfg;
    ilab_engine_config_default(&cfg);
    cfg.max_running = max_running;
    cfg.max_waiting = max_waiting;
    ilab_engine *e = NULL;
    char err[512] = "";
    if (ilab_engine_create(o->plugin, o->backend, &cfg, err, sizeof err, &e) != ILAB_OK)
        fail_msg("engine: %s", err);
    return e;
}

/* ---- collecting a stream ------------------------------------------------- */

typedef struct collect {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t tokens[1024];
    float logprobs[1024];
    int n;
    char text[8192];
    size_t text_len;
    int terminal; /* 0 none, 1 FINISH, 2 ERROR; more than one is a bug */
    int events_after_terminal;
    ilab_finish_reason reason;
    ilab_status status;
    char message[512];
    uint32_t prompt_tokens, completion_tokens;
    bool top_ok;
    /* hooks */
    int block_at;   /* at this many tokens, wait in the callback until released */
    bool blocked, released;
    int cancel_at;  /* return nonzero at this many tokens */
} collect;

static void collect_init(collect *c)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->top_ok = true;
}

static void collect_destroy(collect *c)
{
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
}

static void append(collect *c, const char *t, size_t n)
{
    if (n && c->text_len + n < sizeof c->text) {
        memcpy(c->text + c->text_len, t, n);
        c->text_len += n;
    }
}

static int on_event(void *ud, const ilab_event_t *ev)
{
    collect *c = ud;
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    if (c->terminal)
        c->events_after_terminal++;
    if (ev->type == ILAB_EVENT_TOKEN) {
        if (c->n < 1024) {
            c->logprobs[c->n] = ev->logprob;
            c->tokens[c->n] = ev->token;
        }
        c->n++;
        append(c, ev->text, ev->text_len);
        pthread_cond_broadcast(&c->cv); /* wait_tokens() */
        for (uint32_t i = 0; i < ev->n_top_logprobs; i++)
            if (ev->top_logprobs[i].logprob > 0 || (i && ev->top_logprobs[i].logprob > ev->top_logprobs[i - 1].logprob))
                c->top_ok = false;
        if (c->block_at && c->n == c->block_at) {
            c->blocked = true;
            pthread_cond_broadcast(&c->cv);
            while (!c->released)
                pthread_cond_wait(&c->cv, &c->mu);
        }
        if (c->cancel_at && c->n == c->cancel_at)
            rc = 1;
    } else {
        c->terminal = ev->type == ILAB_EVENT_FINISH ? 1 : 2;
        c->reason = ev->finish_reason;
        c->status = ev->status;
        if (ev->type == ILAB_EVENT_ERROR)
            snprintf(c->message, sizeof c->message, "%s", ev->message ? ev->message : "");
        else
            append(c, ev->text, ev->text_len);
        c->prompt_tokens = ev->prompt_tokens;
        c->completion_tokens = ev->completion_tokens;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static void wait_terminal(collect *c)
{
    pthread_mutex_lock(&c->mu);
    while (!c->terminal)
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

/* Until the stream has delivered at least `n` tokens (or ended). */
static void wait_tokens(collect *c, int n)
{
    pthread_mutex_lock(&c->mu);
    while (c->n < n && !c->terminal)
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

static void wait_blocked(collect *c)
{
    pthread_mutex_lock(&c->mu);
    while (!c->blocked)
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

static void release(collect *c)
{
    pthread_mutex_lock(&c->mu);
    c->released = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static ilab_request make_request(const int32_t *prompt, size_t n, float temperature, uint64_t seed,
                                 int32_t max_tokens)
{
    ilab_request r;
    memset(&r, 0, sizeof r);
    r.prompt_tokens = prompt;
    r.n_prompt_tokens = n;
    r.sampling.struct_size = sizeof r.sampling;
    r.sampling.temperature = temperature;
    r.sampling.top_p = 1.0f;
    r.sampling.repetition_penalty = 1.0f;
    r.sampling.seed = seed;
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    return r;
}

static int32_t argmax(const float *x, int32_t n)
{
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

/* The reference: prefill the prompt, then feed argmax back, calling the
 * backend's eval() directly. */
static void argmax_loop(opened *o, const int32_t *prompt, size_t n_prompt, int steps, int32_t *out)
{
    ilab_model_info_t info = {.struct_size = sizeof info};
    assert_int_equal(o->api->model_info(o->backend, &info), ILAB_OK);
    float *logits = malloc((size_t)info.vocab_size * sizeof *logits);
    ilab_seq_t seq;
    assert_int_equal(o->api->seq_create(o->backend, &seq), ILAB_OK);
    ilab_batch_item_t item = {sizeof item, seq, prompt, (int32_t)n_prompt, 0, logits};
    const ilab_batch_item_t *items[1] = {&item};
    for (int i = 0; i < steps; i++) {
        assert_int_equal(o->api->eval(o->backend, items, 1), ILAB_OK);
        out[i] = argmax(logits, info.vocab_size);
        item.tokens = &out[i];
        item.n_tokens = 1;
    }
    o->api->seq_free(o->backend, seq);
    free(logits);
}

static const int32_t prompt_a[] = {1, 3 + 'H', 3 + 'i', 3 + ' '};

/* ---- tests ---------------------------------------------------------------- */

static void greedy_through_the_host_equals_an_argmax_loop(void **state)
{
    (void)state;
    opened o;
    open_backend(COUNTING_PLUGIN, NULL, 0, &o);
    enum { N = 40 };
    int32_t ref[N];
    argmax_loop(&o, prompt_a, 4, N, ref);

    ilab_engine *e = start(&o, 4, 4);
    collect c;
    collect_init(&c);
    ilab_request r = make_request(prompt_a, 4, 0.0f, 123, N);
    r.top_logprobs = 5;
    char err[512] = "";
    ilab_request_metrics m;
    assert_int_equal(ilab_engine_generate(e, &r, on_event, &c, err, sizeof err, &m), ILAB_OK);
    assert_int_equal(c.terminal, 1);
    assert_int_equal(c.reason, ILAB_FINISH_LENGTH);
    assert_int_equal(c.n, N);
    assert_memory_equal(c.tokens, ref, sizeof ref);
    /* STR-5 usage, STR-2 text == detokenize(tokens) */
    assert_int_equal(c.completion_tokens, N);
    assert_int_equal(c.prompt_tokens, 4);
    assert_int_equal(m.completion_tokens, N);
    char text[256];
    size_t len;
    assert_int_equal(o.api->detokenize(o.backend, ref, N, text, sizeof text, &len), ILAB_OK);
    assert_int_equal(c.text_len, len);
    assert_memory_equal(c.text, text, len);
    assert_true(c.top_ok);
    for (int i = 0; i < N; i++)
        assert_true(c.logprobs[i] <= 0.0f && isfinite(c.logprobs[i]));
    assert_int_equal(c.events_after_terminal, 0);
    assert_true(m.e2e_seconds >= m.ttft_seconds);
    collect_destroy(&c);
    ilab_engine_destroy(e);
    close_backend(&o);
}

/* A request's timings add up: its tokens come between its first token
 * and its end, so the mean inter-token latency times the gaps between
 * tokens (n - 1 of them, not n) spans e2e - ttft, less only the moment
 * after the last token. Paced at 50 ms a step, a mean taken over n instead
 * of n - 1 would be short by a quarter of 150 ms. */
static void request_timings_add_up(void **state)
{
    (void)state;
    ilab_config_entry_t cfg[] = {{"step_ms", "50"}};
    opened o;
    open_backend(COUNTING_PLUGIN, cfg, 1, &o);
    ilab_engine *e = start(&o, 4, 4);
    collect c;
    collect_init(&c);
    ilab_request r = make_request(prompt_a, 4, 0.0f, 0, 4);
    ilab_request_metrics m;
    char err[512] = "";
    assert_int_equal(ilab_engine_generate(e, &r, on_event, &c, err, sizeof err, &m), ILAB_OK);
    assert_int_equal(c.n, 4);
    double gaps = m.mean_itl_seconds * 3, span = m.e2e_seconds - m.ttft_seconds;
    if (!(m.queue_seconds <= m.ttft_seconds && m.ttft_seconds <= m.e2e_seconds &&
          gaps <= span + 1e-6 && gaps >= span - 0.015 && m.mean_itl_seconds >= 0.045))
        fail_msg("queue %.4f s, ttft %.4f s, e2e %.4f s, mean inter-token %.4f s over 4 tokens "
                 "paced at 50 ms: 3 gaps span %.4f s of the %.4f s between first token and end",
                 m.queue_seconds, m.ttft_seconds, m.e2e_seconds, m.mean_itl_seconds, gaps, span);
    collect_destroy(&c);
    ilab_engine_destroy(e);
    close_backend(&o);
}

enum { CONC_R = 4, CONC_N = 12, CONC_MAX_PROMPT = 32 };

/* Each of 4 prompts alone, then all 4 at once: the same tokens (own seed,
 * own RNG), and N eval() calls for the 4 x N tokens. `blocker` is a prompt
 * for a request that holds the scheduler inside its first TOKEN callback
 * while the four are queued (so they are admitted in one step), then
 * cancels itself. */
static void concurrent_equals_alone(opened *o, int32_t prompts[CONC_R][CONC_MAX_PROMPT],
                                    const size_t *n_prompt, const int32_t *blocker_prompt,
                                    float temperature)
{
    ilab_engine *e = start(o, 8, 8);
    char err[512] = "";
    int32_t alone[CONC_R][CONC_N];
    for (int i = 0; i < CONC_R; i++) {
        collect c;
        collect_init(&c);
        ilab_request r = make_request(prompts[i], n_prompt[i], temperature, 1000 + (uint64_t)i, CONC_N);
        uint64_t before = ilab_engine_eval_calls(e);
        assert_int_equal(ilab_engine_generate(e, &r, on_event, &c, err, sizeof err, NULL), ILAB_OK);
        assert_int_equal(c.n, CONC_N);
        assert_int_equal(ilab_engine_eval_calls(e) - before, CONC_N); /* 1 prefill + N-1 decodes */
        memcpy(alone[i], c.tokens, sizeof alone[i]);
        collect_destroy(&c);
    }

    collect blocker, c[CONC_R];
    collect_init(&blocker);
    blocker.block_at = 1;
    blocker.cancel_at = 1;
    ilab_request br = make_request(blocker_prompt, 1, 0.0f, 0, 100);
    assert_int_equal(ilab_engine_submit(e, &br, on_event, &blocker, err, sizeof err, NULL), ILAB_OK);
    wait_blocked(&blocker);
    for (int i = 0; i < CONC_R; i++) {
        collect_init(&c[i]);
        ilab_request r = make_request(prompts[i], n_prompt[i], temperature, 1000 + (uint64_t)i, CONC_N);
        assert_int_equal(ilab_engine_submit(e, &r, on_event, &c[i], err, sizeof err, NULL), ILAB_OK);
    }
    uint64_t before = ilab_engine_eval_calls(e);
    release(&blocker);
    wait_terminal(&blocker);
    assert_int_equal(blocker.reason, ILAB_FINISH_CANCELLED);
    for (int i = 0; i < CONC_R; i++) {
        wait_terminal(&c[i]);
        assert_int_equal(c[i].reason, ILAB_FINISH_LENGTH);
        assert_int_equal(c[i].n, CONC_N);
        assert_memory_equal(c[i].tokens, alone[i], sizeof alone[i]);
        collect_destroy(&c[i]);
    }
    /* 4 x N tokens in N eval() calls: every step carried all four. */
    assert_int_equal(ilab_engine_eval_calls(e) - before, CONC_N);
    collect_destroy(&blocker);
    ilab_engine_destroy(e);
}

static void four_concurrent_requests_share_one_eval_per_step(void **state)
{
    (void)state;
    opened o;
    open_backend(COUNTING_PLUGIN, NULL, 0, &o);
    int32_t prompts[CONC_R][CONC_MAX_PROMPT];
    size_t n[CONC_R];
    for (int i = 0; i < CONC_R; i++) {
        n[i] = 5;
        for (int k = 0; k < 5; k++)
            prompts[i][k] = 3 + 'a' + i * 5 + k;
    }
    int32_t bp[] = {3 + 'z'};
    concurrent_equals_alone(&o, prompts, n, bp, 0.9f);
    close_backend(&o);
}

/* The same on torchlike, on its embedded default: a trained model (random
 * weights would make every request look alike). */
static void four_concurrent_on_torchlike(void **state)
{
    (void)state;
    opened o;
    open_backend(TORCHLIKE_PLUGIN, NULL, 0, &o);
    const char *texts[CONC_R] = {"It is a truth", "Emma Woodhouse, handsome,", "The family of Dashwood",
                                 "Sir Walter Elliot"};
    int32_t prompts[CONC_R][CONC_MAX_PROMPT];
    size_t n[CONC_R];
    for (int i = 0; i < CONC_R; i++)
        assert_int_equal(o.api->tokenize(o.backend, texts[i], strlen(texts[i]), ILAB_TOKENIZE_ADD_BOS,
                                         prompts[i], CONC_MAX_PROMPT, &n[i]), ILAB_OK);
    concurrent_equals_alone(&o, prompts, n, prompts[0], 0.8f);
    close_backend(&o);
}

/* Prompts longer than prefill_chunk go in over several steps, under the
 * step budget, interleaved with another sequence's decodes; the tokens
 * still equal the argmax loop that fed each prompt in one call. */
static void chunked_prefill_under_a_token_budget(void **state)
{
    (void)state;
    opened o;
    open_backend(COUNTING_PLUGIN, NULL, 0, &o);
    enum { P = 10, N = 6 };
    int32_t p1[P], p2[P], ref1[N], ref2[N];
    for (int i = 0; i < P; i++) {
        p1[i] = 3 + 'a' + i;
        p2[i] = 3 + 'A' + i;
    }
    argmax_loop(&o, p1, P, N, ref1);
    argmax_loop(&o, p2, P, N, ref2);
    ilab_engine_config cfg;
    ilab_engine_config_default(&cfg);
    cfg.max_running = 2;
    cfg.prefill_chunk = 3;
    cfg.step_token_budget = 4;
    ilab_engine *e = NULL;
    char err[512];
    assert_int_equal(ilab_engine_create(o.plugin, o.backend, &cfg, err, sizeof err, &e), ILAB_OK);
    collect a, b;
    collect_init(&a);
    collect_init(&b);
    ilab_request r = make_request(p1, P, 0.0f, 0, N);
    uint64_t before = ilab_engine_eval_calls(e);
    assert_int_equal(ilab_engine_generate(e, &r, on_event, &a, err, sizeof err, NULL), ILAB_OK);
    /* 10 prompt tokens in chunks of 3: 4 steps, the last gives token 1 */
    assert_int_equal(ilab_engine_eval_calls(e) - before, 4 + N - 1);
    assert_memory_equal(a.tokens, ref1, sizeof ref1);
    collect_destroy(&a);
    collect_init(&a);
    ilab_request r2 = make_request(p2, P, 0.0f, 0, N);
    assert_int_equal(ilab_engine_submit(e, &r, on_event, &a, err, sizeof err, NULL), ILAB_OK);
    assert_int_equal(ilab_engine_submit(e, &r2, on_event, &b, err, sizeof err, NULL), ILAB_OK);
    wait_terminal(&a);
    wait_terminal(&b);
    assert_int_equal(a.n, N);
    assert_int_equal(b.n, N);
    assert_memory_equal(a.tokens, ref1, sizeof ref1);
    assert_memory_equal(b.tokens, ref2, sizeof ref2);
    collect_destroy(&a);
    collect_destroy(&b);
    ilab_engine_destroy(e);

    /* The budget caps a chunk too: 10 tokens, chunk 8, budget 4 -> 4 + 4 + 2. */
    cfg.max_running = 1;
    cfg.prefill_chunk = 8;
    cfg.step_token_budget = 4;
    assert_int_equal(ilab_engine_create(o.plugin, o.backend, &cfg, err, sizeof err, &e), ILAB_OK);
    collect_init(&a);
    before = ilab_engine_eval_calls(e);
    assert_int_equal(ilab_engine_generate(e, &r, on_event, &a, err, sizeof err, NULL), ILAB_OK);
    assert_int_equal(ilab_engine_eval_calls(e) - before, 3 + N - 1);
    assert_memory_equal(a.tokens, ref1, sizeof ref1);
    collect_destroy(&a);
    ilab_engine_destroy(e);

    /* a budget smaller than the running batch could starve a decode */
    cfg.max_running = 4;
    cfg.step_token_budget = 3;
    assert_int_equal(ilab_engine_create(o.plugin, o.backend, &cfg, err, sizeof err, &e), ILAB_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "step_token_budget"));
    close_backend(&o);
}

typedef struct cancel_arg {
    ilab_engine *e;
    uint64_t id;
    collect *c;
} cancel_arg;

static void *cancel_thread(void *p)
{
    cancel_arg *a = p;
    wait_blocked(a->c);
    ilab_engine_cancel(a->e, a->id);
    release(a->c);
    return NULL;
}

static void cancel_from_another_thread_ends_within_one_step(void **state)
{
    (void)state;
    opened o;
    open_backend(COUNTING_PLUGIN, NULL, 0, &o);
    ilab_engine *e = start(&o, 4, 4);
    collect c;
    collect_init(&c);
    c.block_at = 3;
    ilab_request r = make_request(prompt_a, 4, 0.8f, 5, 400);
    char err[512];
    cancel_arg a = {e, 0, &c};
    assert_int_equal(ilab_engine_submit(e, &r, on_event, &c, err, sizeof err, &a.id), ILAB_OK);
    pthread_t t;
    pthread_create(&t, NULL, cancel_thread, &a);
    wait_terminal(&c);
    pthread_join(t, NULL);
    assert_int_equal(c.terminal, 1);
    assert_int_equal(c.reason, ILAB_FINISH_CANCELLED);
    assert_int_equal(c.n, 3); /* the token in flight was the last */
    assert_int_equal(c.completion_tokens, 3);
    assert_int_equal(ilab_engine_cancel(e, a.id), ILAB_OK); /* finished id: benign */
    assert_int_equal(ilab_engine_cancel(e, 987654), ILAB_OK);
    collect_destroy(&c);
    ilab_engine_destroy(e);
    close_backend(&o);
}

static void past_max_waiting_submit_is_refused_overloaded(void **state)
{
    (void)state;
    opened o;
    open_backend(COUNTING_PLUGIN, NULL, 0, &o);
    ilab_engine *e = start(&o, 1, 2);
    collect blocker, w[3];
    collect_init(&blocker);
    blocker.block_at = 1;
    ilab_request br = make_request(prompt_a, 4, 0.0f, 0, 3);
    char err[512] = "";
    assert_int_equal(ilab_engine_submit(e, &br, on_event, &blocker, err, sizeof err, NULL), ILAB_OK);
    wait_blocked(&blocker);
    uint64_t ids[3];
    for (int i = 0; i < 3; i++)
        collect_init(&w[i]);
    ilab_request r = make_request(prompt_a, 4, 0.0f, 0, 3);
    assert_int_equal(ilab_engine_submit(e, &r, on_event, &w[0], err, sizeof err, &ids[0]), ILAB_OK);
    assert_int_equal(ilab_engine_submit(e, &r, on_event, &w[1], err, sizeof err, &ids[1]), ILAB_OK);
    err[0] = '\0';
    assert_int_equal(ilab_engine_submit(e, &r, on_event, &w[2], err, sizeof err, &ids[2]), ILAB_UNAVAILABLE);
    assert_true(strncmp(err, "overloaded:", 11) == 0);
    /* a waiting request can be cancelled before it ever runs */
    assert_int_equal(ilab_engine_cancel(e, ids[1]), ILAB_OK);
    release(&blocker);
    wait_terminal(&blocker);
    wait_terminal(&w[0]);
    wait_terminal(&w[1]);
    assert_int_equal(blocker.reason, ILAB_FINISH_LENGTH);
    assert_int_equal(w[0].reason, ILAB_FINISH_LENGTH);
    assert_int_equal(w[0].n, 3);
    assert_int_equal(w[1].reason, ILAB_FINISH_CANCELLED);
    assert_int_equal(w[1].n, 0);
    assert_int_equal(w[2].terminal, 0); /* refused: never any event */
    for (int i = 0; i < 3; i++)
        collect_destroy(&w[i]);
    collect_destroy(&blocker);
    ilab_engine_destroy(e);
    close_backend(&o);
}

static void max_waiting_zero_still_fills_free_running_slots(void **state)
{
    (void)state;
    opened o;
    open_backend(COUNTING_PLUGIN, NULL, 0, &o);
    ilab_engine *e = start(&o, 1, 0);
    collect first, second;
    collect_init(&first);
    collect_init(&second);
    first.block_at = 1;
    ilab_request r = make_request(prompt_a, 4, 0.0f, 0, 2);
    char err[512] = "";
    assert_int_equal(ilab_engine_submit(e, &r, on_event, &first, err, sizeof err, NULL), ILAB_OK);
    wait_blocked(&first); /* running now: no free slot, no queue */
    assert_int_equal(ilab_engine_submit(e, &r, on_event, &second, err, sizeof err, NULL), ILAB_UNAVAILABLE);
    assert_true(strncmp(err, "overloaded:", 11) == 0);
    release(&first);
    wait_terminal(&first);
    assert_int_equal(first.reason, ILAB_FINISH_LENGTH);
    /* the slot is free again */
    assert_int_equal(ilab_engine_generate(e, &r, on_event, &second, err, sizeof err, NULL), ILAB_OK);
    collect_destroy(&first);
    collect_destroy(&second);
    ilab_engine_destroy(e);
    close_backend(&o);
}

static void backend_failure_becomes_an_error_event(void **state)
{
    (void)state;
    opened o;
    ilab_config_entry_t cfg[] = {{"fail_after", "2"}};
    open_backend(COUNTING_PLUGIN, cfg, 1, &o);
    ilab_engine *e = start(&o, 4, 4);
    collect c;
    collect_init(&c);
    ilab_request r = make_request(prompt_a, 4, 0.0f, 0, 50);
    char err[512] = "";
    assert_int_equal(ilab_engine_generate(e, &r, on_event, &c, err, sizeof err, NULL), ILAB_INTERNAL);
    assert_int_equal(c.terminal, 2);
    assert_int_equal(c.status, ILAB_INTERNAL);
    assert_non_null(strstr(c.message, "injected failure"));
    assert_non_null(strstr(err, "injected failure"));
    assert_int_equal(c.n, 2);
    collect_destroy(&c);
    ilab_engine_destroy(e);
    close_backend(&o);
}

static void eos_and_stop_strings_end_with_stop(void **state)
{
    (void)state;
    opened o;
    open_backend(COUNTING_PLUGIN, NULL, 0, &o);
    ilab_engine *e = start(&o, 4, 4);
    char err[512] = "";
    /* Greedy text first, then stop on 3 bytes from its middle. */
    collect c;
    collect_init(&c);
    ilab_request r = make_request(prompt_a, 4, 0.0f, 0, 60);
    assert_int_equal(ilab_engine_generate(e, &r, on_event, &c, err, sizeof err, NULL), ILAB_OK);
    size_t at = 0;
    char stop[4] = "";
    for (size_t p = 20; p + 3 <= c.text_len && !stop[0]; p++) {
        if (!c.text[p] || !c.text[p + 1] || !c.text[p + 2])
            continue;
        memcpy(stop, c.text + p, 3);
        stop[3] = '\0';
        if (memmem(c.text, c.text_len, stop, 3) != c.text + p)
            stop[0] = '\0'; /* occurs earlier; try the next spot */
        at = p;
    }
    assert_true(stop[0] != '\0');
    collect s;
    collect_init(&s);
    const char *stops[] = {stop};
    r.stop = stops;
    r.n_stop = 1;
    assert_int_equal(ilab_engine_generate(e, &r, on_event, &s, err, sizeof err, NULL), ILAB_OK);
    assert_int_equal(s.reason, ILAB_FINISH_STOP);
    assert_int_equal(s.text_len, at); /* stop trimmed, nothing after it */
    assert_memory_equal(s.text, c.text, at);
    assert_int_equal(s.n, (int)at + 3); /* byte tokens: the stop's last byte ended it */
    collect_destroy(&c);
    collect_destroy(&s);

    /* A stop token id is not emitted. */
    collect t;
    collect_init(&t);
    r.stop = NULL;
    r.n_stop = 0;
    int32_t third = c.tokens[2];
    r.stop_token_ids = &third;
    r.n_stop_token_ids = 1;
    assert_int_equal(ilab_engine_generate(e, &r, on_event, &t, err, sizeof err, NULL), ILAB_OK);
    assert_int_equal(t.reason, ILAB_FINISH_STOP);
    assert_int_equal(t.n, 2);
    collect_destroy(&t);
    ilab_engine_destroy(e);
    close_backend(&o);

    /* EOS (made certain by the backend's bias) ends with stop unless ignored. */
    ilab_config_entry_t cfg[] = {{"eos_bias", "100"}};
    open_backend(COUNTING_PLUGIN, cfg, 1, &o);
    e = start(&o, 4, 4);
    collect_init(&t);
    r = make_request(prompt_a, 4, 0.0f, 0, 5);
    r.ignore_eos = false;
    assert_int_equal(ilab_engine_generate(e, &r, on_event, &t, err, sizeof err, NULL), ILAB_OK);
    assert_int_equal(t.reason, ILAB_FINISH_STOP);
    assert_int_equal(t.n, 0);
    collect_destroy(&t);
    collect_init(&t);
    r.ignore_eos = true;
    assert_int_equal(ilab_engine_generate(e, &r, on_event, &t, err, sizeof err, NULL), ILAB_OK);
    assert_int_equal(t.reason, ILAB_FINISH_LENGTH);
    assert_int_equal(t.n, 5);
    collect_destroy(&t);
    ilab_engine_destroy(e);
    close_backend(&o);
}

/* Where the stop strings first occur in `text`: the end of the earliest
 * occurrence to end, cut before the longest string ending there (the
 * contract's rule); -1 when none occurs. */
static long first_stop_cut(const char *text, size_t len, const char *const *stops, size_t n)
{
    for (size_t end = 1; end <= len; end++) {
        size_t longest = 0;
        for (size_t i = 0; i < n; i++) {
            size_t k = strlen(stops[i]);
            if (k <= end && k > longest && !memcmp(text + end - k, stops[i], k))
                longest = k;
        }
        if (longest)
            return (long)(end - longest);
    }
    return -1;
}

/* The text a request streams (its TOKEN deltas, then FINISH's held-back
 * tail) is every emitted token's piece exactly once, cut before the stop
 * string when one ended it: nothing held back for a possible stop string
 * may be lost or doubled, whichever token comes last (one with an empty
 * piece too: EOS, made common here and not ending the request). 400
 * random requests, half with eight two-letter stop strings, against that
 * oracle, built from the backend's own token_piece(). */
static void streamed_text_is_every_piece_once(void **state)
{
    (void)state;
    ilab_config_entry_t cfg[] = {{"eos_bias", "6"}};
    opened o;
    open_backend(COUNTING_PLUGIN, cfg, 1, &o);
    ilab_engine *e = start(&o, 4, 4);
    static const char *const stops[] = {"ab", "cd", "ef", "gh", "ij", "kl", "mn", "op"};
    uint64_t rng = 0x5eed;
    for (int k = 0; k < 400; k++) {
        rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
        int32_t max_tokens = 1 + (int32_t)((rng >> 33) % 12);
        collect c;
        collect_init(&c);
        ilab_request r = make_request(prompt_a, 4, 1.0f, (uint64_t)k, max_tokens);
        if (k % 2) {
            r.stop = stops;
            r.n_stop = sizeof stops / sizeof stops[0];
        }
        char err[512] = "";
        assert_int_equal(ilab_engine_generate(e, &r, on_event, &c, err, sizeof err, NULL), ILAB_OK);
        char want[8192];
        size_t want_len = 0;
        int32_t prev = prompt_a[3];
        for (int i = 0; i < c.n; i++) {
            size_t n = 0;
            assert_int_equal(o.api->token_piece(o.backend, prev, c.tokens[i], want + want_len,
                                                sizeof want - want_len, &n), ILAB_OK);
            want_len += n;
            prev = c.tokens[i];
        }
        long cut = first_stop_cut(want, want_len, stops, r.n_stop);
        if (cut >= 0)
            want_len = (size_t)cut;
        if (c.text_len != want_len || memcmp(c.text, want, want_len) != 0 ||
            c.reason != (cut >= 0 ? ILAB_FINISH_STOP : ILAB_FINISH_LENGTH))
            fail_msg("request %d (seed %d, max_tokens %d, %s): %d tokens streamed \"%.*s\" and "
                     "finished %d; their pieces give \"%.*s\"", k, k, (int)max_tokens,
                     r.n_stop ? "stop strings" : "no stop strings", c.n, (int)c.text_len, c.text,
                     (int)c.reason, (int)want_len, want);
        collect_destroy(&c);
    }
    ilab_engine_destroy(e);
    close_backend(&o);
}

static void full_context_ends_with_length(void **state)
{
    (void)state;
    opened o;
    open_backend(COUNTING_PLUGIN, NULL, 0, &o);
    ilab_engine *e = start(&o, 4, 4);
    int32_t prompt[500];
    for (int i = 0; i < 500; i++)
        prompt[i] = 3 + 'a' + i % 26;
    collect c;
    collect_init(&c);
    ilab_request r = make_request(prompt, 500, 0.0f, 0, 100);
    char err[512] = "";
    assert_int_equal(ilab_engine_generate(e, &r, on_event, &c, err, sizeof err, NULL), ILAB_OK);
    assert_int_equal(c.reason, ILAB_FINISH_LENGTH);
    assert_int_equal(c.n, 512 - 500 + 1); /* the last token is sampled from position 512 */
    collect_destroy(&c);
    ilab_engine_destroy(e);
    close_backend(&o);
}

static void bad_requests_are_refused_with_a_reason(void **state)
{
    (void)state;
    opened o;
    open_backend(COUNTING_PLUGIN, NULL, 0, &o);
    ilab_engine *e = start(&o, 4, 4);
    collect c;
    collect_init(&c);
    char err[512];
    int32_t long_prompt[600] = {0};
    for (int i = 0; i < 600; i++)
        long_prompt[i] = 3 + 'x';
    int32_t bad_id[] = {5, 9999}, edge_id[] = {5, 259}; /* the vocabulary is [0, 259) */
    const int32_t stop_259[] = {259};
    struct {
        ilab_request r;
        ilab_status st;
        const char *word;
    } cases[] = {
        {make_request(prompt_a, 4, 0.0f, 0, 0), ILAB_INVALID_ARGUMENT, "max_tokens"},
        {make_request(long_prompt, 600, 0.0f, 0, 4), ILAB_CONTEXT_OVERFLOW, "context"},
        {make_request(bad_id, 2, 0.0f, 0, 4), ILAB_INVALID_ARGUMENT, "9999"},
        {make_request(NULL, 0, 0.0f, 0, 4), ILAB_INVALID_ARGUMENT, "empty"},
        {make_request(prompt_a, 4, -1.0f, 0, 4), ILAB_INVALID_ARGUMENT, "temperature"},
        {make_request(prompt_a, 4, 0.0f, 0, 4), ILAB_INVALID_ARGUMENT, "top_logprobs"},
        {make_request(long_prompt, 513, 0.0f, 0, 4), ILAB_CONTEXT_OVERFLOW, "context of 512"},
        {make_request(edge_id, 2, 0.0f, 0, 4), ILAB_INVALID_ARGUMENT, "259"},
        {make_request(prompt_a, 4, 0.0f, 0, 4), ILAB_INVALID_ARGUMENT, "stop token id 259"},
    };
    cases[5].r.top_logprobs = 9; /* manifest topk_max is 8 */
    cases[8].r.stop_token_ids = stop_259;
    cases[8].r.n_stop_token_ids = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        err[0] = '\0';
        assert_int_equal(ilab_engine_submit(e, &cases[i].r, on_event, &c, err, sizeof err, NULL), cases[i].st);
        if (!strstr(err, cases[i].word))
            fail_msg("case %zu: '%s' should mention '%s'", i, err, cases[i].word);
    }
    assert_int_equal(c.terminal, 0);
    /* a text prompt goes through the backend's tokenizer */
    ilab_request t = make_request(NULL, 0, 0.0f, 0, 2);
    t.prompt_text = "Hi ";
    t.prompt_len = 3;
    t.add_bos = true;
    assert_int_equal(ilab_engine_generate(e, &t, on_event, &c, err, sizeof err, NULL), ILAB_OK);
    assert_int_equal(c.prompt_tokens, 4);
    collect_destroy(&c);
    ilab_engine_destroy(e);
    close_backend(&o);
}

static void more_requests_than_max_batch_all_complete(void **state)
{
    (void)state;
    opened o;
    open_backend(COUNTING_PLUGIN, NULL, 0, &o);
    ilab_engine *e = start(&o, 32, 32); /* capped to the manifest's max_batch 8 */
    enum { R = 20 };
    collect c[R];
    char err[512];
    for (int i = 0; i < R; i++) {
        collect_init(&c[i]);
        ilab_request r = make_request(prompt_a, 4, 1.0f, (uint64_t)i, 6);
        assert_int_equal(ilab_engine_submit(e, &r, on_event, &c[i], err, sizeof err, NULL), ILAB_OK);
    }
    for (int i = 0; i < R; i++) {
        wait_terminal(&c[i]);
        assert_int_equal(c[i].terminal, 1); /* the plugin refuses > 8 items: an error would show */
        assert_int_equal(c[i].n, 6);
        collect_destroy(&c[i]);
    }
    ilab_engine_destroy(e);

    close_backend(&o);

    /* One above max_batch is capped too. With no waiting room the running
     * slots are all there is: 8 long requests take them and a ninth is
     * refused (eval() failing on 9 items would not show: the engine splits
     * a failed batch). */
    ilab_config_entry_t slow[] = {{"step_ms", "2"}};
    open_backend(COUNTING_PLUGIN, slow, 1, &o);
    e = start(&o, 9, 0);
    for (int i = 0; i < 8; i++) {
        collect_init(&c[i]);
        ilab_request r = make_request(prompt_a, 4, 1.0f, (uint64_t)i, 400);
        assert_int_equal(ilab_engine_submit(e, &r, on_event, &c[i], err, sizeof err, NULL), ILAB_OK);
    }
    ilab_request ninth = make_request(prompt_a, 4, 1.0f, 9, 400);
    assert_int_equal(ilab_engine_submit(e, &ninth, on_event, &c[8], err, sizeof err, NULL),
                     ILAB_UNAVAILABLE);
    assert_non_null(strstr(err, "overloaded"));
    ilab_engine_destroy(e);
    for (int i = 0; i < 8; i++)
        collect_destroy(&c[i]);
    close_backend(&o);
}

/* destroy() while one request is running and two wait: the running one ends
 * CANCELLED long before max_tokens, the waiting ones end CANCELLED without a
 * token (they are never started), and each gets exactly one terminal event.
 * The backend is slowed (2 ms a step) so the running request still has most
 * of its 400 tokens to go when destroy() comes. */
static void destroy_cancels_what_is_still_running(void **state)
{
    (void)state;
    opened o;
    ilab_config_entry_t slow[] = {{"step_ms", "2"}};
    open_backend(COUNTING_PLUGIN, slow, 1, &o);
    ilab_engine *e = start(&o, 1, 4);
    enum { MAX = 400 };
    collect c[3];
    char err[512];
    for (int i = 0; i < 3; i++) {
        collect_init(&c[i]);
        ilab_request r = make_request(prompt_a, 4, 0.0f, 0, MAX);
        assert_int_equal(ilab_engine_submit(e, &r, on_event, &c[i], err, sizeof err, NULL), ILAB_OK);
    }
    wait_tokens(&c[0], 2); /* the first is running, the others wait (max_running 1) */
    ilab_engine_destroy(e);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(c[i].terminal, 1); /* every request got exactly one terminal event */
        assert_int_equal(c[i].events_after_terminal, 0);
        assert_int_equal(c[i].reason, ILAB_FINISH_CANCELLED);
        assert_int_equal(c[i].completion_tokens, c[i].n);
    }
    if (c[0].n < 2 || c[0].n >= MAX / 2)
        fail_msg("the running request streamed %d of %d tokens; destroy should have cut it short",
                 c[0].n, MAX);
    assert_int_equal(c[1].n, 0);
    assert_int_equal(c[2].n, 0);
    for (int i = 0; i < 3; i++)
        collect_destroy(&c[i]);
    close_backend(&o);
}

/* A request cancelled while it waits ends at once, not when a running slot
 * frees: the running one (400 tokens at 2 ms a step) is still going when
 * the waiting one's CANCELLED arrives. */
static void cancel_while_waiting_ends_before_a_slot_frees(void **state)
{
    (void)state;
    opened o;
    ilab_config_entry_t slow[] = {{"step_ms", "2"}};
    open_backend(COUNTING_PLUGIN, slow, 1, &o);
    ilab_engine *e = start(&o, 1, 4);
    collect run, wait;
    collect_init(&run);
    collect_init(&wait);
    ilab_request r = make_request(prompt_a, 4, 0.0f, 0, 400);
    char err[512];
    uint64_t id = 0;
    assert_int_equal(ilab_engine_submit(e, &r, on_event, &run, err, sizeof err, NULL), ILAB_OK);
    assert_int_equal(ilab_engine_submit(e, &r, on_event, &wait, err, sizeof err, &id), ILAB_OK);
    wait_tokens(&run, 2);
    assert_int_equal(ilab_engine_cancel(e, id), ILAB_OK);
    wait_terminal(&wait);
    pthread_mutex_lock(&run.mu);
    int running_ended = run.terminal;
    pthread_mutex_unlock(&run.mu);
    assert_int_equal(running_ended, 0);
    assert_int_equal(wait.reason, ILAB_FINISH_CANCELLED);
    assert_int_equal(wait.n, 0);
    ilab_engine_destroy(e);
    collect_destroy(&run);
    collect_destroy(&wait);
    close_backend(&o);
}

/* destroy() while a request is still prefilling (a long prompt one token a
 * step): no token has come, so only destroy's own cancel of the running
 * list can end it. A hang here is the failure. */
static void destroy_during_prefill_cancels(void **state)
{
    (void)state;
    opened o;
    ilab_config_entry_t slow[] = {{"step_ms", "5"}};
    open_backend(COUNTING_PLUGIN, slow, 1, &o);
    ilab_engine_config cfg;
    ilab_engine_config_default(&cfg);
    cfg.max_running = 1;
    cfg.prefill_chunk = 1;
    ilab_engine *e = NULL;
    char err[512];
    assert_int_equal(ilab_engine_create(o.plugin, o.backend, &cfg, err, sizeof err, &e), ILAB_OK);
    enum { P = 200 };
    int32_t prompt[P];
    for (int i = 0; i < P; i++)
        prompt[i] = 3 + 'a' + i % 26;
    collect c;
    collect_init(&c);
    ilab_request r = make_request(prompt, P, 0.0f, 0, 50);
    assert_int_equal(ilab_engine_submit(e, &r, on_event, &c, err, sizeof err, NULL), ILAB_OK);
    while (ilab_engine_eval_calls(e) < 1) /* prefill has started: 200 steps of 5 ms to go */
        usleep(1000);
    ilab_engine_destroy(e);
    assert_int_equal(c.terminal, 1);
    assert_int_equal(c.events_after_terminal, 0);
    assert_int_equal(c.reason, ILAB_FINISH_CANCELLED);
    collect_destroy(&c);
    close_backend(&o);
}

static void torchlike_greedy_equals_its_argmax_loop(void **state)
{
    (void)state;
    opened o;
    open_backend(TORCHLIKE_PLUGIN, NULL, 0, &o);
    const char *text = "It was"; /* greedy goes on " a ...": a leading space */
    int32_t prompt[64];
    size_t n = 0;
    assert_int_equal(o.api->tokenize(o.backend, text, strlen(text), ILAB_TOKENIZE_ADD_BOS, prompt, 64, &n), ILAB_OK);
    enum { N = 24 };
    int32_t ref[N];
    argmax_loop(&o, prompt, n, N, ref);
    ilab_engine *e = start(&o, 4, 4);
    collect c[2];
    char err[512];
    for (int k = 0; k < 2; k++) {
        collect_init(&c[k]);
        ilab_request r = make_request(prompt, n, 0.0f, 77 + (uint64_t)k, N);
        assert_int_equal(ilab_engine_submit(e, &r, on_event, &c[k], err, sizeof err, NULL), ILAB_OK);
    }
    /* The stream continues the prompt: prompt text + streamed text ==
     * detokenize(prompt + output) (a leading space is not dropped). */
    int32_t all[64 + N];
    memcpy(all, prompt, n * sizeof *all);
    memcpy(all + n, ref, sizeof ref);
    char whole[4096];
    size_t whole_len;
    assert_int_equal(o.api->detokenize(o.backend, all, n + N, whole, sizeof whole, &whole_len), ILAB_OK);
    for (int k = 0; k < 2; k++) {
        wait_terminal(&c[k]);
        assert_int_equal(c[k].n, N);
        assert_memory_equal(c[k].tokens, ref, sizeof ref); /* batched with a twin, still the same */
        assert_int_equal(strlen(text) + c[k].text_len, whole_len);
        assert_memory_equal(whole, text, strlen(text));
        assert_memory_equal(whole + strlen(text), c[k].text, c[k].text_len);
        collect_destroy(&c[k]);
    }
    ilab_engine_destroy(e);
    close_backend(&o);
}


/* ---- sampling: backend (generate() on worker threads) ---------------------- */

static void backend_sampling_runs_through_generate(void **state)
{
    (void)state;
    opened o;
    open_backend(GENERATE_PLUGIN, NULL, 0, &o);
    ilab_engine *e = start(&o, 2, 8);
    enum { R = 5 };
    collect c[R];
    char err[512];
    for (int i = 0; i < R; i++) {
        collect_init(&c[i]);
        ilab_request r = make_request(prompt_a, 4, 0.0f, 0, 10 + i);
        assert_int_equal(ilab_engine_submit(e, &r, on_event, &c[i], err, sizeof err, NULL), ILAB_OK);
    }
    for (int i = 0; i < R; i++) {
        wait_terminal(&c[i]);
        assert_int_equal(c[i].terminal, 1);
        assert_int_equal(c[i].reason, ILAB_FINISH_LENGTH);
        assert_int_equal(c[i].n, 10 + i);
        assert_int_equal(c[i].completion_tokens, 10 + i);
        assert_memory_equal(c[i].text, "abcdefghij", 10);
        collect_destroy(&c[i]);
    }
    assert_int_equal(ilab_engine_eval_calls(e), 0);
    ilab_engine_destroy(e);
    close_backend(&o);
}

static void backend_sampling_cancel_goes_to_the_backend(void **state)
{
    (void)state;
    opened o;
    open_backend(GENERATE_PLUGIN, NULL, 0, &o);
    ilab_engine *e = start(&o, 2, 8);
    collect c;
    collect_init(&c);
    c.block_at = 4;
    ilab_request r = make_request(prompt_a, 4, 0.0f, 0, 200);
    char err[512];
    cancel_arg a = {e, 0, &c};
    assert_int_equal(ilab_engine_submit(e, &r, on_event, &c, err, sizeof err, &a.id), ILAB_OK);
    pthread_t t;
    pthread_create(&t, NULL, cancel_thread, &a);
    wait_terminal(&c);
    pthread_join(t, NULL);
    assert_int_equal(c.reason, ILAB_FINISH_CANCELLED);
    assert_int_equal(c.n, 4);
    collect_destroy(&c);
    ilab_engine_destroy(e);
    close_backend(&o);
}

/* cancel() reaches a sampling: backend plugin whose stream went quiet
 * (stall_after): no token comes, so the callback's return cannot stop it;
 * only the backend's cancel() can. A hang here is the failure. */
static void backend_sampling_cancel_ends_a_stalled_stream(void **state)
{
    (void)state;
    opened o;
    ilab_config_entry_t stall[] = {{"stall_after", "3"}};
    open_backend(GENERATE_PLUGIN, stall, 1, &o);
    ilab_engine *e = start(&o, 2, 8);
    collect c;
    collect_init(&c);
    ilab_request r = make_request(prompt_a, 4, 0.0f, 0, 200);
    char err[512];
    uint64_t id = 0;
    assert_int_equal(ilab_engine_submit(e, &r, on_event, &c, err, sizeof err, &id), ILAB_OK);
    wait_tokens(&c, 3);
    assert_int_equal(ilab_engine_cancel(e, id), ILAB_OK);
    wait_terminal(&c);
    assert_int_equal(c.reason, ILAB_FINISH_CANCELLED);
    assert_int_equal(c.n, 3);
    collect_destroy(&c);
    ilab_engine_destroy(e);
    close_backend(&o);
}

/* destroy() stops a sampling: backend plugin that declares cancel: false
 * through the callback's return: the stream (250 tokens, 4 ms each) ends
 * CANCELLED long before max_tokens. */
static void destroy_stops_a_backend_without_cancel(void **state)
{
    (void)state;
    opened o;
    ilab_config_entry_t slow[] = {{"token_ms", "4"}};
    open_backend(GENERATE_NOCANCEL_PLUGIN, slow, 1, &o);
    ilab_engine *e = start(&o, 2, 8);
    enum { MAX = 250 };
    collect c;
    collect_init(&c);
    ilab_request r = make_request(prompt_a, 4, 0.0f, 0, MAX);
    char err[512];
    assert_int_equal(ilab_engine_submit(e, &r, on_event, &c, err, sizeof err, NULL), ILAB_OK);
    wait_tokens(&c, 2);
    ilab_engine_destroy(e);
    assert_int_equal(c.terminal, 1);
    assert_int_equal(c.reason, ILAB_FINISH_CANCELLED);
    if (c.n >= MAX / 2)
        fail_msg("the stream ran %d of %d tokens; destroy should have cut it short", c.n, MAX);
    collect_destroy(&c);
    close_backend(&o);
}

static void backend_sampling_destroy_and_refusals(void **state)
{
    (void)state;
    opened o;
    open_backend(GENERATE_PLUGIN, NULL, 0, &o);
    ilab_engine *e = start(&o, 2, 8);
    char err[512] = "";
    ilab_request bad = make_request(prompt_a, 4, -2.0f, 0, 5);
    assert_int_equal(ilab_engine_submit(e, &bad, on_event, NULL, err, sizeof err, NULL), ILAB_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "temperature"));
    /* one blocked in its callback (released by a thread after destroy has
     * started cancelling), more queued: destroy must end them all */
    collect c[4];
    for (int i = 0; i < 4; i++) {
        collect_init(&c[i]);
        ilab_request r = make_request(prompt_a, 4, 0.0f, 0, 200);
        if (i == 0)
            c[i].block_at = 2;
        assert_int_equal(ilab_engine_submit(e, &r, on_event, &c[i], err, sizeof err, NULL), ILAB_OK);
    }
    wait_blocked(&c[0]);
    release(&c[0]);
    ilab_engine_destroy(e);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(c[i].terminal, 1);
        assert_int_equal(c[i].events_after_terminal, 0);
        collect_destroy(&c[i]);
    }
    close_backend(&o);
}

static void expect_metric(const char *text, const char *line)
{
    if (!strstr(text, line))
        fail_msg("/metrics lacks '%s' in:\n%s", line, text);
}

static void metrics_follow_the_requests(void **state)
{
    (void)state;
    opened o;
    open_backend(COUNTING_PLUGIN, NULL, 0, &o);
    ilab_engine *e = start(&o, 2, 4); /* capacity 2 x 512 positions */
    ilab_metrics_reset();
    ilab_metrics_add_kv_capacity(2 * 512); /* reset() forgot this live engine's share */
    collect c;
    collect_init(&c);
    c.block_at = 1;
    ilab_request r = make_request(prompt_a, 4, 0.0f, 0, 8);
    char err[512];
    assert_int_equal(ilab_engine_submit(e, &r, on_event, &c, err, sizeof err, NULL), ILAB_OK);
    wait_blocked(&c);
    char *live = ilab_metrics_render();
    expect_metric(live, "inferlab:num_requests_running 1\n");
    expect_metric(live, "inferlab:num_requests_waiting 0\n");
    expect_metric(live, "inferlab:kv_cache_usage_ratio 0.00390625\n"); /* 4 of 1024 */
    free(live);
    release(&c);
    wait_terminal(&c);
    char *ended = ilab_metrics_render(); /* the engine still up: its positions given back */
    expect_metric(ended, "inferlab:kv_cache_usage_ratio 0\n");
    free(ended);
    ilab_engine_destroy(e);
    char *done = ilab_metrics_render();
    expect_metric(done, "inferlab:num_requests_running 0\n");
    expect_metric(done, "inferlab:kv_cache_usage_ratio 0\n");
    expect_metric(done, "inferlab:prompt_tokens_total 4\n");
    expect_metric(done, "inferlab:generation_tokens_total 8\n");
    expect_metric(done, "inferlab:time_to_first_token_seconds_count 1\n");
    expect_metric(done, "inferlab:inter_token_latency_seconds_count 7\n");
    expect_metric(done, "inferlab:e2e_request_latency_seconds_count 1\n");
    expect_metric(done, "inferlab:request_success_total{finished_reason=\"length\"} 1\n");
    free(done);
    collect_destroy(&c);
    close_backend(&o);
}

/* A value of /metrics' text, or -1 when the series is not there. */
static double metric_of(const char *text, const char *series)
{
    size_t len = strlen(series);
    for (const char *p = text; (p = strstr(p, series)); p += len)
        if ((p == text || p[-1] == '\n') && p[len] == ' ')
            return strtod(p + len + 1, NULL);
    return -1;
}

typedef struct metrics_reader {
    atomic_bool stop;
    atomic_int submitted; /* submits that returned OK */
    long reads, idle_reads, violations;
    char first[256];
} metrics_reader;

/* While nothing runs or waits, every request submitted so far has been
 * counted by its finish reason: a request is always in one gauge or
 * counted, never in between (a server comparing its own counters with the
 * engine's relies on it). Reads /metrics as fast as it can. */
static void *read_metrics_until_stopped(void *arg)
{
    metrics_reader *rd = arg;
    while (!atomic_load(&rd->stop)) {
        int submitted = atomic_load(&rd->submitted);
        char *t = ilab_metrics_render();
        assert_non_null(t);
        double finished = 0;
        for (int r = ILAB_FINISH_STOP; r <= ILAB_FINISH_ERROR; r++) {
            char name[96];
            snprintf(name, sizeof name, "inferlab:request_success_total{finished_reason=\"%s\"}",
                     ilab_finish_reason_name(r));
            finished += metric_of(t, name);
        }
        double running = metric_of(t, "inferlab:num_requests_running");
        double waiting = metric_of(t, "inferlab:num_requests_waiting");
        rd->reads++;
        if (running == 0 && waiting == 0) {
            rd->idle_reads++;
            if (finished < submitted && rd->violations++ == 0)
                snprintf(rd->first, sizeof rd->first, "nothing runs or waits, %d submitted, "
                         "%g counted finished", submitted, finished);
        }
        free(t);
    }
    return NULL;
}

static void metrics_never_lose_a_request_between_gauge_and_counter(void **state)
{
    (void)state;
    opened o;
    open_backend(COUNTING_PLUGIN, NULL, 0, &o);
    ilab_engine *e = start(&o, 2, 4);
    ilab_metrics_reset();
    metrics_reader rd;
    memset(&rd, 0, sizeof rd);
    pthread_t reader;
    assert_int_equal(pthread_create(&reader, NULL, read_metrics_until_stopped, &rd), 0);
    for (int i = 0; i < 400; i++) {
        collect c;
        collect_init(&c);
        c.cancel_at = i % 3 == 0 ? 1 : 0; /* some end cancelled, the rest by length */
        ilab_request r = make_request(prompt_a, 4, 0.0f, 0, 2);
        char err[512];
        assert_int_equal(ilab_engine_submit(e, &r, on_event, &c, err, sizeof err, NULL), ILAB_OK);
        atomic_fetch_add(&rd.submitted, 1);
        wait_terminal(&c);
        collect_destroy(&c);
    }
    atomic_store(&rd.stop, true);
    pthread_join(reader, NULL);
    ilab_engine_destroy(e);
    close_backend(&o);
    print_message("metrics read %ld times, %ld of them with nothing in flight\n", rd.reads,
                  rd.idle_reads);
    if (rd.violations)
        fail_msg("%ld of %ld reads: %s", rd.violations, rd.reads, rd.first);
    assert_true(rd.idle_reads > 0); /* the invariant was tested at all */
}

/* counting_backend declares thread_safety: none and fails any call that
 * overlaps another (its eval() sleeps step_ms inside the call). Tokenizing
 * through the engine while it decodes must therefore never overlap eval(). */
static void tokenizer_calls_serialise_with_the_scheduler(void **state)
{
    (void)state;
    opened o;
    ilab_config_entry_t cfg[] = {{"step_ms", "2"}};
    open_backend(COUNTING_PLUGIN, cfg, 1, &o);
    ilab_engine *e = start(&o, 4, 4);
    collect c;
    collect_init(&c);
    ilab_request r = make_request(prompt_a, 4, 0.0f, 0, 40);
    char err[512] = "";
    assert_int_equal(ilab_engine_submit(e, &r, on_event, &c, err, sizeof err, NULL), ILAB_OK);
    const char text[] = "H\xc3\xa9!";
    const int32_t want[] = {1, 3 + 'H', 3 + 0xc3, 3 + 0xa9, 3 + '!'};
    int calls = 0;
    for (bool done = false; !done; calls++) {
        int32_t *ids = NULL;
        size_t n = 0;
        ilab_status st = ilab_engine_tokenize(e, text, strlen(text), ILAB_TOKENIZE_ADD_BOS, err,
                                              sizeof err, &ids, &n);
        if (st != ILAB_OK)
            fail_msg("tokenize while decoding: %s: %s", ilab_status_name(st), err);
        assert_int_equal(n, 5);
        assert_memory_equal(ids, want, sizeof want);
        char *back = NULL;
        size_t len = 0;
        st = ilab_engine_detokenize(e, ids, n, err, sizeof err, &back, &len);
        if (st != ILAB_OK)
            fail_msg("detokenize while decoding: %s: %s", ilab_status_name(st), err);
        assert_int_equal(len, strlen(text));
        assert_string_equal(back, text);
        free(back);
        free(ids);
        pthread_mutex_lock(&c.mu);
        done = c.terminal != 0;
        pthread_mutex_unlock(&c.mu);
    }
    wait_terminal(&c);
    if (c.terminal != 1)
        fail_msg("the request ended with an error: %s", c.message);
    assert_int_equal(c.completion_tokens, 40);
    assert_true(calls > 1);

    /* A bad id is refused with the backend's message naming it. */
    const int32_t bad[] = {3 + 'a', 9999};
    char *text_out = (char *)1;
    size_t len = 7;
    assert_int_equal(ilab_engine_detokenize(e, bad, 2, err, sizeof err, &text_out, &len),
                     ILAB_INVALID_ARGUMENT);
    assert_null(text_out);
    assert_non_null(strstr(err, "9999"));
    ilab_engine_destroy(e);
    collect_destroy(&c);
    close_backend(&o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(greedy_through_the_host_equals_an_argmax_loop),
        cmocka_unit_test(four_concurrent_requests_share_one_eval_per_step),
        cmocka_unit_test(four_concurrent_on_torchlike),
        cmocka_unit_test(chunked_prefill_under_a_token_budget),
        cmocka_unit_test(cancel_from_another_thread_ends_within_one_step),
        cmocka_unit_test(past_max_waiting_submit_is_refused_overloaded),
        cmocka_unit_test(max_waiting_zero_still_fills_free_running_slots),
        cmocka_unit_test(backend_failure_becomes_an_error_event),
        cmocka_unit_test(eos_and_stop_strings_end_with_stop),
        cmocka_unit_test(streamed_text_is_every_piece_once),
        cmocka_unit_test(request_timings_add_up),
        cmocka_unit_test(full_context_ends_with_length),
        cmocka_unit_test(bad_requests_are_refused_with_a_reason),
        cmocka_unit_test(more_requests_than_max_batch_all_complete),
        cmocka_unit_test(destroy_cancels_what_is_still_running),
        cmocka_unit_test(cancel_while_waiting_ends_before_a_slot_frees),
        cmocka_unit_test(destroy_during_prefill_cancels),
        cmocka_unit_test(torchlike_greedy_equals_its_argmax_loop),
        cmocka_unit_test(backend_sampling_runs_through_generate),
        cmocka_unit_test(backend_sampling_cancel_goes_to_the_backend),
        cmocka_unit_test(backend_sampling_cancel_ends_a_stalled_stream),
        cmocka_unit_test(destroy_stops_a_backend_without_cancel),
        cmocka_unit_test(backend_sampling_destroy_and_refusals),
        cmocka_unit_test(metrics_follow_the_requests),
        cmocka_unit_test(metrics_never_lose_a_request_between_gauge_and_counter),
        cmocka_unit_test(tokenizer_calls_serialise_with_the_scheduler),
    };
    return ilab_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
