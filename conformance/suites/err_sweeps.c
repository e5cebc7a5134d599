/* Error sweeps (ERR-2, ERR-3, CCH-5, LOG-3):
 *  - every undeclared capability's entry points called with VALID arguments,
 *    including calls that would change nothing, must say UNSUPPORTED;
 *  - NULL for every pointer argument of every entry point;
 *  - eval's edges: no items, unknown flag bits, an invalid or overflowing
 *    LATER item (all-or-nothing), exactly max_batch items. */
#include <stdlib.h>
#include <string.h>

#include "suites.h"

/* A status must be UNSUPPORTED with a message (none when `shimmed`: the
 * plugin left the member NULL and the host's shim answered). */
static bool unsupported(conf_env *env, ilab_status st, const char *capability, const char *call,
                        bool shimmed, char *msg, size_t cap)
{
    char e[512];
    if (st != ILAB_UNSUPPORTED) {
        snprintf(msg, cap, "%s is not declared, but %s (valid arguments) returned %s; want UNSUPPORTED "
                 "(fail closed, even when the call would change nothing)", capability, call,
                 ilab_status_name(st));
        return false;
    }
    if (!shimmed && !conf_last_error(env, e, sizeof e)[0]) {
        snprintf(msg, cap, "%s returned UNSUPPORTED without a message", call);
        return false;
    }
    return true;
}

/* `member`: the table member called; one the plugin left NULL is the host's
 * shim, which has no message of the plugin's (ADR 0022). */
#define NEED_UNSUPPORTED(st, capability, call, member)                                     \
    do {                                                                                   \
        if (!unsupported(env, (st), capability, call,                                      \
                         conf_member_absent(env, offsetof(ilab_backend_api_t, member)), msg, \
                         cap))                                                             \
            return CONF_FAIL;                                                              \
        checked++;                                                                         \
    } while (0)

/* ERR-2 with valid arguments and no-op calls. */
conf_result conf_err2_valid_noops(conf_env *env, char *msg, size_t cap)
{
    const ilab_backend_api_t *a = env->api;
    const ilab_manifest *m = env->m;
    int checked = 0;
    int32_t toks[8], tok = env->info.vocab_size > 3 ? 3 : 0;
    char buf[64];
    size_t n;
    if (!m->tokenizer) {
        NEED_UNSUPPORTED(a->tokenize(env->be, "", 0, 0, toks, 8, &n), "tokenizer", "tokenize(\"\", 0)", tokenize);
        NEED_UNSUPPORTED(a->tokenize(env->be, "a", 1, 0, toks, 8, &n), "tokenizer", "tokenize(\"a\")", tokenize);
        NEED_UNSUPPORTED(a->detokenize(env->be, toks, 0, buf, sizeof buf, &n), "tokenizer", "detokenize(0 ids)", detokenize);
        NEED_UNSUPPORTED(a->token_piece(env->be, -1, tok, buf, sizeof buf, &n), "tokenizer",
                         "token_piece(-1, a valid id)", token_piece);
    }
    ilab_seq_t s = 0;
    if (m->logits != ILAB_LOGITS_FULL) {
        NEED_UNSUPPORTED(a->seq_create(env->be, &s), "logits: full", "seq_create()", seq_create);
    } else if (a->seq_create(env->be, &s) == ILAB_OK) {
        ilab_status st = conf_eval1(env, s, &tok, 1, 0, NULL);
        if (st == ILAB_OK && !m->cache_fork) {
            ilab_seq_t c = 0;
            st = a->seq_fork(env->be, s, &c);
            if (st == ILAB_OK)
                a->seq_free(env->be, c);
            if (!unsupported(env, st, "cache.fork", "seq_fork(a live sequence)",
                             conf_member_absent(env, offsetof(ilab_backend_api_t, seq_fork)), msg, cap)) {
                a->seq_free(env->be, s);
                return CONF_FAIL;
            }
            checked++;
        }
        if (st == ILAB_OK && !m->cache_truncate) {
            /* keeping every position changes nothing: still not declared */
            const char *calls[2] = {"seq_truncate(seq, its own length 1)", "seq_truncate(seq, 0)"};
            for (int k = 0; k < 2; k++) {
                st = a->seq_truncate(env->be, s, 1 - k);
                if (!unsupported(env, st, "cache.truncate", calls[k],
                                 conf_member_absent(env, offsetof(ilab_backend_api_t, seq_truncate)),
                                 msg, cap)) {
                    a->seq_free(env->be, s);
                    return CONF_FAIL;
                }
                checked++;
            }
        }
        a->seq_free(env->be, s);
    }
    if (m->sampling != ILAB_SAMPLING_BACKEND) {
        ilab_sampling_t sampling = {.struct_size = sizeof sampling, .top_p = 1, .repetition_penalty = 1};
        ilab_generate_request_t req = {.struct_size = sizeof req, .request_id = 78, .prompt_tokens = &tok,
                                       .n_prompt_tokens = 1, .sampling = &sampling, .max_tokens = 1};
        NEED_UNSUPPORTED(a->generate(env->be, &req, NULL, NULL), "sampling: backend", "generate(a valid request)", generate);
        NEED_UNSUPPORTED(a->cancel(env->be, 78), "sampling: backend", "cancel(an unknown id)", cancel);
    } else if (!m->cancel) {
        NEED_UNSUPPORTED(a->cancel(env->be, 12345), "cancel", "cancel(an unknown id)", cancel);
    }
    CONF_MSG("%d undeclared entry point(s) fail closed with valid arguments", checked);
    return CONF_PASS;
}

/* ---- NULL arguments -------------------------------------------------------- */

#define WANT_INVALID(call, what, declared)                                                      \
    do {                                                                                        \
        ilab_status st__ = (call);                                                              \
        CONF_CHECK(st__ == ILAB_INVALID_ARGUMENT || (!(declared) && st__ == ILAB_UNSUPPORTED),  \
                   "%s returned %s, want INVALID_ARGUMENT", what, ilab_status_name(st__));      \
        checked++;                                                                              \
    } while (0)

/* ERR-3: NULL for every pointer argument of every entry point. */
conf_result conf_err3_null_sweep(conf_env *env, char *msg, size_t cap)
{
    const ilab_backend_api_t *a = env->api;
    const ilab_manifest *m = env->m;
    int checked = 0;
    int32_t toks[8], tok = 0, len;
    char buf[64];
    size_t n;
    bool tk = m->tokenizer, full = m->logits == ILAB_LOGITS_FULL;
    WANT_INVALID(a->model_info(env->be, NULL), "model_info(info NULL)", true);
    WANT_INVALID(a->tokenize(env->be, NULL, 3, 0, toks, 8, &n), "tokenize(text NULL, len 3)", tk);
    WANT_INVALID(a->tokenize(env->be, "abc", 3, 0, NULL, 8, &n), "tokenize(tokens NULL, cap 8)", tk);
    WANT_INVALID(a->tokenize(env->be, "abc", 3, 0, toks, 8, NULL), "tokenize(n_tokens NULL)", tk);
    WANT_INVALID(a->detokenize(env->be, NULL, 2, buf, sizeof buf, &n), "detokenize(tokens NULL, n 2)", tk);
    WANT_INVALID(a->detokenize(env->be, &tok, 1, NULL, 8, &n), "detokenize(text NULL, cap 8)", tk);
    WANT_INVALID(a->detokenize(env->be, &tok, 1, buf, sizeof buf, NULL), "detokenize(len NULL)", tk);
    WANT_INVALID(a->token_piece(env->be, -1, tok, NULL, 8, &n), "token_piece(piece NULL, cap 8)", tk);
    WANT_INVALID(a->token_piece(env->be, -1, tok, buf, sizeof buf, NULL), "token_piece(len NULL)", tk);
    WANT_INVALID(a->seq_create(env->be, NULL), "seq_create(out NULL)", full);
    WANT_INVALID(a->eval(env->be, NULL, 1), "eval(items NULL, n_items 1)", full);
    const ilab_batch_item_t *null_item[1] = {NULL};
    WANT_INVALID(a->eval(env->be, null_item, 1), "eval(items[0] NULL)", full);
    ilab_seq_t s = 0;
    if (full && a->seq_create(env->be, &s) == ILAB_OK) {
        ilab_batch_item_t item = {.struct_size = sizeof item, .seq = s, .tokens = NULL, .n_tokens = 1};
        const ilab_batch_item_t *items[1] = {&item};
        ilab_status st = a->eval(env->be, items, 1);
        int32_t l = -1;
        a->seq_length(env->be, s, &l);
        if (st != ILAB_INVALID_ARGUMENT || l != 0) {
            a->seq_free(env->be, s);
            CONF_MSG("eval(item.tokens NULL, n_tokens 1) returned %s and left length %d; want "
                     "INVALID_ARGUMENT and 0", ilab_status_name(st), l);
            return CONF_FAIL;
        }
        st = a->seq_length(env->be, s, NULL);
        if (st != ILAB_INVALID_ARGUMENT) {
            a->seq_free(env->be, s);
            CONF_MSG("seq_length(len NULL) returned %s, want INVALID_ARGUMENT", ilab_status_name(st));
            return CONF_FAIL;
        }
        if (m->cache_fork && (st = a->seq_fork(env->be, s, NULL)) != ILAB_INVALID_ARGUMENT) {
            a->seq_free(env->be, s);
            CONF_MSG("seq_fork(child NULL) returned %s, want INVALID_ARGUMENT", ilab_status_name(st));
            return CONF_FAIL;
        }
        a->seq_free(env->be, s);
        checked += 3;
    }
    (void)len;
    char err[256];
    WANT_INVALID(a->create(env->host, env->config, env->n_config, err, sizeof err, NULL),
                 "create(out NULL)", true);
    if (m->sampling == ILAB_SAMPLING_BACKEND) {
        WANT_INVALID(a->generate(env->be, NULL, NULL, NULL), "generate(request NULL)", true);
        ilab_sampling_t sampling = {.struct_size = sizeof sampling, .top_p = 1, .repetition_penalty = 1};
        ilab_generate_request_t req = {.struct_size = sizeof req, .request_id = 91, .prompt_tokens = &tok,
                                       .n_prompt_tokens = 1, .sampling = &sampling, .max_tokens = 1};
        WANT_INVALID(a->generate(env->be, &req, NULL, NULL), "generate(on_event NULL)", true);
        req.sampling = NULL;
        WANT_INVALID(a->generate(env->be, &req, NULL, NULL), "generate(request.sampling NULL)", true);
        req.sampling = &sampling;
        req.prompt_tokens = NULL;
        WANT_INVALID(a->generate(env->be, &req, NULL, NULL), "generate(prompt_tokens NULL, n 1)", true);
    }
    CONF_MSG("%d NULL arguments refused", checked);
    return CONF_PASS;
}

/* ---- eval's edges ----------------------------------------------------------- */

/* Lengths of `n` sequences. */
static bool lengths(conf_env *env, const ilab_seq_t *s, int n, int32_t *out)
{
    for (int i = 0; i < n; i++)
        if (env->api->seq_length(env->be, s[i], &out[i]) != ILAB_OK)
            return false;
    return true;
}

static void free_all(conf_env *env, ilab_seq_t *s, int n)
{
    for (int i = 0; i < n; i++)
        if (s[i])
            env->api->seq_free(env->be, s[i]);
}

/* LOG-6: each item flag bit the SDK does not define, alone, is refused and
 * leaves the sequence empty — every bit, not one: a mask written one bit too
 * wide accepts only its neighbour. */
static conf_result every_unknown_flag_bit(conf_env *env, char *msg, size_t cap)
{
    int32_t tok;
    conf_prompt_tokens(env, env->opt->seed + 52, &tok, 1);
    ilab_seq_t s = 0;
    ilab_status st = env->api->seq_create(env->be, &s);
    CONF_CHECK(st == ILAB_OK, "seq_create() returned %s", ilab_status_name(st));
    for (int bit = 0; bit < 32; bit++) {
        uint32_t flag = 1u << bit;
        if (flag & ILAB_EVAL_ALL_LOGITS)
            continue;
        ilab_batch_item_t item = {.struct_size = sizeof item, .seq = s, .tokens = &tok, .n_tokens = 1,
                                  .flags = flag};
        const ilab_batch_item_t *ptr = &item;
        st = env->api->eval(env->be, &ptr, 1);
        int32_t len = -1;
        env->api->seq_length(env->be, s, &len);
        if (st != ILAB_INVALID_ARGUMENT || len != 0) {
            env->api->seq_free(env->be, s);
            CONF_MSG("eval() of one item with the unknown flag bit %d (0x%x) returned %s and left length %d, "
                     "want INVALID_ARGUMENT and 0", bit, (unsigned)flag, ilab_status_name(st), (int)len);
            return CONF_FAIL;
        }
    }
    env->api->seq_free(env->be, s);
    return CONF_PASS;
}

/* ERR-3: eval with no items or an unknown flag bit is refused; a batch
 * whose LAST item is invalid changes no sequence (all-or-nothing). */
conf_result conf_err3_eval_edges(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->logits == ILAB_LOGITS_FULL, "logits: full");
    if (every_unknown_flag_bit(env, msg, cap) != CONF_PASS)
        return CONF_FAIL;
    int nb = env->m->max_batch < 4 ? env->m->max_batch : 4;
    ilab_seq_t s[4] = {0};
    int32_t tok[4], before[4], after[4];
    conf_prompt_tokens(env, env->opt->seed + 50, tok, 4);
    for (int i = 0; i < nb; i++)
        if (env->api->seq_create(env->be, &s[i]) != ILAB_OK || conf_eval1(env, s[i], tok, 1 + i, 0, NULL) != ILAB_OK) {
            free_all(env, s, nb);
            CONF_MSG("seq_create/eval failed");
            return CONF_FAIL;
        }
    conf_result r = CONF_FAIL;
    ilab_batch_item_t items[4];
    const ilab_batch_item_t *ptrs[4];
    int32_t bad = env->info.vocab_size;
    ilab_seq_t stale = 0;
    if (env->api->seq_create(env->be, &stale) == ILAB_OK)
        env->api->seq_free(env->be, stale);
    lengths(env, s, nb, before);
    int32_t room = conf_max_context(env) - before[nb - 1];
    int32_t *big = calloc((size_t)room + 1, sizeof *big);
    conf_prompt_tokens(env, env->opt->seed + 51, big, room + 1);
    ilab_status st = env->api->eval(env->be, ptrs, 0);
    if (st != ILAB_INVALID_ARGUMENT) {
        CONF_MSG("eval() with n_items 0 returned %s, want INVALID_ARGUMENT", ilab_status_name(st));
        goto out;
    }
    /* The later item broken in each way the contract names. */
    for (int kind = 0; kind < 6; kind++) {
        if (kind >= 4 && nb < 2)
            break; /* a sequence named twice needs two items */
        for (int i = 0; i < nb; i++) {
            items[i] = (ilab_batch_item_t){.struct_size = sizeof items[i], .seq = s[i], .tokens = &tok[0],
                                           .n_tokens = 1};
            ptrs[i] = &items[i];
        }
        ilab_batch_item_t *last = &items[nb - 1];
        const char *what;
        ilab_status want = ILAB_INVALID_ARGUMENT;
        switch (kind) {
        case 0: last->tokens = &bad; what = "an out-of-range token id"; break;
        case 1: last->flags = 1u << 9; what = "an unknown flag bit"; break;
        case 2: last->seq = stale; what = "a freed sequence handle"; break;
        /* the first item's sequence (not next to it once nb >= 3), then the one before it */
        case 4: last->seq = s[0]; what = "the first item's sequence"; break;
        case 5: last->seq = s[nb - 2]; what = "the previous item's sequence"; break;
        default:
            last->tokens = big;
            last->n_tokens = room + 1;
            want = ILAB_CONTEXT_OVERFLOW;
            what = "tokens passing max_context";
        }
        st = env->api->eval(env->be, ptrs, (size_t)nb);
        if (st != want) {
            CONF_MSG("eval() of %d items whose last has %s returned %s, want %s", nb, what, ilab_status_name(st),
                     ilab_status_name(want));
            goto out;
        }
        if (!lengths(env, s, nb, after) || memcmp(before, after, sizeof(int32_t) * (size_t)nb) != 0) {
            CONF_MSG("eval() of %d items whose last has %s failed but changed the earlier sequences "
                     "(lengths %d,%d.. -> %d,%d..): eval is all-or-nothing", nb, what, before[0],
                     nb > 1 ? before[1] : 0, after[0], nb > 1 ? after[1] : 0);
            goto out;
        }
    }
    /* and the sequences still compute what a fresh one does */
    float *got = malloc((size_t)env->info.vocab_size * sizeof *got);
    float *want_l = malloc((size_t)env->info.vocab_size * sizeof *want_l);
    int32_t full[5];
    memcpy(full, tok, sizeof(int32_t));
    full[1] = tok[1];
    bool same = conf_eval1(env, s[0], &tok[1], 1, 0, got) == ILAB_OK && conf_fresh_logits(env, full, 2, want_l) == ILAB_OK &&
                conf_logits_close(got, want_l, env->info.vocab_size,
                                  "a sequence after refused batches vs a fresh one", msg, cap);
    free(got);
    free(want_l);
    if (same)
        r = CONF_PASS;
out:
    free(big);
    free_all(env, s, nb);
    return r;
}

/* LOG-3: every batch size from 1 to max_batch, each item's logits equal
 * to the same tokens evaluated alone; exactly max_batch items must work. */
conf_result conf_log3_every_batch_size(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->logits == ILAB_LOGITS_FULL, "logits: full");
    int maxb = env->m->max_batch, v = env->info.vocab_size;
    if (maxb > 64)
        maxb = 64;
    enum { L = 3 };
    float *alone = malloc((size_t)maxb * (size_t)v * sizeof *alone);
    float *got = malloc((size_t)maxb * (size_t)v * sizeof *got);
    int32_t *toks = malloc((size_t)maxb * L * sizeof *toks);
    ilab_seq_t *s = calloc((size_t)maxb, sizeof *s);
    ilab_batch_item_t *items = calloc((size_t)maxb, sizeof *items);
    const ilab_batch_item_t **ptrs = calloc((size_t)maxb, sizeof *ptrs);
    conf_result r = CONF_FAIL;
    for (int i = 0; i < maxb; i++) {
        conf_prompt_tokens(env, env->opt->seed + 300 + (uint64_t)i, toks + i * L, L);
        if (conf_fresh_logits(env, toks + i * L, L, alone + (size_t)i * (size_t)v) != ILAB_OK) {
            CONF_MSG("eval() of one item alone failed");
            goto out;
        }
    }
    for (int b = 1; b <= maxb; b = b < 8 ? b + 1 : (b == maxb ? b + 1 : (b * 2 > maxb ? maxb : b * 2))) {
        for (int i = 0; i < b; i++) {
            if (env->api->seq_create(env->be, &s[i]) != ILAB_OK) {
                CONF_MSG("seq_create() #%d failed (a batch of %d needs %d sequences)", i + 1, b, b);
                free_all(env, s, i);
                goto out;
            }
            /* varied lengths: item i's first i % L tokens go in first */
            int pre = i % L;
            if (pre)
                conf_eval1(env, s[i], toks + i * L, pre, 0, NULL);
            items[i] = (ilab_batch_item_t){.struct_size = sizeof items[i], .seq = s[i],
                                           .tokens = toks + i * L + pre, .n_tokens = L - pre,
                                           .logits = got + (size_t)i * (size_t)v};
            ptrs[i] = &items[i];
        }
        ilab_status st = env->api->eval(env->be, ptrs, (size_t)b);
        bool ok = st == ILAB_OK;
        if (!ok)
            CONF_MSG("eval() of %d items (max_batch %d) returned %s", b, env->m->max_batch, ilab_status_name(st));
        for (int i = 0; ok && i < b; i++) {
            char what[96];
            snprintf(what, sizeof what, "item %d of a batch of %d vs alone", i, b);
            ok = conf_logits_close(got + (size_t)i * (size_t)v, alone + (size_t)i * (size_t)v, v, what, msg, cap);
        }
        free_all(env, s, b);
        memset(s, 0, (size_t)maxb * sizeof *s);
        if (!ok)
            goto out;
    }
    r = CONF_PASS;
    CONF_MSG("batch sizes 1..%d agree with items alone", maxb);
out:
    free(alone);
    free(got);
    free(toks);
    free(s);
    free(items);
    free(ptrs);
    return r;
}

/* ERR-5: for every configuration key whose type the harness can violate,
 * values a plugin may reject — out of any sensible range for an int or a
 * float (-1, 0, +-1e9 / +-1e30), malformed for its type (which the host
 * never sends), for a string empty, not UTF-8, a missing path or 4 KB long
 * — and one undeclared key. create() may accept a value;
 * refusing it is INVALID_ARGUMENT with a message naming the key and *out
 * untouched, never UNAVAILABLE while probe() with the same values says OK,
 * never a crash. */
static const char *const bad_int[] = {"-1", "0", "1000000000", "-1000000000", "12abc", ""};
static const char *const bad_float[] = {"-1", "0", "1e30", "-1e30", "1.5x", ""};
static const char *const bad_bool[] = {"maybe", ""};
/* a string's valid values are the plugin's to know: empty, not UTF-8, a
 * path that does not exist, and one longer than any path or URL buffer */
static char long_string[4097];
static const char *const bad_string[] = {"", "\xff\xfe\x80", "/nonexistent/conformance/value", long_string};
static const char *const undeclared[] = {"1"};
#define UNDECLARED_KEY "conformance_undeclared_key"

static const char *const *bad_values(ilab_config_type type, size_t *n)
{
    switch (type) {
    case ILAB_CONFIG_INT: *n = sizeof bad_int / sizeof *bad_int; return bad_int;
    case ILAB_CONFIG_FLOAT: *n = sizeof bad_float / sizeof *bad_float; return bad_float;
    case ILAB_CONFIG_BOOL: *n = sizeof bad_bool / sizeof *bad_bool; return bad_bool;
    case ILAB_CONFIG_STRING:
        if (!long_string[0])
            memset(long_string, 'x', sizeof long_string - 1);
        *n = sizeof bad_string / sizeof *bad_string;
        return bad_string;
    default: *n = 0; return NULL;
    }
}

static bool bad_value_handled(conf_env *env, const char *key, const char *value, bool must_name, char *msg,
                              size_t cap)
{
    size_t n = 0;
    ilab_config_entry_t *cfg = conf_config_with(env, key, value, &n);
    CONF_CHECK_BOOL(cfg, "harness out of memory");
    char reason[512] = "", err[512] = "";
    ilab_status ps = env->api->probe(env->host, cfg, n, reason, sizeof reason);
    ilab_backend_t *const untouched = (ilab_backend_t *)(uintptr_t)0x5eedf00d, *b = untouched;
    ilab_status cs = env->api->create(env->host, cfg, n, err, sizeof err, &b);
    free(cfg);
    if (cs == ILAB_OK) {
        env->api->destroy(b);
        return true;
    }
    err[sizeof err - 1] = '\0';
    CONF_CHECK_BOOL(cs == ILAB_INVALID_ARGUMENT || (cs == ILAB_UNAVAILABLE && ps != ILAB_OK),
               "create() with %s=\"%s\" returned %s (%s) while probe() said %s: a value the plugin rejects "
               "is INVALID_ARGUMENT, UNAVAILABLE only when it cannot run here", key, value,
               ilab_status_name(cs), err, ilab_status_name(ps));
    CONF_CHECK_BOOL(b == untouched, "create() with %s=\"%s\" returned %s but wrote *out", key, value,
               ilab_status_name(cs));
    CONF_CHECK_BOOL(err[0], "create() with %s=\"%s\" returned %s without a message", key, value, ilab_status_name(cs));
    CONF_CHECK_BOOL(cs != ILAB_INVALID_ARGUMENT || !must_name || strstr(err, key),
               "create() with %s=\"%s\" returned INVALID_ARGUMENT with a message that does not name the key "
               "'%s': \"%s\"", key, value, key, err);
    return true;
}

conf_result conf_err5_bad_config(conf_env *env, char *msg, size_t cap)
{
    char why[CONF_MSG_CAP];
    conf_result r = conf_env_prepare(env, CONF_NEED_PROBE, why, sizeof why);
    if (r != CONF_PASS && r != CONF_SKIP) {
        CONF_MSG("%s", why);
        return r;
    }
    /* A configuration already refused as given: the message may name that key instead. */
    bool must_name = env->probe_status != ILAB_INVALID_ARGUMENT;
    int tried = 0;
    for (size_t k = 0; k < env->m->n_config; k++) {
        const ilab_config_key *key = &env->m->config[k];
        size_t n;
        const char *const *values = bad_values(key->type, &n);
        for (size_t v = 0; v < n; v++, tried++)
            if (!bad_value_handled(env, key->key, values[v], must_name, msg, cap))
                return CONF_FAIL;
    }
    if (!bad_value_handled(env, UNDECLARED_KEY, undeclared[0], must_name, msg, cap))
        return CONF_FAIL;
    CONF_MSG("%d out-of-range or malformed values and an undeclared key: accepted, or INVALID_ARGUMENT naming "
             "the key", tried);
    return CONF_PASS;
}
