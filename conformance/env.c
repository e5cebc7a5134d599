/* The worker's lazily built view of one plugin: load, probe, create.
 *
 * Each stage runs at most once per worker. When a stage crashed or hung in
 * an earlier worker, the supervisor says so (dead_stage_test) and the stage is
 * not retried: the tests that need it fail, naming the test it died in. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "isolation/proxy.h"
#include "suite.h"
#include "validate.h"
#ifdef ILAB_CONF_HAVE_SETTINGS
#include "config/settings.h"
#endif

static void enter_stage(conf_env *env, conf_stage stage)
{
    if (env->on_stage)
        env->on_stage(env->report_ctx, stage);
}

static void info(conf_env *env, const char *key, const char *value)
{
    if (env->on_info)
        env->on_info(env->report_ctx, key, value);
}

static const ilab_config_entry_t *user_config(conf_env *env, size_t *n)
{
    *n = 0;
#ifdef ILAB_CONF_HAVE_SETTINGS
    if (env->opt->settings && env->m)
        return ilab_settings_plugin_config(env->opt->settings, env->m->name, n);
#endif
    return NULL;
}

static void load(conf_env *env)
{
    env->load_tried = true;
    enter_stage(env, CONF_STAGE_LOAD);
    env->load_status = env->opt->isolated
        ? ilab_proxy_load(env->path, NULL, env->load_err, sizeof env->load_err, &env->plugin)
        : ilab_plugin_load(env->path, env->load_err, sizeof env->load_err, &env->plugin);
    enter_stage(env, CONF_STAGE_NONE);
    if (env->load_status != ILAB_OK) {
        env->plugin = NULL;
        if (!env->load_err[0])
            snprintf(env->load_err, sizeof env->load_err, "%s: refused with %s and no message",
                     env->path, ilab_status_name(env->load_status));
        return;
    }
    env->host = ilab_plugin_host(env->plugin);
    env->m = ilab_plugin_manifest(env->plugin);
    /* every call any test makes goes through the validation layer */
    env->api = conf_validate_wrap(ilab_plugin_api(env->plugin), env->m);
    const ilab_plugin_entry_t *e = ilab_plugin_entry_of(env->plugin);
    char abi[32];
    snprintf(abi, sizeof abi, "%u.%u", (unsigned)e->abi_major, (unsigned)e->abi_minor);
    info(env, "name", env->m->name);
    info(env, "abi", abi);
    info(env, "version", env->m->version);

    size_t n_user = 0;
    const ilab_config_entry_t *user = user_config(env, &n_user);
    ilab_status st = ilab_config_validate(env->m, user, n_user, env->config_err,
                                          sizeof env->config_err);
    if (st == ILAB_OK)
        st = ilab_config_with_defaults(env->m, user, n_user, &env->config, &env->n_config);
    if (st != ILAB_OK && !env->config_err[0])
        snprintf(env->config_err, sizeof env->config_err, "configuration for %s: %s",
                 env->m->name, ilab_status_name(st));
}

static void probe(conf_env *env)
{
    env->probe_tried = true;
    enter_stage(env, CONF_STAGE_PROBE);
    double t0 = conf_now_seconds();
    env->reason[0] = '\0';
    env->probe_status = env->api->probe(env->host, env->config, env->n_config,
                                        env->reason, sizeof env->reason);
    env->reason[sizeof env->reason - 1] = '\0';
    env->probe_seconds = conf_now_seconds() - t0;
    enter_stage(env, CONF_STAGE_NONE);
    if (env->probe_status != ILAB_OK)
        info(env, "unavailable", env->reason[0] ? env->reason : "(probe gave no reason)");
}

static void create(conf_env *env)
{
    env->create_tried = true;
    enter_stage(env, CONF_STAGE_CREATE);
    env->create_err[0] = '\0';
    env->create_status = env->api->create(env->host, env->config, env->n_config,
                                          env->create_err, sizeof env->create_err, &env->be);
    env->create_err[sizeof env->create_err - 1] = '\0';
    if (env->create_status != ILAB_OK) {
        env->be = NULL;
        enter_stage(env, CONF_STAGE_NONE);
        return;
    }
    memset(&env->info, 0, sizeof env->info);
    env->info.struct_size = sizeof env->info;
    ilab_status st = env->api->model_info(env->be, &env->info);
    enter_stage(env, CONF_STAGE_NONE);
    if (st != ILAB_OK) {
        char e[256];
        snprintf(env->create_err, sizeof env->create_err, "model_info() returned %s: %s",
                 ilab_status_name(st), conf_last_error(env, e, sizeof e));
        env->create_status = st;
        env->api->destroy(env->be);
        env->be = NULL;
        return;
    }
    env->info.name[sizeof env->info.name - 1] = '\0';
    env->info.digest[sizeof env->info.digest - 1] = '\0';
    info(env, "digest", env->info.digest);
}

conf_result conf_env_prepare(conf_env *env, conf_need need, char *msg, size_t cap)
{
    if (need == CONF_NEED_FILE || need == CONF_NEED_DEFERRED)
        return CONF_PASS;

    if (env->dead_stage_test[CONF_STAGE_LOAD]) {
        CONF_MSG("loading the plugin died earlier (in %s)", env->dead_stage_test[CONF_STAGE_LOAD]);
        return CONF_FAIL;
    }
    if (!env->load_tried)
        load(env);
    if (!env->plugin) {
        CONF_MSG("the host loader refused the plugin: %s", env->load_err);
        return CONF_FAIL;
    }
    if (env->config_err[0]) {
        CONF_MSG("%s", env->config_err);
        return CONF_ERROR;
    }
    if (need == CONF_NEED_PLUGIN)
        return CONF_PASS;

    if (env->dead_stage_test[CONF_STAGE_PROBE]) {
        CONF_MSG("probe() died earlier (in %s)", env->dead_stage_test[CONF_STAGE_PROBE]);
        return CONF_FAIL;
    }
    if (!env->probe_tried)
        probe(env);
    if (need == CONF_NEED_PROBE)
        return CONF_PASS;

    if (env->probe_status != ILAB_OK) {
        if (env->opt->required) {
            CONF_MSG("required plugin is unavailable: %s", env->reason);
            return CONF_FAIL;
        }
        CONF_MSG("%s", env->reason[0] ? env->reason : "unavailable (probe gave no reason)");
        return CONF_SKIP;
    }
    if (env->dead_stage_test[CONF_STAGE_CREATE]) {
        CONF_MSG("create() died earlier (in %s)", env->dead_stage_test[CONF_STAGE_CREATE]);
        return CONF_FAIL;
    }
    if (!env->create_tried)
        create(env);
    if (!env->be) {
        CONF_MSG("create() returned %s after probe() said available: %s",
                 ilab_status_name(env->create_status), env->create_err);
        return CONF_FAIL;
    }
    return CONF_PASS;
}


void conf_env_release(conf_env *env)
{
    conf_engine_release(env);
    if (env->be)
        env->api->destroy(env->be);
    env->be = NULL;
    if (env->config)
        ilab_config_entries_free(env->config, env->n_config);
    env->config = NULL;
    env->n_config = 0;
    conf_validate_unwrap(env->api);
    env->api = NULL;
    ilab_plugin_unload(env->plugin);
    env->plugin = NULL;
}
