/* The end-of-generation set (ABI 1.2, docs/contract.md TOK-12): every id
 * that ends a generation with "stop" and is never shown as text. A backend
 * declaring chat reports it (EOS, end of turn, end of message, the control
 * tokens its template ends a turn with); for any other backend it is EOS
 * alone, as before. Read once when the engine is created. */
#include <stdio.h>
#include <stdlib.h>

#include "engine_internal.h"

ilab_status ilab_engine_eog_setup(ilab_engine *e, char *err, size_t err_cap)
{
    e->eog = NULL;
    e->n_eog = 0;
    if (!e->manifest->chat) {
        if (e->info.eos_id < 0)
            return ILAB_OK;
        if (!(e->eog = malloc(sizeof *e->eog)))
            return ILAB_OUT_OF_MEMORY;
        e->eog[0] = e->info.eos_id;
        e->n_eog = 1;
        return ILAB_OK;
    }
    size_t n = 0;
    ilab_status st = e->api->eog_ids(e->backend, NULL, 0, &n);
    if (st == ILAB_OK || st == ILAB_BUFFER_TOO_SMALL) {
        e->eog = malloc((n ? n : 1) * sizeof *e->eog);
        if (!e->eog)
            return ILAB_OUT_OF_MEMORY;
        st = e->api->eog_ids(e->backend, e->eog, n, &n);
    }
    if (st != ILAB_OK) {
        char msg[256];
        ilab_engine_backend_error(e, msg, sizeof msg);
        snprintf(err, err_cap, "backend '%s' declares chat but eog_ids() failed: %s: %s",
                 e->manifest->name, ilab_status_name(st), msg);
        free(e->eog);
        e->eog = NULL;
        return st;
    }
    for (size_t i = 0; i < n; i++)
        if (e->eog[i] < 0 || e->eog[i] >= e->info.vocab_size) {
            snprintf(err, err_cap, "backend '%s' eog_ids()[%zu] = %d is outside the vocabulary "
                     "(size %d)", e->manifest->name, i, e->eog[i], e->info.vocab_size);
            free(e->eog);
            e->eog = NULL;
            return ILAB_INVALID_ARGUMENT;
        }
    e->n_eog = n;
    return ILAB_OK;
}

bool ilab_engine_is_eog(const ilab_engine *e, int32_t token)
{
    for (size_t i = 0; i < e->n_eog; i++)
        if (e->eog[i] == token)
            return true;
    return false;
}

const int32_t *ilab_engine_eog_ids(const ilab_engine *e, size_t *n)
{
    *n = e->n_eog;
    return e->eog;
}
