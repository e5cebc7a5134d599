/* ERR clauses: closed statuses with messages, fail-closed capabilities,
 * invalid arguments. */
#include <stdlib.h>
#include <string.h>

#include "suites.h"

/* A non-OK status must be in the enum and come with a message. */
static bool closed(conf_env *env, ilab_status st, const char *what, char *msg, size_t cap)
{
    char e[512];
    if ((int)st < 0 || (int)st >= ILAB_STATUS_COUNT) {
        snprintf(msg, cap, "%s returned %d, outside the closed status enum", what, (int)st);
        return false;
    }
    if (st != ILAB_OK && !conf_last_error(env, e, sizeof e)[0]) {
        snprintf(msg, cap, "%s returned %s with an empty last_error()", what, ilab_status_name(st));
        return false;
    }
    return true;
}

conf_result conf_err1_closed(conf_env *env, char *msg, size_t cap)
{
    const ilab_backend_api_t *a = env->api;
    int32_t tok = env->info.vocab_size + 7, len;
    char buf[64];
    size_t n;
    ilab_status st;
    st = a->seq_free(env->be, (ilab_seq_t)0xdeadbeefull);
    if (!closed(env, st, "seq_free(never-issued handle)", msg, cap)) return CONF_FAIL;
    st = a->seq_length(env->be, (ilab_seq_t)0xdeadbeefull, &len);
    if (!closed(env, st, "seq_length(never-issued handle)", msg, cap)) return CONF_FAIL;
    st = a->detokenize(env->be, &tok, 1, buf, sizeof buf, &n);
    if (!closed(env, st, "detokenize(out-of-range id)", msg, cap)) return CONF_FAIL;
    st = a->tokenize(env->be, "abc", 3, 0, (int32_t *)buf, 0, &n);
    if (!closed(env, st, "tokenize(cap 0)", msg, cap)) return CONF_FAIL;
    ilab_batch_item_t item = {.struct_size = sizeof item, .seq = (ilab_seq_t)0xdeadbeefull, .tokens = &tok,
                              .n_tokens = 1};
    const ilab_batch_item_t *items[1] = {&item};
    st = a->eval(env->be, items, 1);
    if (!closed(env, st, "eval(never-issued handle)", msg, cap)) return CONF_FAIL;
    st = a->seq_truncate(env->be, (ilab_seq_t)0xdeadbeefull, 0);
    if (!closed(env, st, "seq_truncate(never-issued handle)", msg, cap)) return CONF_FAIL;
    ilab_seq_t child;
    st = a->seq_fork(env->be, (ilab_seq_t)0xdeadbeefull, &child);
    if (!closed(env, st, "seq_fork(never-issued handle)", msg, cap)) return CONF_FAIL;
    /* argument errors on a live sequence, where a plugin's checks differ
     * from its handle lookup */
    ilab_seq_t s = ILAB_SEQ_NONE;
    if (env->m->logits == ILAB_LOGITS_FULL && a->seq_create(env->be, &s) == ILAB_OK) {
        bool ok = true;
        if (env->m->cache_truncate) {
            st = a->seq_truncate(env->be, s, -1);
            ok = st != ILAB_OK && closed(env, st, "seq_truncate(live sequence, -1)", msg, cap);
            if (ok) {
                st = a->seq_truncate(env->be, s, 1);
                ok = st != ILAB_OK && closed(env, st, "seq_truncate(empty sequence, 1)", msg, cap);
            }
        }
        if (ok && env->m->cache_fork) {
            st = a->seq_fork(env->be, s, NULL);
            ok = st != ILAB_OK && closed(env, st, "seq_fork(live sequence, NULL)", msg, cap);
        }
        if (ok) {
            st = a->seq_length(env->be, s, NULL);
            ok = st != ILAB_OK && closed(env, st, "seq_length(live sequence, NULL)", msg, cap);
        }
        a->seq_free(env->be, s);
        if (!ok) {
            if (st == ILAB_OK)
                CONF_MSG("a call with an invalid argument on a live sequence returned OK (the error paths above "
                         "each name the call)");
            return CONF_FAIL;
        }
    }
    char reason[256];
    st = a->probe(env->host, env->config, env->n_config, reason, sizeof reason);
    if ((int)st < 0 || (int)st >= ILAB_STATUS_COUNT) {
        CONF_MSG("probe() returned %d, outside the closed status enum", (int)st);
        return CONF_FAIL;
    }
    return CONF_PASS;
}

/* A member the plugin left NULL is the host's shim: it has no message. */
#define UNSUPPORTED(call, what, member)                                                           \
    do {                                                                                          \
        ilab_status st__ = (call);                                                                \
        char e__[512];                                                                            \
        CONF_CHECK(st__ == ILAB_UNSUPPORTED, "%s not declared, but %s returned %s (want UNSUPPORTED)", \
                   capname, what, ilab_status_name(st__));                                        \
        CONF_CHECK(conf_member_absent(env, offsetof(ilab_backend_api_t, member)) ||               \
                   conf_last_error(env, e__, sizeof e__)[0], "%s returned UNSUPPORTED without a message", what); \
        checked++;                                                                                \
    } while (0)

/* What an undeclared generate() emitted (ERR-2: nothing, or one ERROR
 * event with UNSUPPORTED and a message). */
typedef struct undeclared_events {
    int n, n_error;
    ilab_status status;
    bool message;
} undeclared_events;

static int record_undeclared(void *user, const ilab_event_t *ev)
{
    undeclared_events *u = user;
    u->n++;
    if (ev->type == ILAB_EVENT_ERROR) {
        u->n_error++;
        u->status = ev->status;
        u->message = ev->message && ev->message[0];
    }
    return 0;
}

static conf_result undeclared_generate(conf_env *env, char *msg, size_t cap)
{
    int32_t tok = 0;
    ilab_generate_request_t req = {.struct_size = sizeof req, .request_id = 78, .prompt_tokens = &tok,
                                   .n_prompt_tokens = 1, .max_tokens = 1};
    ilab_sampling_t sampling = {.struct_size = sizeof sampling, .top_p = 1, .repetition_penalty = 1};
    req.sampling = &sampling;
    undeclared_events u = {0, 0, ILAB_OK, false};
    ilab_status st = env->api->generate(env->be, &req, record_undeclared, &u);
    CONF_CHECK(st == ILAB_UNSUPPORTED, "sampling: backend not declared, but generate() with a callback returned %s",
               ilab_status_name(st));
    CONF_CHECK(u.n == 0 || (u.n == 1 && u.n_error == 1 && u.status == ILAB_UNSUPPORTED && u.message),
               "sampling: backend not declared; generate() emitted %d event(s), %d ERROR (status %s, %s "
               "message): want none, or one ERROR with UNSUPPORTED and a message", u.n, u.n_error,
               ilab_status_name(u.status), u.message ? "a" : "no");
    return CONF_PASS;
}

conf_result conf_err2_undeclared(conf_env *env, char *msg, size_t cap)
{
    const ilab_backend_api_t *a = env->api;
    const ilab_manifest *m = env->m;
    const char *capname;
    int checked = 0;
    int32_t toks[8];
    char buf[64];
    size_t n;
    int32_t tok = 0, len;
    if (!m->tokenizer) {
        capname = "tokenizer";
        UNSUPPORTED(a->tokenize(env->be, "abc", 3, 0, toks, 8, &n), "tokenize()", tokenize);
        UNSUPPORTED(a->detokenize(env->be, &tok, 1, buf, sizeof buf, &n), "detokenize()", detokenize);
        UNSUPPORTED(a->token_piece(env->be, -1, tok, buf, sizeof buf, &n), "token_piece()", token_piece);
    }
    ilab_seq_t s = 0;
    if (m->logits != ILAB_LOGITS_FULL) {
        capname = "logits: full";
        UNSUPPORTED(a->seq_create(env->be, &s), "seq_create()", seq_create);
        ilab_batch_item_t item = {.struct_size = sizeof item, .seq = 1, .tokens = &tok, .n_tokens = 1};
        const ilab_batch_item_t *items[1] = {&item};
        UNSUPPORTED(a->eval(env->be, items, 1), "eval()", eval);
        UNSUPPORTED(a->seq_length(env->be, 1, &len), "seq_length()", seq_length);
    } else if (a->seq_create(env->be, &s) != ILAB_OK) {
        CONF_MSG("seq_create() failed: cannot check fork/truncate");
        return CONF_FAIL;
    } else {
        conf_eval1(env, s, &tok, 1, 0, NULL);
    }
    conf_result r = CONF_PASS;
    if (!m->cache_fork) {
        ilab_seq_t c = 0;
        ilab_status st = a->seq_fork(env->be, s ? s : 1, &c);
        char e[512];
        if (st != ILAB_UNSUPPORTED) {
            CONF_MSG("cache.fork not declared, but seq_fork() returned %s (want UNSUPPORTED)", ilab_status_name(st));
            r = CONF_FAIL;
            if (st == ILAB_OK)
                a->seq_free(env->be, c);
        } else if (!conf_member_absent(env, offsetof(ilab_backend_api_t, seq_fork)) &&
                   !conf_last_error(env, e, sizeof e)[0]) {
            CONF_MSG("seq_fork() returned UNSUPPORTED without a message");
            r = CONF_FAIL;
        }
        checked++;
    }
    if (r == CONF_PASS && !m->cache_truncate) {
        ilab_status st = a->seq_truncate(env->be, s ? s : 1, 0);
        if (st != ILAB_UNSUPPORTED) {
            CONF_MSG("cache.truncate not declared, but seq_truncate() returned %s (want UNSUPPORTED)",
                     ilab_status_name(st));
            r = CONF_FAIL;
        }
        checked++;
    }
    if (s && m->logits == ILAB_LOGITS_FULL)
        a->seq_free(env->be, s);
    if (r != CONF_PASS)
        return r;
    if (m->sampling != ILAB_SAMPLING_BACKEND) {
        capname = "sampling: backend";
        ilab_generate_request_t req = {.struct_size = sizeof req, .request_id = 77, .prompt_tokens = &tok,
                                       .n_prompt_tokens = 1, .max_tokens = 1};
        ilab_sampling_t sampling = {.struct_size = sizeof sampling, .top_p = 1, .repetition_penalty = 1};
        req.sampling = &sampling;
        UNSUPPORTED(a->generate(env->be, &req, NULL, NULL), "generate()", generate);
        if (!conf_member_absent(env, offsetof(ilab_backend_api_t, generate)) &&
            undeclared_generate(env, msg, cap) != CONF_PASS)
            return CONF_FAIL;
    }
    if (!m->cancel && m->sampling == ILAB_SAMPLING_BACKEND) {
        capname = "cancel";
        UNSUPPORTED(a->cancel(env->be, 77), "cancel()", cancel);
    }
    if (m->topk_max == 0 && env->m->sampling == ILAB_SAMPLING_HOST) {
        /* the host refuses top_logprobs beyond topk_max: checked through the engine */
        int32_t prompt[2] = {tok, tok};
        conf_gen_params p;
        conf_gen_params_default(&p, prompt, 2);
        p.max_tokens = 1;
        p.top_logprobs = 3;
        conf_gen g;
        conf_result gr = conf_generate(env, &p, &g, msg, cap);
        if (gr != CONF_PASS)
            return gr;
        bool refused = g.status == ILAB_UNSUPPORTED || g.status == ILAB_INVALID_ARGUMENT;
        bool silent = g.n_tokens > 0 && g.n_top[0] == 0;
        conf_gen_free(&g);
        CONF_CHECK(refused, "topk_max is 0 but top_logprobs 3 was %s",
                   silent ? "silently ignored" : "not refused");
        checked++;
    }
    CONF_MSG(checked ? "%d undeclared entry point(s) fail closed" : "every capability is declared (%d checks)", checked);
    return CONF_PASS;
}

conf_result conf_err3_invalid(conf_env *env, char *msg, size_t cap)
{
    const ilab_backend_api_t *a = env->api;
    const ilab_manifest *m = env->m;
    int32_t toks[8], tok = 0;
    size_t n;
    char buf[64];
    ilab_status st;
    /* an undeclared capability may answer UNSUPPORTED first */
#define INVALID(call, what, declared)                                                          \
    do {                                                                                       \
        st = (call);                                                                           \
        CONF_CHECK(st == ILAB_INVALID_ARGUMENT || (!(declared) && st == ILAB_UNSUPPORTED),       \
                   "%s returned %s, want INVALID_ARGUMENT", what, ilab_status_name(st));       \
    } while (0)
    INVALID(a->model_info(env->be, NULL), "model_info(NULL)", true);
    INVALID(a->tokenize(env->be, NULL, 5, 0, toks, 8, &n), "tokenize(text NULL, len 5)", m->tokenizer);
    INVALID(a->tokenize(env->be, "abc", 3, 0, NULL, 8, &n), "tokenize(tokens NULL, cap 8)", m->tokenizer);
    INVALID(a->tokenize(env->be, "abc", 3, 0, toks, 8, NULL), "tokenize(n_tokens NULL)", m->tokenizer);
    INVALID(a->detokenize(env->be, NULL, 3, buf, sizeof buf, &n), "detokenize(tokens NULL, n 3)", m->tokenizer);
    INVALID(a->detokenize(env->be, &tok, 1, buf, sizeof buf, NULL), "detokenize(len NULL)", m->tokenizer);
    bool full = m->logits == ILAB_LOGITS_FULL;
    INVALID(a->seq_create(env->be, NULL), "seq_create(NULL)", full);
    INVALID(a->eval(env->be, NULL, 1), "eval(items NULL, n 1)", full);
    ilab_seq_t s = 0;
    if (full && a->seq_create(env->be, &s) == ILAB_OK) {
        ilab_batch_item_t item = {.struct_size = sizeof item, .seq = s, .tokens = &tok, .n_tokens = 0};
        const ilab_batch_item_t *items[2] = {&item, &item};
        conf_result r = CONF_PASS;
        st = a->eval(env->be, items, 1);
        if (st != ILAB_INVALID_ARGUMENT) {
            CONF_MSG("eval() with n_tokens 0 returned %s, want INVALID_ARGUMENT", ilab_status_name(st));
            r = CONF_FAIL;
        }
        int32_t bad = env->info.vocab_size;
        item.n_tokens = 1;
        item.tokens = &bad;
        if (r == CONF_PASS && (st = a->eval(env->be, items, 1)) != ILAB_INVALID_ARGUMENT) {
            CONF_MSG("eval() of token id %d (= vocab_size) returned %s, want INVALID_ARGUMENT", bad,
                     ilab_status_name(st));
            r = CONF_FAIL;
        }
        item.tokens = &tok;
        if (r == CONF_PASS && (st = a->eval(env->be, items, 2)) != ILAB_INVALID_ARGUMENT) {
            CONF_MSG("eval() naming one sequence twice returned %s, want INVALID_ARGUMENT", ilab_status_name(st));
            r = CONF_FAIL;
        }
        if (r == CONF_PASS && (st = a->seq_length(env->be, s, NULL)) != ILAB_INVALID_ARGUMENT) {
            CONF_MSG("seq_length(len NULL) returned %s, want INVALID_ARGUMENT", ilab_status_name(st));
            r = CONF_FAIL;
        }
        int32_t len = -1;
        if (r == CONF_PASS && a->seq_length(env->be, s, &len) == ILAB_OK && len != 0) {
            CONF_MSG("rejected eval() calls changed the sequence (length %d, want 0)", len);
            r = CONF_FAIL;
        }
        a->seq_free(env->be, s);
        if (r != CONF_PASS)
            return r;
    }
    if (m->sampling == ILAB_SAMPLING_BACKEND)
        INVALID(a->generate(env->be, NULL, NULL, NULL), "generate(request NULL)", true);
    return CONF_PASS;
}
