/* The configuration's domain (PRB-1, PRB-2, PRB-3, ERR-5): probe() and
 * create() are driven over every configuration key's values, not only the
 * configuration as given, so the unavailable and the refused paths run
 * even for a plugin that is available as configured.
 *
 * Values per key: for an int the default, -1, 0, 1, the numbers its
 * description names and one past each, malformed text ("12abc", "1.5", "",
 * one past 2^63); for a float the default, -1, 0, 1, "1.5x", ""; for a bool
 * true, false, "maybe", ""; for a string the default, every word its
 * description names (device names, modes: "cpu, or cuda") and one word no
 * description names. Then one undeclared key.
 *
 * Each configuration gets: probe() within 2 s, a status PRB-1 allows, a
 * reason on every non-OK, the same status and reason again (PRB-3), the
 * reason at every small capacity (PRB-1); create() that agrees with the
 * probe — UNAVAILABLE with the same reason byte for byte, OK or
 * INVALID_ARGUMENT where the probe said so, *out untouched and a message on
 * every failure (PRB-2, ERR-5). Rules of ERR-5: malformed values and the
 * undeclared key are INVALID_ARGUMENT naming the key, a negative number is
 * never UNAVAILABLE, and for a key whose description names values of which
 * one runs, a value it does not name is INVALID_ARGUMENT. Finally every
 * configuration is probed again in reverse order and from four threads at
 * once: each answer the same as the first (PRB-3: no memo, counter or
 * shared buffer).
 *
 * The sweep runs once per worker; each clause's test reports its own
 * violations from it. */
#include <ctype.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "config_digest.h"
#include "resources.h"
#include "suites.h"

enum { MAX_CFG = 96, REASON = 512, VALUE = 320, THREADS = 4, ROUNDS = 6 };
#define PROBE_LIMIT_SECONDS 2.0
#define BUDGET_SECONDS 8.0
#define CONCURRENT_SECONDS 0.5

typedef enum value_kind { V_PLAIN, V_MALFORMED, V_NEGATIVE, V_UNNAMED, V_UNDECLARED } value_kind;

typedef struct cfg_case {
    char key[64];
    char value[VALUE];
    value_kind kind;
    bool enum_key; /* a string key whose description names values, one of which runs */
    ilab_status ps;
    char reason[REASON];
    bool slow;
} cfg_case;

enum { C_PRB1, C_PRB2, C_PRB3, C_ERR5, C_DIF1, C_ABI7, C_TOK2, N_CLAUSES };

typedef struct sweep {
    bool done;
    int n;
    cfg_case c[MAX_CFG];
    char fail[N_CLAUSES][CONF_MSG_CAP];
    int probes, creates;
    ilab_model_info_t default_info; /* of the configuration as given */
    bool default_ok;
} sweep;

static sweep g_sweep;

static void note(sweep *s, int clause, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void note(sweep *s, int clause, const char *fmt, ...)
{
    if (s->fail[clause][0])
        return; /* the first violation of each clause is the one reported */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->fail[clause], sizeof s->fail[clause], fmt, ap);
    va_end(ap);
}

static bool add(sweep *s, const char *key, const char *value, value_kind kind)
{
    if (s->n == MAX_CFG)
        return false;
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->c[i].key, key) && !strcmp(s->c[i].value, value))
            return true;
    cfg_case *c = &s->c[s->n++];
    memset(c, 0, sizeof *c);
    snprintf(c->key, sizeof c->key, "%s", key);
    snprintf(c->value, sizeof c->value, "%s", value);
    c->kind = kind;
    return true;
}

/* The words (2..15 letters, digits, '_' or '-', starting with a letter) or
 * the numbers a description names, up to `max`. */
static int description_tokens(const char *d, bool numbers, char out[][VALUE], int max)
{
    int n = 0;
    for (const char *p = d; p && *p && n < max;) {
        if (!isalnum((unsigned char)*p)) {
            p++;
            continue;
        }
        const char *b = p;
        while (isalnum((unsigned char)*p) || *p == '_' || *p == '-')
            p++;
        size_t len = (size_t)(p - b);
        bool digits = isdigit((unsigned char)*b);
        if (len < 2 && !digits)
            continue;
        if (len >= 16 || digits != numbers)
            continue;
        if (numbers && strspn(b, "0123456789") != len)
            continue;
        memcpy(out[n], b, len);
        out[n][len] = '\0';
        n++;
    }
    return n;
}

/* `path`: the plugin's own file, an existing readable file for keys that name one. */
static void add_key_values(sweep *s, const ilab_config_key *k, const char *path)
{
    char words[12][VALUE];
    switch (k->type) {
    case ILAB_CONFIG_INT: {
        static const char *const plain[] = {"0", "1", "9223372036854775808"}, *const bad[] = {"12abc", "1.5", ""};
        if (k->default_value)
            add(s, k->key, k->default_value, V_PLAIN);
        for (size_t i = 0; i < 3; i++)
            add(s, k->key, plain[i], V_PLAIN);
        add(s, k->key, "-1", V_NEGATIVE);
        int n = description_tokens(k->description, true, words, 4);
        for (int i = 0; i < n; i++) {
            char next[VALUE];
            snprintf(next, sizeof next, "%lld", atoll(words[i]) + 1);
            add(s, k->key, words[i], V_PLAIN);
            add(s, k->key, next, V_PLAIN);
        }
        for (size_t i = 0; i < 3; i++)
            add(s, k->key, bad[i], V_MALFORMED);
        break;
    }
    case ILAB_CONFIG_FLOAT:
        if (k->default_value)
            add(s, k->key, k->default_value, V_PLAIN);
        add(s, k->key, "0", V_PLAIN);
        add(s, k->key, "1", V_PLAIN);
        add(s, k->key, "-1", V_NEGATIVE);
        add(s, k->key, "1.5x", V_MALFORMED);
        add(s, k->key, "", V_MALFORMED);
        break;
    case ILAB_CONFIG_BOOL:
        add(s, k->key, "true", V_PLAIN);
        add(s, k->key, "false", V_PLAIN);
        add(s, k->key, "maybe", V_MALFORMED);
        add(s, k->key, "", V_MALFORMED);
        break;
    case ILAB_CONFIG_STRING: {
        if (k->default_value)
            add(s, k->key, k->default_value, V_PLAIN);
        int n = description_tokens(k->description, false, words, 10);
        for (int i = 0; i < n; i++)
            add(s, k->key, words[i], V_PLAIN);
        add(s, k->key, "conformance-unnamed", V_UNNAMED);
        /* lengths at the powers of two a fixed buffer is likely to have */
        static const int lengths[] = {63, 64, 65, 255, 256};
        for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
            char v[VALUE];
            memset(v, 'a', (size_t)lengths[i]);
            v[lengths[i]] = '\0';
            add(s, k->key, v, V_UNNAMED);
        }
        /* a file that exists and reads, for a key that names one */
        if (path && k->description && (strstr(k->description, "file") || strstr(k->description, "path")) &&
            strlen(path) < VALUE)
            add(s, k->key, path, V_UNNAMED);
        break;
    }
    }
}

/* probe() with a canary past the buffer; the seconds it took in *secs. */
static ilab_status probe_cfg(conf_env *env, const cfg_case *c, char *reason, size_t cap_r, double *secs)
{
    size_t n = 0;
    ilab_config_entry_t *cfg = conf_config_with(env, c->key, c->value, &n);
    if (!cfg)
        return ILAB_OUT_OF_MEMORY;
    double t0 = conf_now_seconds();
    ilab_status st = env->api->probe(env->host, cfg, n, reason, cap_r);
    if (secs)
        *secs = conf_now_seconds() - t0;
    free(cfg);
    return st;
}

static const char *what(const cfg_case *c, char *buf, size_t cap)
{
    size_t len = strlen(c->value);
    if (len > 40)
        snprintf(buf, cap, "%.48s=\"%.32s...\" (%zu bytes)", c->key, c->value, len);
    else
        snprintf(buf, cap, "%.48s=\"%.40s\"", c->key, c->value);
    return buf;
}

/* The reason at capacities 0, 1, 2, len-1, len, len+1: a prefix, NUL
 * within the capacity, no byte past it. */
static void reason_capacities(conf_env *env, sweep *s, const cfg_case *c)
{
    size_t len = strlen(c->reason), caps[] = {0, 1, 2, len > 0 ? len - 1 : 0, len, len + 1};
    char w[128];
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
        unsigned char buf[REASON + 16];
        memset(buf, 0xA5, sizeof buf);
        ilab_status st = probe_cfg(env, c, (char *)buf, caps[i], NULL);
        s->probes++;
        size_t past = caps[i];
        while (past < caps[i] + 16 && buf[past] == 0xA5)
            past++;
        if (st != c->ps)
            note(s, C_PRB3, "probe() with %s and reason_cap %zu returned %s, with a large buffer %s",
                 what(c, w, sizeof w), caps[i], ilab_status_name(st), ilab_status_name(c->ps));
        if (past != caps[i] + 16)
            note(s, C_PRB1, "probe() with %s (%s) and reason_cap %zu wrote byte %zu, past the buffer",
                 what(c, w, sizeof w), ilab_status_name(st), caps[i], past);
        else if (caps[i] > 0 && (!memchr(buf, 0, caps[i]) || strncmp((char *)buf, c->reason, strlen((char *)buf))))
            note(s, C_PRB1, "probe() with %s (%s) and reason_cap %zu did not write a NUL-terminated prefix of its "
                 "reason \"%s\"", what(c, w, sizeof w), ilab_status_name(st), caps[i], c->reason);
    }
}

/* One text under this configuration: detokenize(tokenize(text)) == text,
 * or an engine's IO/UNAVAILABLE (the engine behind the plugin failed or
 * disagrees with this configuration). */
static void round_trip_text(conf_env *env, sweep *s, ilab_backend_t *b, const char *w,
                            const char *text, size_t len)
{
    size_t n = 0, back = 0;
    int32_t *ids = malloc((len + 16) * sizeof *ids);
    char *out = malloc(4 * len + 64);
    ilab_status st = ids && out ? env->api->tokenize(b, text, len, 0, ids, len + 16, &n)
                                : ILAB_OUT_OF_MEMORY;
    if (st == ILAB_OK)
        st = env->api->detokenize(b, ids, n, out, 4 * len + 64, &back);
    if (st != ILAB_IO && st != ILAB_UNAVAILABLE &&
        (st != ILAB_OK || back != len || memcmp(out, text, len) != 0))
        note(s, C_TOK2, "with %s, the corpus text \"%.40s\" (%zu bytes) %s", w, text, len,
             st != ILAB_OK ? ilab_status_name(st) : "does not come back from detokenize(tokenize())");
    free(ids);
    free(out);
}

/* TOK-2 under this configuration: the code points at the edges of UTF-8's
 * lengths and ranges each round-trip, and so does the TOK-2 corpus (a
 * configuration may switch a tokenizer's path, as byte fallback or a
 * dummy-prefix setting does). */
static void round_trips(conf_env *env, sweep *s, ilab_backend_t *b, const char *w)
{
    for (size_t i = 0; i < conf_corpus_count && !s->fail[C_TOK2][0]; i++)
        round_trip_text(env, s, b, w, conf_corpus[i], strlen(conf_corpus[i]));
    static const char *const edges[] = {
        "\x00", "\x7f", "\xc2\x80", "\xdf\xbf", "\xe0\xa0\x80", "\xed\x9f\xbf", "\xee\x80\x80",
        "\xef\xbf\xbf", "\xf0\x90\x80\x80", "\xf3\xbf\xbf\xbf", "\xf4\x8f\x80\x80", "\xf4\x8f\xbf\xbf",
    };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0] && !s->fail[C_TOK2][0]; i++) {
        size_t len = i == 0 ? 1 : strlen(edges[i]), n = 0, back = 0;
        int32_t ids[64];
        char text[64];
        ilab_status st = env->api->tokenize(b, edges[i], len, 0, ids, 64, &n);
        if (st == ILAB_OK)
            st = env->api->detokenize(b, ids, n, text, sizeof text, &back);
        if (st == ILAB_IO || st == ILAB_UNAVAILABLE)
            continue; /* the engine behind the plugin failed or disagrees with this configuration */
        if (st != ILAB_OK || back != len || memcmp(text, edges[i], len) != 0)
            note(s, C_TOK2, "with %s, the code point of UTF-8 bytes %02x%02x%02x%02x (%zu bytes) %s", w,
                 (unsigned char)edges[i][0], len > 1 ? (unsigned char)edges[i][1] : 0,
                 len > 2 ? (unsigned char)edges[i][2] : 0, len > 3 ? (unsigned char)edges[i][3] : 0, len,
                 st != ILAB_OK ? ilab_status_name(st) : "does not come back from detokenize(tokenize())");
    }
}

/* Under this configuration, model_info() and cache_stats() through the
 * validation layer, which checks them (TOK-1, CCH-10) and reports there,
 * and TOK-2's round trip at the edges of UTF-8. */
static void instance_answers(conf_env *env, sweep *s, ilab_backend_t *b, const char *w)
{
    ilab_model_info_t info = {.struct_size = sizeof info};
    bool info_ok = env->api->model_info(b, &info) == ILAB_OK;
    if (env->m->cache_stats) {
        ilab_cache_stats_t stats = {.struct_size = sizeof stats};
        env->api->cache_stats(b, &stats);
    }
    /* Only where the vocabulary and its specials are the default
     * configuration's: a key that moves EOS onto an ordinary token (an
     * adapter's eos_id) makes another model, whose TOK-2 is its own. */
    if (env->m->tokenizer && info_ok && s->default_ok && info.vocab_size == s->default_info.vocab_size &&
        info.bos_id == s->default_info.bos_id && info.eos_id == s->default_info.eos_id)
        round_trips(env, s, b, w);
}

/* model_info() of an instance of the configuration as given (no key
 * changed), for instance_answers(). */
static void default_answers(conf_env *env, sweep *s)
{
    ilab_backend_t *b = NULL;
    char err[REASON];
    if (env->api->create(env->host, env->config, env->n_config, err, sizeof err, &b) != ILAB_OK || !b)
        return;
    s->default_info = (ilab_model_info_t){.struct_size = sizeof s->default_info};
    s->default_ok = env->api->model_info(b, &s->default_info) == ILAB_OK;
    env->api->destroy(b);
}

/* ABI-7 under this configuration: a second create()/destroy() leaves the
 * heap, descriptors and threads where the first left them. */
static void no_leak(conf_env *env, sweep *s, const cfg_case *c, const char *w)
{
    size_t n = 0;
    ilab_config_entry_t *cfg = conf_config_with(env, c->key, c->value, &n);
    if (!cfg)
        return;
    conf_resources before = conf_resources_now();
    char err[REASON];
    ilab_backend_t *b = NULL;
    ilab_status st = env->api->create(env->host, cfg, n, err, sizeof err, &b);
    if (st != ILAB_OK || !b) {
        free(cfg);
        note(s, C_PRB3, "create() with %s succeeded, then gave %s the second time", w, ilab_status_name(st));
        return;
    }
    env->api->destroy(b);
    conf_resources after = conf_resources_now();
    free(cfg); /* after the count: it was live in `before` too */
    char what[200], why[CONF_MSG_CAP];
    snprintf(what, sizeof what, "a second create()/destroy() with %s", w);
    if (!conf_resources_same(before, after, what, why, sizeof why))
        note(s, C_ABI7, "%s", why);
}

/* create() with the case's configuration, judged against its probe. */
static void create_agrees(conf_env *env, sweep *s, cfg_case *c)
{
    size_t n = 0;
    ilab_config_entry_t *cfg = conf_config_with(env, c->key, c->value, &n);
    if (!cfg)
        return;
    char err[REASON], w[128];
    memset(err, 0, sizeof err);
    ilab_backend_t *const untouched = (ilab_backend_t *)(uintptr_t)0x5eedf00d, *b = untouched;
    ilab_status cs = env->api->create(env->host, cfg, n, err, sizeof err, &b);
    free(cfg);
    s->creates++;
    err[sizeof err - 1] = '\0';
    what(c, w, sizeof w);
    if (cs == ILAB_OK) {
        if (b && b != untouched) {
            conf_digest_check(env, b, w, s->fail[C_DIF1], sizeof s->fail[C_DIF1]);
            instance_answers(env, s, b, w);
            env->api->destroy(b);
            no_leak(env, s, c, w);
        }
        else
            note(s, C_PRB2, "create() with %s returned OK without an instance", w);
    } else {
        if (b != untouched)
            note(s, c->ps == ILAB_UNAVAILABLE ? C_PRB2 : C_ERR5,
                 "create() with %s returned %s and wrote *out (%p): on a failure *out is untouched", w,
                 ilab_status_name(cs), (void *)b);
        if (!err[0])
            note(s, c->ps == ILAB_UNAVAILABLE ? C_PRB2 : C_ERR5,
                 "create() with %s returned %s without a message", w, ilab_status_name(cs));
    }
    if (c->ps == ILAB_UNAVAILABLE) {
        if (cs != ILAB_UNAVAILABLE)
            note(s, C_PRB2, "probe() with %s said UNAVAILABLE (%s) but create() returned %s", w, c->reason,
                 ilab_status_name(cs));
        else if (strcmp(err, c->reason) != 0)
            note(s, C_PRB2, "create() with %s gave the reason \"%s\", probe() \"%s\": the same reason, byte for "
                 "byte", w, err, c->reason);
    } else if (c->ps == ILAB_OK && cs == ILAB_UNAVAILABLE) {
        note(s, C_PRB2, "probe() with %s said OK but create() returned UNAVAILABLE (%s)", w, err);
    } else if (c->ps == ILAB_INVALID_ARGUMENT && cs != ILAB_INVALID_ARGUMENT) {
        note(s, C_ERR5, "probe() with %s refused it (INVALID_ARGUMENT: %s) but create() returned %s", w, c->reason,
             ilab_status_name(cs));
    }
    /* Judged only where the configuration as given runs: otherwise its own
     * unavailability may be the answer whatever the value. */
    bool base_runs = env->probe_status == ILAB_OK;
    bool must_refuse = base_runs && (c->kind == V_MALFORMED || c->kind == V_UNDECLARED || (c->kind == V_UNNAMED && c->enum_key));
    if (must_refuse && c->ps == ILAB_UNAVAILABLE)
        note(s, C_PRB1, "probe() with %s said UNAVAILABLE (%s): a value the plugin rejects is INVALID_ARGUMENT "
             "(ERR-5), UNAVAILABLE only for what cannot run here", w, c->reason);
    if (must_refuse && cs != ILAB_INVALID_ARGUMENT)
        note(s, C_ERR5, "create() with %s (%s) returned %s%s%s, want INVALID_ARGUMENT naming the key", w,
             c->kind == V_MALFORMED ? "malformed for its type" : c->kind == V_UNDECLARED ? "an undeclared key"
             : "a value the key's description does not name, beside ones that run",
             ilab_status_name(cs), err[0] ? ": " : "", err);
    if (base_runs && c->kind == V_NEGATIVE && cs == ILAB_UNAVAILABLE)
        note(s, C_ERR5, "create() with %s returned UNAVAILABLE (%s): a value out of range is INVALID_ARGUMENT, "
             "UNAVAILABLE only for what cannot run here", w, err);
    if (cs == ILAB_INVALID_ARGUMENT && !strstr(err, c->key) && env->probe_status != ILAB_INVALID_ARGUMENT)
        note(s, C_ERR5, "create() with %s returned INVALID_ARGUMENT with a message that does not name the key: "
             "\"%s\"", w, err);
}

static void first_probe(conf_env *env, sweep *s, cfg_case *c)
{
    char w[128];
    double secs = 0;
    c->ps = probe_cfg(env, c, c->reason, sizeof c->reason, &secs);
    c->reason[sizeof c->reason - 1] = '\0';
    s->probes++;
    what(c, w, sizeof w);
    if (secs > PROBE_LIMIT_SECONDS) {
        c->slow = true;
        note(s, C_PRB1, "probe() with %s took %.2f s; the contract allows 2 s", w, secs);
    }
    ilab_status st = c->ps;
    if (st != ILAB_OK && st != ILAB_UNAVAILABLE && st != ILAB_INVALID_ARGUMENT)
        note(s, C_PRB1, "probe() with %s returned %s; want OK, UNAVAILABLE or INVALID_ARGUMENT", w,
             ilab_status_name(st));
    if (st != ILAB_OK && !c->reason[0])
        note(s, C_PRB1, "probe() with %s returned %s without a reason", w, ilab_status_name(st));
}

/* Same status and reason as the first answer. */
static void probe_again(conf_env *env, sweep *s, const cfg_case *c, const char *when)
{
    char reason[REASON] = "", w[128];
    ilab_status st = probe_cfg(env, c, reason, sizeof reason, NULL);
    s->probes++;
    reason[sizeof reason - 1] = '\0';
    if (st != c->ps || strcmp(reason, c->reason))
        note(s, C_PRB3, "probe() with %s %s gave %s \"%s\", the first time %s \"%s\" (same configuration, "
             "same answer)", what(c, w, sizeof w), when, ilab_status_name(st), reason, ilab_status_name(c->ps),
             c->reason);
}

typedef struct probe_thread {
    conf_env *env;
    sweep *s;
    int offset;
    pthread_mutex_t *lock;
} probe_thread;

static void *concurrent_probes(void *arg)
{
    probe_thread *t = arg;
    double end = conf_now_seconds() + CONCURRENT_SECONDS;
    for (int r = 0; conf_now_seconds() < end || r < ROUNDS; r++)
        for (int i = 0; i < t->s->n; i++) {
            __atomic_add_fetch(&t->s->probes, 1, __ATOMIC_RELAXED);
            const cfg_case *c = &t->s->c[(i + t->offset + r) % t->s->n];
            if (c->slow)
                continue;
            char reason[REASON] = "";
            ilab_status st = probe_cfg(t->env, c, reason, sizeof reason, NULL);
            reason[sizeof reason - 1] = '\0';
            if (st != c->ps || strcmp(reason, c->reason)) {
                char w[128];
                pthread_mutex_lock(t->lock);
                note(t->s, C_PRB3, "probe() with %s from %d threads at once gave %s \"%s\", alone %s \"%s\"",
                     what(c, w, sizeof w), THREADS, ilab_status_name(st), reason, ilab_status_name(c->ps),
                     c->reason);
                pthread_mutex_unlock(t->lock);
            }
        }
    return NULL;
}

/* Is this string key one whose description names values, one of which runs? */
static void mark_enum_keys(sweep *s, const conf_env *env)
{
    for (size_t k = 0; k < env->m->n_config; k++) {
        const ilab_config_key *key = &env->m->config[k];
        if (key->type != ILAB_CONFIG_STRING || !key->default_value || !key->default_value[0])
            continue;
        bool named_default = false, one_runs = false;
        char words[12][VALUE];
        int n = description_tokens(key->description, false, words, 12);
        for (int i = 0; i < n; i++)
            named_default |= !strcmp(words[i], key->default_value);
        for (int i = 0; i < s->n; i++)
            if (!strcmp(s->c[i].key, key->key) && s->c[i].kind == V_PLAIN && s->c[i].ps == ILAB_OK)
                for (int j = 0; j < n; j++)
                    one_runs |= !strcmp(words[j], s->c[i].value);
        for (int i = 0; i < s->n; i++)
            if (!strcmp(s->c[i].key, key->key))
                s->c[i].enum_key = named_default && one_runs;
    }
}

static void run_sweep(conf_env *env, sweep *s)
{
    memset(s, 0, sizeof *s);
    s->done = true;
    default_answers(env, s);
    for (size_t k = 0; k < env->m->n_config; k++)
        add_key_values(s, &env->m->config[k], env->path);
    add(s, "conformance_undeclared_key", "1", V_UNDECLARED);
    double t_end = conf_now_seconds() + BUDGET_SECONDS;
    for (int i = 0; i < s->n; i++)
        first_probe(env, s, &s->c[i]);
    mark_enum_keys(s, env);
    for (int i = 0; i < s->n && conf_now_seconds() < t_end; i++) {
        cfg_case *c = &s->c[i];
        if (c->slow)
            continue;
        probe_again(env, s, c, "a second time");
        if (c->ps != ILAB_OK)
            reason_capacities(env, s, c);
        create_agrees(env, s, c);
    }
    for (int i = s->n - 1; i >= 0 && conf_now_seconds() < t_end; i--)
        if (!s->c[i].slow)
            probe_again(env, s, &s->c[i], "after every other configuration was probed and created");
    pthread_t th[THREADS];
    probe_thread args[THREADS];
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    int started = 0;
    for (int t = 0; t < THREADS && conf_now_seconds() < t_end; t++) {
        args[t] = (probe_thread){env, s, t * 7, &lock};
        if (pthread_create(&th[t], NULL, concurrent_probes, &args[t]) == 0)
            started++;
    }
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
}

static conf_result report(conf_env *env, int clause, char *msg, size_t cap)
{
    if (!env->api || !env->m) {
        CONF_MSG("the plugin did not load");
        return CONF_FAIL;
    }
    if (!g_sweep.done)
        run_sweep(env, &g_sweep);
    if (g_sweep.fail[clause][0]) {
        CONF_MSG("%s", g_sweep.fail[clause]);
        return CONF_FAIL;
    }
    if (clause == C_TOK2)
        CONF_SKIP_UNLESS(env->m->tokenizer, "tokenizer");
    if (clause == C_DIF1) {
        CONF_SKIP_UNLESS(env->m->logits == ILAB_LOGITS_FULL, "logits: full");
        if (conf_digest_pairs() == 0) {
            snprintf(msg, cap, "no two configurations ran and reported the same non-empty digest");
            return CONF_SKIP;
        }
        CONF_MSG("%d pairs of instances of %d configurations with the same digest agree (greedy and top-5)",
                 conf_digest_pairs(), g_sweep.n);
        return CONF_PASS;
    }
    CONF_MSG("%d configurations over %zu key(s) and one undeclared key: %d probe() and %d create() calls agree",
             g_sweep.n, env->m->n_config, g_sweep.probes, g_sweep.creates);
    return CONF_PASS;
}

conf_result conf_cfg_prb1(conf_env *env, char *msg, size_t cap) { return report(env, C_PRB1, msg, cap); }
conf_result conf_cfg_prb2(conf_env *env, char *msg, size_t cap) { return report(env, C_PRB2, msg, cap); }
conf_result conf_cfg_prb3(conf_env *env, char *msg, size_t cap) { return report(env, C_PRB3, msg, cap); }
conf_result conf_cfg_err5(conf_env *env, char *msg, size_t cap) { return report(env, C_ERR5, msg, cap); }
conf_result conf_cfg_dif1(conf_env *env, char *msg, size_t cap) { return report(env, C_DIF1, msg, cap); }
conf_result conf_cfg_abi7(conf_env *env, char *msg, size_t cap) { return report(env, C_ABI7, msg, cap); }
conf_result conf_cfg_tok2(conf_env *env, char *msg, size_t cap) { return report(env, C_TOK2, msg, cap); }
