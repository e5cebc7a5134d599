/* driver — dlopens one inferlab plugin through its public entry point and
 * runs one contract check.
 *
 *   driver PLUGIN.so CASE     prints "OK ..." (exit 0) or "VIOLATION ..." (exit 1)
 *
 * Each check is written from docs/contract.md and the SDK headers only; it
 * holds for every correct plugin with this base's capabilities, and the
 * variant of the same number breaks it. A check runs in a child process,
 * so a crash or a hang is a VIOLATION too (ERR-3: never a crash). */
#include <inferlab/inferlab.h>

#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *so_path;
static const ilab_plugin_entry_t *E;
static const ilab_backend_api_t *A;
static int V, BOSID, EOSID, CTX;

static int violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int violation(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("VIOLATION: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    return 1;
}
#define CHECK(cond, ...) do { if (!(cond)) return violation(__VA_ARGS__); } while (0)
#define NOTE(...) do { printf("  note: " __VA_ARGS__); printf("\n"); } while (0)

/* --- host table ------------------------------------------------------------------ */

static void host_log(const ilab_host_t *h, ilab_log_level l, const char *p, const char *m)
{
    (void)h, (void)l, (void)p, (void)m;
}
static uint64_t host_now(const ilab_host_t *h)
{
    (void)h;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
static const ilab_host_t HOST = {.struct_size = sizeof(ilab_host_t), .abi_major = ILAB_ABI_MAJOR,
                                 .abi_minor = ILAB_ABI_MINOR, .log = host_log, .now_ns = host_now};

static ilab_backend_t *mk(const char *k1, const char *v1)
{
    ilab_config_entry_t c[1] = {{k1, v1}};
    ilab_backend_t *b = NULL;
    char err[512] = "";
    ilab_status st = A->create(&HOST, c, k1 ? 1 : 0, err, sizeof err, &b);
    if (st != ILAB_OK || !b) {
        printf("VIOLATION: create() failed: %s %s\n", ilab_status_name(st), err);
        exit(1);
    }
    return b;
}

static const char *lasterr(ilab_backend_t *b)
{
    static char buf[1200];
    A->last_error(b, buf, sizeof buf);
    return buf;
}

/* --- manifest (a few scalar keys, enough for the checks) ------------------------- */

/* The value of the first `key:` in the manifest, up to ',', '}' or end of line. */
static const char *man(const char *key)
{
    static char val[128];
    const char *m = E->manifest_yaml;
    size_t kl = strlen(key);
    for (const char *p = m; (p = strstr(p, key)); p++) {
        char before = p == m ? '\n' : p[-1];
        if ((before == ' ' || before == '\n' || before == '{') && p[kl] == ':') {
            const char *v = p + kl + 1;
            while (*v == ' ')
                v++;
            size_t n = strcspn(v, ",}\n");
            while (n && v[n - 1] == ' ')
                n--;
            snprintf(val, sizeof val, "%.*s", (int)n, v);
            return val;
        }
    }
    return NULL;
}
static int man_true(const char *key)
{
    const char *v = man(key);
    return v && !strcmp(v, "true");
}

/* --- sequences and logits --------------------------------------------------------- */

static ilab_seq_t seq_new(ilab_backend_t *b)
{
    ilab_seq_t s = 0;
    ilab_status st = A->seq_create(b, &s);
    if (st != ILAB_OK) {
        printf("VIOLATION: seq_create failed: %s %s\n", ilab_status_name(st), lasterr(b));
        exit(1);
    }
    return s;
}

static ilab_batch_item_t item(ilab_seq_t s, const int32_t *t, int32_t n, uint32_t flags, float *lg)
{
    ilab_batch_item_t it = {.struct_size = sizeof it, .seq = s, .tokens = t, .n_tokens = n,
                            .flags = flags, .logits = lg};
    return it;
}

static ilab_status eval1(ilab_backend_t *b, ilab_seq_t s, const int32_t *t, int32_t n, float *lg)
{
    ilab_batch_item_t it = item(s, t, n, 0, lg);
    const ilab_batch_item_t *p = &it;
    return A->eval(b, &p, 1);
}

static ilab_status eval_str(ilab_backend_t *b, ilab_seq_t s, const char *str, float *lg)
{
    int32_t t[4096];
    int n = (int)strlen(str);
    for (int i = 0; i < n; i++)
        t[i] = (unsigned char)str[i];
    return eval1(b, s, t, n, lg);
}

static void must(ilab_status st, ilab_backend_t *b, const char *what)
{
    if (st != ILAB_OK) {
        printf("VIOLATION: %s failed: %s %s\n", what, ilab_status_name(st), lasterr(b));
        exit(1);
    }
}

/* The logits a fresh sequence gets after `t` (n >= 1). */
static void fresh(ilab_backend_t *b, const int32_t *t, int n, float *out)
{
    ilab_seq_t s = seq_new(b);
    must(eval1(b, s, t, n, out), b, "eval (fresh)");
    must(A->seq_free(b, s), b, "seq_free");
}

static void fresh_str(ilab_backend_t *b, const char *str, float *out)
{
    int32_t t[4096];
    int n = (int)strlen(str);
    for (int i = 0; i < n; i++)
        t[i] = (unsigned char)str[i];
    fresh(b, t, n, out);
}

static int32_t seq_len(ilab_backend_t *b, ilab_seq_t s)
{
    int32_t n = -1;
    if (A->seq_length(b, s, &n) != ILAB_OK)
        return -1;
    return n;
}

/* TOL agreement (Terms); returns the first bad index or -1. */
static int tol_diff(const float *a, const float *ref, int n)
{
    for (int i = 0; i < n; i++)
        if (!(fabsf(a[i] - ref[i]) <= 1e-4f + 1e-4f * fabsf(ref[i])))
            return i;
    return -1;
}

static int argmax_low(const float *z, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (z[i] > z[best])
            best = i;
    return best;
}

static void log_softmax(const float *raw, double *out, int n)
{
    double m = raw[0], s = 0;
    for (int i = 1; i < n; i++)
        m = raw[i] > m ? raw[i] : m;
    for (int i = 0; i < n; i++)
        s += exp(raw[i] - m);
    for (int i = 0; i < n; i++)
        out[i] = raw[i] - m - log(s);
}

static ilab_cache_stats_t stats(ilab_backend_t *b)
{
    ilab_cache_stats_t s = {.struct_size = sizeof s};
    must(A->cache_stats(b, &s), b, "cache_stats");
    return s;
}

/* --- generation ------------------------------------------------------------------ */

#define MAXEV 4096
typedef struct run {
    int n_tok, n_term, after_term, bad_id, bad_size;
    int32_t tok[MAXEV];
    float lp[MAXEV];
    size_t bound[MAXEV + 1]; /* text offset after each TOKEN */
    char text[1 << 17];      /* TOKEN texts, concatenated */
    size_t text_len;
    ilab_event_type term;
    ilab_finish_reason reason;
    uint32_t prompt_tokens, completion_tokens;
    char fin_text[8192];
    size_t fin_len;
    ilab_status err_status;
    char err_msg[512];
    ilab_status ret;
    uint64_t id;
    int stop_at;                                   /* callback returns 1 on this TOKEN (1-based) */
    int (*hook)(struct run *, const ilab_event_t *); /* extra per-TOKEN checks */
    int hook_bad;
    char hook_msg[256];
    void *user;
} run;

static int on_event(void *u, const ilab_event_t *ev)
{
    run *r = u;
    if (ev->request_id != r->id)
        r->bad_id = 1;
    if (ev->struct_size < ILAB_EVENT_SIZE_1_0)
        r->bad_size = 1;
    if (r->n_term) {
        r->after_term++;
        return 0;
    }
    if (ev->type == ILAB_EVENT_TOKEN) {
        if (r->n_tok < MAXEV) {
            r->tok[r->n_tok] = ev->token;
            r->lp[r->n_tok] = ev->logprob;
            if (ev->text_len && r->text_len + ev->text_len < sizeof r->text) {
                memcpy(r->text + r->text_len, ev->text, ev->text_len);
                r->text_len += ev->text_len;
            }
            r->bound[r->n_tok] = r->text_len;
        }
        r->n_tok++;
        if (r->hook && r->hook(r, ev))
            r->hook_bad = 1;
        return r->stop_at && r->n_tok == r->stop_at;
    }
    r->n_term++;
    r->term = ev->type;
    if (ev->type == ILAB_EVENT_FINISH) {
        r->reason = ev->finish_reason;
        r->prompt_tokens = ev->prompt_tokens;
        r->completion_tokens = ev->completion_tokens;
        r->fin_len = ev->text_len < sizeof r->fin_text ? ev->text_len : 0;
        if (r->fin_len)
            memcpy(r->fin_text, ev->text, r->fin_len);
    } else {
        r->err_status = ev->status;
        snprintf(r->err_msg, sizeof r->err_msg, "%s", ev->message ? ev->message : "");
    }
    return 0;
}

typedef struct greq {
    ilab_generate_request_t q;
    ilab_sampling_t s;
    int32_t prompt[2048];
} greq;

static void req_init(greq *g, const char *prompt, int max_tokens)
{
    memset(g, 0, sizeof *g);
    g->s = (ilab_sampling_t){.struct_size = sizeof g->s, .temperature = 0.0f, .top_k = 0,
                             .top_p = 1.0f, .min_p = 0.0f, .repetition_penalty = 1.0f};
    int n = (int)strlen(prompt);
    for (int i = 0; i < n; i++)
        g->prompt[i] = (unsigned char)prompt[i];
    g->q = (ilab_generate_request_t){.struct_size = sizeof g->q, .request_id = 1,
                                     .prompt_tokens = g->prompt, .n_prompt_tokens = (size_t)n,
                                     .sampling = &g->s, .max_tokens = max_tokens};
}

static run *gen(ilab_backend_t *b, greq *g, run *r)
{
    if (!r)
        r = calloc(1, sizeof *r);
    else {
        int stop_at = r->stop_at;
        int (*hook)(run *, const ilab_event_t *) = r->hook;
        void *user = r->user;
        memset(r, 0, sizeof *r);
        r->stop_at = stop_at, r->hook = hook, r->user = user;
    }
    g->q.sampling = &g->s;
    r->id = g->q.request_id;
    r->ret = A->generate(b, &g->q, on_event, r);
    return r;
}

/* The grammar every stream keeps (STR-1); 0 when fine. */
static int grammar(const run *r, const char *what)
{
    CHECK(r->n_term == 1 && !r->after_term, "%s: %d terminal events, %d events after one", what,
          r->n_term, r->after_term);
    CHECK(!r->bad_id && !r->bad_size, "%s: an event with the wrong request_id or struct_size", what);
    if (r->term == ILAB_EVENT_FINISH)
        CHECK(r->ret == ILAB_OK, "%s: FINISH(%s) but generate() returned %s", what,
              ilab_finish_reason_name(r->reason), ilab_status_name(r->ret));
    else
        CHECK(r->ret == r->err_status && r->ret != ILAB_OK && r->err_msg[0],
              "%s: ERROR(%s, '%s') but generate() returned %s", what,
              ilab_status_name(r->err_status), r->err_msg, ilab_status_name(r->ret));
    return 0;
}

static int expect_refused(ilab_backend_t *b, greq *g, ilab_status want, const char *what)
{
    run *r = gen(b, g, NULL);
    int bad = grammar(r, what);
    if (bad)
        return 1;
    CHECK(r->term == ILAB_EVENT_ERROR && r->n_tok == 0,
          "%s: expected one ERROR event and no TOKEN, got %d TOKEN(s) then %s", what, r->n_tok,
          r->term == ILAB_EVENT_FINISH ? ilab_finish_reason_name(r->reason) : "ERROR");
    if (want != ILAB_OK)
        CHECK(r->err_status == want, "%s: ERROR status %s, expected %s", what,
              ilab_status_name(r->err_status), ilab_status_name(want));
    free(r);
    return 0;
}

static int expect_finish(ilab_backend_t *b, greq *g, const char *what)
{
    run *r = gen(b, g, NULL);
    if (grammar(r, what))
        return 1;
    CHECK(r->term == ILAB_EVENT_FINISH, "%s: refused with %s: %s", what,
          ilab_status_name(r->err_status), r->err_msg);
    free(r);
    return 0;
}

/* ============================ ABI ============================================== */

static int c_model_info_larger(void) /* 1: ABI-3.2 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    unsigned char buf[256];
    memset(buf, 0xAA, sizeof buf);
    uint32_t size = 200;
    memcpy(buf, &size, 4);
    CHECK(A->model_info(b, (ilab_model_info_t *)(void *)buf) == ILAB_OK, "model_info(200) failed");
    memcpy(&size, buf, 4);
    CHECK(size == 200, "model_info rewrote the caller's struct_size 200 to %u", size);
    for (size_t i = sizeof(ilab_model_info_t); i < sizeof buf; i++)
        CHECK(buf[i] == 0xAA, "model_info wrote byte %zu, past its own sizeof", i);
    return 0;
}

static int c_model_info_small(void) /* 2: ABI-3.2 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    unsigned char buf[256], ref[256];
    memset(buf, 0xAA, sizeof buf);
    uint32_t size = 100;
    memcpy(buf, &size, 4);
    memcpy(ref, buf, sizeof buf);
    ilab_status st = A->model_info(b, (ilab_model_info_t *)(void *)buf);
    CHECK(st == ILAB_ABI_MISMATCH, "model_info(struct_size 100) gave %s", ilab_status_name(st));
    CHECK(!memcmp(buf, ref, sizeof buf), "model_info(struct_size 100) wrote into *info");
    CHECK(lasterr(b)[0], "no message");
    return 0;
}

static int c_item_tail(void) /* 3: ABI-3.3 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    ilab_seq_t s = seq_new(b);
    int32_t t[1] = {'a'};
    struct { ilab_batch_item_t it; unsigned char tail[16]; } big;
    memset(&big, 0, sizeof big);
    big.it = item(s, t, 1, 0, NULL);
    big.it.struct_size = sizeof big;
    big.tail[5] = 1;
    const ilab_batch_item_t *p = &big.it;
    ilab_status st = A->eval(b, &p, 1);
    CHECK(st == ILAB_ABI_MISMATCH, "an item with a non-zero unknown tail gave %s",
          ilab_status_name(st));
    CHECK(seq_len(b, s) == 0, "the refused item changed the sequence");
    big.tail[5] = 0;
    st = A->eval(b, &p, 1);
    CHECK(st == ILAB_OK, "an item with a zero tail gave %s", ilab_status_name(st));
    return 0;
}

static int c_request_small(void) /* 4: ABI-3.3 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    greq g;
    req_init(&g, "hello", 4);
    g.q.struct_size = ILAB_GENERATE_REQUEST_SIZE_1_0 - 8;
    return expect_refused(b, &g, ILAB_ABI_MISMATCH, "request struct_size 80");
}

static int c_sampling_tail(void) /* 5: ABI-3.3 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    greq g;
    req_init(&g, "hello", 4);
    struct { ilab_sampling_t s; unsigned char tail[8]; } big;
    memset(&big, 0, sizeof big);
    big.s = g.s;
    big.s.struct_size = sizeof big;
    big.tail[3] = 7;
    g.q.sampling = &big.s;
    run *r = calloc(1, sizeof *r);
    r->id = 1;
    r->ret = A->generate(b, &g.q, on_event, r);
    CHECK(r->n_term == 1 && r->term == ILAB_EVENT_ERROR && r->n_tok == 0 &&
          r->err_status == ILAB_ABI_MISMATCH,
          "sampling with a non-zero unknown tail was not refused with ABI_MISMATCH (%d tokens, %s)",
          r->n_tok, r->term == ILAB_EVENT_ERROR ? ilab_status_name(r->err_status) : "FINISH");
    return 0;
}

static int c_manifest_identity(void) /* 6: ABI-5 */
{
    const char *n = man("name");
    CHECK(n && !strcmp(n, E->name), "manifest name '%s' != entry '%s'", n ? n : "", E->name);
    const char *v = man("version");
    CHECK(v && !strcmp(v, E->version), "manifest version '%s' != entry '%s'", v ? v : "", E->version);
    char abi[32];
    snprintf(abi, sizeof abi, "%u.%u", E->abi_major, E->abi_minor);
    const char *a = man("abi");
    CHECK(a && !strcmp(a, abi), "manifest abi '%s' != entry %s", a ? a : "", abi);
    return 0;
}

static int c_manifest_ctx(void) /* 7: ABI-9 */
{
    const char *v = man("max_context");
    long mc = v ? atol(v) : -1;
    CHECK(mc >= 0, "manifest max_context missing");
    if (mc)
        CHECK(mc == CTX, "manifest max_context %ld != model_info %d", mc, CTX);
    return 0;
}

static int c_model_info_stable(void) /* 8: ABI-9 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    ilab_model_info_t a, c;
    memset(&a, 0x11, sizeof a), memset(&c, 0x22, sizeof c);
    a.struct_size = c.struct_size = sizeof a;
    must(A->model_info(b, &a), b, "model_info");
    must(A->model_info(b, &c), b, "model_info");
    CHECK(!memcmp(&a, &c, sizeof a), "model_info differs between two calls (digest '%s' then '%s')",
          a.digest, c.digest);
    return 0;
}

static int nm_lines(const char *args, char out[][256], int max)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "nm -D %s '%s' 2>/dev/null", args, so_path);
    FILE *f = popen(cmd, "r");
    int n = 0;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (line[0] != '\n' && n < max)
            snprintf(out[n++], 256, "%s", line);
    if (f)
        pclose(f);
    return n;
}

static int c_one_symbol(void) /* 9: ABI-8 */
{
    static char l[64][256];
    int n = nm_lines("--defined-only", l, 64);
    int ok = 0;
    for (int i = 0; i < n; i++) {
        if (strstr(l[i], " ilab_plugin_entry\n")) {
            ok++;
            continue;
        }
        if (strstr(l[i], " A ")) /* version-node entries */
            continue;
        return violation("exported besides ilab_plugin_entry: %s", l[i]);
    }
    CHECK(ok == 1, "ilab_plugin_entry exported %d times", ok);
    return 0;
}

static int c_no_weak(void) /* 10: ABI-4 */
{
    static char l[256][256];
    static const char *allowed[] = {"__gmon_start__", "__cxa_finalize", "_ITM_registerTMCloneTable",
                                    "_ITM_deregisterTMCloneTable"};
    int n = nm_lines("--undefined-only", l, 256);
    for (int i = 0; i < n; i++) {
        char *w = strstr(l[i], " w ");
        if (!w)
            continue;
        char name[200];
        sscanf(w + 3, "%199s", name);
        name[strcspn(name, "@")] = '\0'; /* drop the symbol version */
        int ok = 0;
        for (size_t k = 0; k < 4; k++)
            ok |= !strcmp(name, allowed[k]);
        CHECK(ok, "undefined weak symbol %s", name);
    }
    return 0;
}

static int c_create_leak(void) /* 11: ABI-7 */
{
    for (int i = 0; i < 5; i++)
        A->destroy(mk(NULL, NULL));
    size_t before = mallinfo2().uordblks;
    for (int i = 0; i < 200; i++) {
        ilab_backend_t *b = mk(NULL, NULL);
        ilab_seq_t s = seq_new(b);
        eval_str(b, s, "abc", NULL);
        A->destroy(b);
    }
    size_t after = mallinfo2().uordblks;
    CHECK(after <= before, "live heap grew by %zu bytes over 200 create/destroy cycles",
          after - before);
    return 0;
}

#define MEMBER_OK(m) \
    (offsetof(ilab_backend_api_t, m) + sizeof(void *) <= A->struct_size && A->m != NULL)

static int c_table_truth(void) /* 12, 13: ABI-6 */
{
    CHECK(A->struct_size >= ILAB_BACKEND_API_SIZE_1_0, "table struct_size %u below 1.0's",
          A->struct_size);
    CHECK(MEMBER_OK(probe) && MEMBER_OK(create) && MEMBER_OK(destroy) && MEMBER_OK(last_error) &&
          MEMBER_OK(model_info), "a lifecycle member is NULL or past struct_size");
    const char *tk = man("tokenizer");
    if (tk && strcmp(tk, "false"))
        CHECK(MEMBER_OK(tokenize) && MEMBER_OK(detokenize) && MEMBER_OK(token_piece),
              "tokenizer declared, a tokenizer member missing");
    const char *lg = man("logits");
    if (lg && !strcmp(lg, "full"))
        CHECK(MEMBER_OK(seq_create) && MEMBER_OK(seq_free) && MEMBER_OK(seq_length) &&
              MEMBER_OK(eval), "logits: full declared, a sequence member missing");
    if (man_true("fork"))
        CHECK(MEMBER_OK(seq_fork), "cache.fork declared but seq_fork is NULL or past struct_size %u",
              A->struct_size);
    if (man_true("truncate"))
        CHECK(MEMBER_OK(seq_truncate), "cache.truncate declared but seq_truncate missing");
    if (man_true("stats"))
        CHECK(MEMBER_OK(cache_stats), "cache.stats declared but cache_stats is NULL or past the "
              "table's struct_size %u", A->struct_size);
    const char *sm = man("sampling");
    if (sm && !strcmp(sm, "backend"))
        CHECK(MEMBER_OK(generate), "sampling: backend declared, generate missing");
    if (man_true("cancel"))
        CHECK(MEMBER_OK(cancel), "cancel declared, cancel missing");
    return 0;
}

/* ============================ PRB ============================================== */

static const ilab_config_entry_t MISSING[1] = {{"data_dir", "/nonexistent/freshd-check"}};

static int c_probe_reason_cap(void) /* 14, 15: PRB-1 */
{
    char buf[64];
    memset(buf, 'Z', sizeof buf);
    ilab_status st = A->probe(&HOST, MISSING, 1, buf, 8);
    CHECK(st == ILAB_UNAVAILABLE, "probe with a missing data_dir gave %s", ilab_status_name(st));
    for (int i = 8; i < 64; i++)
        CHECK(buf[i] == 'Z', "probe wrote byte %d past reason_cap 8", i);
    CHECK(memchr(buf, '\0', 8), "probe's reason is not NUL-terminated within reason_cap 8");
    CHECK(buf[0], "probe's reason is empty on UNAVAILABLE");
    memset(buf, 'Z', sizeof buf);
    st = A->probe(&HOST, MISSING, 1, buf, 1);
    CHECK(buf[0] == '\0' && buf[1] == 'Z', "reason_cap 1: not just a NUL");
    return 0;
}

static int c_create_same_reason(void) /* 16: PRB-2 */
{
    char r[512] = "", e[512] = "";
    ilab_status st = A->probe(&HOST, MISSING, 1, r, sizeof r);
    CHECK(st == ILAB_UNAVAILABLE, "probe gave %s", ilab_status_name(st));
    ilab_backend_t *out = (ilab_backend_t *)(uintptr_t)0x1234;
    st = A->create(&HOST, MISSING, 1, e, sizeof e, &out);
    CHECK(st == ILAB_UNAVAILABLE, "create of an unavailable configuration gave %s",
          ilab_status_name(st));
    CHECK(!strcmp(r, e), "create's reason '%s' differs from probe's '%s'", e, r);
    CHECK(out == (ilab_backend_t *)(uintptr_t)0x1234, "create wrote *out on failure");
    return 0;
}

static int c_probe_repeatable(void) /* 17: PRB-3 */
{
    char r1[256], r2[256], r3[256];
    ilab_status s1 = A->probe(&HOST, MISSING, 1, r1, sizeof r1);
    ilab_status s2 = A->probe(&HOST, NULL, 0, r2, sizeof r2);
    ilab_status s3 = A->probe(&HOST, MISSING, 1, r3, sizeof r3);
    CHECK(s1 == ILAB_UNAVAILABLE, "probe(missing data_dir) gave %s", ilab_status_name(s1));
    CHECK(s2 == ILAB_OK, "probe() with the defaults gave %s after another probe ('%s')",
          ilab_status_name(s2), r2);
    CHECK(s3 == s1 && !strcmp(r1, r3), "probe is not repeatable");
    s2 = A->probe(&HOST, NULL, 0, r2, sizeof r2);
    s1 = A->probe(&HOST, MISSING, 1, r1, sizeof r1);
    CHECK(s2 == ILAB_OK && s1 == ILAB_UNAVAILABLE, "probe answers depend on earlier probes (%s, %s)",
          ilab_status_name(s2), ilab_status_name(s1));
    return 0;
}

/* ============================ TOK ============================================== */

static int c_tokenize_small(void) /* 18: TOK-7 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    int32_t buf[16];
    for (int i = 0; i < 16; i++)
        buf[i] = -7;
    size_t n = 0;
    ilab_status st = A->tokenize(b, "hello", 5, 0, buf, 3, &n);
    CHECK(st == ILAB_BUFFER_TOO_SMALL, "tokenize('hello', cap 3) gave %s", ilab_status_name(st));
    CHECK(n == 5, "needed count %zu, expected 5", n);
    for (int i = 0; i < 16; i++)
        CHECK(buf[i] == -7, "tokenize wrote tokens[%d] = %d although it returned BUFFER_TOO_SMALL", i,
              buf[i]);
    return 0;
}

static int c_detok_exact(void) /* 19: TOK-7 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    int32_t t[3] = {'a', 'b', 'c'};
    char buf[8];
    memset(buf, 'Z', sizeof buf);
    size_t len = 0;
    ilab_status st = A->detokenize(b, t, 3, buf, 3, &len);
    CHECK(st == ILAB_BUFFER_TOO_SMALL, "detokenize of 3 bytes into cap 3 gave %s (no room for NUL)",
          ilab_status_name(st));
    CHECK(len == 3, "needed %zu, expected 3", len);
    for (int i = 0; i < 8; i++)
        CHECK(buf[i] == 'Z', "detokenize wrote byte %d on BUFFER_TOO_SMALL", i);
    st = A->detokenize(b, t, 3, buf, 4, &len);
    CHECK(st == ILAB_OK && len == 3 && !memcmp(buf, "abc", 4), "cap 4 should fit 'abc' + NUL");
    return 0;
}

static int c_piece_query(void) /* 20: TOK-7 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    size_t len = 99;
    ilab_status st = A->token_piece(b, -1, 'a', NULL, 0, &len);
    CHECK(st == ILAB_BUFFER_TOO_SMALL && len == 1,
          "token_piece size query (NULL, 0) gave %s, len %zu; expected BUFFER_TOO_SMALL, 1",
          ilab_status_name(st), len);
    len = 99;
    st = A->detokenize(b, (int32_t[]){'a', 'b'}, 2, NULL, 0, &len);
    CHECK(st == ILAB_BUFFER_TOO_SMALL && len == 2, "detokenize size query gave %s, %zu",
          ilab_status_name(st), len);
    return 0;
}

static int c_tokenize_need(void) /* 21: TOK-7 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    size_t n = 0, n2 = 0;
    int32_t buf[16];
    ilab_status st = A->tokenize(b, "abc", 3, ILAB_TOKENIZE_ADD_BOS | ILAB_TOKENIZE_ADD_EOS, NULL, 0, &n);
    must(A->tokenize(b, "abc", 3, ILAB_TOKENIZE_ADD_BOS | ILAB_TOKENIZE_ADD_EOS, buf, 16, &n2), b,
         "tokenize");
    CHECK(st == ILAB_BUFFER_TOO_SMALL && n == n2,
          "size query with BOS|EOS said %zu (%s), the call then needs %zu", n, ilab_status_name(st), n2);
    st = A->tokenize(b, "abc", 3, ILAB_TOKENIZE_ADD_BOS | ILAB_TOKENIZE_ADD_EOS, buf, n2 - 1, &n);
    CHECK(st == ILAB_BUFFER_TOO_SMALL && n == n2, "cap %zu: said %zu (%s)", n2 - 1, n,
          ilab_status_name(st));
    return 0;
}

static int c_bos_eos(void) /* 22: TOK-8 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    int32_t plain[16], both[16];
    size_t np = 0, nb = 0;
    must(A->tokenize(b, "ab", 2, 0, plain, 16, &np), b, "tokenize");
    must(A->tokenize(b, "ab", 2, ILAB_TOKENIZE_ADD_BOS | ILAB_TOKENIZE_ADD_EOS, both, 16, &nb), b,
         "tokenize");
    size_t want = np + (BOSID >= 0) + (EOSID >= 0);
    CHECK(nb == want, "BOS|EOS gave %zu ids, expected %zu", nb, want);
    size_t k = 0;
    if (BOSID >= 0)
        CHECK(both[k++] == BOSID, "first id is not BOS");
    for (size_t i = 0; i < np; i++)
        CHECK(both[k++] == plain[i], "ids between BOS and EOS differ from tokenize(s, 0)");
    if (EOSID >= 0)
        CHECK(both[k] == EOSID, "last id is %d, not EOS %d", both[k], EOSID);
    return 0;
}

static int c_unknown_flag(void) /* 23: TOK-8 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    for (int bit = 2; bit < 32; bit++) {
        int32_t buf[8] = {-7, -7, -7, -7, -7, -7, -7, -7};
        size_t n = 1234;
        ilab_status st = A->tokenize(b, "ab", 2, 1u << bit, buf, 8, &n);
        CHECK(st == ILAB_INVALID_ARGUMENT, "tokenize flag bit %d gave %s", bit, ilab_status_name(st));
        CHECK(buf[0] == -7 && n == 1234, "refused tokenize wrote output");
    }
    return 0;
}

static int c_special_decode(void) /* 24: TOK-9 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    char buf[32];
    size_t len = 0;
    int32_t t[3] = {'a', BOSID, 'b'};
    must(A->detokenize(b, t, 3, buf, sizeof buf, &len), b, "detokenize");
    CHECK(len == 2 && !memcmp(buf, "ab", 2), "detokenize(a, BOS, b) gave %zu bytes", len);
    int32_t e[2] = {EOSID, 'c'};
    must(A->detokenize(b, e, 2, buf, sizeof buf, &len), b, "detokenize");
    CHECK(len == 1, "detokenize(EOS, c) gave %zu bytes", len);
    for (int prev = -1; prev < V; prev += 37) {
        must(A->token_piece(b, prev, BOSID, buf, sizeof buf, &len), b, "token_piece");
        CHECK(len == 0, "token_piece(%d, BOS) is %zu bytes", prev, len);
        must(A->token_piece(b, prev, EOSID, buf, sizeof buf, &len), b, "token_piece");
        CHECK(len == 0, "token_piece(%d, EOS) is %zu bytes", prev, len);
    }
    int32_t ids[64];
    size_t n = 0;
    must(A->tokenize(b, "hello <s></s>", 13, 0, ids, 64, &n), b, "tokenize");
    for (size_t i = 0; i < n; i++)
        CHECK(ids[i] != BOSID && ids[i] != EOSID, "tokenize(s, 0) returned BOS/EOS");
    return 0;
}

static int c_piece_prev_range(void) /* 25: TOK-6 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    char buf[8] = "ZZZZZZZ";
    size_t len = 77;
    int bad[3] = {V, V + 100, -2};
    for (int i = 0; i < 3; i++) {
        ilab_status st = A->token_piece(b, bad[i], 'a', buf, sizeof buf, &len);
        CHECK(st == ILAB_INVALID_ARGUMENT, "token_piece(prev %d) gave %s", bad[i], ilab_status_name(st));
        CHECK(buf[0] == 'Z' && len == 77, "refused token_piece wrote output");
    }
    return 0;
}

static int c_eval_id_range(void) /* 26: TOK-6 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    ilab_seq_t s = seq_new(b);
    int bad[3] = {V, -1, V + 1};
    for (int i = 0; i < 3; i++) {
        int32_t t[2] = {'a', bad[i]};
        ilab_status st = eval1(b, s, t, 2, NULL);
        CHECK(st == ILAB_INVALID_ARGUMENT, "eval of id %d gave %s", bad[i], ilab_status_name(st));
        CHECK(seq_len(b, s) == 0, "refused eval changed the sequence");
    }
    return 0;
}

static int roundtrip(ilab_backend_t *b, const char *s, size_t n)
{
    int32_t ids[8192];
    char out[8192];
    size_t nt = 0, len = 0;
    ilab_status st = A->tokenize(b, s, n, 0, ids, 8192, &nt);
    if (st == ILAB_INVALID_ARGUMENT)
        return violation("tokenize refused valid UTF-8 of %zu bytes", n);
    must(st, b, "tokenize");
    must(A->detokenize(b, ids, nt, out, sizeof out, &len), b, "detokenize");
    CHECK(len == n && !memcmp(out, s, n), "round trip of %zu bytes gave %zu bytes", n, len);
    return 0;
}

static int c_roundtrip(void) /* 27: TOK-2 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    static const char *cases[] = {"hello", "  lead and trail  ", "tab\there\r\nCRLF", "\xc3\xa9t\xc3\xa9",
                                  "\xe2\x82\xac \xf0\x9f\x98\x80", "e\xcc\x81"};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        if (roundtrip(b, cases[i], strlen(cases[i])))
            return 1;
    if (roundtrip(b, "a\0b\0", 4))
        return 1;
    if (roundtrip(b, "\0", 1))
        return 1;
    return 0;
}

static int c_pieces_concat(void) /* 28: TOK-4 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    static const char *texts[] = {" hi there ", "x y", "  two", "\xe2\x82\xac!"};
    for (size_t k = 0; k < 4; k++) {
        int32_t ids[64];
        size_t n = 0, len = 0;
        must(A->tokenize(b, texts[k], strlen(texts[k]), 0, ids, 64, &n), b, "tokenize");
        char whole[256], cat[256];
        must(A->detokenize(b, ids, n, whole, sizeof whole, &len), b, "detokenize");
        size_t cl = 0;
        for (size_t i = 0; i < n; i++) {
            size_t pl = 0;
            must(A->token_piece(b, i ? ids[i - 1] : -1, ids[i], cat + cl, sizeof cat - cl, &pl), b,
                 "token_piece");
            cl += pl;
        }
        CHECK(cl == len && !memcmp(cat, whole, len), "pieces of '%s' concatenate to %zu bytes, "
              "detokenize gives %zu", texts[k], cl, len);
    }
    return 0;
}

static int c_model_info_facts(void) /* 29: TOK-1 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    ilab_model_info_t mi = {.struct_size = sizeof mi};
    must(A->model_info(b, &mi), b, "model_info");
    CHECK(mi.vocab_size > 0, "vocab_size %d", mi.vocab_size);
    CHECK(mi.bos_id == -1 || (mi.bos_id >= 0 && mi.bos_id < mi.vocab_size), "bos_id %d out of range",
          mi.bos_id);
    CHECK(mi.eos_id == -1 || (mi.eos_id >= 0 && mi.eos_id < mi.vocab_size),
          "eos_id %d is not in [0, %d) nor -1", mi.eos_id, mi.vocab_size);
    CHECK(mi.max_context > 0, "max_context %d", mi.max_context);
    CHECK(memchr(mi.name, 0, sizeof mi.name) && mi.name[0], "name empty or not NUL-terminated");
    CHECK(memchr(mi.digest, 0, sizeof mi.digest) &&
          (!mi.digest[0] || !strncmp(mi.digest, "sha256:", 7)), "digest '%s'", mi.digest);
    return 0;
}

/* ============================ LOG ============================================== */

static int c_one_row(void) /* 30: LOG-1, LOG-5 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    float *buf = malloc(6 * (size_t)V * sizeof *buf), *ref = malloc((size_t)V * sizeof *ref);
    for (size_t i = 0; i < 6 * (size_t)V; i++)
        buf[i] = NAN;
    ilab_seq_t s = seq_new(b);
    must(eval_str(b, s, "hello", buf), b, "eval");
    fresh_str(b, "hello", ref);
    for (int i = 0; i < V; i++)
        CHECK(isfinite(buf[i]), "row 0 element %d not written/finite", i);
    CHECK(tol_diff(buf, ref, V) < 0, "the one row is not the logits after the last token");
    for (size_t i = (size_t)V; i < 6 * (size_t)V; i++)
        CHECK(isnan(buf[i]), "eval without ALL_LOGITS wrote float %zu, past its one row", i);
    ilab_seq_t s2 = seq_new(b);
    must(eval_str(b, s2, "hello", NULL), b, "eval with NULL logits");
    CHECK(seq_len(b, s2) == 5, "NULL logits did not append");
    return 0;
}

static int c_history_determinism(void) /* 31: LOG-2 */
{
    float *l1 = malloc(V * sizeof(float)), *l2 = malloc(V * sizeof(float)), *x = malloc(V * sizeof(float));
    static const char *others[] = {"cb", "zzb", "b", "qqqqqb"};
    for (int i = 0; i < 4; i++) {
        ilab_backend_t *b1 = mk(NULL, NULL), *b2 = mk(NULL, NULL);
        fresh_str(b1, others[i], l1); /* on a new instance, first */
        fresh_str(b2, "ab", x);       /* on another, after some history */
        fresh_str(b2, others[i], l2);
        CHECK(!memcmp(l1, l2, V * sizeof(float)), "logits of '%s' depend on the instance's history "
              "(after 'ab' they differ from a new instance's)", others[i]);
        A->destroy(b1), A->destroy(b2);
    }
    return 0;
}

static int c_batch_independence(void) /* 32: LOG-3 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    static const char *hist[4] = {"xy", "pq", "", "long history here"};
    static const char *tail[4] = {"z", "w", "abc", "d"};
    ilab_seq_t s[4];
    float *lg = malloc(4 * (size_t)V * sizeof *lg), *ref = malloc((size_t)V * sizeof *ref);
    ilab_batch_item_t it[4];
    const ilab_batch_item_t *p[4];
    int32_t t[4][8];
    for (int i = 0; i < 4; i++) {
        s[i] = seq_new(b);
        if (hist[i][0])
            must(eval_str(b, s[i], hist[i], NULL), b, "eval");
        int n = (int)strlen(tail[i]);
        for (int k = 0; k < n; k++)
            t[i][k] = (unsigned char)tail[i][k];
        it[i] = item(s[i], t[i], n, 0, lg + (size_t)i * V);
        p[i] = &it[i];
    }
    must(A->eval(b, p, 4), b, "batched eval");
    for (int i = 0; i < 4; i++) {
        char all[64];
        snprintf(all, sizeof all, "%s%s", hist[i], tail[i]);
        fresh_str(b, all, ref);
        int d = tol_diff(lg + (size_t)i * V, ref, V);
        CHECK(d < 0, "batch item %d: logit %d is %g, alone %g", i, d, lg[(size_t)i * V + d], ref[d]);
    }
    return 0;
}

static int c_all_rows(void) /* 33: LOG-5 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    const char *str = "abcdef";
    float *lg = malloc(7 * (size_t)V * sizeof *lg), *ref = malloc((size_t)V * sizeof *ref);
    for (size_t i = 0; i < 7 * (size_t)V; i++)
        lg[i] = NAN;
    ilab_seq_t s = seq_new(b);
    must(eval_str(b, s, "xy", NULL), b, "eval");
    int32_t t[6];
    for (int i = 0; i < 6; i++)
        t[i] = str[i];
    ilab_batch_item_t it = item(s, t, 6, ILAB_EVAL_ALL_LOGITS, lg);
    const ilab_batch_item_t *p = &it;
    must(A->eval(b, &p, 1), b, "eval ALL_LOGITS");
    for (int r = 0; r < 6; r++) {
        char pre[16];
        snprintf(pre, sizeof pre, "xy%.*s", r + 1, str);
        fresh_str(b, pre, ref);
        int d = tol_diff(lg + (size_t)r * V, ref, V);
        CHECK(d < 0, "ALL_LOGITS row %d differs from a fresh '%s' (element %d: %g vs %g)", r, pre, d,
              lg[(size_t)r * V + d], ref[d]);
    }
    for (size_t i = 6 * (size_t)V; i < 7 * (size_t)V; i++)
        CHECK(isnan(lg[i]), "wrote past n_tokens rows");
    return 0;
}

static int c_dup_seq(void) /* 34: LOG-6 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    ilab_seq_t s = seq_new(b), o = seq_new(b);
    int32_t t[2] = {'a', 'b'};
    ilab_batch_item_t it[3] = {item(s, t, 1, 0, NULL), item(o, t, 1, 0, NULL), item(s, t + 1, 1, 0, NULL)};
    const ilab_batch_item_t *p[3] = {&it[0], &it[1], &it[2]};
    ilab_status st = A->eval(b, p, 3);
    CHECK(st == ILAB_INVALID_ARGUMENT, "a sequence named by two items gave %s", ilab_status_name(st));
    CHECK(seq_len(b, s) == 0 && seq_len(b, o) == 0, "refused batch changed lengths (%d, %d)",
          seq_len(b, s), seq_len(b, o));
    return 0;
}

static int c_zero_tokens(void) /* 35: LOG-6 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    ilab_seq_t s = seq_new(b);
    int32_t t[1] = {'a'};
    ilab_status st = eval1(b, s, t, 0, NULL);
    CHECK(st == ILAB_INVALID_ARGUMENT, "an item with n_tokens 0 gave %s", ilab_status_name(st));
    st = eval1(b, s, t, -3, NULL);
    CHECK(st == ILAB_INVALID_ARGUMENT, "an item with n_tokens -3 gave %s", ilab_status_name(st));
    st = eval1(b, s, NULL, 1, NULL);
    CHECK(st == ILAB_INVALID_ARGUMENT, "NULL tokens gave %s", ilab_status_name(st));
    CHECK(seq_len(b, s) == 0, "length changed");
    return 0;
}

static int c_max_batch(void) /* 36: LOG-6, ABI-9 */
{
    const char *v = man("max_batch");
    int mb = v ? atoi(v) : 0;
    CHECK(mb >= 1 && mb < 256, "manifest max_batch '%s'", v ? v : "");
    ilab_backend_t *b = mk(NULL, NULL);
    ilab_seq_t s[256];
    ilab_batch_item_t it[256];
    const ilab_batch_item_t *p[256];
    int32_t t[1] = {'a'};
    for (int i = 0; i <= mb; i++) {
        s[i] = seq_new(b);
        it[i] = item(s[i], t, 1, 0, NULL);
        p[i] = &it[i];
    }
    for (int n = 1; n <= mb; n++) {
        ilab_status st = A->eval(b, p, (size_t)n);
        CHECK(st == ILAB_OK, "a batch of %d items (max_batch %d) gave %s", n, mb, ilab_status_name(st));
    }
    ilab_status st = A->eval(b, p, (size_t)mb + 1);
    CHECK(st == ILAB_INVALID_ARGUMENT, "max_batch + 1 items gave %s", ilab_status_name(st));
    st = A->eval(b, p, 0);
    CHECK(st == ILAB_INVALID_ARGUMENT, "0 items gave %s", ilab_status_name(st));
    return 0;
}

/* The raw logits a fresh sequence gets after prompt + the first k emitted tokens. */
static void raw_at(ilab_backend_t *b, const greq *g, const run *r, int k, float *out)
{
    int32_t t[2048];
    int n = 0;
    for (size_t i = 0; i < g->q.n_prompt_tokens; i++)
        t[n++] = g->prompt[i];
    for (int i = 0; i < k; i++)
        t[n++] = r->tok[i];
    fresh(b, t, n, out);
}

typedef struct toplog {
    int n;
    ilab_logprob_t top[64][24];
    uint32_t count[64];
} toplog;

static int keep_top(run *r, const ilab_event_t *ev)
{
    toplog *tl = r->user;
    if (tl->n < 64) {
        tl->count[tl->n] = ev->n_top_logprobs;
        memcpy(tl->top[tl->n], ev->top_logprobs, (ev->n_top_logprobs < 24 ? ev->n_top_logprobs : 24) *
               sizeof(ilab_logprob_t));
        tl->n++;
    }
    return 0;
}

static int c_topk_list(void) /* 37: LOG-4 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    greq g;
    req_init(&g, "topk", 8);
    g.q.top_logprobs = 20;
    g.q.ignore_eos = 1;
    g.s.temperature = 0.8f;
    g.s.seed = 3;
    toplog *tl = calloc(1, sizeof *tl);
    run *r = calloc(1, sizeof *r);
    r->hook = keep_top;
    r->user = tl;
    gen(b, &g, r);
    if (grammar(r, "generate"))
        return 1;
    float raw[512];
    double lsm[512];
    for (int k = 0; k < r->n_tok; k++) {
        CHECK(tl->count[k] == 20, "TOKEN %d has %u top logprobs, asked 20", k, tl->count[k]);
        raw_at(b, &g, r, k, raw);
        log_softmax(raw, lsm, V);
        ilab_logprob_t *t = tl->top[k];
        for (int i = 0; i < 20; i++) {
            CHECK(t[i].token >= 0 && t[i].token < V, "top id %d out of range", t[i].token);
            CHECK(t[i].logprob <= 0 && isfinite(t[i].logprob), "top logprob %g", t[i].logprob);
            CHECK(fabs(t[i].logprob - lsm[t[i].token]) <= 1e-4 + 1e-4 * fabs(lsm[t[i].token]),
                  "top entry for %d is %g, log_softmax %g", t[i].token, t[i].logprob, lsm[t[i].token]);
            if (i)
                CHECK(t[i - 1].logprob > t[i].logprob ||
                      (t[i - 1].logprob == t[i].logprob && t[i - 1].token < t[i].token),
                      "TOKEN %d: top list not sorted descending (ties by lower id) at %d: (%d, %g) "
                      "then (%d, %g)", k, i, t[i - 1].token, t[i - 1].logprob, t[i].token, t[i].logprob);
        }
        /* the largest: nothing outside beats the last entry */
        for (int v = 0; v < V; v++) {
            int in = 0;
            for (int i = 0; i < 20; i++)
                in |= t[i].token == v;
            if (!in)
                CHECK(lsm[v] < t[19].logprob + 1e-6 ||
                      (fabs(lsm[v] - t[19].logprob) < 1e-6 && v > t[19].token),
                      "token %d (%g) beats the list's last entry", v, lsm[v]);
        }
    }
    return 0;
}

/* ============================ CCH ============================================== */

static int same_as_fresh(ilab_backend_t *b, ilab_seq_t s, const char *hist, const char *add,
                         const char *what)
{
    float lg[512], ref[512];
    must(eval_str(b, s, add, lg), b, "eval");
    char all[2048];
    snprintf(all, sizeof all, "%s%s", hist, add);
    fresh_str(b, all, ref);
    int d = tol_diff(lg, ref, V);
    CHECK(d < 0, "%s: logits after '%s' differ from a fresh sequence (element %d: %g vs %g)", what,
          all, d, lg[d], ref[d]);
    return 0;
}

static int c_fork_cow(void) /* 38: CCH-3 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    ilab_seq_t p = seq_new(b), c = 0;
    must(eval_str(b, p, "abcde", NULL), b, "eval");
    must(A->seq_fork(b, p, &c), b, "seq_fork");
    CHECK(seq_len(b, c) == 5, "child length %d", seq_len(b, c));
    if (same_as_fresh(b, c, "abcde", "x", "child") || same_as_fresh(b, p, "abcde", "y", "parent") ||
        same_as_fresh(b, c, "abcdex", "z", "child after parent appended") ||
        same_as_fresh(b, p, "abcdey", "w", "parent after child appended"))
        return 1;
    ilab_seq_t g = 0;
    must(A->seq_fork(b, c, &g), b, "fork of fork");
    must(A->seq_free(b, c), b, "seq_free");
    return same_as_fresh(b, g, "abcdexz", "q", "grandchild after its parent was freed");
}

static int c_truncate_len(void) /* 39: CCH-4 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    ilab_seq_t s = seq_new(b);
    must(eval_str(b, s, "abc", NULL), b, "eval");
    ilab_status st = A->seq_truncate(b, s, 3);
    CHECK(st == ILAB_OK, "truncate to the current length 3 gave %s", ilab_status_name(st));
    CHECK(seq_len(b, s) == 3, "length %d", seq_len(b, s));
    st = A->seq_truncate(b, s, 4);
    CHECK(st == ILAB_INVALID_ARGUMENT, "truncate past the length gave %s", ilab_status_name(st));
    st = A->seq_truncate(b, s, -1);
    CHECK(st == ILAB_INVALID_ARGUMENT, "truncate to -1 gave %s", ilab_status_name(st));
    st = A->seq_truncate(b, s, 0);
    CHECK(st == ILAB_OK && seq_len(b, s) == 0, "truncate to 0");
    return same_as_fresh(b, s, "", "xy", "after truncate to 0");
}

static int c_truncate_mid_block(void) /* 40: CCH-4 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    const char *h = "abcdefghijklmnopqrst"; /* 20 */
    ilab_seq_t s = seq_new(b);
    must(eval_str(b, s, h, NULL), b, "eval");
    must(A->seq_truncate(b, s, 18), b, "truncate");
    ilab_seq_t o = seq_new(b);
    must(eval_str(b, o, "0123456789ABCDEFGHIJKLMNOPQRSTUV", NULL), b, "eval other");
    return same_as_fresh(b, s, "abcdefghijklmnopqr", "Z", "after truncate 20 -> 18 and other work");
}

static int fill(ilab_backend_t *b, ilab_seq_t s, int n)
{
    static int32_t t[8192];
    for (int i = 0; i < n; i++)
        t[i] = 'a' + (i * 7) % 26;
    return eval1(b, s, t, n, NULL);
}

static int c_fill_exact(void) /* 41: CCH-5 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    ilab_seq_t s = seq_new(b);
    ilab_status st = fill(b, s, CTX);
    CHECK(st == ILAB_OK, "filling a sequence to exactly max_context %d gave %s", CTX,
          ilab_status_name(st));
    CHECK(seq_len(b, s) == CTX, "length %d", seq_len(b, s));
    int32_t t[1] = {'a'};
    st = eval1(b, s, t, 1, NULL);
    CHECK(st == ILAB_CONTEXT_OVERFLOW, "one more gave %s", ilab_status_name(st));
    ilab_seq_t s2 = seq_new(b);
    must(fill(b, s2, CTX - 3), b, "fill");
    st = fill(b, s2, 3);
    CHECK(st == ILAB_OK, "a prefill ending exactly at max_context gave %s", ilab_status_name(st));
    return 0;
}

static int c_straddle(void) /* 42: CCH-5 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    ilab_seq_t s = seq_new(b);
    must(fill(b, s, CTX - 24), b, "fill");
    ilab_status st = fill(b, s, 30);
    CHECK(st == ILAB_CONTEXT_OVERFLOW, "a prefill straddling max_context gave %s", ilab_status_name(st));
    CHECK(seq_len(b, s) == CTX - 24, "the refused prefill changed the length to %d (was %d)",
          seq_len(b, s), CTX - 24);
    CHECK(lasterr(b)[0], "no message");
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int c_handles_unique(void) /* 43: CCH-6 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    enum { N = 70000 };
    uint64_t *h = malloc(N * sizeof *h);
    for (int i = 0; i < N; i++) {
        h[i] = seq_new(b);
        CHECK(h[i] != 0, "handle 0");
        must(A->seq_free(b, h[i]), b, "seq_free");
    }
    int32_t len;
    ilab_status st = A->seq_length(b, h[0], &len);
    CHECK(st == ILAB_INVALID_ARGUMENT, "the first (freed) handle is accepted again after %d issues (%s)",
          N, ilab_status_name(st));
    qsort(h, N, sizeof *h, cmp_u64);
    for (int i = 1; i < N; i++)
        CHECK(h[i] != h[i - 1], "handle %#llx issued twice within %d creates", (unsigned long long)h[i], N);
    return 0;
}

static int c_stale_reuse(void) /* 44: CCH-6 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    ilab_seq_t h1 = seq_new(b);
    must(eval_str(b, h1, "abc", NULL), b, "eval");
    must(A->seq_free(b, h1), b, "seq_free");
    ilab_seq_t h2 = seq_new(b);
    CHECK(h2 != h1, "seq_create returned the freed handle again");
    int32_t len;
    ilab_status st = A->seq_length(b, h1, &len);
    CHECK(st == ILAB_INVALID_ARGUMENT, "stale handle accepted by seq_length (%s)", ilab_status_name(st));
    st = A->seq_free(b, h1);
    CHECK(st == ILAB_INVALID_ARGUMENT, "seq_free twice gave %s", ilab_status_name(st));
    CHECK(seq_len(b, h2) == 0, "the new sequence was changed through the stale handle");
    return 0;
}

static int c_slots_come_back(void) /* 45: CCH-6 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    for (int i = 0; i < 300; i++) {
        ilab_seq_t s = 0;
        ilab_status st = A->seq_create(b, &s);
        CHECK(st == ILAB_OK, "seq_create number %d (all earlier ones freed) gave %s", i + 1,
              ilab_status_name(st));
        must(A->seq_free(b, s), b, "seq_free");
    }
    ilab_seq_t hs[4096];
    int n = 0;
    ilab_status st;
    while (n < 4096 && (st = A->seq_create(b, &hs[n])) == ILAB_OK)
        n++;
    CHECK(n < 4096 && st == ILAB_OUT_OF_MEMORY, "slots never ran out, or %s", ilab_status_name(st));
    ilab_seq_t c;
    st = A->seq_fork(b, hs[0], &c);
    CHECK(st == ILAB_OUT_OF_MEMORY, "seq_fork with no slot gave %s", ilab_status_name(st));
    must(A->seq_free(b, hs[n / 2]), b, "seq_free");
    st = A->seq_create(b, &c);
    CHECK(st == ILAB_OK, "freeing one did not make room (%s)", ilab_status_name(st));
    return 0;
}

static int c_refused_heap(void) /* 46: CCH-6 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    ilab_seq_t dead = seq_new(b);
    A->seq_free(b, dead);
    ilab_seq_t s = seq_new(b);
    int32_t t[4] = {'a', 'b', 'c', 'd'};
    float lg[512 * 4];
    size_t before = 0;
    for (int i = 0; i < 330; i++) {
        if (i == 30) /* after a warm-up of the same calls */
            before = mallinfo2().uordblks;
        ilab_batch_item_t it[2] = {item(s, t, 4, 0, lg), item(dead, t, 4, 0, lg + 512)};
        const ilab_batch_item_t *p[2] = {&it[0], &it[1]};
        CHECK(A->eval(b, p, 2) == ILAB_INVALID_ARGUMENT, "stale handle accepted");
        CHECK(eval1(b, s, t, 0, lg) == ILAB_INVALID_ARGUMENT, "0 tokens accepted");
    }
    size_t after = mallinfo2().uordblks;
    CHECK(after <= before, "600 refused eval() calls grew the live heap by %zu bytes", after - before);
    return 0;
}

static int c_interleave(void) /* 47: CCH-7 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    ilab_seq_t a = seq_new(b), c = seq_new(b);
    must(eval_str(b, a, "ab", NULL), b, "eval");
    must(eval_str(b, a, "c", NULL), b, "eval");
    int32_t d[1] = {'d'}, x[1] = {'x'};
    ilab_batch_item_t it[2] = {item(a, d, 1, 0, NULL), item(c, x, 1, 0, NULL)};
    const ilab_batch_item_t *p[2] = {&it[0], &it[1]};
    must(A->eval(b, p, 2), b, "batched eval");
    if (same_as_fresh(b, a, "abcd", "e", "A alone after a batched step"))
        return 1;
    return same_as_fresh(b, c, "x", "y", "C alone after a batched step");
}

static int c_all_or_nothing(void) /* 48: CCH-8 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    ilab_seq_t a = seq_new(b), o = seq_new(b), dead = seq_new(b);
    must(eval_str(b, a, "ab", NULL), b, "eval");
    A->seq_free(b, dead);
    int32_t t[2] = {'c', 'd'};
    ilab_batch_item_t it[3] = {item(a, t, 1, 0, NULL), item(o, t, 2, 0, NULL), item(dead, t, 1, 0, NULL)};
    const ilab_batch_item_t *p[3] = {&it[0], &it[1], &it[2]};
    ilab_status st = A->eval(b, p, 3);
    CHECK(st == ILAB_INVALID_ARGUMENT, "a stale last item gave %s", ilab_status_name(st));
    CHECK(seq_len(b, a) == 2 && seq_len(b, o) == 0,
          "refused batch (stale last item) changed the other sequences: lengths %d, %d (were 2, 0)",
          seq_len(b, a), seq_len(b, o));
    return same_as_fresh(b, a, "ab", "e", "after a refused batch");
}

/* Leaves `target` free blocks in the pool (by cache_stats), returns 0 or 1. */
static int pool_to(ilab_backend_t *b, int target)
{
    ilab_cache_stats_t st = stats(b);
    int bs = st.block_size;
    int freeb = (int)(st.free_positions / bs);
    int per = CTX / bs;
    while (freeb - per >= target) {
        must(fill(b, seq_new(b), per * bs), b, "fill");
        freeb = (int)(stats(b).free_positions / bs);
    }
    if (freeb > target)
        must(fill(b, seq_new(b), (freeb - target) * bs), b, "fill");
    freeb = (int)(stats(b).free_positions / bs);
    CHECK(freeb == target, "could not bring the pool to %d free blocks (%d)", target, freeb);
    return 0;
}

static int c_oom_batch(void) /* 49: CCH-9, CCH-8, CCH-10 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    if (pool_to(b, 2))
        return 1;
    int bs = stats(b).block_size;
    ilab_seq_t x = seq_new(b), y = seq_new(b);
    static int32_t t[256];
    for (int i = 0; i < 256; i++)
        t[i] = 'k';
    ilab_batch_item_t it[2] = {item(x, t, bs, 0, NULL), item(y, t, 2 * bs, 0, NULL)};
    const ilab_batch_item_t *p[2] = {&it[0], &it[1]};
    int64_t before = stats(b).free_positions;
    ilab_status st = A->eval(b, p, 2);
    CHECK(st == ILAB_OUT_OF_MEMORY, "a batch needing 3 blocks with 2 free gave %s", ilab_status_name(st));
    CHECK(seq_len(b, x) == 0 && seq_len(b, y) == 0,
          "the refused batch changed lengths to %d, %d (were 0, 0)", seq_len(b, x), seq_len(b, y));
    CHECK(stats(b).free_positions == before, "the refused batch changed free capacity");
    return 0;
}

static int c_stats_blocks(void) /* 50: CCH-10 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    ilab_cache_stats_t s0 = stats(b);
    CHECK(s0.block_size >= 1 && s0.total_positions >= 1 && s0.total_positions % s0.block_size == 0 &&
          s0.free_positions % s0.block_size == 0, "first answer inconsistent");
    ilab_seq_t s = seq_new(b);
    must(eval_str(b, s, "hello", NULL), b, "eval");
    ilab_cache_stats_t s1 = stats(b);
    CHECK(s1.free_positions % s1.block_size == 0, "free_positions %lld is not a multiple of block_size %d",
          (long long)s1.free_positions, s1.block_size);
    int64_t held = (5 + s1.block_size - 1) / s1.block_size * s1.block_size;
    CHECK(s1.free_positions == s0.free_positions - held, "5 positions took %lld positions, expected %lld",
          (long long)(s0.free_positions - s1.free_positions), (long long)held);
    CHECK(s1.total_positions == s0.total_positions && s1.block_size == s0.block_size, "totals moved");
    return 0;
}

static int c_stats_first_figure(void) /* 51: CCH-10 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    int64_t first = stats(b).free_positions;
    for (int round = 0; round < 3; round++) {
        ilab_seq_t s = seq_new(b), c = 0;
        must(eval_str(b, s, "twenty-one characters", NULL), b, "eval");
        must(A->seq_fork(b, s, &c), b, "fork");
        must(eval_str(b, c, "more", NULL), b, "eval");
        must(A->seq_free(b, s), b, "free");
        must(A->seq_free(b, c), b, "free");
        int64_t now = stats(b).free_positions;
        CHECK(now == first, "round %d: every sequence freed, free capacity %lld, first figure %lld",
              round, (long long)now, (long long)first);
    }
    return 0;
}

static int c_stats_small(void) /* 52: CCH-10 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    unsigned char buf[64], ref[64];
    memset(buf, 0xAA, sizeof buf);
    uint32_t size = 16;
    memcpy(buf, &size, 4);
    memcpy(ref, buf, sizeof buf);
    ilab_status st = A->cache_stats(b, (ilab_cache_stats_t *)(void *)buf);
    CHECK(st == ILAB_ABI_MISMATCH, "cache_stats(struct_size 16) gave %s", ilab_status_name(st));
    CHECK(!memcmp(buf, ref, sizeof buf), "cache_stats(struct_size 16) wrote into *stats");
    st = A->cache_stats(b, NULL);
    CHECK(st == ILAB_INVALID_ARGUMENT, "cache_stats(NULL) gave %s", ilab_status_name(st));
    return 0;
}

static int c_stats_exact_fit(void) /* 53: CCH-10 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    ilab_seq_t s = seq_new(b);
    must(eval_str(b, s, "hello", NULL), b, "eval");
    if (pool_to(b, 3))
        return 1;
    int bs = stats(b).block_size;
    int32_t held = (5 + bs - 1) / bs;
    int n_fit = (held + 3) * bs - 5, n_over = n_fit + 1;
    ilab_status st = fill(b, s, n_over);
    CHECK(st == ILAB_OUT_OF_MEMORY, "an eval needing one block more than free gave %s",
          ilab_status_name(st));
    CHECK(seq_len(b, s) == 5, "refused eval changed the length");
    st = fill(b, s, n_fit);
    CHECK(st == ILAB_OK, "an eval needing exactly the 3 free blocks (%d positions) gave %s: %s", n_fit,
          ilab_status_name(st), lasterr(b));
    CHECK(stats(b).free_positions == 0, "free capacity not 0 after using every block");
    return 0;
}

/* ============================ STR ============================================== */

typedef struct canceller {
    ilab_backend_t *b;
    uint64_t id;
    int at;        /* cancel once this many TOKENs have arrived */
    int n_at_cancel;
} canceller;

static void *cancel_thread(void *u)
{
    canceller *c = u;
    A->cancel(c->b, c->id);
    return NULL;
}

static int cancel_hook(run *r, const ilab_event_t *ev)
{
    (void)ev;
    canceller *c = r->user;
    if (r->n_tok == c->at) {
        pthread_t th;
        pthread_create(&th, NULL, cancel_thread, c);
        pthread_join(th, NULL); /* cancel() has returned */
        c->n_at_cancel = r->n_tok;
    }
    return 0;
}

static int cancel_case(uint64_t id)
{
    ilab_backend_t *b = mk(NULL, NULL);
    greq g;
    req_init(&g, "cancel me", 500);
    g.q.request_id = id;
    g.q.ignore_eos = 1;
    g.s.temperature = 1.0f;
    g.s.seed = 9;
    canceller c = {.b = b, .id = id, .at = 3};
    run *r = calloc(1, sizeof *r);
    r->hook = cancel_hook;
    r->user = &c;
    gen(b, &g, r);
    if (grammar(r, "cancelled stream"))
        return 1;
    CHECK(r->term == ILAB_EVENT_FINISH && r->reason == ILAB_FINISH_CANCELLED,
          "request %#llx: cancel() after 3 TOKENs, the stream ended with %s after %d TOKENs",
          (unsigned long long)id, r->term == ILAB_EVENT_FINISH ? ilab_finish_reason_name(r->reason) : "ERROR",
          r->n_tok);
    CHECK(r->n_tok - c.n_at_cancel <= 2, "%d TOKENs after cancel() returned", r->n_tok - c.n_at_cancel);
    return 0;
}

static int c_cancel_returns_ok(void) /* 54: STR-1, STR-4 */ { return cancel_case(77); }
static int c_cancel_big_id(void) /* 58: STR-4 */ { return cancel_case((1ull << 40) | 77); }

/* A greedy reference run and a token k that first appears at k, with a byte before it. */
static int stop_scenario(ilab_backend_t *b, greq *g, run **ref, int *k)
{
    req_init(g, "The ", 16);
    g->q.ignore_eos = 1;
    *ref = gen(b, g, NULL);
    if (grammar(*ref, "reference"))
        return 1;
    run *r = *ref;
    for (int i = 2; i < r->n_tok; i++) {
        int seen = 0;
        for (int j = 0; j < i; j++)
            seen |= r->tok[j] == r->tok[i];
        if (!seen && r->tok[i] < 256 && r->tok[i - 1] < 256 && r->tok[i] != EOSID) {
            *k = i;
            return 0;
        }
    }
    return violation("no usable token in the greedy reference run");
}

static int c_held_back_on_finish(void) /* 55: STR-2, STR-7 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    greq g;
    run *ref;
    int k;
    if (stop_scenario(b, &g, &ref, &k))
        return 1;
    char s[3] = {(char)ref->tok[k - 1], 1, 0};
    const char *stops[1] = {s};
    int32_t sid[1] = {ref->tok[k]};
    g.q.ignore_eos = 0;
    g.q.stop = stops, g.q.n_stop = 1;
    g.q.stop_token_ids = sid, g.q.n_stop_token_ids = 1;
    run *r = gen(b, &g, NULL);
    if (grammar(r, "stream"))
        return 1;
    CHECK(r->term == ILAB_EVENT_FINISH && r->reason == ILAB_FINISH_STOP, "did not stop on the stop id");
    char all[8192];
    memcpy(all, r->text, r->text_len);
    memcpy(all + r->text_len, r->fin_text, r->fin_len);
    CHECK(r->text_len + r->fin_len == (size_t)k && !memcmp(all, ref->text, (size_t)k),
          "output text '%.*s' (TOKENs '%.*s' + FINISH '%.*s') should be '%.*s': held-back bytes lost",
          (int)(r->text_len + r->fin_len), all, (int)r->text_len, r->text, (int)r->fin_len, r->fin_text,
          k, ref->text);
    return 0;
}

static int c_full_context(void) /* 56: STR-3 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    greq g;
    req_init(&g, "", 100);
    int L = CTX - 4;
    for (int i = 0; i < L; i++)
        g.prompt[i] = 'a' + i % 26;
    g.q.n_prompt_tokens = (size_t)L;
    g.q.ignore_eos = 1;
    run *r = gen(b, &g, NULL);
    if (grammar(r, "stream"))
        return 1;
    CHECK(r->term == ILAB_EVENT_FINISH && r->reason == ILAB_FINISH_LENGTH,
          "a full context ended the stream with %s (%s)",
          r->term == ILAB_EVENT_FINISH ? ilab_finish_reason_name(r->reason) : "ERROR", r->err_msg);
    CHECK(r->n_tok == CTX - L + 1 || r->n_tok == CTX - L, "%d tokens, expected %d (or %d)", r->n_tok,
          CTX - L + 1, CTX - L);
    return 0;
}

static int c_prompt_full(void) /* 57: STR-9, STR-3 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    greq g;
    req_init(&g, "", 10);
    for (int i = 0; i < CTX + 1; i++)
        g.prompt[i] = 'a' + i % 26;
    g.q.n_prompt_tokens = (size_t)CTX + 1;
    if (expect_refused(b, &g, ILAB_CONTEXT_OVERFLOW, "prompt of max_context + 1"))
        return 1;
    g.q.n_prompt_tokens = (size_t)CTX;
    run *r = gen(b, &g, NULL);
    if (grammar(r, "prompt of max_context"))
        return 1;
    CHECK(r->term == ILAB_EVENT_FINISH && r->reason == ILAB_FINISH_LENGTH,
          "a prompt of exactly max_context was refused: %s '%s'", ilab_status_name(r->err_status),
          r->err_msg);
    return 0;
}

static int c_cancel_unknown(void) /* 59: STR-4 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    CHECK(A->cancel(b, 4242) == ILAB_OK, "cancel of an unknown id is not OK");
    greq g;
    req_init(&g, "hi", 5);
    g.q.request_id = 4242;
    g.q.ignore_eos = 1;
    run *r = gen(b, &g, NULL);
    if (grammar(r, "stream"))
        return 1;
    CHECK(r->term == ILAB_EVENT_FINISH && r->reason == ILAB_FINISH_LENGTH && r->n_tok == 5,
          "a request whose id was cancelled before it started ended %s after %d tokens",
          ilab_finish_reason_name(r->reason), r->n_tok);
    return 0;
}

static int c_usage(void) /* 60: STR-5 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    greq g;
    run *ref;
    int k;
    if (stop_scenario(b, &g, &ref, &k))
        return 1;
    int32_t sid[1] = {ref->tok[k]};
    g.q.stop_token_ids = sid, g.q.n_stop_token_ids = 1;
    run *r = gen(b, &g, NULL);
    if (grammar(r, "stream"))
        return 1;
    CHECK(r->term == ILAB_EVENT_FINISH, "no FINISH");
    CHECK(r->prompt_tokens == g.q.n_prompt_tokens, "prompt_tokens %u", r->prompt_tokens);
    CHECK(r->completion_tokens == (uint32_t)r->n_tok, "completion_tokens %u, TOKEN events %d",
          r->completion_tokens, r->n_tok);
    CHECK(ref->completion_tokens == (uint32_t)ref->n_tok, "reference: completion_tokens %u, TOKENs %d",
          ref->completion_tokens, ref->n_tok);
    return 0;
}

static int c_stop_longest(void) /* 61: STR-6 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    greq g;
    req_init(&g, "The ", 24);
    g.q.ignore_eos = 1;
    run *ref = gen(b, &g, NULL);
    if (grammar(ref, "reference"))
        return 1;
    const char *T = ref->text;
    size_t k = 0;
    for (size_t i = 1; i < ref->text_len && !k; i++)
        if (!memchr(T, T[i], i))
            k = i;
    CHECK(k, "no fresh byte in the reference text");
    char s1[2] = {T[k], 0}, s2[3] = {T[k - 1], T[k], 0};
    const char *stops[2] = {s1, s2};
    g.q.stop = stops, g.q.n_stop = 2;
    run *r = gen(b, &g, NULL);
    if (grammar(r, "stream"))
        return 1;
    CHECK(r->term == ILAB_EVENT_FINISH && r->reason == ILAB_FINISH_STOP, "did not stop");
    CHECK(r->text_len + r->fin_len == k - 1 && !memcmp(r->text, T, k - 1),
          "stops {'%s', '%s'} over '%.*s': output '%.*s%.*s', expected the cut before the longest "
          "occurrence: '%.*s'", s1, s2, (int)k + 1, T, (int)r->text_len, r->text, (int)r->fin_len,
          r->fin_text, (int)k - 1, T);
    return 0;
}

static int c_stop_limits(void) /* 62: STR-6 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    greq g;
    req_init(&g, "The ", 3);
    static char big[16][4097];
    const char *stops[16];
    for (int i = 0; i < 16; i++) {
        memset(big[i], 2 + i, 4096);
        big[i][4096] = 0;
        stops[i] = big[i];
    }
    g.q.stop = stops, g.q.n_stop = 16;
    return expect_finish(b, &g, "16 stop strings of 4096 bytes");
}

static int utf8_len_at(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
#define CONT(i) ((i) < n && (s[i] & 0xC0) == 0x80)
    if (c >= 0xC2 && c <= 0xDF)
        return CONT(1) ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (n < 3 || !CONT(2))
            return 0;
        unsigned d = s[1];
        if (c == 0xE0 ? (d >= 0xA0 && d <= 0xBF) : c == 0xED ? (d >= 0x80 && d <= 0x9F) : CONT(1))
            return 3;
        return 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (n < 4 || !CONT(2) || !CONT(3))
            return 0;
        unsigned d = s[1];
        if (c == 0xF0 ? (d >= 0x90 && d <= 0xBF) : c == 0xF4 ? (d >= 0x80 && d <= 0x8F) : CONT(1))
            return 4;
    }
    return 0;
#undef CONT
}

static int c_utf8_split(void) /* 63: STR-7 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    int found3 = 0;
    run *r = calloc(1, sizeof *r);
    for (uint64_t seed = 1; seed <= 400 && found3 < 4; seed++) {
        greq g;
        req_init(&g, "u", 300);
        g.q.ignore_eos = 1;
        g.s.temperature = 1.0f;
        g.s.seed = seed;
        gen(b, &g, r);
        if (grammar(r, "stream"))
            return 1;
        const unsigned char *t = (const unsigned char *)r->text;
        for (size_t i = 0; i < r->text_len; i++) {
            int n = utf8_len_at(t + i, r->text_len - i);
            if (!n)
                continue;
            if (n >= 3)
                found3++;
            for (int k = 0; k < r->n_tok; k++)
                CHECK(!(r->bound[k] > i && r->bound[k] < i + (size_t)n),
                      "seed %llu: TOKEN %d's text ends inside the %d-byte code point at byte %zu",
                      (unsigned long long)seed, k, n, i);
            i += (size_t)n - 1;
        }
    }
    if (!found3)
        NOTE("no 3-byte code point generated; check inconclusive");
    return 0;
}

static int c_ignore_eos(void) /* 64: STR-8, STR-3 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    run *r = calloc(1, sizeof *r);
    for (uint64_t seed = 1; seed <= 40; seed++) {
        greq g;
        req_init(&g, "e", 600);
        g.q.ignore_eos = 1;
        g.s.temperature = 50.0f;
        g.s.seed = seed;
        gen(b, &g, r);
        if (grammar(r, "stream"))
            return 1;
        CHECK(r->term == ILAB_EVENT_FINISH && r->reason == ILAB_FINISH_LENGTH && r->n_tok == 600,
              "seed %llu, ignore_eos: %d TOKENs then %s, expected 600 and length",
              (unsigned long long)seed, r->n_tok, ilab_finish_reason_name(r->reason));
        for (int i = 0; i < r->n_tok; i++)
            if (r->tok[i] == EOSID)
                return 0; /* EOS was sampled and did not end the stream */
    }
    NOTE("EOS never sampled; check inconclusive");
    return 0;
}

static int c_stop_id_not_emitted(void) /* 65: STR-8 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    greq g;
    run *ref;
    int k;
    if (stop_scenario(b, &g, &ref, &k))
        return 1;
    int32_t sid[1] = {ref->tok[k]};
    g.q.stop_token_ids = sid, g.q.n_stop_token_ids = 1;
    run *r = gen(b, &g, NULL);
    if (grammar(r, "stream"))
        return 1;
    CHECK(r->term == ILAB_EVENT_FINISH && r->reason == ILAB_FINISH_STOP, "not stop");
    for (int i = 0; i < r->n_tok; i++)
        CHECK(r->tok[i] != sid[0], "the stop token id %d was emitted as TOKEN %d", sid[0], i);
    CHECK(r->n_tok == k, "%d TOKENs, expected %d", r->n_tok, k);
    return 0;
}

static int c_max_tokens_range(void) /* 66: STR-9 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    greq g;
    req_init(&g, "hi", 0);
    if (expect_refused(b, &g, ILAB_INVALID_ARGUMENT, "max_tokens 0"))
        return 1;
    g.q.max_tokens = -5;
    if (expect_refused(b, &g, ILAB_INVALID_ARGUMENT, "max_tokens -5"))
        return 1;
    req_init(&g, "", 4);
    if (expect_refused(b, &g, ILAB_INVALID_ARGUMENT, "empty prompt"))
        return 1;
    req_init(&g, "hi", 4);
    g.q.top_logprobs = -1;
    return expect_refused(b, &g, ILAB_INVALID_ARGUMENT, "top_logprobs -1");
}

static int c_callback_stop(void) /* 67: STR-10 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    greq g;
    req_init(&g, "hello", 50);
    g.q.ignore_eos = 1;
    run *r = calloc(1, sizeof *r);
    r->stop_at = 2;
    gen(b, &g, r);
    if (grammar(r, "stream"))
        return 1;
    CHECK(r->n_tok == 2, "the callback asked to stop at TOKEN 2, %d TOKENs came", r->n_tok);
    CHECK(r->term == ILAB_EVENT_FINISH && r->reason == ILAB_FINISH_CANCELLED, "then %s",
          ilab_finish_reason_name(r->reason));
    return 0;
}

/* ============================ SMP ============================================== */

/* A prompt whose first-step logits have a tie at the maximum; the tied ids. */
static int tie_prompt(ilab_backend_t *b, char *prompt, int *tied, int *n_tied)
{
    float raw[512];
    for (int a = 'a'; a <= 'z'; a++)
        for (int c = 'a'; c <= 'z'; c++) {
            snprintf(prompt, 8, "%c%c", a, c);
            fresh_str(b, prompt, raw);
            int m = argmax_low(raw, V), n = 0;
            for (int v = 0; v < V; v++)
                if (raw[v] == raw[m])
                    tied[n++] = v;
            if (n >= 2) {
                *n_tied = n;
                return 0;
            }
        }
    return violation("no prompt with a tied maximum");
}

static int first_token(ilab_backend_t *b, const char *prompt, float T, uint64_t seed, int top_k,
                       float top_p, float min_p)
{
    greq g;
    req_init(&g, prompt, 1);
    g.q.ignore_eos = 1;
    g.s.temperature = T, g.s.seed = seed, g.s.top_k = top_k, g.s.top_p = top_p, g.s.min_p = min_p;
    run r1;
    run *r = gen(b, &g, NULL);
    r1.tok[0] = r->n_tok ? r->tok[0] : -1;
    free(r);
    return r1.tok[0];
}

static int c_greedy_ties(void) /* 68: SMP-1 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    char p[8];
    int tied[512], n;
    if (tie_prompt(b, p, tied, &n))
        return 1;
    for (uint64_t seed = 0; seed < 3; seed++) {
        int t = first_token(b, p, 0.0f, seed, 0, 1.0f, 0.0f);
        CHECK(t == tied[0], "greedy after '%s' (tie among %d ids, lowest %d) gave %d", p, n, tied[0], t);
    }
    return 0;
}

static int tokens_of(ilab_backend_t *b, const char *prompt, float T, uint64_t seed, int n, int32_t *out)
{
    greq g;
    req_init(&g, prompt, n);
    g.q.ignore_eos = 1;
    g.s.temperature = T, g.s.seed = seed;
    run *r = gen(b, &g, NULL);
    int k = r->n_tok;
    memcpy(out, r->tok, (size_t)k * sizeof *out);
    free(r);
    return k;
}

static int c_seed_64(void) /* 69: SMP-2 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    int32_t a[64], c[64];
    int na = tokens_of(b, "seed", 1.0f, 5, 48, a);
    int nc = tokens_of(b, "seed", 1.0f, 5 | (1ull << 40), 48, c);
    CHECK(na == 48 && nc == 48, "short runs");
    CHECK(memcmp(a, c, sizeof(int32_t) * 48), "seeds 5 and 5 + 2^40 give the same 48 tokens");
    return 0;
}

static int c_seed_repeat(void) /* 70: SMP-2 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    int32_t a[64], c[64], x[64];
    tokens_of(b, "seed", 1.0f, 11, 32, a);
    tokens_of(b, "other", 1.0f, 12, 32, x);
    tokens_of(b, "seed", 1.0f, 11, 32, c);
    CHECK(!memcmp(a, c, sizeof(int32_t) * 32), "the same prompt and seed gave different tokens");
    return 0;
}

static int c_top_p_tiny(void) /* 71: SMP-3 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    char p[8];
    int tied[512], n;
    if (tie_prompt(b, p, tied, &n))
        return 1;
    const char *prompts[3] = {p, "hello", "zz"};
    for (int i = 0; i < 3; i++)
        for (uint64_t seed = 1; seed < 6; seed++) {
            int g0 = first_token(b, prompts[i], 0.0f, 0, 0, 1.0f, 0.0f);
            int t = first_token(b, prompts[i], 1.0f, seed, 0, 1e-6f, 0.0f);
            CHECK(t == g0, "top_p 1e-6 after '%s' gave %d, greedy %d", prompts[i], t, g0);
        }
    return 0;
}

static int c_min_p_ties(void) /* 72: SMP-3 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    char p[8];
    int tied[512], n;
    if (tie_prompt(b, p, tied, &n))
        return 1;
    int drawn[512] = {0}, distinct = 0;
    for (uint64_t seed = 1; seed <= 60; seed++) {
        int t = first_token(b, p, 1.0f, seed, 0, 1.0f, 1.0f);
        int in = 0;
        for (int i = 0; i < n; i++)
            in |= tied[i] == t;
        CHECK(in, "min_p 1 drew %d, not one of the %d tokens tied at the maximum", t, n);
        if (!drawn[t]++)
            distinct++;
    }
    CHECK(distinct >= 2, "min_p 1 with %d tokens tied at the maximum drew only %d (60 seeds)", n, tied[0]);
    return 0;
}

static int c_chi_square(void) /* 73: SMP-4 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    const float T = 0.6f;
    float raw[512];
    fresh_str(b, "dist", raw);
    double p[512], m = raw[0], s = 0;
    for (int v = 1; v < V; v++)
        m = raw[v] > m ? raw[v] : m;
    for (int v = 0; v < V; v++)
        s += p[v] = exp((raw[v] - m) / T);
    int N = 3000, count[512] = {0};
    for (int i = 0; i < N; i++) {
        int t = first_token(b, "dist", T, 1000 + (uint64_t)i * 7919, 0, 1.0f, 0.0f);
        CHECK(t >= 0 && t < V, "no token");
        count[t]++;
    }
    /* merge bins with expected < 5 into one */
    double chi = 0, e_rest = 0, o_rest = 0;
    int df = -1;
    for (int v = 0; v < V; v++) {
        double e = N * p[v] / s;
        if (e < 5) {
            e_rest += e, o_rest += count[v];
            continue;
        }
        chi += (count[v] - e) * (count[v] - e) / e;
        df++;
    }
    if (e_rest > 0) {
        chi += (o_rest - e_rest) * (o_rest - e_rest) / e_rest;
        df++;
    }
    /* Wilson-Hilferty: the p = 0.001 critical value */
    double k = df, z = 3.0902;
    double crit = k * pow(1 - 2 / (9 * k) + z * sqrt(2 / (9 * k)), 3);
    CHECK(chi < crit, "chi-square %.1f over %d dof (critical %.1f at p = 0.001): draws do not follow "
          "softmax(z / T)", chi, df, crit);
    return 0;
}

static int c_presence_output_only(void) /* 74: SMP-5 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    float raw[512];
    char p[8];
    for (int a = 'a'; a <= 'z'; a++)
        for (int c = 'a'; c <= 'z'; c++) {
            snprintf(p, sizeof p, "%c%c", a, c);
            fresh_str(b, p, raw);
            int g0 = argmax_low(raw, V);
            if (g0 != a && g0 != c)
                continue;
            float second = -1e30f;
            for (int v = 0; v < V; v++)
                if (v != g0 && raw[v] > second)
                    second = raw[v];
            if (second <= raw[g0] - 2.0f)
                continue;
            greq g;
            req_init(&g, p, 1);
            g.s.presence_penalty = 2.0f;
            g.s.frequency_penalty = 2.0f;
            run *r = gen(b, &g, NULL);
            if (grammar(r, "stream"))
                return 1;
            CHECK(r->n_tok == 1 && r->tok[0] == g0, "prompt '%s': presence/frequency penalties (output "
                  "tokens only) changed the first token from %d to %d", p, g0, r->tok[0]);
            return 0;
        }
    NOTE("no suitable prompt; inconclusive");
    return 0;
}

static int c_top_k_one(void) /* 75: SMP-3 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    char p[8];
    int tied[512], n;
    if (tie_prompt(b, p, tied, &n))
        return 1;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        int t = first_token(b, p, 1.0f, seed, 1, 1.0f, 0.0f);
        CHECK(t == tied[0], "top_k 1 after '%s' gave %d; greedy (lowest of the tie) is %d", p, t, tied[0]);
    }
    return 0;
}

static int c_rep_zero(void) /* 76: SMP-5 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    greq g;
    req_init(&g, "hi", 4);
    g.s.repetition_penalty = 0.0f;
    if (expect_refused(b, &g, ILAB_INVALID_ARGUMENT, "repetition_penalty 0"))
        return 1;
    req_init(&g, "hi", 4);
    g.s.top_p = 0.0f;
    if (expect_refused(b, &g, ILAB_INVALID_ARGUMENT, "top_p 0"))
        return 1;
    req_init(&g, "hi", 4);
    g.s.temperature = -0.5f;
    return expect_refused(b, &g, ILAB_INVALID_ARGUMENT, "temperature -0.5");
}

static int c_penalty_bounds(void) /* 77: SMP-5 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    float vals[2] = {2.0f, -2.0f};
    for (int i = 0; i < 2; i++) {
        greq g;
        req_init(&g, "hi", 4);
        g.s.presence_penalty = vals[i];
        if (expect_finish(b, &g, vals[i] > 0 ? "presence_penalty 2" : "presence_penalty -2"))
            return 1;
        req_init(&g, "hi", 4);
        g.s.frequency_penalty = vals[i];
        if (expect_finish(b, &g, "frequency_penalty at the bound"))
            return 1;
    }
    greq g;
    req_init(&g, "hi", 4);
    g.s.presence_penalty = 2.5f;
    return expect_refused(b, &g, ILAB_INVALID_ARGUMENT, "presence_penalty 2.5");
}

static int c_tiny_temperature(void) /* 78: SMP-5, SMP-1 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    float temps[3] = {1e-45f, 1e-38f, 1e-30f};
    float raw[512];
    for (int i = 0; i < 3; i++) {
        greq g;
        req_init(&g, "tiny", 10);
        g.q.ignore_eos = 1;
        g.s.temperature = temps[i];
        g.s.seed = 3;
        run *r = gen(b, &g, NULL);
        if (grammar(r, "stream"))
            return 1;
        CHECK(r->n_tok == 10, "T %g: %d tokens", temps[i], r->n_tok);
        for (int k = 0; k < 10; k++) {
            raw_at(b, &g, r, k, raw);
            int m = argmax_low(raw, V);
            CHECK(raw[r->tok[k]] == raw[m], "temperature %g: token %d is %d (logit %g), not an argmax "
                  "(%d, logit %g)", temps[i], k, r->tok[k], raw[r->tok[k]], m, raw[m]);
        }
        free(r);
    }
    return 0;
}

static int c_logprob_raw(void) /* 79: SMP-6 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    greq g;
    req_init(&g, "lp", 8);
    g.q.ignore_eos = 1;
    g.s.temperature = 0.5f;
    g.s.seed = 4;
    g.s.top_k = 40;
    run *r = gen(b, &g, NULL);
    if (grammar(r, "stream"))
        return 1;
    float raw[512];
    double lsm[512];
    for (int k = 0; k < r->n_tok; k++) {
        raw_at(b, &g, r, k, raw);
        log_softmax(raw, lsm, V);
        double want = lsm[r->tok[k]];
        CHECK(fabs(r->lp[k] - want) <= 1e-4 + 1e-4 * fabs(want),
              "TOKEN %d (%d): logprob %g, log_softmax of the raw logits %g", k, r->tok[k], r->lp[k], want);
    }
    return 0;
}

static int c_topk_cap(void) /* 80: SMP-7 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    const char *v = man("topk_max");
    int cap = v ? atoi(v) : 0;
    greq g;
    req_init(&g, "hi", 2);
    g.q.top_logprobs = cap + 1;
    return expect_refused(b, &g, ILAB_INVALID_ARGUMENT, "top_logprobs above topk_max");
}

/* ============================ ERR ============================================== */

static int c_message_set(void) /* 81: ERR-1 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    int32_t len;
    ilab_status st = A->seq_length(b, (ilab_seq_t)0xdead00000007ull, &len);
    CHECK(st == ILAB_INVALID_ARGUMENT, "seq_length(never issued) gave %s", ilab_status_name(st));
    char buf[256];
    size_t n = A->last_error(b, buf, sizeof buf);
    CHECK(n > 0 && buf[0], "INVALID_ARGUMENT from seq_length with an empty last_error()");
    ilab_seq_t s = seq_new(b);
    st = A->seq_truncate(b, s, 5);
    CHECK(st == ILAB_INVALID_ARGUMENT && lasterr(b)[0], "truncate past length: no message");
    return 0;
}

static int c_last_error_len(void) /* 82: ERR-4 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    size_t n = 0;
    A->tokenize(b, "x", 1, 1u << 9, NULL, 0, &n);
    char full[2048], small[8];
    size_t L = A->last_error(b, full, sizeof full);
    CHECK(L == strlen(full) && L > 4, "full message length %zu", L);
    memset(small, 'Z', sizeof small);
    size_t l4 = A->last_error(b, small, 4);
    CHECK(l4 == L, "last_error(cap 4) returned %zu, the full length is %zu", l4, L);
    CHECK(!memcmp(small, full, 3) && small[3] == '\0' && small[4] == 'Z', "cap 4 copy wrong");
    return 0;
}

static int c_last_error_cap0(void) /* 83: ERR-4 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    size_t n = 0;
    A->tokenize(b, "x", 1, 1u << 9, NULL, 0, &n);
    char buf[4] = "XYZ";
    size_t L = A->last_error(b, buf, 0);
    CHECK(L > 0, "length 0");
    CHECK(!memcmp(buf, "XYZ", 4), "last_error with cap 0 wrote into the buffer");
    char nb[4] = "XYZ";
    A->last_error(NULL, nb, sizeof nb);
    CHECK(nb[0] == '\0' || memchr(nb, 0, 4), "last_error(NULL) did not NUL-terminate");
    return 0;
}

static int unsupported(ilab_backend_t *b, ilab_status st, const char *cap)
{
    CHECK(st == ILAB_UNSUPPORTED, "undeclared capability '%s': a valid call gave %s", cap,
          ilab_status_name(st));
    CHECK(strstr(lasterr(b), cap), "undeclared '%s': message '%s' does not name it", cap, lasterr(b));
    return 0;
}

static int c_undeclared(void) /* 84: ERR-2 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    ilab_seq_t s = seq_new(b);
    if (!man_true("cancel") && unsupported(b, A->cancel(b, 99), "cancel"))
        return 1;
    if (!man_true("truncate") && unsupported(b, A->seq_truncate(b, s, 0), "truncate"))
        return 1;
    ilab_seq_t c;
    if (!man_true("fork") && unsupported(b, A->seq_fork(b, s, &c), "fork"))
        return 1;
    ilab_cache_stats_t cs = {.struct_size = sizeof cs};
    if (!man_true("stats") && A->struct_size > offsetof(ilab_backend_api_t, cache_stats) &&
        A->cache_stats && unsupported(b, A->cache_stats(b, &cs), "stats"))
        return 1;
    return 0;
}

static int c_null_args(void) /* 85: ERR-3 */
{
    ilab_backend_t *b = mk(NULL, NULL);
    ilab_seq_t s = seq_new(b);
    CHECK(A->seq_length(b, s, NULL) == ILAB_INVALID_ARGUMENT, "seq_length(NULL out)");
    CHECK(A->seq_create(b, NULL) == ILAB_INVALID_ARGUMENT, "seq_create(NULL)");
    CHECK(A->seq_fork(b, s, NULL) == ILAB_INVALID_ARGUMENT, "seq_fork(NULL child)");
    CHECK(A->tokenize(b, "a", 1, 0, NULL, 0, NULL) == ILAB_INVALID_ARGUMENT, "tokenize(NULL n)");
    CHECK(A->detokenize(b, NULL, 0, NULL, 0, NULL) == ILAB_INVALID_ARGUMENT, "detokenize(NULL len)");
    CHECK(A->model_info(b, NULL) == ILAB_INVALID_ARGUMENT, "model_info(NULL)");
    CHECK(A->eval(b, NULL, 1) == ILAB_INVALID_ARGUMENT, "eval(NULL items)");
    const ilab_batch_item_t *p[1] = {NULL};
    CHECK(A->eval(b, p, 1) == ILAB_INVALID_ARGUMENT, "eval(NULL item)");
    CHECK(A->generate(b, NULL, on_event, NULL) == ILAB_INVALID_ARGUMENT, "generate(NULL request)");
    CHECK(A->seq_free(b, 0) == ILAB_INVALID_ARGUMENT, "seq_free(0)");
    A->destroy(NULL);
    return 0;
}

static int bad_config(const char *k, const char *v, const char *name)
{
    ilab_config_entry_t c[1] = {{k, v}};
    char err[512] = "";
    ilab_backend_t *out = (ilab_backend_t *)(uintptr_t)0x5678;
    ilab_status st = A->create(&HOST, c, 1, err, sizeof err, &out);
    CHECK(st == ILAB_INVALID_ARGUMENT, "create with %s=%s gave %s ('%s')", k, v, ilab_status_name(st), err);
    CHECK(strstr(err, name), "the message '%s' does not name '%s'", err, name);
    CHECK(out == (ilab_backend_t *)(uintptr_t)0x5678, "create wrote *out on failure");
    return 0;
}

static int c_config_range(void) /* 86: ERR-5 */
{
    return bad_config("threads", "0", "threads") || bad_config("threads", "65", "threads") ||
           bad_config("seed", "x1", "seed");
}
static int c_config_unknown(void) /* 87: ERR-5 */ { return bad_config("bogus_key", "1", "bogus_key"); }
static int c_config_out(void) /* 88: ERR-5 */
{
    return bad_config("seed", "12abc", "seed") || bad_config("threads", "-3", "threads");
}

/* ============================ THR ============================================== */

typedef struct thr_arg {
    ilab_backend_t *b;
    int id, iters, bad;
    float (*ref)[512];
    pthread_barrier_t *bar;
} thr_arg;

#define THR_LEN 200
static void *eval_worker(void *u)
{
    thr_arg *a = u;
    ilab_seq_t s = seq_new(a->b);
    float lg[512];
    pthread_barrier_wait(a->bar);
    for (int it = 0; it < a->iters && !a->bad; it++) {
        int pos = it % THR_LEN;
        if (pos == 0 && it)
            A->seq_truncate(a->b, s, 0);
        int32_t t[1] = {'a' + (pos * 7 + a->id * 3) % 26};
        if (eval1(a->b, s, t, 1, lg) != ILAB_OK || memcmp(lg, a->ref[pos], (size_t)V * sizeof(float)))
            a->bad = it + 1;
    }
    return NULL;
}

static int c_thr_eval(void) /* 89: THR-1 */
{
    const char *ts = man("thread_safety");
    if (!ts || !strcmp(ts, "none")) {
        NOTE("thread_safety none: nothing to check");
        return 0;
    }
    ilab_backend_t *b = mk(NULL, NULL);
    static float ref[2][THR_LEN][512];
    for (int id = 0; id < 2; id++) {
        ilab_seq_t s = seq_new(b);
        for (int pos = 0; pos < THR_LEN; pos++) {
            int32_t t[1] = {'a' + (pos * 7 + id * 3) % 26};
            must(eval1(b, s, t, 1, ref[id][pos]), b, "eval");
        }
        A->seq_free(b, s);
    }
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    thr_arg a[2] = {{b, 0, 20000, 0, ref[0], &bar}, {b, 1, 20000, 0, ref[1], &bar}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, eval_worker, &a[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++)
        CHECK(!a[i].bad, "thread_safety %s: thread %d's logits at step %d differ from the serial ones "
              "while another thread evaluated another sequence", ts, i, a[i].bad - 1);
    return 0;
}

typedef struct tok_arg {
    ilab_backend_t *b;
    char ch;
    int bad;
    pthread_barrier_t *bar;
} tok_arg;

static void *tok_worker(void *u)
{
    tok_arg *a = u;
    enum { N = 60000 };
    char *s = malloc(N);
    int32_t *ids = malloc(N * sizeof *ids);
    memset(s, a->ch, N);
    pthread_barrier_wait(a->bar);
    for (int it = 0; it < 200 && !a->bad; it++) {
        size_t n = 0;
        if (A->tokenize(a->b, s, N, 0, ids, N, &n) != ILAB_OK || n != N)
            a->bad = 1;
        for (size_t i = 0; i < n && !a->bad; i++)
            if (ids[i] != (unsigned char)a->ch)
                a->bad = 2;
    }
    return NULL;
}

static int c_thr_tokenize(void) /* 90: THR-2 */
{
    const char *ts = man("thread_safety");
    if (!ts || !strcmp(ts, "none"))
        return 0;
    ilab_backend_t *b1 = mk(NULL, NULL), *b2 = mk(NULL, NULL);
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 3);
    tok_arg a[3] = {{b1, 'x', 0, &bar}, {b1, 'y', 0, &bar}, {b2, 'z', 0, &bar}};
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&th[i], NULL, tok_worker, &a[i]);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++)
        CHECK(!a[i].bad, "thread_safety %s: concurrent tokenize() of '%c'*60000 returned other ids", ts,
              a[i].ch);
    return 0;
}

typedef struct gen_arg {
    ilab_backend_t *b;
    const char *prompt;
    char ref[4096];
    size_t ref_len;
    int bad;
    pthread_barrier_t *bar;
} gen_arg;

static void *gen_worker(void *u)
{
    gen_arg *a = u;
    run *r = calloc(1, sizeof *r);
    pthread_barrier_wait(a->bar);
    static const char *stops[3] = {"e\x01", "a\x01", "t\x01"};
    for (int it = 0; it < 200 && !a->bad; it++) {
        greq g;
        req_init(&g, a->prompt, 300);
        g.q.ignore_eos = 1;
        g.q.stop = stops, g.q.n_stop = 3;
        g.s.temperature = 1.0f, g.s.top_k = 40, g.s.seed = 5;
        g.q.request_id = (uint64_t)(uintptr_t)a + (uint64_t)it;
        gen(a->b, &g, r);
        if (r->text_len != a->ref_len || memcmp(r->text, a->ref, a->ref_len))
            a->bad = it + 1;
    }
    free(r);
    return NULL;
}

static int c_thr_generate(void) /* 91: THR-2 */
{
    const char *ts = man("thread_safety");
    if (!ts || !strcmp(ts, "none"))
        return 0;
    ilab_backend_t *b = mk(NULL, NULL);
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    gen_arg a[2] = {{.b = b, .prompt = "first", .bar = &bar}, {.b = b, .prompt = "second one", .bar = &bar}};
    for (int i = 0; i < 2; i++) {
        greq g;
        static const char *stops[3] = {"e\x01", "a\x01", "t\x01"};
        req_init(&g, a[i].prompt, 300);
        g.q.ignore_eos = 1;
        g.q.stop = stops, g.q.n_stop = 3;
        g.s.temperature = 1.0f, g.s.top_k = 40, g.s.seed = 5;
        run *r = gen(b, &g, NULL);
        memcpy(a[i].ref, r->text, r->text_len);
        a[i].ref_len = r->text_len;
        free(r);
    }
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, gen_worker, &a[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++)
        CHECK(!a[i].bad, "thread_safety %s: generate('%s') run %d beside another generate() gave "
              "other text than alone", ts, a[i].prompt, a[i].bad - 1);
    return 0;
}

/* ============================ DIF ============================================== */

static int c_digest(void) /* 92: DIF-1 */
{
    ilab_backend_t *b1 = mk("seed", "1"), *b2 = mk("seed", "2");
    ilab_model_info_t m1 = {.struct_size = sizeof m1}, m2 = {.struct_size = sizeof m2};
    must(A->model_info(b1, &m1), b1, "model_info");
    must(A->model_info(b2, &m2), b2, "model_info");
    if (!m1.digest[0] || strcmp(m1.digest, m2.digest))
        return 0; /* different weights claimed: nothing to compare */
    int32_t t1[32], t2[32];
    static const char *prompts[3] = {"hello", "The ", "x"};
    for (int i = 0; i < 3; i++) {
        int n1 = tokens_of(b1, prompts[i], 0.0f, 0, 24, t1);
        int n2 = tokens_of(b2, prompts[i], 0.0f, 0, 24, t2);
        CHECK(n1 == n2 && !memcmp(t1, t2, (size_t)n1 * sizeof *t1),
              "instances with seed 1 and seed 2 report the same digest '%s' but greedy tokens after "
              "'%s' differ", m1.digest, prompts[i]);
    }
    return 0;
}

/* ============================ main ============================================== */

typedef struct kase {
    int id;
    int (*fn)(void);
} kase;

static const kase CASES[] = {
    {1, c_model_info_larger}, {2, c_model_info_small}, {3, c_item_tail}, {4, c_request_small},
    {5, c_sampling_tail}, {6, c_manifest_identity}, {7, c_manifest_ctx}, {8, c_model_info_stable},
    {9, c_one_symbol}, {10, c_no_weak}, {11, c_create_leak}, {12, c_table_truth}, {13, c_table_truth},
    {14, c_probe_reason_cap}, {15, c_probe_reason_cap}, {16, c_create_same_reason},
    {17, c_probe_repeatable}, {18, c_tokenize_small}, {19, c_detok_exact}, {20, c_piece_query},
    {21, c_tokenize_need}, {22, c_bos_eos}, {23, c_unknown_flag}, {24, c_special_decode},
    {25, c_piece_prev_range}, {26, c_eval_id_range}, {27, c_roundtrip}, {28, c_pieces_concat},
    {29, c_model_info_facts}, {30, c_one_row}, {31, c_history_determinism}, {32, c_batch_independence},
    {33, c_all_rows}, {34, c_dup_seq}, {35, c_zero_tokens}, {36, c_max_batch}, {37, c_topk_list},
    {38, c_fork_cow}, {39, c_truncate_len}, {40, c_truncate_mid_block}, {41, c_fill_exact},
    {42, c_straddle}, {43, c_handles_unique}, {44, c_stale_reuse}, {45, c_slots_come_back},
    {46, c_refused_heap}, {47, c_interleave}, {48, c_all_or_nothing}, {49, c_oom_batch},
    {50, c_stats_blocks}, {51, c_stats_first_figure}, {52, c_stats_small}, {53, c_stats_exact_fit},
    {54, c_cancel_returns_ok}, {55, c_held_back_on_finish}, {56, c_full_context}, {57, c_prompt_full},
    {58, c_cancel_big_id}, {59, c_cancel_unknown}, {60, c_usage}, {61, c_stop_longest},
    {62, c_stop_limits}, {63, c_utf8_split}, {64, c_ignore_eos}, {65, c_stop_id_not_emitted},
    {66, c_max_tokens_range}, {67, c_callback_stop}, {68, c_greedy_ties}, {69, c_seed_64},
    {70, c_seed_repeat}, {71, c_top_p_tiny}, {72, c_min_p_ties}, {73, c_chi_square},
    {74, c_presence_output_only}, {75, c_top_k_one}, {76, c_rep_zero}, {77, c_penalty_bounds},
    {78, c_tiny_temperature}, {79, c_logprob_raw}, {80, c_topk_cap}, {81, c_message_set},
    {82, c_last_error_len}, {83, c_last_error_cap0}, {84, c_undeclared}, {85, c_null_args},
    {86, c_config_range}, {87, c_config_unknown}, {88, c_config_out}, {89, c_thr_eval},
    {90, c_thr_tokenize}, {91, c_thr_generate}, {92, c_digest},
};

static int load(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("VIOLATION: dlopen: %s\n", dlerror());
        return 1;
    }
    E = dlsym(h, ILAB_PLUGIN_ENTRY_SYMBOL);
    if (!E || E->struct_size < ILAB_PLUGIN_ENTRY_SIZE_1_0 || !E->backend || !E->name || !E->version ||
        !E->manifest_yaml)
        return violation("no usable ilab_plugin_entry (ABI-1)");
    if (E->abi_major != ILAB_ABI_MAJOR || E->abi_minor > ILAB_ABI_MINOR)
        return violation("ABI %u.%u", E->abi_major, E->abi_minor);
    A = E->backend;
    ilab_backend_t *b = mk(NULL, NULL);
    ilab_model_info_t mi = {.struct_size = sizeof mi};
    must(A->model_info(b, &mi), b, "model_info");
    V = mi.vocab_size, BOSID = mi.bos_id, EOSID = mi.eos_id, CTX = mi.max_context;
    A->destroy(b);
    if (V <= 0 || V > 512 || CTX > 4096)
        return violation("this driver expects a vocabulary up to 512 and a context up to 4096");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s PLUGIN.so CASE\n", argv[0]);
        return 2;
    }
    so_path = argv[1];
    int id = atoi(argv[2]);
    const kase *k = NULL;
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++)
        if (CASES[i].id == id)
            k = &CASES[i];
    if (!k) {
        fprintf(stderr, "unknown case %s\n", argv[2]);
        return 2;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(120);
        if (load(so_path))
            _exit(1);
        int bad = k->fn();
        fflush(stdout);
        _exit(bad ? 1 : 0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) {
        printf("VIOLATION: case %d: the check %s (signal %d)\n", id,
               WTERMSIG(status) == SIGALRM ? "timed out" : "crashed", WTERMSIG(status));
        return 1;
    }
    if (WEXITSTATUS(status)) {
        printf("VIOLATION (case %d)\n", id);
        return 1;
    }
    printf("OK (case %d)\n", id);
    return 0;
}
