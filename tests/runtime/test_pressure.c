/* The engine under pressure: a failing item does not fail its batch-mates,
 * a full KV cache preempts (and later recomputes) instead of failing, a
 * request too big for the cache fails alone with the capacity named, and
 * the prefix cache saves prefill without changing any output.
 *
 * pool_backend (tests/support/test_backend.c) models a small KV pool
 * (kv_blocks of 16 positions), forks and truncates; its logits hash the
 * whole sequence, so a resumed or forked sequence that differs from the
 * original by one token gives different tokens. stats_backend is the same
 * plus cache.stats (ABI 1.1): the engine admits by its free capacity.
 * torchlike (cache.stats too) runs on its embedded default model. */
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
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

/* ---- a backend and an engine ---------------------------------------------- */

static ilab_engine *start(opened *o, const ilab_engine_config *cfg)
{
    ilab_engine *e = NULL;
    char err[512] = "";
    if (ilab_engine_create(o->plugin, o->backend, cfg, err, sizeof err, &e) != ILAB_OK)
        fail_msg("engine: %s", err);
    return e;
}

static ilab_engine_config config(int max_running, int prefix_positions)
{
    ilab_engine_config cfg;
    ilab_engine_config_default(&cfg);
    cfg.max_running = max_running;
    cfg.max_waiting = 16;
    cfg.prefix_cache_positions = prefix_positions;
    return cfg;
}

/* What most tests stand on: `plugin` with `kv_blocks` blocks (NULL: its
 * default) under one engine of config(max_running, prefix_positions). */
static ilab_engine *open_engine(const char *plugin, const char *kv_blocks, int max_running,
                                int prefix_positions, opened *o)
{
    ilab_config_entry_t cfg[] = {{"kv_blocks", kv_blocks}};
    open_backend(plugin, cfg, kv_blocks ? 1 : 0, o);
    ilab_engine_config ec = config(max_running, prefix_positions);
    return start(o, &ec);
}

static void close_engine(ilab_engine *e, opened *o)
{
    ilab_engine_destroy(e);
    close_backend(o);
}

/* ---- one request's stream ---------------------------------------------------- */

enum { MAX_OUT = 512 };

typedef struct stream {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t tokens[MAX_OUT];
    int n;
    int terminal; /* 0 none, 1 FINISH, 2 ERROR */
    ilab_finish_reason reason;
    ilab_status status;
    char message[768];
    int hold_at; /* at this many tokens, wait in the callback until released */
    bool held, released;
    bool keep_going; /* after the hold, go on (else cancel) */
    int finish_order; /* 1 for the first stream of the test to end, 2 next, ... */
} stream;

static atomic_int finished_streams;

static void stream_init(stream *s)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
}

static void stream_destroy(stream *s)
{
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
}

static int on_event(void *ud, const ilab_event_t *ev)
{
    stream *s = ud;
    int cancel = 0;
    pthread_mutex_lock(&s->mu);
    if (ev->type == ILAB_EVENT_TOKEN) {
        if (s->n < MAX_OUT)
            s->tokens[s->n] = ev->token;
        s->n++;
        if (s->hold_at && s->n == s->hold_at) {
            s->held = true;
            pthread_cond_broadcast(&s->cv);
            while (!s->released)
                pthread_cond_wait(&s->cv, &s->mu);
            cancel = !s->keep_going;
        }
    } else {
        s->terminal = ev->type == ILAB_EVENT_FINISH ? 1 : 2;
        s->finish_order = atomic_fetch_add(&finished_streams, 1) + 1;
        s->reason = ev->finish_reason;
        s->status = ev->status;
        if (ev->message)
            snprintf(s->message, sizeof s->message, "%s", ev->message);
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return cancel;
}

/* Until `s` waits in its callback at hold_at tokens. */
static void wait_held(stream *s)
{
    pthread_mutex_lock(&s->mu);
    while (!s->held)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

static void release(stream *s)
{
    pthread_mutex_lock(&s->mu);
    s->released = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void wait_terminal(stream *s)
{
    pthread_mutex_lock(&s->mu);
    while (!s->terminal)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

static ilab_request request(const int32_t *prompt, size_t n, uint64_t seed, int32_t max_tokens)
{
    ilab_request r;
    memset(&r, 0, sizeof r);
    r.prompt_tokens = prompt;
    r.n_prompt_tokens = n;
    r.sampling.struct_size = sizeof r.sampling;
    r.sampling.temperature = 0.8f;
    r.sampling.top_p = 0.95f;
    r.sampling.repetition_penalty = 1.1f;
    r.sampling.seed = seed;
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    return r;
}

/* Run `r` alone to its end. */
static void run_alone(ilab_engine *e, const ilab_request *r, stream *s)
{
    char err[768] = "";
    stream_init(s);
    ilab_status st = ilab_engine_generate(e, r, on_event, s, err, sizeof err, NULL);
    if (st != ILAB_OK)
        fail_msg("alone: %s: %s", ilab_status_name(st), err);
}

/* Submit `n` requests so that they are admitted in the same step: a holder
 * request keeps the scheduler inside its first TOKEN callback while they
 * are queued, then cancels itself. */
static void run_together(ilab_engine *e, const ilab_request *reqs, int n, stream *out)
{
    static const int32_t hold_prompt[] = {1, 3 + 'z'};
    stream holder;
    stream_init(&holder);
    holder.hold_at = 1;
    char err[768] = "";
    ilab_request hr = request(hold_prompt, 2, 9, 50);
    assert_int_equal(ilab_engine_submit(e, &hr, on_event, &holder, err, sizeof err, NULL), ILAB_OK);
    wait_held(&holder);
    for (int i = 0; i < n; i++) {
        stream_init(&out[i]);
        if (ilab_engine_submit(e, &reqs[i], on_event, &out[i], err, sizeof err, NULL) != ILAB_OK)
            fail_msg("submit %d: %s", i, err);
    }
    release(&holder);
    wait_terminal(&holder);
    for (int i = 0; i < n; i++)
        wait_terminal(&out[i]);
    stream_destroy(&holder);
}

/* A prompt of `n` byte tokens (3 + byte), distinct per `salt`. */
static void make_prompt(int32_t *p, size_t n, int salt)
{
    p[0] = 1;
    for (size_t i = 1; i < n; i++)
        p[i] = 3 + 'a' + (int32_t)((i * 7 + (size_t)salt * 13) % 26);
}

static double metric_value(const char *name)
{
    char *text = ilab_metrics_render();
    assert_non_null(text);
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *at = strstr(text, key);
    double v = at ? strtod(at + strlen(key), NULL) : -1.0;
    free(text);
    if (!at)
        fail_msg("metric %s not rendered", name);
    return v;
}

/* Each got[i] of n ran to its length, n_tokens, with want[i]'s tokens (its
 * solo run, or its run without the prefix cache); destroys both. */
static void expect_same_streams(const char *what, stream *got, stream *want, int n, int n_tokens)
{
    for (int i = 0; i < n; i++) {
        if (got[i].terminal != 1)
            fail_msg("%s: request %d: %s", what, i, got[i].message);
        assert_int_equal(got[i].reason, ILAB_FINISH_LENGTH);
        assert_int_equal(got[i].n, n_tokens);
        assert_memory_equal(got[i].tokens, want[i].tokens, (size_t)n_tokens * sizeof(int32_t));
        stream_destroy(&got[i]);
        stream_destroy(&want[i]);
    }
}

/* ---- error isolation ---------------------------------------------------------- */

/* Four requests prefill in one batch; the backend fails every eval() that
 * holds token 3 + 'Q', which only request 2's prompt has. Request 2 fails
 * with the backend's message; the others finish, each with the tokens it
 * gets alone. */
static void one_bad_item_fails_only_its_request(void **state)
{
    (void)state;
    opened o;
    char bad[16];
    snprintf(bad, sizeof bad, "%d", 3 + 'Q');
    ilab_config_entry_t cfg[] = {{"fail_token", bad}};
    open_backend(POOL_PLUGIN, cfg, 1, &o);
    ilab_engine_config ec = config(8, 0);
    ilab_engine *e = start(&o, &ec);
    enum { R = 4, P = 12, N = 20 };
    int32_t prompts[R][P];
    ilab_request reqs[R];
    stream alone[R], together[R];
    for (int i = 0; i < R; i++) {
        make_prompt(prompts[i], P, i);
        if (i == 2)
            prompts[i][5] = 3 + 'Q';
        reqs[i] = request(prompts[i], P, 100 + (uint64_t)i, N);
        if (i != 2) {
            run_alone(e, &reqs[i], &alone[i]);
            assert_int_equal(alone[i].n, N);
        }
    }
    uint64_t evals_before = ilab_engine_eval_calls(e);
    run_together(e, reqs, R, together);
    for (int i = 0; i < R; i++) {
        if (i == 2) {
            assert_int_equal(together[i].terminal, 2);
            assert_int_equal(together[i].status, ILAB_INTERNAL);
            assert_non_null(strstr(together[i].message, "fail_token"));
            assert_int_equal(together[i].n, 0);
        } else {
            assert_int_equal(together[i].terminal, 1);
            assert_int_equal(together[i].reason, ILAB_FINISH_LENGTH);
            assert_int_equal(together[i].n, N);
            assert_memory_equal(together[i].tokens, alone[i].tokens, N * sizeof(int32_t));
            stream_destroy(&alone[i]);
        }
        stream_destroy(&together[i]);
    }
    /* The failed step was retried in parts; after it, one eval() a step. */
    uint64_t evals = ilab_engine_eval_calls(e) - evals_before;
    assert_true(evals > N && evals < N + 12);
    close_engine(e, &o);
}

/* ---- preemption ------------------------------------------------------------------ */

enum { PRESS_R = 8, PRESS_P = 20, PRESS_N = 200 };

/* 8 requests of 20 + 200 positions (14 blocks each) on a pool of 40 blocks:
 * at most 2 or 3 fit at once. Every one completes with the tokens it gets
 * alone (same seed), and the engine preempted some to get there. */
static void kv_pressure_preempts_and_every_request_completes(void **state)
{
    (void)state;
    opened o;
    ilab_metrics_reset();
    ilab_engine *e = open_engine(POOL_PLUGIN, "40", 16, 4096, &o);
    int32_t prompts[PRESS_R][PRESS_P];
    ilab_request reqs[PRESS_R];
    static stream alone[PRESS_R], together[PRESS_R];
    for (int i = 0; i < PRESS_R; i++) {
        make_prompt(prompts[i], PRESS_P, i);
        reqs[i] = request(prompts[i], PRESS_P, 7000 + (uint64_t)i, PRESS_N);
        run_alone(e, &reqs[i], &alone[i]);
        assert_int_equal(alone[i].n, PRESS_N);
    }
    ilab_engine_counters before, after;
    ilab_engine_get_counters(e, &before);
    assert_int_equal(before.preemptions, 0);
    run_together(e, reqs, PRESS_R, together);
    /* The youngest go first, so the oldest is never preempted: it ends no
     * later than any other. */
    for (int i = 1; i < PRESS_R; i++)
        assert_true(together[0].finish_order < together[i].finish_order);
    expect_same_streams("together", together, alone, PRESS_R, PRESS_N);
    ilab_engine_get_counters(e, &after);
    print_message("8 x (20 + 200) positions on 40 blocks of 16: %llu preemptions, %llu eval() "
                  "calls\n", (unsigned long long)after.preemptions,
                  (unsigned long long)(after.eval_calls - before.eval_calls));
    assert_true(after.preemptions > 0);
    /* No thrashing: after a preemption nothing new is admitted until a
     * request ends (a dozen here; without that hold, hundreds). */
    assert_true(after.preemptions <= 4 * PRESS_R);
    assert_int_equal(metric_value("inferlab:num_preemptions_total"), after.preemptions);
    close_engine(e, &o);
}

/* After a preemption nothing new starts while a request still runs, even
 * when only one does: two requests of 20 + 200 positions on 15 blocks of
 * 16 fit together until position 113 (8 blocks each), then the younger is
 * preempted and waits for the older to end. Exactly one preemption; a
 * scheduler that readmitted it beside the one still running would preempt
 * it again at every step. */
static void after_a_preemption_the_last_runner_finishes_alone(void **state)
{
    (void)state;
    opened o;
    ilab_engine *e = open_engine(POOL_PLUGIN, "15", 4, 0, &o);
    enum { R = 2, P = 20, N = 200 };
    int32_t prompts[R][P];
    ilab_request reqs[R];
    stream alone[R], together[R];
    for (int i = 0; i < R; i++) {
        make_prompt(prompts[i], P, 40 + i);
        reqs[i] = request(prompts[i], P, 500 + (uint64_t)i, N);
        run_alone(e, &reqs[i], &alone[i]);
        assert_int_equal(alone[i].n, N);
    }
    ilab_engine_counters before, after;
    ilab_engine_get_counters(e, &before);
    run_together(e, reqs, R, together);
    ilab_engine_get_counters(e, &after);
    assert_true(together[0].finish_order < together[1].finish_order);
    expect_same_streams("together", together, alone, R, N);
    assert_int_equal(after.preemptions - before.preemptions, 1);
    close_engine(e, &o);
}

/* A request that cannot fit even alone (4 blocks = 64 positions, it needs
 * 110) fails with ILAB_OUT_OF_MEMORY naming the capacity; a small one
 * beside it completes. */
static void a_request_too_big_for_the_cache_fails_alone(void **state)
{
    (void)state;
    opened o;
    ilab_engine *e = open_engine(POOL_PLUGIN, "4", 4, 0, &o);
    int32_t big[10], small[4];
    make_prompt(big, 10, 1);
    make_prompt(small, 4, 2);
    ilab_request reqs[2] = {request(big, 10, 1, 100), request(small, 4, 2, 8)};
    stream s[2];
    run_together(e, reqs, 2, s);
    assert_int_equal(s[0].terminal, 2);
    assert_int_equal(s[0].status, ILAB_OUT_OF_MEMORY);
    assert_non_null(strstr(s[0].message, "even alone"));
    assert_non_null(strstr(s[0].message, "kv_blocks"));
    assert_int_equal(s[1].terminal, 1);
    assert_int_equal(s[1].n, 8);
    stream_destroy(&s[0]);
    stream_destroy(&s[1]);
    close_engine(e, &o);
}

/* The prefix cache holds blocks a request needs: it gives them up before
 * anything fails. 16 blocks; three cached 40-token prompts hold 9 of them;
 * then a request of 10 + 190 positions (13 blocks) runs alone. */
static void prefix_cache_gives_way_under_pressure(void **state)
{
    (void)state;
    opened o;
    ilab_engine *e = open_engine(POOL_PLUGIN, "16", 4, 4096, &o);
    int32_t p[3][40], big[10];
    stream s;
    for (int i = 0; i < 3; i++) {
        make_prompt(p[i], 40, 10 + i);
        ilab_request r = request(p[i], 40, 1, 2);
        run_alone(e, &r, &s);
        stream_destroy(&s);
    }
    make_prompt(big, 10, 20);
    ilab_request r = request(big, 10, 2, 190);
    run_alone(e, &r, &s);
    assert_int_equal(s.n, 190);
    stream_destroy(&s);
    close_engine(e, &o);
}

/* ---- admission by capacity (cache.stats) ------------------------------------------ */

enum { ADM_R = 4, ADM_P = 100, ADM_N = 8 };

/* Four prompts of 100 tokens (7 blocks each with their 8 tokens) on 20
 * blocks: two fit. Without cache.stats (pool_backend) all four start and
 * their first prefill step runs out of memory, so some are preempted; with
 * it (stats_backend) the engine admits two and then the others as room
 * returns: no preemption at all. Every output equals its solo run. */
static uint64_t run_four_big_prompts(const char *plugin, stream *out)
{
    opened o;
    ilab_engine *e = open_engine(plugin, "20", 8, 0, &o);
    int32_t prompts[ADM_R][ADM_P];
    ilab_request reqs[ADM_R];
    stream alone[ADM_R];
    for (int i = 0; i < ADM_R; i++) {
        make_prompt(prompts[i], ADM_P, 30 + i);
        reqs[i] = request(prompts[i], ADM_P, 900 + (uint64_t)i, ADM_N);
        run_alone(e, &reqs[i], &alone[i]);
    }
    run_together(e, reqs, ADM_R, out);
    expect_same_streams(plugin, out, alone, ADM_R, ADM_N);
    ilab_engine_counters c;
    ilab_engine_get_counters(e, &c);
    close_engine(e, &o);
    return c.preemptions;
}

static void admission_by_capacity_preempts_nothing(void **state)
{
    (void)state;
    stream out[ADM_R];
    uint64_t without = run_four_big_prompts(POOL_PLUGIN, out);
    uint64_t with = run_four_big_prompts(STATS_PLUGIN, out);
    print_message("4 x 100-token prompts on 20 blocks: %llu preemptions without cache.stats, "
                  "%llu with\n", (unsigned long long)without, (unsigned long long)with);
    assert_true(without > 0);
    assert_int_equal(with, 0);
}

/* The watermark (10% of 20 blocks: 2 blocks) keeps room for running
 * sequences to grow. A holds 10 of the 20 blocks (150 positions, decoding
 * up to 159); B's 160-token prompt needs the other 10 exactly. Without a
 * watermark B starts at once and ends first; with it B waits for A. */
static void the_watermark_holds_back_a_prompt_that_fits_exactly(void **state)
{
    (void)state;
    opened o;
    ilab_config_entry_t cfg[] = {{"kv_blocks", "20"}};
    open_backend(STATS_PLUGIN, cfg, 1, &o);
    for (int pass = 0; pass < 2; pass++) {
        ilab_engine_config ec = config(8, 0);
        ec.kv_watermark_percent = pass ? 10 : 0;
        ilab_engine *e = start(&o, &ec);
        int32_t pa[150], pb[160];
        make_prompt(pa, 150, 40);
        make_prompt(pb, 160, 41);
        ilab_request ra = request(pa, 150, 1, 10), rb = request(pb, 160, 2, 1);
        stream a, b;
        stream_init(&a);
        stream_init(&b);
        a.hold_at = 1; /* A's prompt is in: submit B now */
        a.keep_going = true;
        char err[256];
        assert_int_equal(ilab_engine_submit(e, &ra, on_event, &a, err, sizeof err, NULL), ILAB_OK);
        wait_held(&a);
        assert_int_equal(ilab_engine_submit(e, &rb, on_event, &b, err, sizeof err, NULL), ILAB_OK);
        release(&a);
        wait_terminal(&a);
        wait_terminal(&b);
        if (a.terminal != 1 || b.terminal != 1)
            fail_msg("pass %d: %s / %s", pass, a.message, b.message);
        assert_int_equal(a.n, 10);
        print_message("watermark %d%%: B ended %s A\n", ec.kv_watermark_percent,
                      b.finish_order < a.finish_order ? "before" : "after");
        if (pass)
            assert_true(b.finish_order > a.finish_order);
        else
            assert_true(b.finish_order < a.finish_order);
        stream_destroy(&a);
        stream_destroy(&b);
        ilab_engine_counters c;
        ilab_engine_get_counters(e, &c);
        assert_int_equal(c.preemptions, 0);
        ilab_engine_destroy(e);
    }
    close_backend(&o);
}

/* inferlab:kv_cache_usage_ratio is the backend's figure with cache.stats
 * (3 of 10 blocks hold a 40-token prompt and its first token) and the host
 * estimate without (41 positions of max_running 4 x 512). */
static void the_usage_gauge_is_the_backends_figure(void **state)
{
    (void)state;
    const char *plugins[2] = {STATS_PLUGIN, POOL_PLUGIN};
    const double want[2] = {3.0 / 10.0, 41.0 / (4.0 * 512.0)};
    for (int k = 0; k < 2; k++) {
        opened o;
        ilab_metrics_reset();
        ilab_engine *e = open_engine(plugins[k], "10", 4, 0, &o);
        int32_t p[40];
        make_prompt(p, 40, 50);
        ilab_request r = request(p, 40, 5, 10);
        stream s;
        stream_init(&s);
        s.hold_at = 2; /* the prompt and token 1 are in; token 2 is being emitted */
        char err[256];
        assert_int_equal(ilab_engine_submit(e, &r, on_event, &s, err, sizeof err, NULL), ILAB_OK);
        wait_held(&s);
        double got = metric_value("inferlab:kv_cache_usage_ratio");
        print_message("%s: kv_cache_usage_ratio %.4f (want %.4f)\n", plugins[k], got, want[k]);
        release(&s);
        wait_terminal(&s);
        stream_destroy(&s);
        assert_true(got > want[k] - 1e-6 && got < want[k] + 1e-6);
        close_engine(e, &o);
    }
    assert_true(metric_value("inferlab:kv_cache_usage_ratio") == 0.0);
}

/* A prompt longer than the whole cache fails alone, naming the capacity the
 * backend reported; one beside it completes. */
static void a_prompt_bigger_than_the_cache_names_its_capacity(void **state)
{
    (void)state;
    opened o;
    ilab_engine *e = open_engine(STATS_PLUGIN, "4", 4, 0, &o);
    int32_t big[80], small[4];
    make_prompt(big, 80, 60);
    make_prompt(small, 4, 61);
    ilab_request reqs[2] = {request(big, 80, 1, 4), request(small, 4, 2, 8)};
    stream s[2];
    run_together(e, reqs, 2, s);
    assert_int_equal(s[0].terminal, 2);
    assert_int_equal(s[0].status, ILAB_OUT_OF_MEMORY);
    if (!strstr(s[0].message, "the cache holds 64"))
        fail_msg("message: %s", s[0].message);
    assert_int_equal(s[1].terminal, 1);
    assert_int_equal(s[1].n, 8);
    stream_destroy(&s[0]);
    stream_destroy(&s[1]);
    close_engine(e, &o);
}

/* ---- prefix cache ------------------------------------------------------------------ */

enum { SHARED = 64, TAIL = 6, PFX_N = 30 };

/* Requests B and C share a 64-token prefix with A. With the prefix cache,
 * B and C prefill only their tails (fewer eval() calls at prefill_chunk 8,
 * hits counted), and every output equals the output without the cache. */
static void prefix_cache_saves_prefill_and_changes_no_output(void **state)
{
    (void)state;
    opened o;
    open_backend(POOL_PLUGIN, NULL, 0, &o);
    int32_t prompts[3][SHARED + TAIL];
    for (int i = 0; i < 3; i++) {
        make_prompt(prompts[i], SHARED + TAIL, 0);
        for (int k = 0; k < TAIL; k++)
            prompts[i][SHARED + k] = 3 + 'A' + i * TAIL + k;
    }
    stream off[3], on[3];
    uint64_t evals[2][3];
    ilab_engine_counters counters[2];
    for (int pass = 0; pass < 2; pass++) {
        ilab_engine_config ec = config(4, pass ? 1024 : 0);
        ec.prefill_chunk = 8;
        ilab_engine *e = start(&o, &ec);
        for (int i = 0; i < 3; i++) {
            ilab_request r = request(prompts[i], SHARED + TAIL, 40 + (uint64_t)i, PFX_N);
            uint64_t before = ilab_engine_eval_calls(e);
            run_alone(e, &r, pass ? &on[i] : &off[i]);
            evals[pass][i] = ilab_engine_eval_calls(e) - before;
        }
        ilab_engine_get_counters(e, &counters[pass]);
        ilab_engine_destroy(e);
    }
    expect_same_streams("prefix cache on", on, off, 3, PFX_N);
    /* 70 prompt tokens at 8 a step: 9 prefill steps; from the cache, the
     * 6-token tail in one. */
    assert_int_equal(evals[0][1], 9 + PFX_N - 1);
    assert_int_equal(evals[1][0], 9 + PFX_N - 1);
    assert_int_equal(evals[1][1], 1 + PFX_N - 1);
    assert_int_equal(evals[1][2], 1 + PFX_N - 1);
    assert_int_equal(counters[0].prefix_cache_hits, 0);
    assert_int_equal(counters[1].prefix_cache_queries, 3 * (SHARED + TAIL));
    assert_int_equal(counters[1].prefix_cache_hits, 2 * SHARED);
    close_backend(&o);
}

/* The same prompt twice: the second forks the whole prompt but one token
 * (its logits are needed) and still gets the same output. */
static void an_identical_prompt_is_reused_but_its_last_token(void **state)
{
    (void)state;
    opened o;
    ilab_engine *e = open_engine(POOL_PLUGIN, NULL, 4, 1024, &o);
    int32_t p[40];
    make_prompt(p, 40, 5);
    ilab_request r = request(p, 40, 3, 16);
    stream a, b;
    run_alone(e, &r, &a);
    run_alone(e, &r, &b);
    assert_memory_equal(a.tokens, b.tokens, 16 * sizeof(int32_t));
    ilab_engine_counters c;
    ilab_engine_get_counters(e, &c);
    assert_int_equal(c.prefix_cache_hits, 39);
    stream_destroy(&a);
    stream_destroy(&b);
    close_engine(e, &o);
}

/* ---- torchlike -------------------------------------------------------------------------- */

static size_t tokenize(opened *o, const char *text, int32_t *out, size_t cap)
{
    size_t n = 0;
    assert_int_equal(o->api->tokenize(o->backend, text, strlen(text), ILAB_TOKENIZE_ADD_BOS, out,
                                      cap, &n),
                     ILAB_OK);
    return n;
}

/* The case on torchlike: kv_blocks 40 (640 positions) and 8
 * concurrent requests of a short prompt + 200 tokens (13 blocks each, 104
 * in all): every one completes with the tokens of its solo run, and the
 * engine preempted some to get there (admission by capacity lets all 8
 * start, since their prompts fit; they outgrow the cache while decoding).
 * Then, with a shared prefix, the prefix cache changes nothing either. */
static void torchlike_under_pressure_and_with_prefixes(void **state)
{
    (void)state;
    opened o;
    ilab_config_entry_t cfg[] = {{"kv_blocks", "40"}, {"threads", "1"}};
    open_backend(TORCHLIKE_PLUGIN, cfg, 2, &o);
    static const char *const texts[8] = {"It is a truth", "Elizabeth walked", "Mr. Darcy said",
                                         "The weather at Bath", "Her sister", "Lady Catherine",
                                         "The letter came", "At Pemberley"};
    enum { R = 8, N = 200 };
    int32_t prompts[R][32];
    ilab_request reqs[R];
    static stream alone[R], together[R];
    ilab_engine_config ec = config(8, 0);
    ilab_engine *e = start(&o, &ec);
    for (int i = 0; i < R; i++) {
        size_t n = tokenize(&o, texts[i], prompts[i], 32);
        reqs[i] = request(prompts[i], n, 500 + (uint64_t)i, N);
        run_alone(e, &reqs[i], &alone[i]);
    }
    run_together(e, reqs, R, together);
    ilab_engine_counters c;
    ilab_engine_get_counters(e, &c);
    print_message("torchlike, 8 x (prompt + 200) positions on 40 blocks of 16: %llu preemptions\n",
                  (unsigned long long)c.preemptions);
    assert_true(c.preemptions > 0);
    expect_same_streams("torchlike together", together, alone, R, N);
    ilab_engine_destroy(e);

    /* Prefixes: a long shared opening, three endings; cache off, then on. */
    const char *opening = "It is a truth universally acknowledged, that a single man in "
                          "possession of a good fortune, must be in want of a wife. ";
    static const char *const endings[3] = {"However little", "Mr. Bennet", "My dear"};
    int32_t pp[3][96];
    size_t pn[3];
    for (int i = 0; i < 3; i++) {
        char text[256];
        snprintf(text, sizeof text, "%s%s", opening, endings[i]);
        pn[i] = tokenize(&o, text, pp[i], 96);
    }
    stream runs[2][3];
    ilab_engine_counters pc[2];
    for (int pass = 0; pass < 2; pass++) {
        ilab_engine_config pcfg = config(4, pass ? 2048 : 0);
        e = start(&o, &pcfg);
        for (int i = 0; i < 3; i++) {
            ilab_request r = request(pp[i], pn[i], 60 + (uint64_t)i, 24);
            run_alone(e, &r, &runs[pass][i]);
        }
        ilab_engine_get_counters(e, &pc[pass]);
        ilab_engine_destroy(e);
    }
    expect_same_streams("torchlike, prefix cache on", runs[1], runs[0], 3, 24);
    assert_int_equal(pc[0].prefix_cache_hits, 0);
    assert_true(pc[1].prefix_cache_hits >= 2 * 16);
    close_backend(&o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_bad_item_fails_only_its_request),
        cmocka_unit_test(kv_pressure_preempts_and_every_request_completes),
        cmocka_unit_test(after_a_preemption_the_last_runner_finishes_alone),
        cmocka_unit_test(a_request_too_big_for_the_cache_fails_alone),
        cmocka_unit_test(prefix_cache_gives_way_under_pressure),
        cmocka_unit_test(admission_by_capacity_preempts_nothing),
        cmocka_unit_test(the_watermark_holds_back_a_prompt_that_fits_exactly),
        cmocka_unit_test(the_usage_gauge_is_the_backends_figure),
        cmocka_unit_test(a_prompt_bigger_than_the_cache_names_its_capacity),
        cmocka_unit_test(prefix_cache_saves_prefill_and_changes_no_output),
        cmocka_unit_test(an_identical_prompt_is_reused_but_its_last_token),
        cmocka_unit_test(torchlike_under_pressure_and_with_prefixes),
    };
    return ilab_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
