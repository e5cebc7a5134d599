/* PRB-1's reason buffer at every small capacity: for the configuration as
 * given and for ones a plugin refuses (an int or float configuration value
 * out of any sensible range, a host table shorter than ABI 1.0's), probe()
 * is called with reason_cap 0, 1, 2, ... up to two past the full reason's
 * length, into a buffer filled with a canary. Each call must give the
 * status of the full-size call, a NUL within the first reason_cap bytes, a
 * prefix of the full reason (non-empty on a refusal when reason_cap >= 2,
 * ERR-1), and no byte written past reason_cap; reason_cap 0 writes nothing.
 * A slow probe (a server round trip) gets the edge capacities only. */
#include <stdlib.h>
#include <string.h>

#include "suites.h"

enum { FULL = 1024, OVER = 32, DENSE_UP_TO = 96, MAX_CASES = 3 };
#define SLOW_PROBE_SECONDS 0.05
#define BUDGET_SECONDS 3.0

typedef struct probe_case {
    char what[128];
    ilab_host_t host;
    ilab_config_entry_t *cfg; /* owned, or env->config */
    size_t n;
    bool owned;
} probe_case;

static bool one_capacity(conf_env *env, const probe_case *c, ilab_status want, const char *full, size_t cap_r,
                         char *msg, size_t cap)
{
    unsigned char buf[FULL + OVER];
    memset(buf, 0xA5, sizeof buf);
    ilab_status st = env->api->probe(&c->host, c->cfg, c->n, (char *)buf, cap_r);
    size_t past = cap_r;
    while (past < cap_r + OVER && buf[past] == 0xA5)
        past++;
    CONF_CHECK_BOOL(st == want, "%s: probe() with reason_cap %zu returned %s, with a large buffer %s", c->what, cap_r,
               ilab_status_name(st), ilab_status_name(want));
    CONF_CHECK_BOOL(past == cap_r + OVER, "%s (%s): probe() with reason_cap %zu wrote byte %zu, past the buffer", c->what,
               ilab_status_name(want), cap_r, past);
    if (cap_r == 0)
        return true;
    const char *nul = memchr(buf, '\0', cap_r);
    CONF_CHECK_BOOL(nul, "%s (%s): probe() with reason_cap %zu left the reason without a NUL in its %zu bytes (the full "
               "reason is %zu bytes: a truncated reason must still be NUL-terminated)", c->what,
               ilab_status_name(want), cap_r, cap_r, strlen(full));
    size_t len = (size_t)(nul - (const char *)buf);
    CONF_CHECK_BOOL(strncmp((const char *)buf, full, len) == 0 && len <= strlen(full),
               "%s (%s): probe() with reason_cap %zu wrote \"%s\", not a prefix of the full reason \"%s\"", c->what,
               ilab_status_name(want), cap_r, (const char *)buf, full);
    CONF_CHECK_BOOL(want == ILAB_OK || cap_r < 2 || len > 0,
               "%s: probe() returned %s with reason_cap %zu and an empty reason", c->what, ilab_status_name(want),
               cap_r);
    return true;
}

/* Every capacity 0..one past the full length (dense while short), or the
 * edges only when probe() is slow. */
static conf_result sweep_case(conf_env *env, const probe_case *c, double t_end, int *calls, char *msg, size_t cap)
{
    char full[FULL];
    double t0 = conf_now_seconds();
    ilab_status want = env->api->probe(&c->host, c->cfg, c->n, full, sizeof full);
    bool slow = conf_now_seconds() - t0 > SLOW_PROBE_SECONDS;
    full[FULL - 1] = '\0';
    size_t len = strlen(full);
    CONF_CHECK(len + 2 < FULL, "%s: probe()'s reason fills all %d bytes of the buffer", c->what, FULL);
    size_t caps[DENSE_UP_TO + 8], n = 0;
    size_t dense = slow ? 3 : (len + 3 < DENSE_UP_TO ? len + 3 : DENSE_UP_TO);
    for (size_t k = 0; k < dense; k++)
        caps[n++] = k;
    for (size_t k = len > 1 ? len - 1 : 0; k <= len + 2; k++)
        if (k >= dense)
            caps[n++] = k;
    for (size_t i = 0; i < n; i++) {
        if (conf_now_seconds() > t_end)
            return CONF_SKIP; /* out of time: what ran passed */
        if (!one_capacity(env, c, want, full, caps[i], msg, cap))
            return CONF_FAIL;
        ++*calls;
    }
    ilab_status st = env->api->probe(&c->host, c->cfg, c->n, NULL, 0);
    CONF_CHECK(st == want, "%s: probe() with reason NULL, reason_cap 0 returned %s, with a buffer %s", c->what,
               ilab_status_name(st), ilab_status_name(want));
    return CONF_PASS;
}

/* A configuration with an int or float value the plugin refuses, if any. */
static bool refused_config(conf_env *env, probe_case *c)
{
    static const char *const values[] = {"-1", "1000000000", "0"};
    for (size_t k = 0; k < env->m->n_config; k++) {
        const ilab_config_key *key = &env->m->config[k];
        if (key->type != ILAB_CONFIG_INT && key->type != ILAB_CONFIG_FLOAT)
            continue;
        for (size_t v = 0; v < sizeof values / sizeof values[0]; v++) {
            c->cfg = conf_config_with(env, key->key, values[v], &c->n);
            if (!c->cfg)
                return false;
            char reason[FULL];
            if (env->api->probe(&c->host, c->cfg, c->n, reason, sizeof reason) != ILAB_OK) {
                c->owned = true;
                snprintf(c->what, sizeof c->what, "configuration %s=%s", key->key, values[v]);
                return true;
            }
            free(c->cfg);
        }
    }
    return false;
}

conf_result conf_prb1_reason_capacities(conf_env *env, char *msg, size_t cap)
{
    probe_case cases[MAX_CASES];
    int n_cases = 0, calls = 0;
    memset(cases, 0, sizeof cases);
    cases[0].host = *env->host;
    cases[0].cfg = env->config;
    cases[0].n = env->n_config;
    snprintf(cases[0].what, sizeof cases[0].what, "the configuration as given");
    n_cases = 1;
    cases[1] = cases[0];
    if (refused_config(env, &cases[1]))
        n_cases++;
    cases[n_cases] = cases[0];
    cases[n_cases].host.struct_size = (uint32_t)offsetof(ilab_host_t, log);
    snprintf(cases[n_cases].what, sizeof cases[n_cases].what, "a host table of struct_size %u (shorter than ABI 1.0's)",
             cases[n_cases].host.struct_size);
    n_cases++;
    double t_end = conf_now_seconds() + BUDGET_SECONDS;
    conf_result r = CONF_PASS;
    bool short_of_time = false;
    for (int i = 0; i < n_cases && r != CONF_FAIL; i++) {
        r = sweep_case(env, &cases[i], t_end, &calls, msg, cap);
        short_of_time |= r == CONF_SKIP;
        if (r == CONF_SKIP)
            r = CONF_PASS;
    }
    for (int i = 0; i < n_cases; i++)
        if (cases[i].owned)
            free(cases[i].cfg);
    if (r == CONF_PASS)
        CONF_MSG("%d probe() calls over %d configurations: every reason NUL-terminated within reason_cap, "
                 "nothing written past it%s", calls, n_cases, short_of_time ? " (time budget reached)" : "");
    return r;
}
