/* One stream for the STR checks: the greedy request most of them start
 * from and then vary (a stop string, a stop id, a callback stop, a shorter
 * max_tokens), and running a request with the failure they share. */
#include "suites.h"

conf_result conf_stream_run(conf_env *env, const conf_gen_params *p, conf_gen *g, char *msg, size_t cap)
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

void conf_greedy_request(const conf_env *env, uint64_t seed, int32_t *prompt, size_t n, int32_t max_tokens,
                         conf_gen_params *p)
{
    conf_prompt_tokens(env, seed, prompt, (int32_t)n);
    conf_gen_params_default(p, prompt, n);
    p->max_tokens = max_tokens;
    p->ignore_eos = true;
}

conf_result conf_greedy_stream(conf_env *env, uint64_t seed, int32_t *prompt, size_t n, int32_t max_tokens,
                               conf_gen_params *p, conf_gen *g, char *msg, size_t cap)
{
    conf_greedy_request(env, seed, prompt, n, max_tokens, p);
    return conf_stream_run(env, p, g, msg, cap);
}
