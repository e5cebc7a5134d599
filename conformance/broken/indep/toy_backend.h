/* The instance of the indep toy backends, shared by plugin.c (the backend
 * table) and gen.c (backend-owned generation, INDEP_GEN builds only). */
#ifndef INDEP_TOY_BACKEND_H
#define INDEP_TOY_BACKEND_H

#include <pthread.h>
#include <stdatomic.h>

#include <inferlab/inferlab.h>

#include "toy_model.h"

#define TOY_MAX_BATCH 16
#define TOY_TOPK_MAX 8
#define TOY_MAX_RUNNING 32

/* One running generate(), visible to cancel(). */
typedef struct toy_running {
    int in_use;
    uint64_t id;
    atomic_int cancel;
} toy_running;

struct ilab_backend {
    const ilab_host_t *host;
    pthread_mutex_t lock; /* cache, scratch, running table */
    toy_cache cache;
    float scratch[TOY_MAX_CONTEXT]; /* attention scores, under lock */
    toy_running running[TOY_MAX_RUNNING];
    void *extra; /* BREAK_CREATE_LEAK's table */
    char *threads_cfg; /* BREAK_CFG_LEAK's copy of the config value */
    float gen_work[TOY_VOCAB]; /* BREAK_GEN_RACE: the sampler's scratch, shared */
    int gen_order[TOY_VOCAB];
    ilab_last_error_t error;
};

ilab_status toy_fail(ilab_backend_t *b, ilab_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* One eval of `n` tokens on a sequence under the instance lock (the
 * generate() path); logits: one row. */
ilab_status toy_eval_one(ilab_backend_t *b, toy_seq *s, const int32_t *tokens, int32_t n,
                         float *logits);

#ifdef INDEP_GEN
ilab_status toy_generate(ilab_backend_t *b, const ilab_generate_request_t *request,
                         ilab_event_fn on_event, void *user_data);
ilab_status toy_cancel(ilab_backend_t *b, uint64_t request_id);
#endif

#endif
