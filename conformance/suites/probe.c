/* PRB clauses: availability. These run for unavailable plugins too; they
 * are how the harness learns the reason every other test skips with. */
#include <stdint.h>
#include <string.h>

#include "suites.h"

conf_result conf_prb1_answers(conf_env *env, char *msg, size_t cap)
{
    ilab_status st = env->probe_status;
    CONF_CHECK(st == ILAB_OK || st == ILAB_UNAVAILABLE || st == ILAB_INVALID_ARGUMENT || st == ILAB_ABI_MISMATCH,
               "probe() returned %s (%d); want OK, UNAVAILABLE, INVALID_ARGUMENT (a configuration value it "
               "rejects) or ABI_MISMATCH (a host table it cannot use)", ilab_status_name(st), (int)st);
    CONF_CHECK(env->probe_seconds <= 2.0, "probe() took %.2f s; the contract allows 2 s",
               env->probe_seconds);
    if (st != ILAB_OK) {
        CONF_CHECK(env->reason[0] != '\0', "probe() said %s without a reason", ilab_status_name(st));
        CONF_MSG("%s after %.0f ms: %s", ilab_status_name(st), env->probe_seconds * 1000, env->reason);
    }
    return CONF_PASS;
}

conf_result conf_prb2_refuses(conf_env *env, char *msg, size_t cap)
{
    if (env->probe_status == ILAB_OK) {
        char why[CONF_MSG_CAP];
        conf_result r = conf_env_prepare(env, CONF_NEED_INSTANCE, why, sizeof why);
        CONF_CHECK(r == CONF_PASS, "probe() said available but %s", why);
        CONF_MSG("available; create() succeeded");
        return CONF_PASS;
    }
    ilab_backend_t *const untouched = (ilab_backend_t *)(uintptr_t)0x5eedf00d, *b = untouched;
    char err[512] = "";
    ilab_status st = env->api->create(env->host, env->config, env->n_config, err,
                                      sizeof err, &b);
    if (st == ILAB_UNAVAILABLE) {
        CONF_CHECK(b == untouched, "create() returned UNAVAILABLE but wrote *out (%p)", (void *)b);
        CONF_CHECK(err[0], "create() returned UNAVAILABLE without a reason");
        CONF_CHECK(strcmp(err, env->reason) == 0,
                   "create() gave a different reason than probe(): '%s' vs '%s' (the same, byte for byte)",
                   err, env->reason);
        return CONF_PASS;
    }
    if (st != ILAB_OK) {
        CONF_MSG("create() of an unavailable backend returned %s (%s), want UNAVAILABLE",
                 ilab_status_name(st), err);
        return CONF_FAIL;
    }
    /* It created an instance: then every piece of work must be refused. */
    conf_result r = CONF_PASS;
    ilab_seq_t s = 0;
    st = env->api->seq_create(b, &s);
    if (st == ILAB_OK) {
        int32_t tok = 0;
        float *logits = NULL;
        ilab_batch_item_t item = {.struct_size = sizeof item, .seq = s, .tokens = &tok, .n_tokens = 1,
                                  .logits = logits};
        const ilab_batch_item_t *items[1] = {&item};
        st = env->api->eval(b, items, 1);
        if (st == ILAB_OK) {
            CONF_MSG("probe() said unavailable (%s) but create() and eval() succeeded", env->reason);
            r = CONF_FAIL;
        }
    }
    if (r == CONF_PASS) {
        int32_t tok = 0;
        ilab_generate_request_t req = {.struct_size = sizeof req, .request_id = 1,
                                       .prompt_tokens = &tok, .n_prompt_tokens = 1, .max_tokens = 1};
        ilab_sampling_t sampling = {.struct_size = sizeof sampling, .top_p = 1, .repetition_penalty = 1};
        req.sampling = &sampling;
        st = env->api->generate(b, &req, NULL, NULL);
        if (st == ILAB_OK) {
            CONF_MSG("probe() said unavailable (%s) but generate() succeeded", env->reason);
            r = CONF_FAIL;
        }
    }
    env->api->destroy(b);
    return r;
}
