/* lifetime.*: instances and handles over long lives, side by side, and
 * refused calls that must leave no trace. Heap, file descriptors and
 * threads are counted around each kind of operation; the validation layer
 * checks every call on the way (handles, lengths, capacity back to the
 * instance's first figure, no last_error across instances). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resources.h"
#include "suites.h"



/* ---- handles past 2^16 ------------------------------------------------------ */

static int by_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

conf_result conf_life_handle_cycles(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->logits == ILAB_LOGITS_FULL, "logits: full");
    /* the host engine's scheduler thread frees on its own time: no engine
     * while the heap is counted (the next stream starts a new one) */
    conf_engine_release(env);
    enum { CYCLES = 70000 }; /* past 2^16: a 16-bit generation or slot wraps */
    uint64_t *seen = malloc(CYCLES * sizeof *seen);
    CONF_CHECK(seen, "out of memory");
    int32_t tok;
    conf_prompt_tokens(env, env->opt->seed + 500, &tok, 1);
    ilab_seq_t keep = 0; /* one live handle the whole time, evaluated now and then */
    conf_result r = CONF_FAIL;
    ilab_status st = env->api->seq_create(env->be, &keep);
    if (st != ILAB_OK) {
        conf_fail_status(env, st, "seq_create()", msg, cap);
        goto out;
    }
    conf_resources before = {0};
    for (size_t i = 0; i < CYCLES; i++) {
        if (i == 1)
            before = conf_resources_now(); /* after one cycle with an eval: lazy set-up is done */
        ilab_seq_t s = 0;
        st = env->api->seq_create(env->be, &s);
        if (st != ILAB_OK) {
            CONF_MSG("seq_create() #%zu returned %s", i + 1, ilab_status_name(st));
            goto out;
        }
        seen[i] = s;
        if (i % 4096 == 0 && (st = conf_eval1(env, s, &tok, 1, 0, NULL)) != ILAB_OK) {
            CONF_MSG("eval() of one token into handle #%zu returned %s", i + 1, ilab_status_name(st));
            goto out;
        }
        if ((st = env->api->seq_free(env->be, s)) != ILAB_OK) {
            CONF_MSG("seq_free() #%zu returned %s", i + 1, ilab_status_name(st));
            goto out;
        }
        if (i % 8192 == 8191) {
            /* an old handle stays stale; the one kept live stays live */
            int32_t len = -1;
            st = env->api->seq_length(env->be, seen[i / 3], &len);
            CONF_CHECK(st == ILAB_INVALID_ARGUMENT || (free(seen), false),
                       "seq_length() of handle #%zu (freed %zu cycles ago) returned %s after %zu cycles",
                       i / 3 + 1, i - i / 3, ilab_status_name(st), i + 1);
            st = env->api->seq_length(env->be, keep, &len);
            CONF_CHECK(st == ILAB_OK || (free(seen), false),
                       "seq_length() of the handle kept live returned %s after %zu cycles",
                       ilab_status_name(st), i + 1);
        }
    }
    qsort(seen, CYCLES, sizeof *seen, by_u64);
    for (size_t i = 1; i < CYCLES; i++)
        if (seen[i] == seen[i - 1] || seen[i] == keep) {
            CONF_MSG("handle 0x%llx was issued twice in %d create/free cycles",
                     (unsigned long long)seen[i], CYCLES);
            goto out;
        }
    if (!conf_resources_same(before, conf_resources_now(), "70000 create/free cycles", msg, cap))
        goto out;
    r = CONF_PASS;
    CONF_MSG("%d create/free cycles: every handle new, stale ones refused, no resource kept", CYCLES);
out:
    if (keep)
        env->api->seq_free(env->be, keep);
    free(seen);
    return r;
}

/* ---- two instances side by side ------------------------------------------ */

static ilab_status second_instance(conf_env *env, ilab_backend_t **b, char *err, size_t cap)
{
    err[0] = '\0';
    return env->api->create(env->host, env->config, env->n_config, err, cap, b);
}

static size_t message_of(conf_env *env, ilab_backend_t *b, char *buf, size_t cap)
{
    buf[0] = '\0';
    size_t n = env->api->last_error(b, buf, cap);
    buf[cap - 1] = '\0';
    return n;
}

conf_result conf_life_two_instances(conf_env *env, char *msg, size_t cap)
{
    char err[512], a0[512], b0[512], now[512];
    ilab_backend_t *b = NULL;
    ilab_status st = second_instance(env, &b, err, sizeof err);
    if (st != ILAB_OK) {
        CONF_MSG("a second instance beside the first: create() returned %s (%s)", ilab_status_name(st), err);
        return st == ILAB_OUT_OF_MEMORY || st == ILAB_UNAVAILABLE ? CONF_SKIP : CONF_FAIL;
    }
    conf_result r = CONF_FAIL;
    /* last_error: a failure on one instance is not the other's message */
    int32_t len;
    env->api->seq_length(b, (ilab_seq_t)0x7fffffff0001ULL, &len);
    message_of(env, b, b0, sizeof b0);
    env->api->seq_length(env->be, (ilab_seq_t)0x7fffffff0002ULL, &len);
    message_of(env, env->be, a0, sizeof a0);
    env->api->tokenize(b, "x", 1, 0x80000000u, NULL, 0, NULL);
    message_of(env, env->be, now, sizeof now);
    if (strcmp(now, a0) != 0) {
        CONF_MSG("a failed call on instance B changed instance A's last_error() from \"%.80s\" to \"%.80s\"", a0, now);
        goto out;
    }
    /* cancel(): an id cancelled on B does not touch a request with that id on A */
    if (env->m->cancel && env->m->sampling == ILAB_SAMPLING_BACKEND) {
        int32_t prompt[4];
        conf_prompt_tokens(env, env->opt->seed + 510, prompt, 4);
        conf_gen_params p;
        conf_gen_params_default(&p, prompt, 4);
        p.max_tokens = 8;
        p.ignore_eos = true;
        p.request_id = 0x5eed0000ULL + env->opt->seed % 1000;
        st = env->api->cancel(b, p.request_id);
        conf_gen g;
        conf_result gr = conf_generate(env, &p, &g, msg, cap);
        if (gr != CONF_PASS) {
            r = gr;
            goto out;
        }
        bool ok = st == ILAB_OK && g.status == ILAB_OK && g.n_tokens == 8 &&
                  g.finish_reason == ILAB_FINISH_LENGTH;
        if (!ok)
            CONF_MSG("after cancel(B, %llu) returned %s, generate() on A with that id gave %s, %zu "
                     "tokens, FINISH(%s); want 8 tokens and length",
                     (unsigned long long)p.request_id, ilab_status_name(st), ilab_status_name(g.status),
                     g.n_tokens, ilab_finish_reason_name(g.finish_reason));
        conf_gen_free(&g);
        if (!ok)
            goto out;
    }
    /* sequences and capacity: B's work does not move A's */
    if (env->m->logits == ILAB_LOGITS_FULL) {
        int32_t v = env->info.vocab_size, toks[8];
        conf_prompt_tokens(env, env->opt->seed + 511, toks, 8);
        float *x = malloc((size_t)v * sizeof *x), *y = malloc((size_t)v * sizeof *y);
        ilab_seq_t sa = 0, sb = 0;
        ilab_cache_stats_t ca = {.struct_size = sizeof ca}, cb = ca;
        bool stats = env->m->cache_stats && env->api->cache_stats(env->be, &ca) == ILAB_OK;
        bool ok = env->api->seq_create(env->be, &sa) == ILAB_OK && conf_eval1(env, sa, toks, 4, 0, x) == ILAB_OK;
        ilab_backend_t *keep = env->be;
        env->be = b; /* conf_eval1 works on env->be */
        ok = ok && env->api->seq_create(b, &sb) == ILAB_OK && conf_eval1(env, sb, toks, 8, 0, y) == ILAB_OK;
        env->be = keep;
        if (ok && stats)
            ok = env->api->cache_stats(env->be, &cb) == ILAB_OK;
        if (!ok)
            CONF_MSG("seq_create()/eval() on two instances side by side failed");
        int32_t la = -1;
        if (ok) {
            env->api->seq_free(b, sb);
            sb = 0;
            ok = env->api->seq_length(env->be, sa, &la) == ILAB_OK && la == 4;
            if (!ok)
                CONF_MSG("freeing B's sequence left A's at length %d, not 4", (int)la);
        }
        if (ok && stats) {
            ilab_cache_stats_t cc = {.struct_size = sizeof cc};
            env->api->cache_stats(env->be, &cc);
            ok = cc.free_positions == cb.free_positions;
            if (!ok)
                CONF_MSG("instance B's sequences moved instance A's free capacity: %lld -> %lld",
                         (long long)cb.free_positions, (long long)cc.free_positions);
        }
        if (sb)
            env->api->seq_free(b, sb);
        if (sa)
            env->api->seq_free(env->be, sa);
        free(x);
        free(y);
        if (!ok)
            goto out;
    }
    /* destroying B leaves A working, its message kept */
    env->api->destroy(b);
    b = NULL;
    message_of(env, env->be, now, sizeof now);
    if (strcmp(now, a0) != 0) {
        CONF_MSG("destroying instance B changed instance A's last_error() from \"%.80s\" to \"%.80s\"", a0, now);
        goto out;
    }
    r = CONF_PASS;
    CONF_MSG("two instances: last_error, cancel, sequences and capacity stay apart");
out:
    if (b)
        env->api->destroy(b);
    return r;
}

/* ---- refused calls leave no trace -------------------------------------------- */

typedef bool (*refusal_fn)(conf_env *env, ilab_seq_t s, int32_t len);

static bool refuse_overflow(conf_env *env, ilab_seq_t s, int32_t len)
{
    int32_t mc = conf_max_context(env), n = mc - len + 1;
    int32_t *t = calloc((size_t)n, sizeof *t);
    conf_prompt_tokens(env, env->opt->seed + 520, t, n);
    ilab_status st = conf_eval1(env, s, t, n, 0, NULL);
    free(t);
    return st == ILAB_CONTEXT_OVERFLOW;
}

static bool refuse_bad_id(conf_env *env, ilab_seq_t s, int32_t len)
{
    (void)len;
    int32_t t[2] = {0, env->info.vocab_size};
    return conf_eval1(env, s, t, 2, 0, NULL) == ILAB_INVALID_ARGUMENT;
}

static bool refuse_stale(conf_env *env, ilab_seq_t s, int32_t len)
{
    (void)s;
    (void)len;
    int32_t l;
    return env->api->seq_length(env->be, (ilab_seq_t)0x7ffffffffff1ULL, &l) == ILAB_INVALID_ARGUMENT;
}

static bool refuse_truncate(conf_env *env, ilab_seq_t s, int32_t len)
{
    if (!env->m->cache_truncate)
        return true;
    return env->api->seq_truncate(env->be, s, len + 1) == ILAB_INVALID_ARGUMENT;
}

static bool refuse_flags(conf_env *env, ilab_seq_t s, int32_t len)
{
    (void)s;
    (void)len;
    if (!env->m->tokenizer)
        return true;
    int32_t t[8];
    size_t n;
    return env->api->tokenize(env->be, "ab", 2, 1u << 30, t, 8, &n) == ILAB_INVALID_ARGUMENT;
}

conf_result conf_life_refusals(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->logits == ILAB_LOGITS_FULL, "logits: full");
    /* the host engine's scheduler thread frees on its own time: no engine
     * while the heap is counted (the next stream starts a new one) */
    conf_engine_release(env);
    static const struct {
        const char *name;
        refusal_fn fn;
    } kinds[] = {
        {"eval() past max_context", refuse_overflow},
        {"eval() with an id past the vocabulary", refuse_bad_id},
        {"seq_length() of a never-issued handle", refuse_stale},
        {"seq_truncate() past the length", refuse_truncate},
        {"tokenize() with an unknown flag", refuse_flags},
    };
    int32_t toks[8];
    conf_prompt_tokens(env, env->opt->seed + 521, toks, 8);
    ilab_seq_t s = 0;
    ilab_status st = env->api->seq_create(env->be, &s);
    CONF_CHECK_OK(env, st, "seq_create()");
    conf_result r = CONF_FAIL;
    if ((st = conf_eval1(env, s, toks, 8, 0, NULL)) != ILAB_OK) {
        conf_fail_status(env, st, "eval() of 8 tokens", msg, cap);
        goto out;
    }
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        /* once to settle the stored message, then 20 times counted */
        if (!kinds[k].fn(env, s, 8)) {
            CONF_MSG("%s was not refused with the status its clause names", kinds[k].name);
            goto out;
        }
        conf_resources before = conf_resources_now();
        for (int i = 0; i < 20; i++)
            kinds[k].fn(env, s, 8);
        char what[128];
        snprintf(what, sizeof what, "20 refused calls of %s", kinds[k].name);
        if (!conf_resources_same(before, conf_resources_now(), what, msg, cap))
            goto out;
        int32_t len = -1;
        env->api->seq_length(env->be, s, &len);
        if (len != 8) {
            CONF_MSG("after %s the sequence has length %d, not 8", kinds[k].name, (int)len);
            goto out;
        }
    }
    r = CONF_PASS;
    CONF_MSG("%zu kinds of refused call: no heap byte, descriptor, thread or position changed",
             sizeof kinds / sizeof kinds[0]);
out:
    env->api->seq_free(env->be, s);
    return r;
}

/* ---- random programs over instances that come and go ----------------------- */

conf_result conf_life_random_programs(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->logits == ILAB_LOGITS_FULL, "logits: full");
    /* the host engine's scheduler thread frees on its own time: no engine
     * while the heap is counted (the next stream starts a new one) */
    conf_engine_release(env);
    enum { OPS = 160, SEQS = 6 };
    uint64_t rng = env->opt->seed ^ 0x11fe;
    conf_resources first = {0}, after = {0};
    for (int round = 0; round < 3; round++) {
        uint64_t prog = rng; /* every round runs the same program */
        ilab_backend_t *b = NULL;
        ilab_seq_t s[2][SEQS] = {{0}};
        int32_t len[2][SEQS] = {{0}};
        int32_t mc = conf_max_context(env), tok[4];
        for (int op = 0; op < OPS; op++) {
            uint64_t x = conf_splitmix64(&prog);
            int which = (int)(x & 1), slot = (int)((x >> 1) % SEQS), kind = (int)((x >> 8) % 10);
            ilab_backend_t *be = which ? b : env->be;
            if (which && !b) {
                char err[256];
                if (second_instance(env, &b, err, sizeof err) != ILAB_OK) {
                    CONF_MSG("create() of a second instance failed at op %d: %s", op, err);
                    return CONF_FAIL;
                }
                continue;
            }
            if (kind == 0 && which) { /* destroy B with whatever it holds */
                env->api->destroy(b);
                b = NULL;
                memset(s[1], 0, sizeof s[1]);
                memset(len[1], 0, sizeof len[1]);
                continue;
            }
            ilab_seq_t *h = &s[which][slot];
            if (!*h) {
                if (env->api->seq_create(be, h) != ILAB_OK)
                    *h = 0;
                len[which][slot] = 0;
                continue;
            }
            if (kind < 4) {
                int32_t n = 1 + (int32_t)((x >> 16) % 4);
                if (len[which][slot] + n > mc)
                    n = 1;
                conf_prompt_tokens(env, x, tok, n);
                ilab_batch_item_t it = {.struct_size = sizeof it, .seq = *h, .tokens = tok, .n_tokens = n};
                const ilab_batch_item_t *p = &it;
                ilab_status st = env->api->eval(be, &p, 1);
                if (st == ILAB_OK)
                    len[which][slot] += n;
                else if (st != ILAB_CONTEXT_OVERFLOW && st != ILAB_OUT_OF_MEMORY) {
                    CONF_MSG("eval() at op %d of round %d returned %s", op, round, ilab_status_name(st));
                    return CONF_FAIL;
                }
            } else if (kind < 6 && env->m->cache_truncate) {
                int32_t keep = len[which][slot] ? (int32_t)((x >> 20) % (uint64_t)(len[which][slot] + 1)) : 0;
                if (env->api->seq_truncate(be, *h, keep) == ILAB_OK)
                    len[which][slot] = keep;
            } else if (kind < 8) {
                env->api->seq_free(be, *h);
                *h = 0;
            } else if (env->m->cache_stats) {
                ilab_cache_stats_t cs = {.struct_size = sizeof cs};
                env->api->cache_stats(be, &cs); /* the layer checks the figures */
            }
        }
        for (int w = 0; w < 2; w++)
            for (int i = 0; i < SEQS; i++)
                if (s[w][i])
                    env->api->seq_free(w ? b : env->be, s[w][i]);
        if (b)
            env->api->destroy(b);
        if (env->m->cache_stats) {
            ilab_cache_stats_t cs = {.struct_size = sizeof cs};
            env->api->cache_stats(env->be, &cs); /* back to the first figure (the layer) */
        }
        /* round 0 warms up; rounds 1 and 2 ran the same program from the
         * same state and must end on the same resources */
        if (round == 1)
            first = conf_resources_now();
        if (round == 2)
            after = conf_resources_now();
    }
    if (!conf_resources_same(first, after, "a random program over two instances, run again", msg, cap))
        return CONF_FAIL;
    CONF_MSG("a %d-op program over two instances that come and go, three times: same resources", OPS);
    return CONF_PASS;
}
