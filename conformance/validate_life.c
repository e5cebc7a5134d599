/* The validation layer over the calls that make, describe and end an
 * instance: probe (PRB-1), create (ERR-1, ERR-5), destroy, last_error
 * (ERR-4), model_info (ABI-9), cache_stats (CCH-10) and cancel. */
#include <stdio.h>
#include <string.h>

#include "validate_internal.h"

#define R (val_g.real)

/* A message buffer the plugin writes (probe's reason, create's error):
 * NUL-terminated within cap, nothing past it, non-empty on non-OK when
 * cap >= 2. Copies back up to the NUL. */
static void check_text_out(const val_buf *b, char *user, size_t cap, ilab_status st,
                           const char *clause, const char *call)
{
    const char *p = val_buf_ptr(b);
    val_checked(clause);
    if (!val_buf_guards_ok(b)) {
        val_violation(clause, call, "wrote outside its %zu-byte message buffer", cap);
        return;
    }
    if (cap == 0)
        return;
    const char *nul = memchr(p, '\0', cap);
    if (!nul && st == ILAB_OK && strcmp(call, "create") == 0) {
        memcpy(user, p, cap); /* create() owes a message on failure only */
        return;
    }
    if (!nul) {
        val_violation(clause, call, "returned %s and left no NUL in its %zu-byte message buffer",
                      ilab_status_name(st), cap);
        memcpy(user, p, cap - 1);
        user[cap - 1] = '\0';
        return;
    }
    memcpy(user, p, (size_t)(nul - p) + 1);
    if (st != ILAB_OK && cap >= 2 && !p[0])
        val_violation(clause, call, "returned %s with an empty message (cap %zu)", ilab_status_name(st), cap);
}

static ilab_status w_probe(const ilab_host_t *host, const ilab_config_entry_t *config, size_t n_config,
                           char *reason, size_t cap)
{
    val_call c;
    val_enter(&c, "probe", NULL);
    val_buf b;
    bool shadow = reason && val_buf_open(&b, cap);
    ilab_status st = R->probe(host, config, n_config, shadow ? val_buf_ptr(&b) : reason, cap);
    if (shadow) {
        check_text_out(&b, reason, cap, st, "PRB-1", "probe");
        val_buf_close(&b);
    }
    if (st != ILAB_OK && st != ILAB_UNAVAILABLE && st != ILAB_INVALID_ARGUMENT && st != ILAB_ABI_MISMATCH)
        val_violation("PRB-1", "probe", "returned %s, not OK, UNAVAILABLE, INVALID_ARGUMENT or ABI_MISMATCH",
                      ilab_status_name(st));
    val_leave(&c, st);
    return st;
}

static void register_instance(ilab_backend_t *be)
{
    val_checked("ABI-7");
    val_lock();
    if (val_inst_find(be)) {
        val_unlock();
        val_violation("ABI-7", "create", "returned the handle of an instance that is still live");
        return;
    }
    val_inst *in = NULL;
    for (size_t i = 0; i < sizeof val_g.inst / sizeof val_g.inst[0] && !in; i++)
        if (!val_g.inst[i].be)
            in = &val_g.inst[i];
    if (in) {
        in->be = be;
        in->first_free = in->total = -1;
        memset(&in->info, VAL_PATTERN, sizeof in->info); /* as w_model_info's, for ABI-9's memcmp */
        in->info.struct_size = sizeof in->info;
        in->info_ok = R->model_info(be, &in->info) == ILAB_OK;
        /* the instance's very first answer is ABI-9's reference: a plugin
         * whose later answers differ from it (a digest filled in lazily)
         * is caught on the test's own first call */
        in->first_info = in->info;
        in->first_info_ok = in->info_ok;
        char buf[VAL_MSG] = "";
        R->last_error(be, buf, sizeof buf);
        buf[sizeof buf - 1] = '\0';
        snprintf(in->last, sizeof in->last, "%s", buf);
        in->last_ok = true;
    }
    val_unlock();
}

static ilab_status w_create(const ilab_host_t *host, const ilab_config_entry_t *config, size_t n_config,
                            char *error, size_t cap, ilab_backend_t **out)
{
    val_call c;
    val_enter(&c, "create", NULL);
    val_buf b;
    bool shadow = error && val_buf_open(&b, cap);
    ilab_backend_t *const sentinel = (ilab_backend_t *)(uintptr_t)0x5a5a5a5a5a5a5a50ULL;
    ilab_backend_t *local = sentinel;
    ilab_status st = R->create(host, config, n_config, shadow ? val_buf_ptr(&b) : error, cap,
                               out ? &local : NULL);
    if (shadow) {
        check_text_out(&b, error, cap, st, "ERR-1", "create");
        val_buf_close(&b);
    }
    if (out) {
        /* UNAVAILABLE writes nothing to *out (PRB-2); any other failure
         * neither (ERR-5) */
        const char *clause = st == ILAB_UNAVAILABLE ? "PRB-2" : "ERR-5";
        val_checked(clause);
        if (st != ILAB_OK && local != sentinel)
            val_violation(clause, "create", "returned %s and wrote *out (%p)", ilab_status_name(st),
                          (void *)local);
        if (st == ILAB_OK && (local == sentinel || !local))
            val_violation("ERR-1", "create", "returned OK without an instance in *out");
        if (st == ILAB_OK && local != sentinel) {
            *out = local;
            if (local)
                register_instance(local);
        }
    }
    val_leave(&c, st);
    return st;
}

void val_inst_drop(val_inst *in); /* validate_core.c */

static void w_destroy(ilab_backend_t *be)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    val_lock();
    val_inst *in = val_inst_find(be);
    if (in)
        val_inst_drop(in);
    val_unlock();
    R->destroy(be);
}

static size_t w_last_error(const ilab_backend_t *be, char *buf, size_t cap)
{
    val_buf b;
    if (!buf || !val_buf_open(&b, cap))
        return R->last_error(be, buf, cap);
    char *p = val_buf_ptr(&b);
    size_t len = R->last_error(be, p, cap);
    val_checked("ERR-4");
    if (!val_buf_guards_ok(&b))
        val_violation("ERR-4", "last_error", "wrote outside its %zu-byte buffer", cap);
    if (cap == 0) {
        if (val_buf_changed_from(&b, 0) != SIZE_MAX)
            val_violation("ERR-4", "last_error", "wrote a byte at cap 0");
    } else {
        const char *nul = memchr(p, '\0', cap);
        if (!nul) {
            val_violation("ERR-4", "last_error", "left no NUL in a %zu-byte buffer", cap);
            memcpy(buf, p, cap - 1);
            buf[cap - 1] = '\0';
        } else {
            size_t held = (size_t)(nul - p);
            if (held > len || (len < cap && held != len) || (len >= cap && held != cap - 1))
                val_violation("ERR-4", "last_error", "returned %zu and copied %zu bytes into %zu",
                              len, held, cap);
            memcpy(buf, p, held + 1);
        }
    }
    val_buf_close(&b);
    return len;
}

static ilab_status w_model_info(ilab_backend_t *be, ilab_model_info_t *info)
{
    val_call c;
    val_enter(&c, "model_info", be);
    if (!info || info->struct_size != sizeof *info) {
        ilab_status st = R->model_info(be, info); /* ABI-3's own tests */
        val_leave(&c, st);
        return st;
    }
    ilab_model_info_t local;
    memset(&local, VAL_PATTERN, sizeof local);
    local.struct_size = info->struct_size;
    ilab_status st = R->model_info(be, &local);
    if (st == ILAB_OK) {
        val_checked("TOK-1");
        if (!memchr(local.name, '\0', sizeof local.name) || !local.name[0])
            val_violation("TOK-1", "model_info", "name is %s", local.name[0] ? "not NUL-terminated in its "
                          "64 bytes" : "empty");
        else if (!memchr(local.digest, '\0', sizeof local.digest))
            val_violation("TOK-1", "model_info", "digest is not NUL-terminated in its 80 bytes");
        else if (local.vocab_size <= 0 || local.max_context <= 0 || local.bos_id < -1 ||
                 local.bos_id >= local.vocab_size || local.eos_id < -1 || local.eos_id >= local.vocab_size)
            val_violation("TOK-1", "model_info", "vocab_size %d, max_context %d, bos_id %d, eos_id %d",
                          (int)local.vocab_size, (int)local.max_context, (int)local.bos_id, (int)local.eos_id);
        *info = local;
        val_lock();
        val_inst *in = val_inst_find(be);
        if (in && !in->first_info_ok) {
            in->first_info = local;
            in->first_info_ok = true;
        } else if (in) {
            val_checked("ABI-9");
            if (memcmp(&in->first_info, &local, sizeof local) != 0)
                val_violation("ABI-9", "model_info", "an answer differs from the instance's first");
        }
        val_unlock();
    }
    val_leave(&c, st);
    return st;
}

static void stats_check(val_inst *in, const ilab_cache_stats_t *s)
{
    val_checked("CCH-10");
    const char *bad = NULL;
    if (s->block_size < 1 || s->total_positions < 1)
        bad = "block_size and total_positions are not both >= 1";
    else if (s->free_positions < 0 || s->free_positions > s->total_positions)
        bad = "free_positions is outside 0..total_positions";
    else if (s->free_positions % s->block_size || s->total_positions % s->block_size)
        bad = "free or total positions are not a multiple of block_size";
    else if (in->total >= 0 && (in->total != s->total_positions || in->block != s->block_size))
        bad = "total_positions or block_size changed";
    if (bad) {
        val_violation("CCH-10", "cache_stats", "%s (block %d, total %lld, free %lld)", bad,
                      (int)s->block_size, (long long)s->total_positions, (long long)s->free_positions);
        return;
    }
    in->total = s->total_positions;
    in->block = s->block_size;
    if (in->foreign || in->generated || in->live || in->active > 1)
        return;
    if (in->first_free < 0) {
        in->first_free = s->free_positions;
    } else if (s->free_positions != in->first_free) {
        val_violation("CCH-10", "cache_stats",
                      "with every sequence freed, free_positions is %lld, not the instance's first "
                      "figure %lld",
                      (long long)s->free_positions, (long long)in->first_free);
    }
}

static ilab_status w_cache_stats(ilab_backend_t *be, ilab_cache_stats_t *stats)
{
    val_call c;
    val_enter(&c, "cache_stats", be);
    if (!stats || stats->struct_size != sizeof *stats) {
        ilab_status st = R->cache_stats(be, stats);
        val_leave(&c, st);
        return st;
    }
    ilab_cache_stats_t local;
    memset(&local, VAL_PATTERN, sizeof local);
    local.struct_size = stats->struct_size;
    ilab_status st = R->cache_stats(be, &local);
    if (st == ILAB_OK) {
        *stats = local;
        val_lock();
        val_inst *in = val_inst_find(be);
        if (in)
            stats_check(in, &local);
        val_unlock();
    } else {
        ilab_cache_stats_t fresh;
        memset(&fresh, VAL_PATTERN, sizeof fresh);
        fresh.struct_size = stats->struct_size;
        val_checked("CCH-10");
        if (memcmp(&fresh, &local, sizeof fresh) != 0)
            val_violation("CCH-10", "cache_stats", "returned %s and wrote *stats", ilab_status_name(st));
    }
    val_leave(&c, st);
    return st;
}

static ilab_status w_cancel(ilab_backend_t *be, uint64_t id)
{
    val_call c;
    val_enter(&c, "cancel", be);
    ilab_status st = R->cancel(be, id);
    val_leave(&c, st);
    return st;
}

void val_fill_life(ilab_backend_api_t *t)
{
    if (t->probe) t->probe = w_probe;
    if (t->create) t->create = w_create;
    if (t->destroy) t->destroy = w_destroy;
    if (t->last_error) t->last_error = w_last_error;
    if (t->model_info) t->model_info = w_model_info;
    if (t->cache_stats) t->cache_stats = w_cache_stats;
    if (t->cancel) t->cancel = w_cancel;
}
