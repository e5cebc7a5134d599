/* STR clauses: the event stream of a request, generated the way the host
 * does it (conf_generate: the plugin's generate() or the host engine). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "suites.h"
#include "text_tokens.h"

#define PROMPT 6

static bool can_stream(const conf_env *env)
{
    return env->m->sampling == ILAB_SAMPLING_HOST || env->m->streaming;
}
#define NEED_STREAM() CONF_SKIP_UNLESS(can_stream(env), "streaming")

static bool grammar_ok(const conf_gen *g, const char *what, char *msg, size_t cap)
{
    if (g->bad_type) {
        snprintf(msg, cap, "%s: %d event(s) of an unknown type", what, g->bad_type);
        return false;
    }
    if (g->n_terminal != 1) {
        snprintf(msg, cap, "%s: %d terminal events, want exactly one FINISH or ERROR", what, g->n_terminal);
        return false;
    }
    if (g->after_terminal) {
        snprintf(msg, cap, "%s: %d event(s) after the terminal %s", what, g->after_terminal,
                 g->terminal == ILAB_EVENT_FINISH ? "FINISH" : "ERROR");
        return false;
    }
    if (g->wrong_id) {
        snprintf(msg, cap, "%s: %d event(s) without the request's request_id", what, g->wrong_id);
        return false;
    }
    return true;
}

conf_result conf_str1_grammar(conf_env *env, char *msg, size_t cap)
{
    NEED_STREAM();
    int32_t p[PROMPT];
    conf_prompt_tokens(env, env->opt->seed + 40, p, PROMPT);
    conf_gen_params gp;
    conf_gen_params_default(&gp, p, PROMPT);
    gp.max_tokens = 12;
    const char *cases[4] = {"greedy, 12 tokens", "cancelled from the callback", "temperature 1, EOS allowed",
                            "refused (a prompt id = vocab_size): one ERROR"};
    int32_t bad = env->info.vocab_size;
    /* the plugin itself refuses only what generate() is given */
    int n_cases = env->m->sampling == ILAB_SAMPLING_BACKEND ? 4 : 3;
    for (int i = 0; i < n_cases; i++) {
        if (i == 1) {
            gp.ignore_eos = true;
            gp.cancel_after_tokens = 2;
        } else if (i == 2) {
            gp.cancel_after_tokens = 0;
            gp.sampling.temperature = 1.0f;
            gp.sampling.seed = env->opt->seed;
        } else if (i == 3) {
            gp.prompt = &bad;
            gp.n_prompt = 1;
        }
        conf_gen g;
        conf_result r = i == 3 ? conf_generate(env, &gp, &g, msg, cap) : conf_stream_run(env, &gp, &g, msg, cap);
        if (r != CONF_PASS)
            return r;
        bool ok = grammar_ok(&g, cases[i], msg, cap);
        conf_gen_free(&g);
        if (!ok)
            return CONF_FAIL;
    }
    return CONF_PASS;
}

conf_result conf_str2_text(conf_env *env, char *msg, size_t cap)
{
    NEED_STREAM();
    int32_t p[PROMPT];
    conf_gen_params gp;
    conf_gen a, b;
    conf_result r = conf_greedy_stream(env, env->opt->seed + 41, p, PROMPT, 16, &gp, &a, msg, cap);
    if (r != CONF_PASS)
        return r;
    r = conf_stream_run(env, &gp, &b, msg, cap);
    if (r != CONF_PASS) {
        conf_gen_free(&a);
        return r;
    }
    r = CONF_FAIL;
    if (a.split_utf8) {
        CONF_MSG("a TOKEN event's text ends inside a UTF-8 code point");
        goto out;
    }
    if (a.text_len != b.text_len || memcmp(a.text, b.text, a.text_len) != 0) {
        CONF_MSG("the same greedy request streamed different text twice (%zu vs %zu bytes)", a.text_len, b.text_len);
        goto out;
    }
    bool defined = true;
    if (env->m->tokenizer && !conf_output_text_defined(env, p[PROMPT - 1], a.tokens, a.n_tokens, &defined, msg, cap))
        goto out;
    if (!defined && !conf_utf8_valid(a.text, a.text_len)) {
        CONF_MSG("the TOKEN texts (%zu bytes) are not valid UTF-8 (tokenizer: text, TOK-10)", a.text_len);
        goto out;
    }
    if (env->m->tokenizer && defined) {
        size_t len;
        char *d = conf_output_text(env, p[PROMPT - 1], a.tokens, a.n_tokens, &len, msg, cap);
        if (!d)
            goto out;
        bool same = len == a.text_len && memcmp(d, a.text, len) == 0;
        free(d);
        if (!same) {
            /* Not detokenize(ids): a piece depends on the token before it
             * (a SentencePiece word start after the prompt keeps its space). */
            CONF_MSG("concatenated TOKEN text (%zu bytes) != the output text, token_piece over the %zu TOKEN ids "
                     "after prompt token %d (%zu bytes; seed %" PRIu64 ")", a.text_len, a.n_tokens,
                     (int)p[PROMPT - 1], len, env->opt->seed);
            goto out;
        }
    }
    r = CONF_PASS;
out:
    conf_gen_free(&a);
    conf_gen_free(&b);
    return r;
}

conf_result conf_str3_finish(conf_env *env, char *msg, size_t cap)
{
    NEED_STREAM();
    int32_t p[PROMPT];
    conf_gen_params gp;
    conf_gen g;
    conf_result r = conf_greedy_stream(env, env->opt->seed + 42, p, PROMPT, 7, &gp, &g, msg, cap);
    if (r != CONF_PASS)
        return r;
    size_t n = g.n_tokens;
    ilab_finish_reason fr = g.finish_reason;
    bool fin = g.terminal == ILAB_EVENT_FINISH;
    conf_gen_free(&g);
    CONF_CHECK(fin, "the stream did not end with FINISH");
    CONF_CHECK(fr >= ILAB_FINISH_STOP && fr <= ILAB_FINISH_ERROR, "finish reason %d is outside the closed set", (int)fr);
    CONF_CHECK(n == 7 && fr == ILAB_FINISH_LENGTH,
               "max_tokens 7 with EOS ignored gave %zu tokens and '%s', want 7 and 'length'", n,
               ilab_finish_reason_name(fr));
    return CONF_PASS;
}

conf_result conf_str4_cancel(conf_env *env, char *msg, size_t cap)
{
    NEED_STREAM();
    int32_t p[PROMPT];
    conf_gen_params gp;
    conf_greedy_request(env, env->opt->seed + 43, p, PROMPT, 200, &gp);
    gp.cancel_after_tokens = 3;
    conf_gen g;
    conf_result r = conf_stream_run(env, &gp, &g, msg, cap);
    if (r != CONF_PASS)
        return r;
    size_t n = g.n_tokens;
    ilab_finish_reason fr = g.finish_reason;
    conf_gen_free(&g);
    CONF_CHECK(fr == ILAB_FINISH_CANCELLED && n <= 5,
               "the callback asked to stop at token 3: the stream gave %zu tokens and '%s', want <= 5 and 'cancelled'",
               n, ilab_finish_reason_name(fr));
    /* from another thread, through cancel() (the host engine always can) */
    if (env->m->sampling == ILAB_SAMPLING_BACKEND && !env->m->cancel) {
        CONF_MSG("callback cancel passed; cancel() from another thread not run: capability cancel not declared");
        return CONF_PASS;
    }
    gp.cancel_after_tokens = 0;
    gp.cancel_thread_after = 3;
    r = conf_stream_run(env, &gp, &g, msg, cap);
    if (r != CONF_PASS)
        return r;
    n = g.n_tokens;
    fr = g.finish_reason;
    conf_gen_free(&g);
    CONF_CHECK(fr == ILAB_FINISH_CANCELLED && n <= 5,
               "cancel() from another thread at token 3: %zu tokens and '%s', want <= 5 and 'cancelled'",
               n, ilab_finish_reason_name(fr));
    /* the request id's domain is every uint64_t: its edges, where ids kept
     * in 32 or 63 bits stop matching (the ids above are drawn over it too) */
    static const uint64_t edges[] = {1, 0xffffffffULL, 0x100000003ULL, 0x8000000000000005ULL, UINT64_MAX};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        gp.request_id = edges[i];
        r = conf_stream_run(env, &gp, &g, msg, cap);
        if (r != CONF_PASS)
            return r;
        size_t m = g.n_tokens;
        ilab_finish_reason f = g.finish_reason;
        conf_gen_free(&g);
        CONF_CHECK(f == ILAB_FINISH_CANCELLED && m <= 5,
                   "request id %#llx, cancel() from another thread at token 3: %zu tokens and '%s', want <= 5 "
                   "and 'cancelled'", (unsigned long long)edges[i], m, ilab_finish_reason_name(f));
    }
    CONF_MSG("cancel from another thread stopped after %zu tokens; also with request ids at 2^32 - 1, "
             "2^32 + 3, 2^63 + 5 and 2^64 - 1", n);
    return CONF_PASS;
}

static size_t stop_window(const char *text, size_t len, size_t at);

/* STR-5 on every way a stream ends besides max_tokens: a stop string (3
 * bytes of the greedy output), a stop token id (its 3rd token) and the
 * callback's stop after 2 tokens: usage counts exactly the TOKEN events. */
static conf_result str5_every_ending(conf_env *env, char *msg, size_t cap)
{
    int32_t p[PROMPT];
    conf_gen_params gp;
    conf_gen g;
    conf_result r = conf_greedy_stream(env, env->opt->seed + 46, p, PROMPT, 12, &gp, &g, msg, cap);
    if (r != CONF_PASS)
        return r;
    char stop[8] = "";
    size_t sl = g.text_len > 4 ? stop_window(g.text, g.text_len, g.text_len / 2) : 0;
    if (sl)
        memcpy(stop, g.text + g.text_len / 2, sl);
    int32_t stop_id = g.n_tokens >= 3 ? g.tokens[2] : -1;
    conf_gen_free(&g);
    const char *stops[1] = {stop};
    for (int how = 0; how < 3; how++) {
        conf_gen_params q = gp;
        const char *what = how == 0 ? "a stop string" : how == 1 ? "a stop token id" : "the callback's stop";
        if (how == 0 && (!sl || ((unsigned char)stop[0] & 0xC0) == 0x80))
            continue;
        if (how == 0) {
            q.stop = stops;
            q.n_stop = 1;
        } else if (how == 1) {
            if (stop_id < 0)
                continue;
            q.stop_token_ids = &stop_id;
            q.n_stop_token_ids = 1;
        } else {
            q.cancel_after_tokens = 2;
        }
        r = conf_stream_run(env, &q, &g, msg, cap);
        if (r != CONF_PASS)
            return r;
        bool finished = g.terminal == ILAB_EVENT_FINISH;
        uint32_t pt = g.prompt_tokens, ct = g.completion_tokens;
        size_t n = g.n_tokens;
        conf_gen_free(&g);
        if (!finished)
            continue; /* an ERROR ending has no usage to check */
        CONF_CHECK(pt == PROMPT, "ended by %s: usage.prompt_tokens %u, the prompt had %d tokens", what, pt,
                   PROMPT);
        CONF_CHECK(ct == n, "ended by %s: usage.completion_tokens %u, the stream had %zu TOKEN events (seed %" PRIu64
                   ")", what, ct, n, env->opt->seed);
    }
    return CONF_PASS;
}

conf_result conf_str5_usage(conf_env *env, char *msg, size_t cap)
{
    NEED_STREAM();
    int32_t p[PROMPT + 3];
    conf_prompt_tokens(env, env->opt->seed + 44, p, PROMPT + 3);
    /* plain ids, then the same prompt after BOS: every id counts */
    for (int with_bos = 0; with_bos < (env->info.bos_id >= 0 ? 2 : 1); with_bos++) {
        if (with_bos)
            p[0] = env->info.bos_id;
        conf_gen_params gp;
        conf_gen_params_default(&gp, p, PROMPT + 3);
        gp.max_tokens = 5;
        conf_gen g;
        conf_result r = conf_stream_run(env, &gp, &g, msg, cap);
        if (r != CONF_PASS)
            return r;
        uint32_t pt = g.prompt_tokens, ct = g.completion_tokens;
        size_t n = g.n_tokens;
        conf_gen_free(&g);
        CONF_CHECK(pt == PROMPT + 3, "usage.prompt_tokens %u, the prompt%s had %d tokens", pt,
                   with_bos ? " (starting with BOS)" : "", PROMPT + 3);
        CONF_CHECK(ct == n, "usage.completion_tokens %u, the stream had %zu TOKEN events", ct, n);
    }
    return str5_every_ending(env, msg, cap);
}

/* The length of a stop string of up to 3 whole code points starting at
 * text[at] (a code point start), or 0 when it would hold a NUL. */
static size_t stop_window(const char *text, size_t len, size_t at)
{
    size_t sl = 0;
    for (int cps = 0; cps < 3 && at + sl < len; cps++) {
        sl++;
        while (at + sl < len && ((unsigned char)text[at + sl] & 0xC0) == 0x80 && sl < 7)
            sl++;
    }
    if (sl >= 8 || memchr(text + at, '\0', sl))
        return 0;
    return sl;
}

/* Where `needle` first occurs in `hay` (which may hold NULs); len if nowhere. */
static size_t first_at(const char *hay, size_t len, const char *needle, size_t n)
{
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(hay + i, needle, n) == 0)
            return i;
    return len;
}

conf_result conf_str6_stop(conf_env *env, char *msg, size_t cap)
{
    NEED_STREAM();
    int32_t p[PROMPT];
    conf_gen_params gp;
    conf_gen g;
    conf_result r = conf_greedy_stream(env, env->opt->seed + 45, p, PROMPT, 16, &gp, &g, msg, cap);
    if (r != CONF_PASS)
        return r;
    /* a stop string taken from the middle of the unconstrained output: up
     * to 3 whole code points, none of them NUL (a stop string is a C string) */
    char stop[8] = "";
    size_t at = 0, sl = 0;
    for (size_t k = 0; k < g.text_len && sl == 0; k++) {
        size_t half = g.text_len / 2; /* the middle first, then after it, then before it */
        at = k < g.text_len - half ? half + k : g.text_len - 1 - k;
        if (((unsigned char)g.text[at] & 0xC0) == 0x80)
            continue;
        sl = stop_window(g.text, g.text_len, at);
    }
    if (sl == 0) {
        size_t len = g.text_len;
        conf_gen_free(&g);
        CONF_MSG("the greedy output (%zu bytes) has no NUL-free code point to take a stop string from (seed %" PRIu64
                 ")", len, env->opt->seed);
        return len ? CONF_SKIP : CONF_FAIL;
    }
    memcpy(stop, g.text + at, sl);
    stop[sl] = '\0';
    size_t expect = first_at(g.text, g.text_len, stop, sl);
    char *want = malloc(expect + 1);
    memcpy(want, g.text, expect);
    conf_gen_free(&g);
    const char *stops[1] = {stop};
    gp.stop = stops;
    gp.n_stop = 1;
    r = conf_stream_run(env, &gp, &g, msg, cap);
    if (r != CONF_PASS) {
        free(want);
        return r;
    }
    bool text_ok = g.text_len == expect && memcmp(g.text, want, expect) == 0;
    ilab_finish_reason fr = g.finish_reason;
    size_t got_len = g.text_len;
    conf_gen_free(&g);
    free(want);
    CONF_CHECK(fr == ILAB_FINISH_STOP, "stop string of %zu bytes: finish reason '%s', want 'stop'", sl,
               ilab_finish_reason_name(fr));
    CONF_CHECK(text_ok, "stop string of %zu bytes: streamed %zu bytes, want the %zu bytes before it (trimmed)",
               sl, got_len, expect);
    return CONF_PASS;
}
