/* How streams end, against the greedy stream each check varies: where the
 * bytes still held at the end ride (STR-7), cancel() of ids that are not
 * running (STR-4), and a nonzero callback return for the terminal event
 * (STR-10). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "suites.h"

static bool streams(const conf_env *env)
{
    return env->m->sampling == ILAB_SAMPLING_HOST || env->m->streaming;
}

static bool same_stream(const conf_gen *a, const conf_gen *b)
{
    /* no token: no token array (memcmp may not be given NULL) */
    return a->n_tokens == b->n_tokens &&
           (!a->n_tokens || memcmp(a->tokens, b->tokens, a->n_tokens * sizeof *a->tokens) == 0) &&
           a->text_len == b->text_len && (!a->text_len || memcmp(a->text, b->text, a->text_len) == 0) &&
           a->terminal == b->terminal &&
           a->finish_reason == b->finish_reason && a->n_terminal == b->n_terminal &&
           a->after_terminal == b->after_terminal;
}

/* ---- STR-7: held-back bytes on the last TOKEN or on FINISH --------------- */

/* A stop string that the end of `text` begins and that the text never
 * holds: its last code point (at most 4 bytes) and bytes it lacks. The
 * plugin must hold that tail back as a possible stop string until it
 * knows; returns the tail's length, 0 when there is none to take. */
static size_t tail_stop(const char *text, size_t len, char stop[16])
{
    if (len == 0)
        return 0;
    size_t from = len - 1;
    while (from > 0 && len - from < 4 && ((unsigned char)text[from] & 0xC0) == 0x80)
        from--;
    size_t tl = len - from;
    if (memchr(text + from, '\0', tl))
        return 0;
    memcpy(stop, text + from, tl);
    memcpy(stop + tl, "\x01\x02~", 4);
    return memmem(text, len, stop, strlen(stop)) ? 0 : tl;
}

/* One ending of `q` with the stop string of `want`'s tail: the stream must
 * be `want` again (tokens, text, reason), with FINISH carrying nothing when
 * the last TOKEN was known to be last and at least the tail otherwise. */
static conf_result held_ending(conf_env *env, conf_gen_params q, const conf_gen *want, bool known_last,
                               const char *what, int *checked, char *msg, size_t cap)
{
    char stop[16];
    size_t tl = tail_stop(want->text, want->text_len, stop);
    if (tl == 0)
        return CONF_PASS;
    const char *stops[1] = {stop};
    q.stop = stops;
    q.n_stop = 1;
    conf_gen g;
    conf_result r = conf_stream_run(env, &q, &g, msg, cap);
    if (r != CONF_PASS)
        return r;
    bool placed = known_last ? g.finish_text_len == 0 : g.finish_text_len >= tl;
    bool ok = g.terminal == ILAB_EVENT_FINISH && g.finish_reason == want->finish_reason &&
              g.n_tokens == want->n_tokens && g.text_len == want->text_len &&
              memcmp(g.text, want->text, g.text_len) == 0 && placed;
    if (!ok)
        CONF_MSG("ended by %s after %zu TOKENs, with a stop string that the output's last %zu byte(s) begin: "
                 "%zu TOKENs, %zu bytes of which %zu on FINISH, finish %s; want %zu TOKENs, the %zu bytes of "
                 "the output, %s, and %s (STR-7: held bytes ride on the last TOKEN when it is known to be the "
                 "last, on FINISH otherwise; seed %" PRIu64 ")", what, want->n_tokens, tl, g.n_tokens, g.text_len,
                 g.finish_text_len, ilab_finish_reason_name(g.finish_reason), want->n_tokens, want->text_len,
                 ilab_finish_reason_name(want->finish_reason),
                 known_last ? "nothing on FINISH" : "the held bytes on FINISH", env->opt->seed);
    conf_gen_free(&g);
    (*checked)++;
    return ok ? CONF_PASS : CONF_FAIL;
}

/* The last token k whose next one was not drawn before it (so a stop id
 * of it ends the stream right after k), or -1. */
static long last_fresh(const conf_gen *g)
{
    for (size_t k = g->n_tokens - 1; k-- > 0;) {
        bool fresh = true;
        for (size_t j = 0; j <= k; j++)
            fresh &= g->tokens[j] != g->tokens[k + 1];
        if (fresh)
            return (long)k;
    }
    return -1;
}

/* max_tokens, a stop token id (and EOS when that is the next token) after
 * token k of a greedy stream. */
static conf_result held_short_endings(conf_env *env, int *checked, char *msg, size_t cap)
{
    int32_t prompt[6];
    conf_gen_params p;
    conf_gen full;
    conf_result r = conf_greedy_stream(env, env->opt->seed + 100, prompt, 6, 8, &p, &full, msg, cap);
    if (r != CONF_PASS)
        return r;
    long k = full.n_tokens > 1 ? last_fresh(&full) : -1;
    int32_t next = k >= 0 ? full.tokens[k + 1] : -1;
    conf_gen_free(&full);
    if (k < 0)
        return CONF_PASS;
    conf_gen_params q = p;
    q.max_tokens = (int32_t)k + 1;
    conf_gen upto;
    r = conf_stream_run(env, &q, &upto, msg, cap);
    if (r != CONF_PASS)
        return r;
    r = held_ending(env, q, &upto, true, "max_tokens", checked, msg, cap);
    upto.finish_reason = ILAB_FINISH_STOP;
    if (r == CONF_PASS) {
        q = p;
        q.stop_token_ids = &next;
        q.n_stop_token_ids = 1;
        r = held_ending(env, q, &upto, false, "a stop token id", checked, msg, cap);
    }
    if (r == CONF_PASS && next == env->info.eos_id) {
        q = p;
        q.ignore_eos = false;
        r = held_ending(env, q, &upto, false, "EOS", checked, msg, cap);
    }
    conf_gen_free(&upto);
    return r;
}

/* A prompt of max_context - 2 tokens: the context fills. */
static conf_result held_context_full(conf_env *env, int *checked, char *msg, size_t cap)
{
    int32_t ctx = conf_max_context(env);
    if (ctx <= 4 || ctx > 8192)
        return CONF_PASS;
    int32_t *prompt = malloc((size_t)ctx * sizeof *prompt);
    conf_gen_params p;
    conf_gen full;
    conf_result r = conf_greedy_stream(env, env->opt->seed + 101, prompt, (size_t)(ctx - 2), 16, &p, &full, msg,
                                       cap);
    if (r == CONF_PASS) {
        if (full.terminal == ILAB_EVENT_FINISH && full.finish_reason == ILAB_FINISH_LENGTH && full.n_tokens < 16)
            r = held_ending(env, p, &full, true, "the full context", checked, msg, cap);
        conf_gen_free(&full);
    }
    free(prompt);
    return r;
}

conf_result conf_str7_held_placement(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(streams(env), "streaming");
    int checked = 0;
    conf_result r = held_short_endings(env, &checked, msg, cap);
    if (r == CONF_PASS)
        r = held_context_full(env, &checked, msg, cap);
    if (r != CONF_PASS)
        return r;
    if (checked == 0) {
        CONF_MSG("no greedy output here ended with bytes a stop string could begin (seed %" PRIu64 ")",
                 env->opt->seed);
        return CONF_SKIP;
    }
    CONF_MSG("%d endings (max_tokens, stop token id, EOS when next, full context) with a possible stop-string "
             "prefix held: on the last TOKEN when it was known to be last, on FINISH otherwise", checked);
    return CONF_PASS;
}

/* ---- STR-4: cancel() of an id that is not running ----------------------- */

conf_result conf_str4_cancel_not_running(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->sampling == ILAB_SAMPLING_BACKEND, "sampling: backend");
    CONF_SKIP_UNLESS(env->m->streaming, "streaming");
    CONF_SKIP_UNLESS(env->m->cancel, "cancel");
    int32_t prompt[4];
    conf_gen_params p;
    conf_gen ref;
    conf_result r = conf_greedy_stream(env, env->opt->seed + 110, prompt, 4, 8, &p, &ref, msg, cap);
    if (r != CONF_PASS)
        return r;
    static const char *const cases[] = {"never started", "cancelled twice, never started", "finished"};
    uint64_t base = 0x7E57000000000000ull + (env->opt->seed & 0xFFFFFF) * 8;
    for (int c = 0; c < 3 && r == CONF_PASS; c++) {
        conf_gen_params q = p;
        q.request_id = base + (uint64_t)c;
        conf_gen g;
        if (c == 2) { /* run it to the end first */
            r = conf_stream_run(env, &q, &g, msg, cap);
            if (r != CONF_PASS)
                break;
            conf_gen_free(&g);
        }
        for (int times = 0; times < (c == 1 ? 2 : 1); times++) {
            ilab_status st = env->api->cancel(env->be, q.request_id);
            if (st != ILAB_OK) {
                CONF_MSG("cancel(%" PRIu64 ") of an id %s returned %s, want OK", q.request_id, cases[c],
                         ilab_status_name(st));
                r = CONF_FAIL;
            }
        }
        if (r != CONF_PASS)
            break;
        r = conf_stream_run(env, &q, &g, msg, cap);
        if (r != CONF_PASS)
            break;
        if (!same_stream(&ref, &g)) {
            CONF_MSG("after cancel() of request id %" PRIu64 " (%s), a generate() with that id gave %zu TOKENs "
                     "and %s, the same request with another id %zu TOKENs and %s; want the same stream (a cancel "
                     "of an id that is not running changes nothing)", q.request_id, cases[c], g.n_tokens,
                     ilab_finish_reason_name(g.finish_reason), ref.n_tokens,
                     ilab_finish_reason_name(ref.finish_reason));
            r = CONF_FAIL;
        }
        conf_gen_free(&g);
    }
    if (r == CONF_PASS)
        CONF_MSG("cancel() of a request id never started, cancelled twice, or finished: OK, and a later "
                 "generate() with that id streamed as with any other (%zu TOKENs, %s)", ref.n_tokens,
                 ilab_finish_reason_name(ref.finish_reason));
    conf_gen_free(&ref);
    return r;
}

/* ---- STR-10: a nonzero return for the terminal event -------------------- */

/* `q` with and without the callback returning nonzero for the terminal
 * event: the same events and the same return of generate(), which is OK
 * after FINISH and the ERROR event's status after ERROR. */
static conf_result terminal_return(conf_env *env, const conf_gen_params *q, const char *what, char *msg, size_t cap)
{
    conf_gen a, b;
    conf_result r = conf_generate(env, q, &a, msg, cap);
    if (r != CONF_PASS)
        return r;
    conf_gen_params nz = *q;
    nz.nonzero_on_terminal = true;
    r = conf_generate(env, &nz, &b, msg, cap);
    if (r != CONF_PASS) {
        conf_gen_free(&a);
        return r;
    }
    ilab_status want = a.terminal == ILAB_EVENT_ERROR ? a.status : ILAB_OK;
    bool ok = a.n_terminal == 1 && a.returned == want && b.returned == want && same_stream(&a, &b);
    if (!ok)
        CONF_MSG("%s: generate() returned %s after %d TOKEN(s) and %s(%s) when the callback returned 0 for it, "
                 "and %s after %zu TOKEN(s) and %s(%s) when it returned nonzero; want %s both times and the same "
                 "events (a nonzero return for the terminal event changes nothing)", what,
                 ilab_status_name(a.returned), (int)a.n_tokens, a.terminal == ILAB_EVENT_ERROR ? "ERROR" : "FINISH",
                 ilab_finish_reason_name(a.finish_reason), ilab_status_name(b.returned), b.n_tokens,
                 b.terminal == ILAB_EVENT_ERROR ? "ERROR" : "FINISH", ilab_finish_reason_name(b.finish_reason),
                 ilab_status_name(want));
    conf_gen_free(&a);
    conf_gen_free(&b);
    return ok ? CONF_PASS : CONF_FAIL;
}

conf_result conf_str10_terminal_return(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->sampling == ILAB_SAMPLING_BACKEND, "sampling: backend");
    CONF_SKIP_UNLESS(env->m->streaming, "streaming");
    int32_t prompt[4];
    conf_gen_params p;
    conf_gen ref;
    conf_result r = conf_greedy_stream(env, env->opt->seed + 120, prompt, 4, 6, &p, &ref, msg, cap);
    if (r != CONF_PASS)
        return r;
    int32_t stop_id = ref.n_tokens >= 3 ? ref.tokens[2] : -1;
    conf_gen_free(&ref);
    r = terminal_return(env, &p, "FINISH(length)", msg, cap);
    conf_gen_params q = p;
    if (r == CONF_PASS && stop_id >= 0) {
        q.stop_token_ids = &stop_id;
        q.n_stop_token_ids = 1;
        r = terminal_return(env, &q, "FINISH(stop) by a stop token id", msg, cap);
    }
    if (r == CONF_PASS) {
        q = p;
        q.cancel_after_tokens = 2; /* nonzero for every event from TOKEN 2 on */
        r = terminal_return(env, &q, "FINISH(cancelled) after the callback's stop at TOKEN 2", msg, cap);
    }
    if (r == CONF_PASS) {
        q = p;
        q.max_tokens = 0; /* refused: one ERROR event */
        r = terminal_return(env, &q, "ERROR (max_tokens 0)", msg, cap);
    }
    if (r == CONF_PASS)
        CONF_MSG("a nonzero return for FINISH(length), FINISH(stop)%s, FINISH(cancelled) and ERROR changed "
                 "neither the events nor generate()'s return", stop_id >= 0 ? "" : " (not run: no 3rd token)");
    return r;
}
