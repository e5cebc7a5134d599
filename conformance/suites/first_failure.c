/* Every refusal the contract names, provoked as the first failure of a
 * fresh instance (ERR-1, ERR-4, and the clause that names the refusal).
 *
 * A message check made after other calls already failed cannot tell a
 * message set by this call from one left by an earlier one. So each kind
 * of refusal gets an instance of its own, created for it with the
 * worker's configuration, on which it is the first call to fail: the
 * status must be the one its clause names, last_error() must then hold a
 * non-empty message (ERR-1, ERR-4), and a refused generate() must emit
 * exactly one ERROR event with a non-empty message that last_error() also
 * gives (ERR-1, ERR-4). Kinds: seq_truncate below 0 and past the length
 * (CCH-4); seq_length, seq_free and seq_fork of a freed handle (CCH-6); an
 * eval() with an id past the vocabulary (TOK-6), past max_context (CCH-5),
 * with n_tokens 0 and -1 (LOG-6); tokenize() with an unknown flag (TOK-8);
 * detokenize() and token_piece() of an id out of range (TOK-6);
 * model_info(NULL) (ERR-3); generate() with max_tokens 0, top_logprobs -1
 * and topk_max + 1 (STR-9), a prompt past max_context (STR-3), a sampling
 * and a request struct_size below ABI 1.0's (ABI-3).
 *
 * One sweep per worker; each clause's test reports its own violations. */
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "suites.h"

enum { C_ERR1, C_ERR4, C_CCH4, C_CCH6, C_CCH5, C_LOG6, C_TOK6, C_TOK8, C_ERR3, C_STR9, C_STR3, C_ABI3, N_CL };
static const char *const clause_names[N_CL] = {"ERR-1", "ERR-4", "CCH-4", "CCH-6", "CCH-5", "LOG-6",
                                               "TOK-6", "TOK-8", "ERR-3", "STR-9", "STR-3", "ABI-3"};

typedef struct ff_sweep {
    bool done;
    int kinds;
    char fail[N_CL][CONF_MSG_CAP];
} ff_sweep;

static ff_sweep g_ff;

static void ff_note(int clause, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ff_note(int clause, const char *fmt, ...)
{
    if (g_ff.fail[clause][0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_ff.fail[clause], sizeof g_ff.fail[clause], fmt, ap);
    va_end(ap);
}

typedef struct ff_ctx {
    conf_env *env;
    ilab_backend_t *b;
    const char *what;
    int clause; /* the clause naming this refusal */
} ff_ctx;

/* A refused call's status and the message it left. */
static void judge(ff_ctx *x, ilab_status st, ilab_status want1, ilab_status want2)
{
    if (st == ILAB_OK || (st != want1 && st != want2)) {
        ff_note(x->clause, "%s on a fresh instance returned %s, want %s", x->what, ilab_status_name(st),
                ilab_status_name(want1));
        if (st == ILAB_OK)
            return;
    }
    char buf[512] = "";
    size_t len = x->env->api->last_error(x->b, buf, sizeof buf);
    if (len == 0 || !buf[0])
        ff_note(C_ERR1, "%s, the first failure of a fresh instance, returned %s and left last_error() empty "
                "(length %zu)", x->what, ilab_status_name(st), len);
}

static ilab_seq_t new_seq(ff_ctx *x, int32_t n_tokens)
{
    ilab_seq_t s = 0;
    if (x->env->api->seq_create(x->b, &s) != ILAB_OK)
        return 0;
    if (n_tokens > 0) {
        int32_t t[4];
        conf_prompt_tokens(x->env, 77, t, n_tokens);
        conf_env e = *x->env;
        e.be = x->b;
        if (conf_eval1(&e, s, t, n_tokens, 0, NULL) != ILAB_OK)
            return 0;
    }
    return s;
}

static ilab_status eval_one(ff_ctx *x, ilab_seq_t s, const int32_t *t, int32_t n)
{
    ilab_batch_item_t item = {.struct_size = sizeof item, .seq = s, .tokens = t, .n_tokens = n};
    const ilab_batch_item_t *items[1] = {&item};
    return x->env->api->eval(x->b, items, 1);
}

typedef struct gen_seen {
    int events, errors;
    ilab_status status;
    char message[512];
} gen_seen;

static int on_event(void *user, const ilab_event_t *ev)
{
    gen_seen *g = user;
    g->events++;
    if (ev->type == ILAB_EVENT_ERROR) {
        g->errors++;
        g->status = ev->status;
        snprintf(g->message, sizeof g->message, "%s", ev->message ? ev->message : "");
    }
    return 0;
}

/* A refused generate(): non-OK or one ERROR event; a message in the event
 * and the same in last_error(). */
static void judge_generate(ff_ctx *x, ilab_generate_request_t *req, ilab_status want)
{
    gen_seen g = {0};
    ilab_status st = x->env->api->generate(x->b, req, on_event, &g);
    if (st == ILAB_OK && g.errors == 0) {
        ff_note(x->clause, "generate() with %s returned OK with %d event(s) and no ERROR: want a refusal (%s)",
                x->what, g.events, ilab_status_name(want));
        return;
    }
    if (g.errors > 1 || (g.errors == 1 && g.events != 1))
        ff_note(C_STR9, "generate() with %s emitted %d event(s), %d ERROR: a refusal is exactly one ERROR event",
                x->what, g.events, g.errors);
    if (g.errors && !g.message[0])
        ff_note(C_ERR1, "generate() with %s emitted an ERROR event (%s) with an empty message", x->what,
                ilab_status_name(g.status));
    char buf[512] = "";
    size_t len = x->env->api->last_error(x->b, buf, sizeof buf);
    if (len == 0 || !buf[0])
        ff_note(C_ERR4, "generate() with %s, the first failure of a fresh instance, was refused (%s%s%s) but "
                "last_error() is empty: it holds the message of the call that just failed", x->what,
                ilab_status_name(g.errors ? g.status : st), g.errors ? ", ERROR event \"" : "",
                g.errors ? g.message : "");
    else if (g.errors && g.message[0] && strcmp(buf, g.message) != 0 && strlen(g.message) < sizeof buf - 1)
        ff_note(C_ERR4, "generate() with %s: the ERROR event said \"%s\", last_error() \"%s\": the message of "
                "the call that just failed", x->what, g.message, buf);
}

static bool fresh(ff_ctx *x)
{
    char err[512] = "";
    x->b = NULL;
    return x->env->api->create(x->env->host, x->env->config, x->env->n_config, err, sizeof err, &x->b) ==
               ILAB_OK && x->b;
}

static void run_kind(conf_env *env, int kind)
{
    ff_ctx x = {env, NULL, "", C_ERR1};
    const ilab_manifest *m = env->m;
    int32_t vocab = env->info.vocab_size, max_ctx = conf_max_context(env);
    bool logits = m->logits != ILAB_LOGITS_NONE, backend = m->sampling == ILAB_SAMPLING_BACKEND;
    /* which kinds apply, before paying for an instance */
    static const int needs_logits[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    if (kind >= 20 || (needs_logits[kind] && !logits) || (kind >= 13 && !backend) ||
        ((kind == 0 || kind == 1) && !m->cache_truncate) || (kind == 4 && !m->cache_fork) ||
        ((kind == 9 || kind == 10 || kind == 11) && !m->tokenizer))
        return;
    if (!fresh(&x))
        return;
    g_ff.kinds++;
    int32_t tok[4] = {0, 0, 0, 0};
    conf_prompt_tokens(env, 99, tok, 4);
    ilab_seq_t s;
    switch (kind) {
    case 0:
        x.what = "seq_truncate(length + 1)", x.clause = C_CCH4;
        if ((s = new_seq(&x, 2)))
            judge(&x, env->api->seq_truncate(x.b, s, 3), ILAB_INVALID_ARGUMENT, ILAB_INVALID_ARGUMENT);
        break;
    case 1:
        x.what = "seq_truncate(-1)", x.clause = C_CCH4;
        if ((s = new_seq(&x, 2)))
            judge(&x, env->api->seq_truncate(x.b, s, -1), ILAB_INVALID_ARGUMENT, ILAB_INVALID_ARGUMENT);
        break;
    case 2: case 3: case 4: {
        x.clause = C_CCH6;
        if (!(s = new_seq(&x, 1)) || env->api->seq_free(x.b, s) != ILAB_OK)
            break;
        int32_t len = 0;
        ilab_seq_t child = 0;
        x.what = kind == 2 ? "seq_length(a freed handle)" : kind == 3 ? "seq_free(a freed handle)"
                                                                      : "seq_fork(a freed handle)";
        ilab_status st = kind == 2 ? env->api->seq_length(x.b, s, &len)
                       : kind == 3 ? env->api->seq_free(x.b, s) : env->api->seq_fork(x.b, s, &child);
        judge(&x, st, ILAB_INVALID_ARGUMENT, ILAB_INVALID_ARGUMENT);
        break;
    }
    case 5:
        x.what = "eval() of an id equal to vocab_size", x.clause = C_TOK6;
        tok[1] = vocab;
        if ((s = new_seq(&x, 0)))
            judge(&x, eval_one(&x, s, tok, 2), ILAB_INVALID_ARGUMENT, ILAB_INVALID_ARGUMENT);
        break;
    case 6: {
        x.what = "eval() of max_context + 1 tokens", x.clause = C_CCH5;
        int32_t *t = malloc((size_t)(max_ctx + 1) * sizeof *t);
        if (t && (s = new_seq(&x, 0))) {
            conf_prompt_tokens(env, 5, t, max_ctx + 1);
            judge(&x, eval_one(&x, s, t, max_ctx + 1), ILAB_CONTEXT_OVERFLOW, ILAB_CONTEXT_OVERFLOW);
        }
        free(t);
        break;
    }
    case 7: case 8:
        x.what = kind == 7 ? "eval() of an item with n_tokens 0" : "eval() of an item with n_tokens -1";
        x.clause = C_LOG6;
        if ((s = new_seq(&x, 1)))
            judge(&x, eval_one(&x, s, tok, kind == 7 ? 0 : -1), ILAB_INVALID_ARGUMENT, ILAB_INVALID_ARGUMENT);
        break;
    case 9: {
        /* The lowest bit this plugin does not know: PARSE_SPECIAL (4) is
         * known where chat is declared (TOK-11). */
        uint32_t unknown = m->chat ? ILAB_TOKENIZE_PARSE_SPECIAL << 1 : ILAB_TOKENIZE_PARSE_SPECIAL;
        x.what = m->chat ? "tokenize() with the unknown flag bit 8" : "tokenize() with the unknown flag bit 4";
        x.clause = C_TOK8;
        int32_t out[16];
        size_t n = 0;
        judge(&x, env->api->tokenize(x.b, "ab", 2, unknown, out, 16, &n), ILAB_INVALID_ARGUMENT,
              ILAB_INVALID_ARGUMENT);
        break;
    }
    case 10: {
        x.what = "detokenize() of an id equal to vocab_size", x.clause = C_TOK6;
        char text[64];
        size_t len = 0;
        tok[1] = vocab;
        judge(&x, env->api->detokenize(x.b, tok, 2, text, sizeof text, &len), ILAB_INVALID_ARGUMENT,
              ILAB_INVALID_ARGUMENT);
        break;
    }
    case 11: {
        x.what = "token_piece() of token -1", x.clause = C_TOK6;
        char piece[64];
        size_t len = 0;
        judge(&x, env->api->token_piece(x.b, -1, -1, piece, sizeof piece, &len), ILAB_INVALID_ARGUMENT,
              ILAB_INVALID_ARGUMENT);
        break;
    }
    case 12:
        x.what = "model_info(NULL)", x.clause = C_ERR3;
        judge(&x, env->api->model_info(x.b, NULL), ILAB_INVALID_ARGUMENT, ILAB_INVALID_ARGUMENT);
        break;
    default: { /* generate() refusals */
        ilab_sampling_t smp = {.struct_size = sizeof smp, .temperature = 0, .top_p = 1, .repetition_penalty = 1};
        ilab_generate_request_t req = {.struct_size = sizeof req, .request_id = 4242, .prompt_tokens = tok,
                                       .n_prompt_tokens = 2, .sampling = &smp, .max_tokens = 2};
        int32_t *long_prompt = NULL;
        ilab_status want = ILAB_INVALID_ARGUMENT;
        x.clause = C_STR9;
        switch (kind) {
        case 13: x.what = "max_tokens 0"; req.max_tokens = 0; break;
        case 14: x.what = "top_logprobs -1"; req.top_logprobs = -1; break;
        case 15: x.what = "top_logprobs topk_max + 1"; req.top_logprobs = m->topk_max + 1; break;
        case 16:
            x.what = "a prompt of max_context + 1 tokens", x.clause = C_STR3, want = ILAB_CONTEXT_OVERFLOW;
            long_prompt = malloc((size_t)(max_ctx + 1) * sizeof *long_prompt);
            if (!long_prompt)
                break;
            conf_prompt_tokens(env, 6, long_prompt, max_ctx + 1);
            req.prompt_tokens = long_prompt, req.n_prompt_tokens = (size_t)max_ctx + 1;
            break;
        case 17:
            x.what = "a sampling struct_size of 4", x.clause = C_ABI3, want = ILAB_ABI_MISMATCH;
            smp.struct_size = 4;
            break;
        case 18:
            x.what = "a request struct_size just below ABI 1.0's", x.clause = C_ABI3, want = ILAB_ABI_MISMATCH;
            req.struct_size = (uint32_t)offsetof(ilab_generate_request_t, top_logprobs);
            req.request_id = 0; /* a request too short to read is answered as request 0 (the layer's view) */
            break;
        default: x.what = NULL; break;
        }
        if (x.what)
            judge_generate(&x, &req, want);
        free(long_prompt);
        break;
    }
    }
    env->api->destroy(x.b);
}

static conf_result ff_report(conf_env *env, int clause, char *msg, size_t cap)
{
    if (!g_ff.done) {
        g_ff.done = true;
        for (int k = 0; k < 20; k++)
            run_kind(env, k);
    }
    if (g_ff.fail[clause][0]) {
        CONF_MSG("%s", g_ff.fail[clause]);
        return CONF_FAIL;
    }
    if (g_ff.kinds == 0) {
        CONF_MSG("no refusal applies to the declared capabilities");
        return CONF_SKIP;
    }
    CONF_MSG("%d kinds of refusal, each the first failure of a fresh instance: the %s rules hold", g_ff.kinds,
             clause_names[clause]);
    return CONF_PASS;
}

#define FF(name, cl) \
    conf_result name(conf_env *env, char *msg, size_t cap) { return ff_report(env, cl, msg, cap); }
FF(conf_ff_err1, C_ERR1)
FF(conf_ff_err4, C_ERR4)
FF(conf_ff_cch4, C_CCH4)
FF(conf_ff_cch6, C_CCH6)
FF(conf_ff_cch5, C_CCH5)
FF(conf_ff_log6, C_LOG6)
FF(conf_ff_tok6, C_TOK6)
FF(conf_ff_tok8, C_TOK8)
FF(conf_ff_err3, C_ERR3)
FF(conf_ff_str9, C_STR9)
FF(conf_ff_str3, C_STR3)
FF(conf_ff_abi3, C_ABI3)
