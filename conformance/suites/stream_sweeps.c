/* Stream sweeps (STR-1..10): many seeded generations at several
 * temperatures with random stop token ids, each checked against the whole
 * stream contract; stop-string sets; callback stop; cancel from another
 * thread at random points; a context that fills; refused requests. The
 * plugin's generate() for `sampling: backend`, the host engine otherwise. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "suites.h"
#include "text_tokens.h"

#define SWEEP_RUNS 48

static bool streams_at_all(conf_env *env)
{
    return env->m->sampling == ILAB_SAMPLING_HOST || env->m->streaming;
}

#define NEED_STREAMS() CONF_SKIP_UNLESS(streams_at_all(env), "streaming")

/* Everything one finished stream must satisfy. `stop_ids` were requested. */
static bool stream_ok(conf_env *env, const conf_gen_params *p, const conf_gen *g, const char *what, char *msg,
                      size_t cap)
{
    if (g->n_terminal != 1 || g->after_terminal || g->bad_type || g->wrong_id) {
        CONF_MSG("%s: %d terminal event(s), %d event(s) after it, %d of unknown type, %d without the request's "
                 "request_id (STR-1)", what, g->n_terminal, g->after_terminal, g->bad_type, g->wrong_id);
        return false;
    }
    if (g->terminal == ILAB_EVENT_ERROR) {
        CONF_MSG("%s: ended with ERROR %s: %s", what, ilab_status_name(g->status), g->error);
        return false;
    }
    if (g->completion_tokens != g->n_tokens || g->prompt_tokens != p->n_prompt) {
        CONF_MSG("%s: FINISH usage says %u prompt + %u completion tokens; the request had %zu and %zu TOKEN "
                 "events came (STR-5)", what, g->prompt_tokens, g->completion_tokens, p->n_prompt, g->n_tokens);
        return false;
    }
    for (size_t i = 0; i < g->n_tokens; i++)
        for (size_t k = 0; k < p->n_stop_token_ids; k++)
            if (g->tokens[i] == p->stop_token_ids[k] ||
                (!p->ignore_eos && env->info.eos_id >= 0 && g->tokens[i] == env->info.eos_id)) {
                CONF_MSG("%s: TOKEN %zu is %s %d, which ends the stream and is never emitted (STR-8)", what, i,
                         g->tokens[i] == env->info.eos_id ? "EOS" : "the stop token id", g->tokens[i]);
                return false;
            }
    if (g->split_utf8) {
        CONF_MSG("%s: a TOKEN's text ended inside a UTF-8 code point that the next one continues (STR-7)", what);
        return false;
    }
    bool defined = true;
    if (env->m->tokenizer &&
        !conf_output_text_defined(env, p->prompt[p->n_prompt - 1], g->tokens, g->n_tokens, &defined, msg, cap))
        return false;
    if (!defined && !conf_utf8_valid(g->text, g->text_len)) {
        CONF_MSG("%s: the TOKEN texts and FINISH's text (%zu bytes) are not valid UTF-8 (tokenizer: text, TOK-10)",
                 what, g->text_len);
        return false;
    }
    if (p->n_stop == 0 && env->m->tokenizer && defined) {
        /* the output text: token_piece over the emitted tokens, after the prompt */
        size_t len = 0;
        char *want = conf_output_text(env, p->prompt[p->n_prompt - 1], g->tokens, g->n_tokens, &len, msg, cap);
        if (!want)
            return false;
        bool same = len == g->text_len && memcmp(want, g->text, len) == 0;
        free(want);
        if (!same) {
            CONF_MSG("%s: the TOKEN texts and FINISH's text make %zu bytes, the output text (pieces of the %zu "
                     "tokens) %zu (held-back bytes lost or duplicated, STR-2)", what, g->text_len, g->n_tokens, len);
            return false;
        }
    }
    return true;
}

/* STR-1/2/5/7/8: seeded generations at T 0.7, 1 and 1.5, each with one or
 * two random stop token ids. */
conf_result conf_str_sweep(conf_env *env, char *msg, size_t cap)
{
    NEED_STREAMS();
    uint64_t rng = env->opt->seed * 7 + 1;
    int runs = SWEEP_RUNS * (env->opt->deep ? 10 : 1);
    static const float temps[] = {0.7f, 1.0f, 1.5f};
    for (int i = 0; i < runs; i++) {
        int32_t prompt[6], stop_ids[2];
        conf_prompt_tokens(env, conf_splitmix64(&rng), prompt, 6);
        conf_prompt_tokens(env, conf_splitmix64(&rng), stop_ids, 2);
        conf_gen_params p;
        conf_gen_params_default(&p, prompt, 6);
        p.sampling.temperature = temps[i % 3];
        p.sampling.seed = conf_splitmix64(&rng) >> 1; /* engines take signed 64-bit seeds */
        /* 48 streams of 48 tokens: a split that needs one particular
         * boundary inside a 4-byte code point shows at every seed (24 of
         * 24 missed one such plugin at 1 seed in 10) */
        p.max_tokens = 48;
        p.stop_token_ids = stop_ids;
        p.n_stop_token_ids = 1 + (size_t)(i & 1);
        conf_gen g;
        conf_result r = conf_generate(env, &p, &g, msg, cap);
        if (r != CONF_PASS)
            return r;
        char what[160];
        snprintf(what, sizeof what, "run %d (T %.1f, seed %" PRIu64 ", stop ids %d%s)", i,
                 (double)p.sampling.temperature, p.sampling.seed, stop_ids[0], p.n_stop_token_ids > 1 ? ",..." : "");
        bool ok = stream_ok(env, &p, &g, what, msg, cap);
        conf_gen_free(&g);
        if (!ok)
            return CONF_FAIL;
    }
    CONF_MSG("%d seeded streams (seed %" PRIu64 ")", runs, env->opt->seed);
    return CONF_PASS;
}

/* One ending of a stream right after token k, whose text ends inside a
 * code point: by a stop token id (the next token), by EOS when that is the
 * next token, or by max_tokens = k + 1. The TOKEN texts and FINISH's text
 * must be the output text of tokens 0..k, nothing held back lost. */
static conf_result held_back_ending(conf_env *env, const conf_gen_params *base, const conf_gen *full, size_t k,
                                    int how, const char *want, size_t want_len, bool *diverged, char *msg,
                                    size_t cap)
{
    static const char *const names[] = {"a stop token id", "EOS", "max_tokens"};
    conf_gen_params p = *base;
    int32_t next = full->tokens[k + 1];
    if (how == 0) {
        p.stop_token_ids = &next;
        p.n_stop_token_ids = 1;
    } else if (how == 1) {
        p.ignore_eos = false;
    } else {
        p.max_tokens = (int32_t)k + 1;
    }
    conf_gen g;
    conf_result r = conf_generate(env, &p, &g, msg, cap);
    if (r != CONF_PASS)
        return r;
    /* the same seed draws the same tokens up to the end (SMP-2); if not,
     * this is no case for STR-2 */
    bool same_draws = g.n_tokens == k + 1 && memcmp(g.tokens, full->tokens, (k + 1) * sizeof *g.tokens) == 0;
    if (!same_draws && g.n_tokens > k + 1 && memcmp(g.tokens, full->tokens, (k + 1) * sizeof *g.tokens) == 0) {
        CONF_MSG("seed %" PRIu64 ", T %.1f: ended by %s (%d) after token %zu: %zu TOKEN events came, want %zu",
                 p.sampling.seed, (double)p.sampling.temperature, names[how], next, k, g.n_tokens, k + 1);
        conf_gen_free(&g);
        return CONF_FAIL;
    }
    if (!same_draws) {
        *diverged = true;
        conf_gen_free(&g);
        return CONF_PASS;
    }
    bool ok = g.n_terminal == 1 && g.terminal == ILAB_EVENT_FINISH &&
              g.finish_reason == (how == 2 ? ILAB_FINISH_LENGTH : ILAB_FINISH_STOP) && g.text_len == want_len &&
              memcmp(g.text, want, want_len) == 0;
    if (!ok) {
        char tail[40] = "";
        size_t from = want_len > 4 ? want_len - 4 : 0, t = 0;
        for (size_t i = from; i < want_len && t + 5 < sizeof tail; i++)
            t += (size_t)snprintf(tail + t, sizeof tail - t, "%02x ", (unsigned char)want[i]);
        CONF_MSG("seed %" PRIu64 ", T %.1f, prompt of %zu tokens: the stream ended by %s (%d) right after token %zu, "
                 "whose text ends inside a code point (last bytes %s): TOKEN texts + FINISH text are %zu bytes (%zu on "
                 "FINISH), finish %s; want the %zu bytes of the output text and %s (held-back bytes ride on FINISH, "
                 "STR-2/STR-7)", p.sampling.seed, (double)p.sampling.temperature, p.n_prompt, names[how],
                 how == 2 ? (int)k + 1 : next, k, tail, g.text_len, g.finish_text_len,
                 ilab_finish_reason_name(g.finish_reason), want_len, how == 2 ? "length" : "stop");
    }
    conf_gen_free(&g);
    return ok ? CONF_PASS : CONF_FAIL;
}

/* STR-2: streams that end right after a token whose text ends inside a
 * code point. Seeded streams at a high temperature are searched for such
 * a token k (its next token not drawn before), then replayed with the same
 * seed and ended there three ways. */
conf_result conf_str2_held_back(conf_env *env, char *msg, size_t cap)
{
    NEED_STREAMS();
    CONF_SKIP_UNLESS(env->m->tokenizer, "tokenizer");
    CONF_SKIP_IF_TEXT(env, "a text piece never ends inside a code point, so no such ending can be found; the "
                           "stream sweeps check that no TOKEN text ends inside one (STR-7)");
    uint64_t rng = env->opt->seed * 7 + 9;
    int runs = SWEEP_RUNS * 2 * (env->opt->deep ? 10 : 1), found = 0, diverged = 0, want_cases = 6;
    for (int i = 0; i < runs && found < want_cases; i++) {
        int32_t prompt[6];
        conf_prompt_tokens(env, conf_splitmix64(&rng), prompt, 6);
        conf_gen_params p;
        conf_gen_params_default(&p, prompt, 6);
        p.sampling.temperature = 1.5f;
        p.sampling.seed = conf_splitmix64(&rng) >> 1;
        p.max_tokens = 32;
        p.ignore_eos = true;
        conf_gen full;
        conf_result r = conf_generate(env, &p, &full, msg, cap);
        if (r != CONF_PASS)
            return r;
        size_t len = 0;
        char *text = full.status == ILAB_OK ? conf_output_text(env, prompt[5], full.tokens, full.n_tokens, &len, msg, cap) : NULL;
        if (full.status == ILAB_OK && !text) {
            conf_gen_free(&full); /* msg names the token_piece() call that failed */
            return CONF_FAIL;
        }
        size_t at = 0;
        for (size_t k = 0; text && k + 1 < full.n_tokens && r == CONF_PASS; k++) {
            size_t plen = 0;
            char piece[64];
            if (env->api->token_piece(env->be, k ? full.tokens[k - 1] : prompt[5], full.tokens[k], piece, sizeof piece,
                                      &plen) != ILAB_OK)
                break;
            at += plen;
            int32_t next = full.tokens[k + 1];
            bool fresh = true;
            for (size_t j = 0; j <= k; j++)
                fresh &= full.tokens[j] != next;
            if (!fresh || !conf_utf8_ends_inside(text, at))
                continue;
            bool is_eos = next == env->info.eos_id;
            for (int how = 0; how < 3 && r == CONF_PASS; how++) {
                if (how == 1 && !is_eos)
                    continue;
                bool div = false;
                r = held_back_ending(env, &p, &full, k, how, text, at, &div, msg, cap);
                diverged += div;
            }
            found++;
            break;
        }
        free(text);
        conf_gen_free(&full);
        if (r != CONF_PASS)
            return r;
    }
    CONF_MSG("%d stream(s) ended right after a token inside a code point (stop id, EOS when next, max_tokens): "
             "every held-back byte delivered; %d replay(s) drew differently (seed %" PRIu64 ")%s", found, diverged,
             env->opt->seed, found ? "" : "; no stream of this vocabulary ended inside a code point");
    return CONF_PASS;
}

/* STR-6: a set of stop strings where a later one occurs first: the output
 * ends right before its first occurrence, FINISH(stop). */
conf_result conf_str6_stop_set(conf_env *env, char *msg, size_t cap)
{
    NEED_STREAMS();
    uint64_t rng = env->opt->seed * 7 + 6;
    int tried = 0;
    for (int i = 0; i < 12 && tried < 4; i++) {
        int32_t prompt[4];
        conf_gen_params p;
        conf_gen full;
        conf_result r = conf_greedy_stream(env, conf_splitmix64(&rng), prompt, 4, 24, &p, &full, msg, cap);
        if (r != CONF_PASS)
            return r;
        /* a 2-byte stop string from the middle of the text, without NUL */
        size_t at = full.text_len > 6 ? 3 + conf_splitmix64(&rng) % (full.text_len - 5) : 0;
        char stop2[3] = {0};
        bool usable = full.text_len > 6 && full.text[at] && full.text[at + 1];
        if (usable) {
            memcpy(stop2, full.text + at, 2);
            char *first = memmem(full.text, full.text_len, stop2, 2);
            at = (size_t)(first - full.text);
        }
        if (!usable) {
            conf_gen_free(&full);
            continue;
        }
        tried++;
        const char *stops[3] = {"\x01\x02~never~", stop2, "\x03\x04~nor~"};
        p.stop = stops;
        p.n_stop = 3;
        conf_gen g;
        r = conf_generate(env, &p, &g, msg, cap);
        bool ok = r == CONF_PASS && g.n_terminal == 1 && g.terminal == ILAB_EVENT_FINISH &&
                  g.finish_reason == ILAB_FINISH_STOP && g.text_len == at && memcmp(g.text, full.text, at) == 0;
        if (!ok && r == CONF_PASS)
            CONF_MSG("stop strings {\"\\x01\\x02~never~\", \"%s\", \"\\x03\\x04~nor~\"} on a greedy text whose "
                     "first \"%s\" is at byte %zu: got %zu bytes, finish %s (want %zu bytes, stop; every string "
                     "of the set counts)", stop2, stop2, at, g.text_len, ilab_finish_reason_name(g.finish_reason), at);
        conf_gen_free(&g);
        conf_gen_free(&full);
        if (!ok)
            return r == CONF_PASS ? CONF_FAIL : r;
    }
    CONF_MSG("%d stop-string sets honoured", tried);
    return CONF_PASS;
}

/* STR-10: the callback asks to stop at token k: exactly k TOKENs, then
 * FINISH(cancelled). */
conf_result conf_str10_callback_stop(conf_env *env, char *msg, size_t cap)
{
    NEED_STREAMS();
    for (int k = 1; k <= 5; k++) {
        int32_t prompt[4];
        conf_gen_params p;
        conf_greedy_request(env, env->opt->seed + 60 + (uint64_t)k, prompt, 4, 16, &p);
        p.cancel_after_tokens = k;
        conf_gen g;
        conf_result r = conf_generate(env, &p, &g, msg, cap);
        if (r != CONF_PASS)
            return r;
        bool ok = g.n_tokens == (size_t)k && g.n_terminal == 1 && g.terminal == ILAB_EVENT_FINISH &&
                  g.finish_reason == ILAB_FINISH_CANCELLED && g.after_terminal == 0;
        if (!ok)
            CONF_MSG("the callback returned nonzero at TOKEN %d: got %zu TOKENs and %s(%s); want %d and "
                     "FINISH(cancelled)", k, g.n_tokens, g.terminal == ILAB_EVENT_ERROR ? "ERROR" : "FINISH",
                     ilab_finish_reason_name(g.finish_reason), k);
        conf_gen_free(&g);
        if (!ok)
            return CONF_FAIL;
    }
    return CONF_PASS;
}

/* STR-4: cancel() from another thread at token k (1..8): at most 2 more
 * TOKENs after it returned, then FINISH(cancelled); cancel() of an id that
 * is not running is OK. */
conf_result conf_str4_cancel_sweep(conf_env *env, char *msg, size_t cap)
{
    NEED_STREAMS();
    CONF_SKIP_UNLESS(env->m->sampling == ILAB_SAMPLING_HOST || env->m->cancel, "cancel");
    if (env->m->sampling == ILAB_SAMPLING_BACKEND) {
        ilab_status st = env->api->cancel(env->be, 987654321ull);
        CONF_CHECK(st == ILAB_OK, "cancel() of an id that is not running returned %s, want OK",
                   ilab_status_name(st));
    }
    for (int k = 1; k <= 8; k++) {
        int32_t prompt[4];
        conf_prompt_tokens(env, env->opt->seed + 70 + (uint64_t)k, prompt, 4);
        conf_gen_params p;
        conf_gen_params_default(&p, prompt, 4);
        p.max_tokens = 40;
        p.ignore_eos = true;
        p.sampling.temperature = 1.0f;
        p.cancel_thread_after = k;
        conf_gen g;
        conf_result r = conf_generate(env, &p, &g, msg, cap);
        if (r != CONF_PASS)
            return r;
        size_t after = g.n_tokens - g.tokens_at_cancel;
        bool ok = g.n_terminal == 1 && g.terminal == ILAB_EVENT_FINISH && after <= 2 &&
                  (g.finish_reason == ILAB_FINISH_CANCELLED || g.n_tokens >= (size_t)p.max_tokens);
        if (!ok)
            CONF_MSG("cancel() from another thread at TOKEN %d: %zu more TOKEN(s) after it returned (at most "
                     "2), finish %s", k, after, ilab_finish_reason_name(g.finish_reason));
        conf_gen_free(&g);
        if (!ok)
            return CONF_FAIL;
    }
    return CONF_PASS;
}

/* STR-3: prompts of max_context - 2, - 1 and max_context tokens (max_tokens
 * 16, EOS ignored) end with FINISH(length), not ERROR, after C - L + 1
 * TOKENs (the last one is not appended) or C - L (every one is): the same
 * rule for all three, so a full prompt gives 1 TOKEN (or none). */
conf_result conf_str3_context_full(conf_env *env, char *msg, size_t cap)
{
    NEED_STREAMS();
    int32_t ctx = conf_max_context(env);
    CONF_SKIP_UNLESS(ctx > 4 && ctx <= 8192, "a max_context small enough to fill");
    int32_t *prompt = malloc((size_t)ctx * sizeof *prompt);
    conf_prompt_tokens(env, env->opt->seed + 80, prompt, ctx);
    int rule = -1; /* the TOKENs past C - L of the first prompt: 1 or 0 */
    conf_result r = CONF_PASS;
    for (int32_t left = 2; left >= 0 && r == CONF_PASS; left--) {
        conf_gen_params p;
        conf_gen_params_default(&p, prompt, (size_t)(ctx - left));
        p.max_tokens = 16;
        p.ignore_eos = true;
        conf_gen g;
        r = conf_generate(env, &p, &g, msg, cap);
        if (r != CONF_PASS)
            break;
        int extra = g.n_tokens == (size_t)left + 1 ? 1 : g.n_tokens == (size_t)left ? 0 : -1;
        bool ok = g.n_terminal == 1 && g.terminal == ILAB_EVENT_FINISH && g.finish_reason == ILAB_FINISH_LENGTH &&
                  extra >= 0 && (rule < 0 || extra == rule);
        if (!ok) {
            CONF_MSG("a prompt of max_context - %d = %d tokens with max_tokens 16 ended with %s(%s %s) after %zu "
                     "TOKENs; want FINISH(length) after %d (the last TOKEN not appended) or %d (every TOKEN "
                     "appended)%s", left, ctx - left, g.terminal == ILAB_EVENT_ERROR ? "ERROR" : "FINISH",
                     ilab_finish_reason_name(g.finish_reason),
                     g.terminal == ILAB_EVENT_ERROR ? ilab_status_name(g.status) : "", g.n_tokens, left + 1, left,
                     rule < 0 ? "" : rule ? ", and max_context - 2 gave 3: C - L + 1" : ", and max_context - 2 "
                     "gave 2: C - L");
            r = CONF_FAIL;
        }
        rule = extra;
        conf_gen_free(&g);
    }
    free(prompt);
    if (r == CONF_PASS)
        CONF_MSG("prompts of max_context %d - 2, - 1, - 0: FINISH(length) after C - L%s TOKENs", ctx,
                 rule ? " + 1" : "");
    return r;
}

typedef struct refusal_probe {
    int tokens, errors, finishes;
    bool empty_message;
} refusal_probe;

static int count_event(void *user, const ilab_event_t *ev)
{
    refusal_probe *r = user;
    if (ev->type == ILAB_EVENT_TOKEN)
        r->tokens++;
    else if (ev->type == ILAB_EVENT_ERROR) {
        r->errors++;
        r->empty_message |= !ev->message || !ev->message[0];
    } else if (ev->type == ILAB_EVENT_FINISH)
        r->finishes++;
    return 0;
}

/* STR-9 (backend sampling): a refused request gets exactly one ERROR event
 * with a message and no TOKEN. */
conf_result conf_str9_refusals(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->sampling == ILAB_SAMPLING_BACKEND, "sampling: backend");
    int32_t good[2] = {0, 0}, bad = env->info.vocab_size + 5;
    conf_prompt_tokens(env, env->opt->seed + 90, good, 2);
    for (int kind = 0; kind < 3; kind++) {
        ilab_sampling_t s = {.struct_size = sizeof s, .top_p = 1, .repetition_penalty = 1};
        ilab_generate_request_t req = {.struct_size = sizeof req, .request_id = 500 + (uint64_t)kind,
                                       .prompt_tokens = good, .n_prompt_tokens = 2, .sampling = &s,
                                       .max_tokens = 4};
        const char *what = "max_tokens 0";
        if (kind == 0)
            req.max_tokens = 0;
        else if (kind == 1) {
            req.prompt_tokens = &bad;
            req.n_prompt_tokens = 1;
            what = "an out-of-range prompt id";
        } else {
            req.n_prompt_tokens = 0;
            what = "an empty prompt";
        }
        refusal_probe r = {0};
        ilab_status st = env->api->generate(env->be, &req, count_event, &r);
        CONF_CHECK(st != ILAB_OK && r.errors == 1 && r.tokens == 0 && r.finishes == 0 && !r.empty_message,
                   "generate() with %s returned %s after %d TOKEN, %d ERROR, %d FINISH event(s)%s; want a non-OK "
                   "status and exactly one ERROR event with a message", what, ilab_status_name(st), r.tokens,
                   r.errors, r.finishes, r.empty_message ? " (an empty message)" : "");
    }
    return CONF_PASS;
}

/* ABI-3 (backend sampling): an ilab_sampling_t larger than the plugin's
 * with a non-zero unknown tail is refused, not silently half-read. */
conf_result conf_abi3_sampling_tail(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->sampling == ILAB_SAMPLING_BACKEND, "sampling: backend");
    struct {
        ilab_sampling_t s;
        float future;
    } big;
    memset(&big, 0, sizeof big);
    big.s = (ilab_sampling_t){.struct_size = sizeof big, .top_p = 1, .repetition_penalty = 1};
    big.future = 0.5f;
    int32_t prompt[2];
    conf_prompt_tokens(env, env->opt->seed + 91, prompt, 2);
    ilab_generate_request_t req = {.struct_size = sizeof req, .request_id = 600, .prompt_tokens = prompt,
                                   .n_prompt_tokens = 2, .sampling = &big.s, .max_tokens = 2};
    refusal_probe r = {0};
    ilab_status st = env->api->generate(env->be, &req, count_event, &r);
    CONF_CHECK(st != ILAB_OK && r.tokens == 0,
               "generate() with an ilab_sampling_t of struct_size %zu whose unknown tail is non-zero returned %s "
               "after %d TOKEN(s); want it refused (ABI_MISMATCH)", sizeof big, ilab_status_name(st), r.tokens);
    return CONF_PASS;
}
