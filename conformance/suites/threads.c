/* THR-1: calls on different sequences from several threads agree with the
 * same calls made one after another (thread_safety sequence or full). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "suites.h"

enum { THREADS = 4, PROMPT = 7, STEPS = 6 };

typedef struct job {
    conf_env *env;
    int32_t prompt[PROMPT];
    int32_t tokens[STEPS];
    float *logits; /* vocab per step */
    ilab_status st;
} job;

static void *run_job(void *arg)
{
    job *j = arg;
    conf_env *env = j->env;
    int32_t v = env->info.vocab_size;
    ilab_seq_t s = 0;
    j->st = env->api->seq_create(env->be, &s);
    if (j->st == ILAB_OK)
        j->st = conf_eval1(env, s, j->prompt, PROMPT, 0, j->logits);
    for (int i = 0; i < STEPS && j->st == ILAB_OK; i++) {
        j->tokens[i] = conf_argmax(j->logits + (size_t)(i ? i - 1 : 0) * v, v);
        j->st = conf_eval1(env, s, &j->tokens[i], 1, 0, j->logits + (size_t)i * v);
    }
    if (s)
        env->api->seq_free(env->be, s);
    return NULL;
}

conf_result conf_thr1_concurrent(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->logits == ILAB_LOGITS_FULL, "logits: full");
    CONF_SKIP_UNLESS(env->m->thread_safety != ILAB_THREADS_NONE, "thread_safety: sequence or full");
    int32_t v = env->info.vocab_size;
    job serial[THREADS], par[THREADS];
    for (int t = 0; t < THREADS; t++) {
        serial[t].env = par[t].env = env;
        conf_prompt_tokens(env, env->opt->seed + 60 + (uint64_t)t, serial[t].prompt, PROMPT);
        memcpy(par[t].prompt, serial[t].prompt, sizeof serial[t].prompt);
        serial[t].logits = calloc((size_t)v * STEPS, sizeof(float));
        par[t].logits = calloc((size_t)v * STEPS, sizeof(float));
        run_job(&serial[t]);
    }
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++)
        pthread_create(&th[t], NULL, run_job, &par[t]);
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    conf_result r = CONF_PASS;
    for (int t = 0; t < THREADS && r == CONF_PASS; t++) {
        if (serial[t].st != ILAB_OK || par[t].st != ILAB_OK) {
            CONF_MSG("thread %d: %s serially, %s concurrently", t, ilab_status_name(serial[t].st),
                     ilab_status_name(par[t].st));
            r = CONF_FAIL;
            break;
        }
        for (int i = 0; i < STEPS && r == CONF_PASS; i++) {
            char what[80];
            snprintf(what, sizeof what, "thread %d of %d, step %d", t, THREADS, i + 1);
            if (serial[t].tokens[i] != par[t].tokens[i] ||
                !conf_logits_close(par[t].logits + (size_t)i * v, serial[t].logits + (size_t)i * v, v, what, msg, cap)) {
                if (serial[t].tokens[i] != par[t].tokens[i])
                    CONF_MSG("%s: greedy token %d concurrently, %d serially", what, par[t].tokens[i], serial[t].tokens[i]);
                r = CONF_FAIL;
            }
        }
    }
    for (int t = 0; t < THREADS; t++) {
        free(serial[t].logits);
        free(par[t].logits);
    }
    return r;
}
