/* STR clauses: the event stream of a request, generated the way the host
 * does it (conf_generate: the plugin's generate() or the host engine). */
#include <stdlib.h>
#include <string.h>

#include "suites.h"

#define PROMPT 6

static bool can_stream(const conf_env *env)
{
    return env->m->sampling == ILAB_SAMPLING_HOST || env->m->streaming;
}
#define NEED_STREAM() CONF_SKIP_UNLESS(can_stream(env), "streaming")

static conf_result run(conf_env *env, conf_gen_params *p, conf_gen *g, char *msg, size_t cap)
{
    conf_result r = conf_generate(env, p, g, msg, cap);
    if (r != CONF_PASS)
        return r;
    if (g->status != ILAB_OK && g->finish_reason != ILAB_FINISH_CANCELLED) {
        CONF_MSG("generation failed: %s: %s", ilab_status_name(g->status), g->error);
        conf_gen_free(g);
        return CONF_FAIL;
    }
    return CONF_PASS;
}

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
    const char *cases[3] = {"greedy, 12 tokens", "cancelled from the callback", "temperature 1, EOS allowed"};
    for (int i = 0; i < 3; i++) {
        if (i == 1) {
            gp.ignore_eos = true;
            gp.cancel_after_tokens = 2;
        } else if (i == 2) {
            gp.cancel_after_tokens = 0;
            gp.sampling.temperature = 1.0f;
            gp.sampling.seed = env->opt->seed;
        }
        conf_gen g;
        conf_result r = run(env, &gp, &g, msg, cap);
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
    conf_prompt_tokens(env, env->opt->seed + 41, p, PROMPT);
    conf_gen_params gp;
    conf_gen_params_default(&gp, p, PROMPT);
    gp.max_tokens = 16;
    gp.ignore_eos = true;
    conf_gen a, b;
    conf_result r = run(env, &gp, &a, msg, cap);
    if (r != CONF_PASS)
        return r;
    r = run(env, &gp, &b, msg, cap);
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
    if (env->m->tokenizer) {
        size_t len;
        char *d = conf_detokenize(env, a.tokens, a.n_tokens, &len, msg, cap);
        if (!d)
            goto out;
        bool same = len == a.text_len && memcmp(d, a.text, len) == 0;
        free(d);
        if (!same) {
            CONF_MSG("concatenated TOKEN text (%zu bytes) != detokenize of the TOKEN ids (%zu bytes)", a.text_len, len);
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
    conf_prompt_tokens(env, env->opt->seed + 42, p, PROMPT);
    conf_gen_params gp;
    conf_gen_params_default(&gp, p, PROMPT);
    gp.max_tokens = 7;
    gp.ignore_eos = true;
    conf_gen g;
    conf_result r = run(env, &gp, &g, msg, cap);
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
    conf_prompt_tokens(env, env->opt->seed + 43, p, PROMPT);
    conf_gen_params gp;
    conf_gen_params_default(&gp, p, PROMPT);
    gp.max_tokens = 200;
    gp.ignore_eos = true;
    gp.cancel_after_tokens = 3;
    conf_gen g;
    conf_result r = run(env, &gp, &g, msg, cap);
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
    r = run(env, &gp, &g, msg, cap);
    if (r != CONF_PASS)
        return r;
    n = g.n_tokens;
    fr = g.finish_reason;
    conf_gen_free(&g);
    CONF_CHECK(fr == ILAB_FINISH_CANCELLED && n <= 5,
               "cancel() from another thread at token 3: %zu tokens and '%s', want <= 5 and 'cancelled'",
               n, ilab_finish_reason_name(fr));
    CONF_MSG("cancel from another thread stopped after %zu tokens", n);
    return CONF_PASS;
}

conf_result conf_str5_usage(conf_env *env, char *msg, size_t cap)
{
    NEED_STREAM();
    int32_t p[PROMPT + 3];
    conf_prompt_tokens(env, env->opt->seed + 44, p, PROMPT + 3);
    conf_gen_params gp;
    conf_gen_params_default(&gp, p, PROMPT + 3);
    gp.max_tokens = 5;
    conf_gen g;
    conf_result r = run(env, &gp, &g, msg, cap);
    if (r != CONF_PASS)
        return r;
    uint32_t pt = g.prompt_tokens, ct = g.completion_tokens;
    size_t n = g.n_tokens;
    conf_gen_free(&g);
    CONF_CHECK(pt == PROMPT + 3, "usage.prompt_tokens %u, the prompt had %d tokens", pt, PROMPT + 3);
    CONF_CHECK(ct == n, "usage.completion_tokens %u, the stream had %zu TOKEN events", ct, n);
    return CONF_PASS;
}

conf_result conf_str6_stop(conf_env *env, char *msg, size_t cap)
{
    NEED_STREAM();
    int32_t p[PROMPT];
    conf_prompt_tokens(env, env->opt->seed + 45, p, PROMPT);
    conf_gen_params gp;
    conf_gen_params_default(&gp, p, PROMPT);
    gp.max_tokens = 16;
    gp.ignore_eos = true;
    conf_gen g;
    conf_result r = run(env, &gp, &g, msg, cap);
    if (r != CONF_PASS)
        return r;
    /* a stop string taken from the middle of the unconstrained output */
    char stop[8] = "";
    size_t at = g.text_len / 2;
    while (at > 0 && ((unsigned char)g.text[at] & 0xC0) == 0x80)
        at--;
    size_t sl = 0;
    while (at + sl < g.text_len && sl < 3) {
        sl++;
        while (at + sl < g.text_len && ((unsigned char)g.text[at + sl] & 0xC0) == 0x80 && sl < 7)
            sl++;
    }
    if (sl == 0 || sl >= sizeof stop) {
        CONF_MSG("the greedy output is too short to take a stop string from (%zu bytes)", g.text_len);
        conf_gen_free(&g);
        return CONF_FAIL;
    }
    memcpy(stop, g.text + at, sl);
    stop[sl] = '\0';
    size_t expect = (size_t)(strstr(g.text, stop) - g.text);
    char *want = strndup(g.text, expect);
    conf_gen_free(&g);
    const char *stops[1] = {stop};
    gp.stop = stops;
    gp.n_stop = 1;
    r = run(env, &gp, &g, msg, cap);
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
