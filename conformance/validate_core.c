/* The validation layer's core: the wrapped table, the instances and
 * sequences it has seen, the checks every call on an instance gets when it
 * returns (ERR-1, ERR-4), and the record of broken rules per clause.
 *
 * Its own tables live in mmap'ed memory, not on the heap: the leak tests
 * count the live heap of the whole process across thousands of cycles, and
 * a table that grows with every handle issued must not look like a leak. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "validate_internal.h"

val_state val_g = {.mu = PTHREAD_MUTEX_INITIALIZER};

static ilab_backend_api_t wrapped;
static bool wrapped_on;
static unsigned long calls;

void val_lock(void) { pthread_mutex_lock(&val_g.mu); }
void val_unlock(void) { pthread_mutex_unlock(&val_g.mu); }
unsigned long conf_validate_calls(void) { return __atomic_load_n(&calls, __ATOMIC_RELAXED); }

/* ---- the record of broken rules ------------------------------------------ */

typedef struct val_clause {
    char clause[12];
    unsigned long count;
    char first[CONF_MSG_CAP - 128];
    bool checked, reported_checked;
    int reported;
} val_clause;

static pthread_mutex_t rec_mu = PTHREAD_MUTEX_INITIALIZER;
static val_clause rec[48];
static const char *current_test;
static void (*reporter)(void *ctx, const char *key, const char *value);
static void *reporter_ctx;

static val_clause *rec_find(const char *clause)
{
    for (size_t i = 0; i < sizeof rec / sizeof rec[0]; i++) {
        if (strcmp(rec[i].clause, clause) == 0)
            return &rec[i];
        if (!rec[i].clause[0]) {
            snprintf(rec[i].clause, sizeof rec[i].clause, "%s", clause);
            return &rec[i];
        }
    }
    return NULL;
}

void conf_validate_set_test(const char *id) { __atomic_store_n(&current_test, id, __ATOMIC_RELAXED); }

void conf_validate_set_reporter(void (*fn)(void *ctx, const char *key, const char *value), void *ctx)
{
    pthread_mutex_lock(&rec_mu);
    reporter = fn;
    reporter_ctx = ctx;
    pthread_mutex_unlock(&rec_mu);
}

void conf_validate_reset(void)
{
    pthread_mutex_lock(&rec_mu);
    memset(rec, 0, sizeof rec);
    pthread_mutex_unlock(&rec_mu);
}

void conf_validate_note(const char *key, const char *value)
{
    char clause[12] = "";
    size_t n = strcspn(value, " ");
    if (n == 0 || n >= sizeof clause)
        return;
    memcpy(clause, value, n);
    pthread_mutex_lock(&rec_mu);
    val_clause *c = rec_find(clause);
    if (c && strcmp(key, "validated") == 0) {
        c->checked = c->reported_checked = true;
    } else if (c && strcmp(key, "violation") == 0) {
        if (c->count++ == 0)
            snprintf(c->first, sizeof c->first, "%s", value[n] ? value + n + 1 : "");
        c->checked = c->reported_checked = true;
        c->reported++;
    }
    pthread_mutex_unlock(&rec_mu);
}

void val_violation(const char *clause, const char *call, const char *fmt, ...)
{
    char detail[512], line[CONF_MSG_CAP - 128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    const char *test = __atomic_load_n(&current_test, __ATOMIC_RELAXED);
    snprintf(line, sizeof line, "%s() in %s: %s", call, test ? test : "set-up", detail);
    pthread_mutex_lock(&rec_mu);
    val_clause *c = rec_find(clause);
    if (c) {
        if (c->count++ == 0)
            snprintf(c->first, sizeof c->first, "%s", line);
        c->checked = true;
        if (reporter && c->reported < 3) {
            char v[CONF_MSG_CAP];
            snprintf(v, sizeof v, "%s %s", clause, line);
            c->reported++;
            c->reported_checked = true;
            reporter(reporter_ctx, "violation", v);
        }
    }
    pthread_mutex_unlock(&rec_mu);
}

void val_checked(const char *clause)
{
    pthread_mutex_lock(&rec_mu);
    val_clause *c = rec_find(clause);
    if (c) {
        c->checked = true;
        if (reporter && !c->reported_checked) {
            c->reported_checked = true;
            reporter(reporter_ctx, "validated", clause);
        }
    }
    pthread_mutex_unlock(&rec_mu);
}

conf_result conf_validate_verdict(const char *clause, char *msg, size_t cap)
{
    conf_result r;
    pthread_mutex_lock(&rec_mu);
    val_clause *c = rec_find(clause);
    if (c && c->count) {
        snprintf(msg, cap, "%lu call%s broke %s; the first: %s", c->count, c->count == 1 ? "" : "s",
                 clause, c->first);
        r = CONF_FAIL;
    } else if (c && c->checked) {
        snprintf(msg, cap, "every call checked against %s held it", clause);
        r = CONF_PASS;
    } else {
        snprintf(msg, cap, "no call that %s governs was made", clause);
        r = CONF_SKIP;
    }
    pthread_mutex_unlock(&rec_mu);
    return r;
}

/* ---- instances and sequences --------------------------------------------- */

val_inst *val_inst_find(const ilab_backend_t *be)
{
    if (!be)
        return NULL;
    for (size_t i = 0; i < sizeof val_g.inst / sizeof val_g.inst[0]; i++)
        if (val_g.inst[i].be == be)
            return &val_g.inst[i];
    return NULL;
}

static size_t slot_of(uint64_t h, size_t cap)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return (size_t)h & (cap - 1);
}

val_seq *val_seq_find(val_inst *in, uint64_t h)
{
    if (!in->seqs || h == 0)
        return NULL;
    for (size_t i = slot_of(h, in->seq_cap);; i = (i + 1) & (in->seq_cap - 1)) {
        if (in->seqs[i].handle == h)
            return &in->seqs[i];
        if (in->seqs[i].handle == 0)
            return NULL;
    }
}

static bool seq_grow(val_inst *in)
{
    size_t cap = in->seq_cap ? in->seq_cap * 2 : 1024;
    val_seq *s = mmap(NULL, cap * sizeof *s, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (s == MAP_FAILED)
        return false;
    VAL_UNPOISON(s, cap * sizeof *s);
    for (size_t i = 0; i < in->seq_cap; i++) {
        if (!in->seqs[i].handle)
            continue;
        size_t j = slot_of(in->seqs[i].handle, cap);
        while (s[j].handle)
            j = (j + 1) & (cap - 1);
        s[j] = in->seqs[i];
    }
    if (in->seqs)
        munmap(in->seqs, in->seq_cap * sizeof *in->seqs);
    in->seqs = s;
    in->seq_cap = cap;
    return true;
}

val_seq *val_seq_add(val_inst *in, uint64_t h)
{
    if ((in->seq_used + 1) * 2 > in->seq_cap && !seq_grow(in))
        return NULL;
    size_t i = slot_of(h, in->seq_cap);
    while (in->seqs[i].handle)
        i = (i + 1) & (in->seq_cap - 1);
    in->seqs[i].handle = h;
    in->seq_used++;
    return &in->seqs[i];
}

void val_inst_drop(val_inst *in);
void val_inst_drop(val_inst *in)
{
    if (in->seqs)
        munmap(in->seqs, in->seq_cap * sizeof *in->seqs);
    memset(in, 0, sizeof *in);
}

void conf_validate_foreign(const ilab_backend_t *be)
{
    val_lock();
    val_inst *in = val_inst_find(be);
    if (in)
        in->foreign = true;
    val_unlock();
}

/* ---- every call on an instance ------------------------------------------- */

void val_enter(val_call *c, const char *name, const ilab_backend_t *be)
{
    __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
    c->name = name;
    val_lock();
    c->inst = val_inst_find(be);
    if (c->inst) {
        c->started_alone = c->inst->active == 0 && !c->inst->foreign;
        c->inst->active++;
        c->epoch = ++c->inst->epoch;
    }
    val_unlock();
}

/* last_error() at capacity `cap` into a shadow; returns what it returned
 * and copies the text into out (NUL-terminated, VAL_MSG). */
static size_t read_message(val_inst *in, const char *call, size_t cap, char *out, bool *ok)
{
    val_buf b;
    *ok = true;
    out[0] = '\0';
    if (!val_buf_open(&b, cap))
        return 0;
    char *p = val_buf_ptr(&b);
    size_t len = val_g.real->last_error(in->be, p, cap);
    if (!val_buf_guards_ok(&b)) {
        val_violation("ERR-4", call, "last_error(cap %zu) after it wrote outside its buffer", cap);
        *ok = false;
    } else if (cap == 0 && val_buf_changed_from(&b, 0) != SIZE_MAX) {
        val_violation("ERR-4", call, "last_error(cap 0) after it wrote a byte");
        *ok = false;
    } else if (cap > 0 && !memchr(p, '\0', cap)) {
        val_violation("ERR-4", call, "last_error(cap %zu) after it left no NUL in the buffer", cap);
        *ok = false;
    } else if (cap > 0) {
        snprintf(out, VAL_MSG, "%s", p);
    }
    val_buf_close(&b);
    return len;
}

static void check_message(val_call *c, ilab_status st, bool alone)
{
    val_inst *in = c->inst;
    char full[VAL_MSG], part[VAL_MSG];
    bool ok;
    size_t len = read_message(in, c->name, VAL_MSG, full, &ok);
    in->last_ok = false;
    if (!ok)
        return;
    val_checked("ERR-1");
    if (len == 0 || !full[0]) {
        val_violation("ERR-1", c->name, "returned %s and last_error() is empty (returns %zu)",
                      ilab_status_name(st), len);
        return;
    }
    if (!alone)
        return; /* another call may have replaced the message meanwhile */
    val_checked("ERR-4");
    size_t held = strlen(full);
    if (held != (len < VAL_MSG ? len : VAL_MSG - 1)) {
        val_violation("ERR-4", c->name, "last_error() returned %zu but copied %zu bytes into %d",
                      len, held, VAL_MSG);
        return;
    }
    size_t caps[] = {0, 1, 2, len, len + 1};
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
        size_t cap = caps[i];
        if (cap >= VAL_MSG)
            continue;
        size_t r = read_message(in, c->name, cap, part, &ok);
        if (!ok)
            return;
        size_t want = cap == 0 ? 0 : (len < cap - 1 ? len : cap - 1);
        if (r != len || (cap > 0 && (strlen(part) != want || memcmp(part, full, want) != 0))) {
            val_violation("ERR-4", c->name,
                          "last_error(cap %zu) returned %zu and copied \"%.60s\"; at cap %d it "
                          "returned %zu, \"%.60s\"",
                          cap, r, part, VAL_MSG, len, full);
            return;
        }
    }
    snprintf(in->last, sizeof in->last, "%s", full);
    in->last_ok = true;
}

/* No instance's message changes through another instance's call. */
static void check_bleed(const val_inst *self, const char *call)
{
    size_t n = 0;
    for (size_t i = 0; i < sizeof val_g.inst / sizeof val_g.inst[0]; i++)
        n += val_g.inst[i].be && !val_g.inst[i].foreign;
    if (n < 2)
        return;
    for (size_t i = 0; i < sizeof val_g.inst / sizeof val_g.inst[0]; i++) {
        val_inst *o = &val_g.inst[i];
        if (!o->be || o == self || o->foreign || o->active || !o->last_ok)
            continue;
        char now[VAL_MSG];
        bool ok;
        read_message(o, call, VAL_MSG, now, &ok);
        if (!ok)
            continue;
        val_checked("ERR-4");
        if (strcmp(now, o->last) != 0) {
            val_violation("ERR-4", call,
                          "a call on another instance changed this instance's last_error() from "
                          "\"%.80s\" to \"%.80s\"",
                          o->last, now);
            snprintf(o->last, sizeof o->last, "%s", now);
        }
    }
}

void val_leave(val_call *c, ilab_status st)
{
    val_checked("ERR-1");
    if ((int)st < 0 || (int)st >= ILAB_STATUS_COUNT)
        val_violation("ERR-1", c->name, "returned status %d, outside the closed enum", (int)st);
    val_lock();
    bool alone = false;
    if (c->inst) {
        alone = c->started_alone && c->inst->epoch == c->epoch;
        c->inst->active--;
        if (st != ILAB_OK && !c->inst->foreign)
            check_message(c, st, alone);
    }
    /* only after a failure (or a new instance): a message is set then, and
     * reading every other instance's message on every call would
     * serialise the threads the THR tests need overlapping */
    if (st != ILAB_OK || !c->inst)
        check_bleed(c->inst, c->name);
    val_unlock();
}

/* ---- the table ------------------------------------------------------------ */

const ilab_backend_api_t *conf_validate_wrap(const ilab_backend_api_t *real, const ilab_manifest *m)
{
    if (!real || wrapped_on || real->struct_size < sizeof *real)
        return real; /* an older table keeps the host's shims (ABI-3.5) */
    val_lock();
    val_g.real = real;
    val_g.m = m;
    for (size_t i = 0; i < sizeof val_g.inst / sizeof val_g.inst[0]; i++)
        val_inst_drop(&val_g.inst[i]);
    val_unlock();
    wrapped = *real;
    val_fill_life(&wrapped);
    val_fill_tokens(&wrapped);
    val_fill_seq(&wrapped);
    val_fill_generate(&wrapped);
    wrapped_on = true;
    return &wrapped;
}

const ilab_backend_api_t *conf_validate_unwrapped(const ilab_backend_api_t *t)
{
    return t == &wrapped && wrapped_on ? val_g.real : t;
}

void conf_validate_resync(void)
{
    val_lock();
    for (size_t i = 0; i < sizeof val_g.inst / sizeof val_g.inst[0]; i++) {
        val_inst *in = &val_g.inst[i];
        in->last_ok = false;
        for (size_t k = 0; in->seqs && k < in->seq_cap; k++)
            in->seqs[k].length = -1;
    }
    val_unlock();
}

void conf_validate_unwrap(const ilab_backend_api_t *t)
{
    if (t != &wrapped || !wrapped_on)
        return;
    val_lock();
    for (size_t i = 0; i < sizeof val_g.inst / sizeof val_g.inst[0]; i++)
        val_inst_drop(&val_g.inst[i]);
    val_g.real = NULL;
    val_g.m = NULL;
    val_unlock();
    wrapped_on = false;
}
