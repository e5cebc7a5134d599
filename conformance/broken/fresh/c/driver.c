/* driver CASE PLUGIN.so — calls the plugin through the ABI as a host would and
 * exits 0 ("violation: ...") when it shows CASE's violation, 1 ("no violation")
 * when the plugin behaves correctly for that case. Each case runs in a forked
 * child, so a crash or a hang is itself a violation. */
#define _GNU_SOURCE
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
#include <time.h>
#include <unistd.h>

static const ilab_plugin_entry_t *E;
static const ilab_backend_api_t *A;
static ilab_host_t H;
static int VOC, BOSID, EOSID, CTX, MAXB, TOPK;

static void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void violation(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("violation: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    _exit(0);
}
#define CHECK(cond, ...) do { if (!(cond)) violation(__VA_ARGS__); } while (0)
/* driver-side failure: the case could not be set up; neither verdict */
#define REQUIRE(cond) do { if (!(cond)) { printf("driver error: %s:%d: %s\n", __FILE__, __LINE__, #cond); fflush(stdout); _exit(2); } } while (0)

static uint64_t h_now(const ilab_host_t *h) { (void)h; struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec; }
static void h_log(const ilab_host_t *h, ilab_log_level l, const char *p, const char *m) { (void)h, (void)l, (void)p, (void)m; }

static int manifest_int(const char *key)
{
    const char *p = strstr(E->manifest_yaml, key);
    REQUIRE(p);
    return atoi(p + strlen(key));
}

static void load(const char *so)
{
    void *dl = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!dl) { printf("driver error: %s\n", dlerror()); _exit(2); }
    E = dlsym(dl, ILAB_PLUGIN_ENTRY_SYMBOL);
    REQUIRE(E && E->backend);
    A = E->backend;
    H.struct_size = sizeof H; H.abi_major = ILAB_ABI_MAJOR; H.abi_minor = ILAB_ABI_MINOR;
    H.log = h_log; H.now_ns = h_now;
    CTX = manifest_int("max_context: ");
    MAXB = manifest_int("max_batch: ");
    TOPK = manifest_int("topk_max: ");
}

static ilab_backend_t *mk_cfg(const char *k, const char *v)
{
    ilab_config_entry_t c = {k, v};
    char err[256] = "";
    ilab_backend_t *b = NULL;
    ilab_status st = A->create(&H, k ? &c : NULL, k ? 1 : 0, err, sizeof err, &b);
    if (st != ILAB_OK) { printf("driver error: create: %s\n", err); _exit(2); }
    ilab_model_info_t mi = {.struct_size = sizeof mi};
    REQUIRE(A->model_info(b, &mi) == ILAB_OK);
    VOC = mi.vocab_size; BOSID = mi.bos_id; EOSID = mi.eos_id;
    return b;
}
static ilab_backend_t *mk(void) { return mk_cfg(NULL, NULL); }

static size_t lasterr(ilab_backend_t *b, char *buf, size_t cap) { return A->last_error(b, buf, cap); }

/* --- eval helpers ---------------------------------------------------------- */

static ilab_seq_t seq_new(ilab_backend_t *b)
{
    ilab_seq_t s = 0;
    REQUIRE(A->seq_create(b, &s) == ILAB_OK);
    return s;
}
static int32_t seq_len(ilab_backend_t *b, ilab_seq_t s)
{
    int32_t n = -1;
    REQUIRE(A->seq_length(b, s, &n) == ILAB_OK);
    return n;
}
static ilab_batch_item_t item(ilab_seq_t s, const int32_t *t, int n, uint32_t flags, float *lg)
{
    ilab_batch_item_t it = {.struct_size = sizeof it, .seq = s, .tokens = t, .n_tokens = n,
                            .flags = flags, .logits = lg};
    return it;
}
static ilab_status eval1(ilab_backend_t *b, ilab_seq_t s, const int32_t *t, int n, float *lg)
{
    ilab_batch_item_t it = item(s, t, n, 0, lg);
    const ilab_batch_item_t *p = &it;
    return A->eval(b, &p, 1);
}
/* text as byte tokens */
static int bytes_of(const char *s, int32_t *t)
{
    int n = 0;
    for (; *s; s++) t[n++] = (unsigned char)*s;
    return n;
}
/* logits after toks[0..n) in a fresh sequence */
static void fresh_logits(ilab_backend_t *b, const int32_t *t, int n, float *out)
{
    ilab_seq_t s = seq_new(b);
    REQUIRE(eval1(b, s, t, n, out) == ILAB_OK);
    REQUIRE(A->seq_free(b, s) == ILAB_OK);
}
static int tol_eq(const float *a, const float *b, int n)
{
    for (int i = 0; i < n; i++)
        if (!(fabsf(a[i] - b[i]) <= 1e-4f + 1e-4f * fabsf(b[i])))
            return 0;
    return 1;
}
static int64_t free_pos(ilab_backend_t *b)
{
    ilab_cache_stats_t cs = {.struct_size = sizeof cs};
    REQUIRE(A->cache_stats(b, &cs) == ILAB_OK);
    return cs.free_positions;
}
static int block_size(ilab_backend_t *b)
{
    ilab_cache_stats_t cs = {.struct_size = sizeof cs};
    REQUIRE(A->cache_stats(b, &cs) == ILAB_OK);
    return cs.block_size;
}

/* --- generation helpers ------------------------------------------------------ */

typedef struct ev {
    int type, token, finish;
    char text[512];
    size_t text_len;
    float lp;
    int ntop;
    ilab_status status;
    uint32_t pt, ct;
    char msg[256];
} ev;

typedef struct coll {
    ev e[256];
    int n;
    int stop_after;                         /* return 1 from the TOKEN callback number stop_after (1-based); 0 never */
    void (*hook)(struct coll *, const ilab_event_t *);
    void *ctx;
} coll;

static int on_ev(void *ud, const ilab_event_t *e)
{
    coll *c = ud;
    REQUIRE(c->n < 256);
    ev *x = &c->e[c->n++];
    memset(x, 0, sizeof *x);
    x->type = e->type;
    x->token = e->token;
    x->finish = e->finish_reason;
    if (e->text_len && e->text) {
        size_t n = e->text_len < sizeof x->text ? e->text_len : sizeof x->text - 1;
        memcpy(x->text, e->text, n);
        x->text_len = n;
    }
    x->lp = e->logprob;
    x->ntop = (int)e->n_top_logprobs;
    x->status = e->status;
    x->pt = e->prompt_tokens;
    x->ct = e->completion_tokens;
    if (e->message) snprintf(x->msg, sizeof x->msg, "%s", e->message);
    if (c->hook) c->hook(c, e);
    int ntok = 0;
    for (int i = 0; i < c->n; i++) ntok += c->e[i].type == ILAB_EVENT_TOKEN;
    return e->type == ILAB_EVENT_TOKEN && c->stop_after && ntok == c->stop_after;
}

typedef struct greq {
    ilab_sampling_t s;
    ilab_generate_request_t r;
} greq;

static void greq_init(greq *g, const int32_t *prompt, int n, int max_tokens)
{
    memset(g, 0, sizeof *g);
    g->s.struct_size = sizeof g->s;
    g->s.temperature = 0; g->s.top_k = 0; g->s.top_p = 1; g->s.min_p = 0;
    g->s.repetition_penalty = 1; g->s.seed = 42;
    g->r.struct_size = sizeof g->r;
    g->r.request_id = 1;
    g->r.prompt_tokens = prompt;
    g->r.n_prompt_tokens = (size_t)n;
    g->r.sampling = &g->s;
    g->r.max_tokens = max_tokens;
    g->r.ignore_eos = 1;
}

static ilab_status run(ilab_backend_t *b, greq *g, coll *c)
{
    g->r.sampling = &g->s;
    c->n = 0;
    return A->generate(b, &g->r, on_ev, c);
}
static int n_tokens_of(const coll *c)
{
    int n = 0;
    for (int i = 0; i < c->n; i++) n += c->e[i].type == ILAB_EVENT_TOKEN;
    return n;
}
static const ev *terminal(const coll *c) { return c->n ? &c->e[c->n - 1] : NULL; }
static size_t stream_text(const coll *c, char *out)
{
    size_t n = 0;
    for (int i = 0; i < c->n; i++) {
        if (c->e[i].type == ILAB_EVENT_ERROR) continue;
        memcpy(out + n, c->e[i].text, c->e[i].text_len);
        n += c->e[i].text_len;
    }
    out[n] = 0;
    return n;
}
static size_t piece(ilab_backend_t *b, int prev, int tok, char *out)
{
    size_t len = 0;
    REQUIRE(A->token_piece(b, prev, tok, out, 64, &len) == ILAB_OK);
    return len;
}
/* output text of the TOKEN events of c */
static size_t output_text(ilab_backend_t *b, const coll *c, int prev, char *out)
{
    size_t n = 0;
    for (int i = 0; i < c->n; i++)
        if (c->e[i].type == ILAB_EVENT_TOKEN) {
            n += piece(b, prev, c->e[i].token, out + n);
            prev = c->e[i].token;
        }
    out[n] = 0;
    return n;
}
static int same_tokens(const coll *a, const coll *b)
{
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++)
        if (a->e[i].type != b->e[i].type || a->e[i].token != b->e[i].token) return 0;
    return 1;
}
static void tok_list(const coll *c, char *out)
{
    out[0] = 0;
    for (int i = 0; i < c->n && strlen(out) < 200; i++)
        if (c->e[i].type == ILAB_EVENT_TOKEN) sprintf(out + strlen(out), "%d ", c->e[i].token);
}

/* Host-side reference of deterministic sampling (greedy after penalties),
 * computed from eval() logits. */
static int ref_greedy(ilab_backend_t *b, const int32_t *prompt, int n, int max_tokens, float rep,
                      float pres, float freq, int32_t *out)
{
    ilab_seq_t s = seq_new(b);
    float *lg = malloc(sizeof(float) * VOC);
    int *all = calloc(VOC, sizeof(int)), *cnt = calloc(VOC, sizeof(int));
    REQUIRE(eval1(b, s, prompt, n, lg) == ILAB_OK);
    for (int i = 0; i < n; i++) all[prompt[i]]++;
    int k = 0, len = n;
    while (k < max_tokens) {
        int best = -1;
        float bz = 0;
        for (int v = 0; v < VOC; v++) {
            float z = lg[v];
            if (rep != 1 && all[v]) z = z > 0 ? z / rep : z * rep;
            if (cnt[v]) z -= pres + freq * (float)cnt[v];
            if (best < 0 || z > bz) best = v, bz = z;
        }
        out[k++] = best;
        all[best]++; cnt[best]++;
        if (len == CTX) break;
        REQUIRE(eval1(b, s, &best, 1, lg) == ILAB_OK);
        len++;
    }
    free(lg); free(all); free(cnt);
    REQUIRE(A->seq_free(b, s) == ILAB_OK);
    return k;
}
static void expect_ref(ilab_backend_t *b, greq *g, const int32_t *prompt, int n, int max, const char *what)
{
    int32_t ref[64];
    float pres = ILAB_STRUCT_HAS(ilab_sampling_t, &g->s, presence_penalty) ? g->s.presence_penalty : 0;
    int k = ref_greedy(b, prompt, n, max, g->s.repetition_penalty, pres, g->s.frequency_penalty, ref);
    coll c = {0};
    ilab_status st = run(b, g, &c);
    CHECK(st == ILAB_OK && terminal(&c)->type == ILAB_EVENT_FINISH, "%s: generate failed (%s)", what, ilab_status_name(st));
    CHECK(n_tokens_of(&c) == k, "%s: %d tokens, expected %d", what, n_tokens_of(&c), k);
    for (int i = 0; i < k; i++)
        CHECK(c.e[i].token == ref[i], "%s: token %d is %d, the reference sampler gives %d", what, i, c.e[i].token, ref[i]);
}

/* ===================================================================== cases */

static void c_abi_minfo_size(void)
{
    ilab_backend_t *b = mk();
    unsigned char buf[sizeof(ilab_model_info_t) + 32];
    memset(buf, 0xAB, sizeof buf);
    ilab_model_info_t *mi = (ilab_model_info_t *)buf;
    mi->struct_size = sizeof buf;
    REQUIRE(A->model_info(b, mi) == ILAB_OK);
    CHECK(mi->struct_size == sizeof buf, "model_info rewrote struct_size %zu to %u", sizeof buf, mi->struct_size);
    for (size_t i = sizeof(ilab_model_info_t); i < sizeof buf; i++)
        CHECK(buf[i] == 0xAB, "model_info wrote byte %zu past its struct", i);
}

static void c_abi_sampling_tail(void)
{
    ilab_backend_t *b = mk();
    int32_t p[4]; int n = bytes_of("abc", p);
    struct { ilab_sampling_t s; uint32_t extra[2]; } big;
    memset(&big, 0, sizeof big);
    greq g; greq_init(&g, p, n, 3);
    big.s = g.s;
    big.s.struct_size = sizeof big;
    big.extra[1] = 7; /* a newer host set a parameter */
    g.r.sampling = &big.s;
    coll c = {0};
    ilab_status st = A->generate(b, &g.r, on_ev, &c);
    CHECK(c.n == 1 && c.e[0].type == ILAB_EVENT_ERROR && st == ILAB_ABI_MISMATCH,
          "sampling struct with a non-zero unknown tail accepted: %d events, status %s", c.n, ilab_status_name(st));
    /* an all-zero tail is fine */
    big.extra[1] = 0;
    c.n = 0;
    st = A->generate(b, &g.r, on_ev, &c);
    REQUIRE(st == ILAB_OK);
}

static void cycle(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t s1 = seq_new(b), s2 = seq_new(b);
    int32_t t[3] = {'a', 'b', 'c'};
    REQUIRE(eval1(b, s1, t, 3, NULL) == ILAB_OK);
    REQUIRE(eval1(b, s2, t, 2, NULL) == ILAB_OK);
    A->destroy(b);
}
static void c_abi_leak(void)
{
    for (int i = 0; i < 5; i++) cycle();
    struct mallinfo2 m0 = mallinfo2();
    for (int i = 0; i < 50; i++) cycle();
    struct mallinfo2 m1 = mallinfo2();
    CHECK(m1.uordblks <= m0.uordblks, "live heap grew by %zu bytes over 50 create/destroy cycles",
          m1.uordblks - m0.uordblks);
}

static void c_abi_maxctx(void)
{
    ilab_backend_t *b = mk();
    ilab_model_info_t mi = {.struct_size = sizeof mi};
    REQUIRE(A->model_info(b, &mi) == ILAB_OK);
    CHECK(CTX == 0 || mi.max_context == CTX, "manifest max_context %d, model_info says %d", CTX, mi.max_context);
}

static void c_abi_maxbatch(void)
{
    ilab_backend_t *b = mk();
    ilab_batch_item_t it[64];
    const ilab_batch_item_t *p[64];
    int32_t t[2] = {'h', 'i'};
    for (int i = 0; i < MAXB; i++) { it[i] = item(seq_new(b), t, 2, 0, NULL); p[i] = &it[i]; }
    ilab_status st = A->eval(b, p, (size_t)MAXB);
    CHECK(st == ILAB_OK, "eval of exactly max_batch=%d items: %s", MAXB, ilab_status_name(st));
}

static void c_prb_reason_nul(void)
{
    char buf[64];
    for (size_t cap = 1; cap < 40; cap++) {
        memset(buf, 'Z', sizeof buf);
        A->probe(&H, NULL, 0, buf, cap);
        CHECK(memchr(buf, 0, cap) != NULL, "probe reason not NUL-terminated within reason_cap %zu", cap);
        for (size_t i = cap; i < sizeof buf; i++) CHECK(buf[i] == 'Z', "probe wrote past reason_cap %zu", cap);
    }
    ilab_config_entry_t c = {"device", "gpu"};
    memset(buf, 'Z', sizeof buf);
    ilab_status st = A->probe(&H, &c, 1, buf, 8);
    CHECK(st == ILAB_UNAVAILABLE && memchr(buf, 0, 8), "unavailable probe's reason (cap 8) not NUL-terminated");
}

static void c_prb_create_reason(void)
{
    ilab_config_entry_t c = {"device", "gpu"};
    char r1[512], r2[512];
    ilab_status st = A->probe(&H, &c, 1, r1, sizeof r1);
    REQUIRE(st == ILAB_UNAVAILABLE);
    ilab_backend_t *b = NULL;
    st = A->create(&H, &c, 1, r2, sizeof r2, &b);
    CHECK(st == ILAB_UNAVAILABLE, "create of an unavailable config gave %s", ilab_status_name(st));
    CHECK(!strcmp(r1, r2), "probe said \"%s\", create said \"%s\"", r1, r2);
}

static void c_prb_memo(void)
{
    ilab_config_entry_t cpu = {"device", "cpu"}, gpu = {"device", "gpu"};
    char r[256];
    ilab_status s1 = A->probe(&H, &cpu, 1, r, sizeof r);
    ilab_status s2 = A->probe(&H, &gpu, 1, r, sizeof r);
    ilab_status s3 = A->probe(&H, &cpu, 1, r, sizeof r);
    REQUIRE(s1 == ILAB_OK);
    CHECK(s2 == ILAB_UNAVAILABLE && s3 == ILAB_OK, "probe(gpu) after probe(cpu) gave %s (a fresh process says UNAVAILABLE)",
          ilab_status_name(s2));
}

static void c_prb_out_written(void)
{
    ilab_config_entry_t c = {"device", "gpu"};
    char r[256];
    ilab_backend_t *sentinel = (ilab_backend_t *)(uintptr_t)0x1234, *b = sentinel;
    ilab_status st = A->create(&H, &c, 1, r, sizeof r, &b);
    REQUIRE(st == ILAB_UNAVAILABLE);
    CHECK(b == sentinel, "create() returned UNAVAILABLE but wrote %p to *out", (void *)b);
}

static void c_tok_size_eos(void)
{
    ilab_backend_t *b = mk();
    const char *s = "hello there";
    int32_t big[64];
    size_t n = 0, q = 0;
    uint32_t fl = ILAB_TOKENIZE_ADD_BOS | ILAB_TOKENIZE_ADD_EOS;
    REQUIRE(A->tokenize(b, s, strlen(s), fl, big, 64, &n) == ILAB_OK);
    ilab_status st = A->tokenize(b, s, strlen(s), fl, NULL, 0, &q);
    CHECK(st == ILAB_BUFFER_TOO_SMALL && q == n, "size query says %zu (%s), the ids are %zu", q, ilab_status_name(st), n);
    for (size_t cap = 0; cap < n; cap++) {
        int32_t buf[64];
        for (int i = 0; i < 64; i++) buf[i] = -77;
        size_t got = 0;
        st = A->tokenize(b, s, strlen(s), fl, buf, cap, &got);
        CHECK(st == ILAB_BUFFER_TOO_SMALL, "cap %zu < %zu needed gave %s", cap, n, ilab_status_name(st));
        for (int i = 0; i < 64; i++) CHECK(buf[i] == -77, "cap %zu: element %d written", cap, i);
    }
}

static void c_tok_detok_cap(void)
{
    ilab_backend_t *b = mk();
    int32_t t[3] = {'a', 'b', 'c'};
    for (size_t cap = 0; cap <= 3; cap++) {
        char buf[16];
        memset(buf, 'Z', sizeof buf);
        size_t len = 0;
        ilab_status st = A->detokenize(b, t, 3, buf, cap, &len);
        CHECK(st == ILAB_BUFFER_TOO_SMALL && len == 3, "detokenize cap %zu (3 bytes + NUL needed): %s len %zu", cap,
              ilab_status_name(st), len);
        for (size_t i = 0; i < sizeof buf; i++) CHECK(buf[i] == 'Z', "cap %zu: byte %zu written", cap, i);
    }
}

static void c_tok_lookahead(void)
{
    ilab_backend_t *b = mk();
    const char *texts[] = {"th", "he", "a t", "inert"};
    for (int k = 0; k < 4; k++) {
        const char *s = texts[k];
        size_t L = strlen(s) - 1; /* all but the last byte */
        int32_t t[64];
        size_t n = 0, len = 0;
        REQUIRE(A->tokenize(b, s, L, 0, t, 64, &n) == ILAB_OK);
        char out[64];
        REQUIRE(A->detokenize(b, t, n, out, sizeof out, &len) == ILAB_OK);
        CHECK(len == L && !memcmp(out, s, L), "detokenize(tokenize(\"%.*s\")) = \"%.*s\"", (int)L, s, (int)len, out);
    }
}

static void c_tok_prev_range(void)
{
    ilab_backend_t *b = mk();
    int prevs[] = {-2, -100, VOC, VOC + 5};
    for (int i = 0; i < 4; i++) {
        char buf[8];
        memset(buf, 'Z', sizeof buf);
        size_t len = 99;
        ilab_status st = A->token_piece(b, prevs[i], 'a', buf, sizeof buf, &len);
        CHECK(st == ILAB_INVALID_ARGUMENT, "token_piece(prev=%d) gave %s", prevs[i], ilab_status_name(st));
        CHECK(buf[0] == 'Z' && len == 99, "token_piece(prev=%d) wrote its out-parameters", prevs[i]);
    }
}

static void c_tok_flags(void)
{
    ilab_backend_t *b = mk();
    for (int bit = 2; bit < 32; bit++) {
        int32_t t[16];
        for (int i = 0; i < 16; i++) t[i] = -9;
        size_t n = 777;
        ilab_status st = A->tokenize(b, "ab", 2, 1u << bit, t, 16, &n);
        CHECK(st == ILAB_INVALID_ARGUMENT, "tokenize with flag bit %d gave %s", bit, ilab_status_name(st));
        CHECK(t[0] == -9 && n == 777, "tokenize with flag bit %d wrote output", bit);
    }
}

static int tok_count(ilab_backend_t *b, const char *s, int32_t *t)
{
    size_t n = 0;
    REQUIRE(A->tokenize(b, s, strlen(s), 0, t, 64, &n) == ILAB_OK);
    return (int)n;
}
static void c_tok_shared_table(void)
{
    const char *s = "the other thing";
    ilab_backend_t *x = mk();
    int32_t ref[64];
    int nref = tok_count(x, s, ref);
    for (int round = 0; round < 3; round++) {
        ilab_backend_t *a = mk(), *b = mk();
        int32_t t[64];
        int n = tok_count(b, s, t);
        CHECK(n == nref && !memcmp(t, ref, sizeof(int32_t) * n), "round %d: instance B tokenizes differently", round);
        A->destroy(a); /* another instance goes away */
        n = tok_count(b, s, t);
        CHECK(n == nref && !memcmp(t, ref, sizeof(int32_t) * n),
              "after destroying another instance, \"%s\" gives %d ids instead of %d", s, n, nref);
        n = tok_count(x, s, t);
        CHECK(n == nref, "first instance changed after another was destroyed: %d ids instead of %d", n, nref);
        A->destroy(b);
    }
}

static void c_log_null_skip(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t s = seq_new(b);
    int32_t t[5] = {'h', 'e', 'l', 'l', 'o'};
    REQUIRE(eval1(b, s, t, 5, NULL) == ILAB_OK);
    CHECK(seq_len(b, s) == 5, "eval with logits NULL: length %d, expected 5", seq_len(b, s));
    float lg[400], ref[400];
    int32_t x = 'w';
    REQUIRE(eval1(b, s, &x, 1, lg) == ILAB_OK);
    int32_t all[6] = {'h', 'e', 'l', 'l', 'o', 'w'};
    fresh_logits(b, all, 6, ref);
    CHECK(tol_eq(lg, ref, VOC), "logits after a NULL-logits prefill differ from a fresh sequence");
}

static void c_log_batch_pos(void)
{
    ilab_backend_t *b = mk();
    int32_t pa[4] = {'a', 'b', 'c', 'd'}, pb[3] = {'x', 'y', 'z'};
    float *la = malloc(sizeof(float) * VOC), *lb = malloc(sizeof(float) * VOC), *ra = malloc(sizeof(float) * VOC),
          *rb = malloc(sizeof(float) * VOC);
    fresh_logits(b, pa, 4, ra);
    fresh_logits(b, pb, 3, rb);
    ilab_seq_t s1 = seq_new(b), s2 = seq_new(b);
    ilab_batch_item_t i1 = item(s1, pa, 4, 0, la), i2 = item(s2, pb, 3, 0, lb);
    const ilab_batch_item_t *p[2] = {&i1, &i2};
    REQUIRE(A->eval(b, p, 2) == ILAB_OK);
    CHECK(tol_eq(la, ra, VOC), "first item of a batch differs from alone");
    CHECK(tol_eq(lb, rb, VOC), "second item of a batch of 2 differs from its logits alone");
}

static void c_log_row_offset(void)
{
    ilab_backend_t *b = mk();
    int32_t t[3] = {'c', 'a', 't'};
    float *all = malloc(sizeof(float) * VOC * 3), *buf = malloc(sizeof(float) * VOC * 3);
    ilab_seq_t s = seq_new(b);
    ilab_batch_item_t it = item(s, t, 3, ILAB_EVAL_ALL_LOGITS, all);
    const ilab_batch_item_t *p = &it;
    REQUIRE(A->eval(b, &p, 1) == ILAB_OK);
    for (int i = 0; i < VOC * 3; i++) buf[i] = 12345.0f;
    ilab_seq_t s2 = seq_new(b);
    /* the caller gives room for one row only; the rest is a guard */
    REQUIRE(eval1(b, s2, t, 3, buf) == ILAB_OK);
    for (int i = VOC; i < VOC * 3; i++) CHECK(buf[i] == 12345.0f, "eval without ALL_LOGITS wrote float %d (past the one row)", i);
    CHECK(tol_eq(buf, all + 2 * VOC, VOC), "the one row is not the logits after the last token");
}

static void c_log_dup_seq(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t s = seq_new(b);
    int32_t t[2] = {'a', 'b'};
    ilab_batch_item_t i1 = item(s, t, 2, 0, NULL), i2 = item(s, t, 1, 0, NULL);
    const ilab_batch_item_t *p[2] = {&i1, &i2};
    ilab_status st = A->eval(b, p, 2);
    CHECK(st == ILAB_INVALID_ARGUMENT, "two items naming one sequence: %s", ilab_status_name(st));
    CHECK(seq_len(b, s) == 0, "refused eval changed the length to %d", seq_len(b, s));
}

static void c_log_mask_inf(void)
{
    ilab_backend_t *b = mk();
    int32_t t[40];
    int n = bytes_of("finite logits everywhere", t);
    float *lg = malloc(sizeof(float) * VOC * n);
    ilab_seq_t s = seq_new(b);
    ilab_batch_item_t it = item(s, t, n, ILAB_EVAL_ALL_LOGITS, lg);
    const ilab_batch_item_t *p = &it;
    REQUIRE(A->eval(b, &p, 1) == ILAB_OK);
    for (int i = 0; i < VOC * n; i++) CHECK(isfinite(lg[i]), "logit %d of row %d is %f", i % VOC, i / VOC, lg[i]);
}

static void c_cch_no_cow(void)
{
    ilab_backend_t *b = mk();
    int32_t t[8] = {'a', 'b', 'c', 'd', 'e', 'f', 'x', 'y'};
    float *lg = malloc(sizeof(float) * VOC), *ref = malloc(sizeof(float) * VOC);
    for (int plen = 1; plen <= 6; plen++) {
        ilab_seq_t p = seq_new(b), c = 0;
        REQUIRE(eval1(b, p, t, plen, NULL) == ILAB_OK);
        REQUIRE(A->seq_fork(b, p, &c) == ILAB_OK);
        REQUIRE(eval1(b, c, &t[6], 1, NULL) == ILAB_OK); /* child appends 'x' */
        REQUIRE(eval1(b, p, &t[7], 1, lg) == ILAB_OK);   /* parent appends 'y' */
        int32_t want[10];
        memcpy(want, t, sizeof(int32_t) * plen);
        want[plen] = 'y';
        fresh_logits(b, want, plen + 1, ref);
        CHECK(tol_eq(lg, ref, VOC), "parent of length %d changed after its fork appended", plen);
        int32_t z = 'z';
        REQUIRE(eval1(b, c, &z, 1, lg) == ILAB_OK);      /* child goes on with 'z' */
        want[plen] = 'x';
        want[plen + 1] = 'z';
        fresh_logits(b, want, plen + 2, ref);
        CHECK(tol_eq(lg, ref, VOC), "fork of a parent of length %d changed after the parent appended", plen);
        A->seq_free(b, p);
        A->seq_free(b, c);
    }
}

static void c_cch_trunc_nofree(void)
{
    ilab_backend_t *b = mk();
    int B = block_size(b);
    int64_t f0 = free_pos(b);
    ilab_seq_t s = seq_new(b);
    int32_t t[32];
    for (int i = 0; i < 32; i++) t[i] = 'a' + i % 26;
    REQUIRE(eval1(b, s, t, 10, NULL) == ILAB_OK);
    int64_t want = f0 - (int64_t)((10 + B - 1) / B) * B;
    CHECK(free_pos(b) == want, "after 10 positions free is %lld, expected %lld", (long long)free_pos(b), (long long)want);
    REQUIRE(A->seq_truncate(b, s, 2) == ILAB_OK);
    want = f0 - (int64_t)((2 + B - 1) / B) * B;
    CHECK(free_pos(b) == want, "after truncate to 2 free is %lld, expected %lld", (long long)free_pos(b), (long long)want);
    REQUIRE(A->seq_free(b, s) == ILAB_OK);
    CHECK(free_pos(b) == f0, "after seq_free free is %lld, first answer %lld", (long long)free_pos(b), (long long)f0);
}

static void c_cch_trunc_high(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t s = seq_new(b);
    int32_t t[3] = {'a', 'b', 'c'};
    REQUIRE(eval1(b, s, t, 3, NULL) == ILAB_OK);
    ilab_status st = A->seq_truncate(b, s, 4);
    CHECK(st == ILAB_INVALID_ARGUMENT, "seq_truncate(n = length + 1) gave %s", ilab_status_name(st));
    st = A->seq_truncate(b, s, -1);
    CHECK(st == ILAB_INVALID_ARGUMENT, "seq_truncate(-1) gave %s", ilab_status_name(st));
    CHECK(seq_len(b, s) == 3, "length changed to %d", seq_len(b, s));
}

static void c_cch_partial_apply(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t a = seq_new(b), f = seq_new(b);
    int32_t t[64];
    for (int i = 0; i < 64; i++) t[i] = 'a' + i % 26;
    REQUIRE(eval1(b, f, t, CTX - 2, NULL) == ILAB_OK);
    ilab_batch_item_t i1 = item(a, t, 2, 0, NULL), i2 = item(f, t, 3, 0, NULL);
    const ilab_batch_item_t *p[2] = {&i1, &i2};
    ilab_status st = A->eval(b, p, 2);
    CHECK(st == ILAB_CONTEXT_OVERFLOW, "second item straddling max_context: %s", ilab_status_name(st));
    CHECK(seq_len(b, a) == 0, "refused eval left the first item's sequence at length %d", seq_len(b, a));
    CHECK(seq_len(b, f) == CTX - 2, "refused eval changed the full sequence");
}

static void c_cch_exact_full(void)
{
    ilab_backend_t *b = mk();
    int32_t t[64];
    for (int i = 0; i < 64; i++) t[i] = 'a' + (i * 7) % 26;
    ilab_seq_t s = seq_new(b);
    ilab_status st = eval1(b, s, t, CTX, NULL);
    CHECK(st == ILAB_OK, "prefill of exactly max_context=%d tokens: %s", CTX, ilab_status_name(st));
    ilab_seq_t s2 = seq_new(b);
    REQUIRE(eval1(b, s2, t, CTX - 1, NULL) == ILAB_OK);
    st = eval1(b, s2, t, 1, NULL);
    CHECK(st == ILAB_OK, "decode of the last position: %s", ilab_status_name(st));
    st = eval1(b, s2, t, 1, NULL);
    CHECK(st == ILAB_CONTEXT_OVERFLOW, "decode past max_context: %s", ilab_status_name(st));
}

static void c_cch_handle_reuse(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t seen[64];
    int n = 0;
    for (int i = 0; i < 20; i++) {
        ilab_seq_t s = seq_new(b);
        for (int j = 0; j < n; j++) CHECK(s != seen[j], "seq_create reissued handle %#llx", (unsigned long long)s);
        seen[n++] = s;
        REQUIRE(A->seq_free(b, s) == ILAB_OK);
        int32_t len;
        CHECK(A->seq_length(b, s, &len) == ILAB_INVALID_ARGUMENT, "freed handle still valid");
    }
}

static void c_cch_oom_exact(void)
{
    ilab_backend_t *b = mk();
    int B = block_size(b);
    int64_t free0 = free_pos(b);
    int32_t t[64];
    for (int i = 0; i < 64; i++) t[i] = 'a' + i % 26;
    /* fill all but the last block, in sequences of at most CTX positions */
    int64_t left = free0 - B;
    ilab_seq_t last = 0;
    while (left > 0) {
        int n = left > CTX ? CTX : (int)left;
        last = seq_new(b);
        REQUIRE(eval1(b, last, t, n, NULL) == ILAB_OK);
        left -= n;
    }
    REQUIRE(free_pos(b) == B);
    ilab_seq_t s = seq_new(b);
    ilab_status st = eval1(b, s, t, 1, NULL);
    CHECK(st == ILAB_OK, "eval needing exactly the one free block: %s", ilab_status_name(st));
    ilab_seq_t s2 = seq_new(b);
    st = eval1(b, s2, t, 1, NULL);
    CHECK(st == ILAB_OUT_OF_MEMORY, "eval needing one block more than free: %s", ilab_status_name(st));
    CHECK(seq_len(b, s2) == 0, "refused eval changed the length");
}

static void c_cch_free_shared(void)
{
    ilab_backend_t *b = mk();
    int32_t t[16] = {'s', 'h', 'a', 'r', 'e', 'd', 'x', 'q', 'w', 'e', 'r', 't', 'y', 'u', 'i', 'o'};
    float *lg = malloc(sizeof(float) * VOC), *ref = malloc(sizeof(float) * VOC);
    ilab_seq_t p = seq_new(b), c = 0;
    REQUIRE(eval1(b, p, t, 6, NULL) == ILAB_OK);
    REQUIRE(A->seq_fork(b, p, &c) == ILAB_OK);
    REQUIRE(A->seq_free(b, p) == ILAB_OK);
    ilab_seq_t o = seq_new(b);
    REQUIRE(eval1(b, o, t + 8, 8, NULL) == ILAB_OK); /* someone else takes free blocks */
    REQUIRE(eval1(b, c, t + 6, 1, lg) == ILAB_OK);
    fresh_logits(b, t, 7, ref);
    CHECK(tol_eq(lg, ref, VOC), "a fork's logits changed after its parent was freed and the pool reused");
    CHECK(seq_len(b, c) == 7, "fork length %d", seq_len(b, c));
}

/* -------- streaming */

static void c_str_stop_across(void)
{
    ilab_backend_t *b = mk();
    int32_t p[8];
    const char *prompts[] = {"the ", "a cat", "zz", "on"};
    int tried = 0;
    for (int k = 0; k < 4; k++) {
        int n = bytes_of(prompts[k], p);
        greq g; greq_init(&g, p, n, 12);
        coll c = {0};
        REQUIRE(run(b, &g, &c) == ILAB_OK);
        char out[256];
        size_t starts[32]; int ns = 0;
        size_t len = 0;
        int prev = p[n - 1];
        for (int i = 0; i < c.n; i++)
            if (c.e[i].type == ILAB_EVENT_TOKEN) {
                starts[ns++] = len;
                len += piece(b, prev, c.e[i].token, out + len);
                prev = c.e[i].token;
            }
        out[len] = 0;
        for (int i = 1; i < ns; i++) {
            size_t bpos = starts[i];
            if (bpos == 0 || bpos >= len || bpos == starts[i - 1]) continue;
            char stop[3] = {out[bpos - 1], out[bpos], 0};
            if (!stop[0] || !stop[1]) continue;
            char *first = memmem(out, len, stop, 2);
            if (first != out + bpos - 1) continue;
            tried++;
            const char *stops[1] = {stop};
            g.r.stop = stops; g.r.n_stop = 1;
            coll d = {0};
            REQUIRE(run(b, &g, &d) == ILAB_OK);
            char txt[512];
            size_t tl = stream_text(&d, txt);
            CHECK(terminal(&d)->finish == ILAB_FINISH_STOP, "stop string \"%s\" across a token boundary: finish %s",
                  stop, ilab_finish_reason_name(terminal(&d)->finish));
            CHECK(tl == bpos - 1 && !memcmp(txt, out, tl), "stop \"%s\": text not cut before it", stop);
            CHECK(n_tokens_of(&d) == i + 1, "stop \"%s\": %d tokens, expected %d", stop, n_tokens_of(&d), i + 1);
            break;
        }
    }
    REQUIRE(tried > 0);
}

static int incomplete_at(const char *s, size_t p, size_t total)
{
    /* a lead byte before p whose code point continues after p */
    for (size_t k = 1; k <= 3 && k <= p; k++) {
        unsigned char c = (unsigned char)s[p - k];
        if ((c & 0xC0) == 0x80) continue;
        int need = (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        if (need > (int)k && p < total && ((unsigned char)s[p] & 0xC0) == 0x80) return 1;
        return 0;
    }
    return 0;
}
static void c_str_utf8_split(void)
{
    ilab_backend_t *b = mk();
    int32_t p[4] = {'h', 'i'};
    int checked = 0;
    for (uint64_t seed = 1; seed < 400; seed++) {
        greq g; greq_init(&g, p, 2, 20);
        g.s.temperature = 1.5f; g.s.seed = seed;
        coll c = {0};
        REQUIRE(run(b, &g, &c) == ILAB_OK);
        char all[1024];
        size_t total = 0, ends[256]; int ne = 0;
        for (int i = 0; i < c.n; i++) {
            memcpy(all + total, c.e[i].text, c.e[i].text_len);
            total += c.e[i].text_len;
            ends[ne++] = total;
        }
        for (int i = 0; i < ne; i++)
            CHECK(!incomplete_at(all, ends[i], total), "seed %llu: event %d ends inside a code point continued later",
                  (unsigned long long)seed, i);
        /* count streams where a multi-byte code point actually appeared */
        for (size_t i = 0; i + 1 < total; i++)
            if ((unsigned char)all[i] >= 0xC2 && (unsigned char)all[i] <= 0xF4 && ((unsigned char)all[i + 1] & 0xC0) == 0x80) checked++;
        if (checked > 20) break;
    }
    REQUIRE(checked > 0);
}

static void c_str_eos_counted(void)
{
    ilab_backend_t *b = mk();
    int32_t p[4] = {'o', 'k'};
    int32_t stops[3] = {'e', ' ', 'a'};
    int found = 0;
    for (uint64_t seed = 1; seed < 200 && found < 5; seed++) {
        greq g; greq_init(&g, p, 2, 25);
        g.s.temperature = 1.0f; g.s.seed = seed;
        g.r.stop_token_ids = stops; g.r.n_stop_token_ids = 3;
        coll c = {0};
        REQUIRE(run(b, &g, &c) == ILAB_OK);
        const ev *t = terminal(&c);
        if (t->finish != ILAB_FINISH_STOP) continue;
        found++;
        CHECK(t->ct == (uint32_t)n_tokens_of(&c), "FINISH(stop) on a stop token id: completion_tokens %u, TOKEN events %d",
              t->ct, n_tokens_of(&c));
        CHECK(t->pt == 2, "prompt_tokens %u", t->pt);
    }
    REQUIRE(found);
}

static void c_str_cancel_early(void)
{
    ilab_backend_t *b = mk();
    int32_t p[4] = {'g', 'o'};
    REQUIRE(A->cancel(b, 777) == ILAB_OK); /* not yet started */
    greq g; greq_init(&g, p, 2, 5);
    g.r.request_id = 777;
    coll c = {0};
    REQUIRE(run(b, &g, &c) == ILAB_OK);
    CHECK(terminal(&c)->finish == ILAB_FINISH_LENGTH && n_tokens_of(&c) == 5,
          "request cancelled before it started: %d tokens, finish %s", n_tokens_of(&c),
          ilab_finish_reason_name(terminal(&c)->finish));
}

static void c_str_callback_ignored(void)
{
    ilab_backend_t *b = mk();
    int32_t p[4] = {'g', 'o'};
    greq g; greq_init(&g, p, 2, 10);
    coll c = {0};
    c.stop_after = 2;
    ilab_status st = run(b, &g, &c);
    CHECK(st == ILAB_OK, "generate returned %s", ilab_status_name(st));
    CHECK(n_tokens_of(&c) == 2, "callback returned nonzero on TOKEN 2, yet %d TOKEN events came", n_tokens_of(&c));
    CHECK(terminal(&c)->finish == ILAB_FINISH_CANCELLED, "finish %s", ilab_finish_reason_name(terminal(&c)->finish));
}

static void c_str_held_lost(void)
{
    ilab_backend_t *b = mk();
    int32_t p[4] = {'w', 'e'};
    greq g; greq_init(&g, p, 2, 10);
    coll c = {0};
    REQUIRE(run(b, &g, &c) == ILAB_OK);
    int tk[16], n = 0;
    for (int i = 0; i < c.n; i++) if (c.e[i].type == ILAB_EVENT_TOKEN) tk[n++] = c.e[i].token;
    int k = -1;
    for (int i = 2; i < n && k < 0; i++) {
        int dup = 0;
        for (int j = 0; j < i; j++) dup |= tk[j] == tk[i];
        if (!dup) k = i;
    }
    REQUIRE(k > 0);
    char expect[128];
    size_t el = 0;
    int prev = p[1];
    for (int i = 0; i < k; i++) { el += piece(b, prev, tk[i], expect + el); prev = tk[i]; }
    REQUIRE(el > 0);
    char stop[4] = {expect[el - 1], '\x01', 0};
    const char *stops[1] = {stop};
    int32_t sid[1] = {tk[k]};
    g.r.stop = stops; g.r.n_stop = 1;
    g.r.stop_token_ids = sid; g.r.n_stop_token_ids = 1;
    coll d = {0};
    REQUIRE(run(b, &g, &d) == ILAB_OK);
    REQUIRE(terminal(&d)->finish == ILAB_FINISH_STOP && n_tokens_of(&d) == k);
    char txt[512];
    size_t tl = stream_text(&d, txt);
    CHECK(tl == el && !memcmp(txt, expect, el), "stream text is %zu bytes, the output text %zu: held-back bytes lost", tl, el);
}

static void c_str_maxtok_zero(void)
{
    ilab_backend_t *b = mk();
    int32_t p[4] = {'h', 'i'};
    int vals[] = {0, -1};
    for (int i = 0; i < 2; i++) {
        greq g; greq_init(&g, p, 2, vals[i]);
        coll c = {0};
        ilab_status st = run(b, &g, &c);
        CHECK(c.n == 1 && c.e[0].type == ILAB_EVENT_ERROR && st != ILAB_OK && c.e[0].msg[0],
              "max_tokens %d: %d events (%d TOKEN), status %s", vals[i], c.n, n_tokens_of(&c), ilab_status_name(st));
    }
}

static ilab_backend_t *other;
static void cancel_other(coll *c, const ilab_event_t *e)
{
    (void)c;
    if (e->type == ILAB_EVENT_TOKEN) A->cancel(other, e->request_id);
}
static void c_str_cancel_global(void)
{
    ilab_backend_t *a = mk(), *b = mk();
    other = a; /* a runs nothing */
    int32_t p[4] = {'h', 'i'};
    greq g; greq_init(&g, p, 2, 8);
    g.r.request_id = 5;
    coll c = {0};
    c.hook = cancel_other;
    REQUIRE(run(b, &g, &c) == ILAB_OK);
    CHECK(terminal(&c)->finish == ILAB_FINISH_LENGTH && n_tokens_of(&c) == 8,
          "cancel(other instance, same id) ended this stream: %d tokens, finish %s", n_tokens_of(&c),
          ilab_finish_reason_name(terminal(&c)->finish));
}

static void c_str_ctx_error(void)
{
    ilab_backend_t *b = mk();
    int32_t p[64];
    for (int i = 0; i < 64; i++) p[i] = 'a' + (i * 5) % 26;
    for (int L = CTX - 3; L <= CTX; L++) {
        greq g; greq_init(&g, p, L, 20);
        coll c = {0};
        ilab_status st = run(b, &g, &c);
        const ev *t = terminal(&c);
        CHECK(st == ILAB_OK && t->type == ILAB_EVENT_FINISH && t->finish == ILAB_FINISH_LENGTH,
              "prompt %d of max_context %d: ended with %s/%s (%s)", L, CTX, t->type == ILAB_EVENT_ERROR ? "ERROR" : "FINISH",
              ilab_finish_reason_name(t->finish), ilab_status_name(st));
        int nt = n_tokens_of(&c);
        CHECK(nt == CTX - L + 1 || nt == CTX - L, "prompt %d: %d tokens at a full context", L, nt);
    }
}

static void c_str_ctx_usage(void)
{
    ilab_backend_t *b = mk();
    int32_t p[64];
    for (int i = 0; i < 64; i++) p[i] = 'a' + (i * 3) % 26;
    for (int L = CTX - 4; L <= CTX; L++) {
        greq g; greq_init(&g, p, L, 50);
        coll c = {0};
        REQUIRE(run(b, &g, &c) == ILAB_OK);
        const ev *t = terminal(&c);
        CHECK(t->ct == (uint32_t)n_tokens_of(&c) && t->pt == (uint32_t)L,
              "full context, prompt %d: usage %u+%u, but %d TOKEN events", L, t->pt, t->ct, n_tokens_of(&c));
    }
    greq g; greq_init(&g, p, 3, 4);
    coll c = {0};
    REQUIRE(run(b, &g, &c) == ILAB_OK);
    CHECK(terminal(&c)->ct == 4, "max_tokens 4: completion_tokens %u", terminal(&c)->ct);
}

/* -------- sampling */

static void c_smp_rng_static(void)
{
    ilab_backend_t *b = mk();
    int32_t p[4] = {'r', 'n', 'g'};
    greq g; greq_init(&g, p, 3, 12);
    g.s.temperature = 1.0f; g.s.seed = 1234;
    coll c1 = {0}, c2 = {0};
    REQUIRE(run(b, &g, &c1) == ILAB_OK);
    REQUIRE(run(b, &g, &c2) == ILAB_OK);
    char a[256], d[256];
    tok_list(&c1, a); tok_list(&c2, d);
    CHECK(same_tokens(&c1, &c2), "same request and seed twice: [%s] then [%s]", a, d);
    ilab_backend_t *b2 = mk();
    coll c3 = {0};
    REQUIRE(run(b2, &g, &c3) == ILAB_OK);
    CHECK(same_tokens(&c1, &c3), "same request and seed on a second instance gives other tokens");
}

static void c_smp_seed_signed(void)
{
    ilab_backend_t *b = mk();
    int32_t p[4] = {'s', 'e'};
    uint64_t seeds[] = {(1ull << 32) + 7, (1ull << 63) + 12345, UINT64_MAX};
    for (int i = 0; i < 3; i++) {
        greq g; greq_init(&g, p, 2, 6);
        g.s.temperature = 0.9f; g.s.seed = seeds[i];
        coll c1 = {0}, c2 = {0};
        ilab_status st = run(b, &g, &c1);
        CHECK(st == ILAB_OK && terminal(&c1)->type == ILAB_EVENT_FINISH, "seed %llu refused: %s",
              (unsigned long long)seeds[i], c1.n ? terminal(&c1)->msg : "");
        REQUIRE(run(b, &g, &c2) == ILAB_OK);
        CHECK(same_tokens(&c1, &c2), "seed %llu not reproducible", (unsigned long long)seeds[i]);
    }
}

static void c_smp_topk_vocab(void)
{
    ilab_backend_t *b = mk();
    int32_t p[4] = {'t', 'k'};
    for (uint64_t seed = 1; seed < 6; seed++) {
        greq g; greq_init(&g, p, 2, 8);
        g.s.temperature = 0.8f; g.s.seed = seed;
        coll off = {0}, full = {0};
        REQUIRE(run(b, &g, &off) == ILAB_OK);
        g.s.top_k = VOC;
        ilab_status st = run(b, &g, &full);
        CHECK(st == ILAB_OK, "top_k = vocab_size (%d) refused: %s", VOC, full.n ? terminal(&full)->msg : "");
        CHECK(same_tokens(&off, &full), "top_k = vocab_size differs from top_k off (seed %llu)", (unsigned long long)seed);
    }
}

static void c_smp_tiny_temp(void)
{
    ilab_backend_t *b = mk();
    const char *ps[] = {"tiny", "temperature", "zq"};
    for (int k = 0; k < 3; k++) {
        int32_t p[16];
        int n = bytes_of(ps[k], p);
        greq g; greq_init(&g, p, n, 10);
        g.s.temperature = 1e-38f; g.s.seed = 99;
        expect_ref(b, &g, p, n, 10, "temperature 1e-38");
    }
}

static void c_smp_presence_order(void)
{
    ilab_backend_t *b = mk();
    const char *ps[] = {"pen", "alty", "hello", "x", "sos"};
    for (int k = 0; k < 5; k++) {
        int32_t p[16];
        int n = bytes_of(ps[k], p);
        greq g; greq_init(&g, p, n, 20);
        g.s.temperature = 0.25f; g.s.top_k = 1; g.s.presence_penalty = 1.5f;
        expect_ref(b, &g, p, n, 20, "presence 1.5, T 0.25, top_k 1");
    }
}

static void c_smp_rep_prompt_only(void)
{
    ilab_backend_t *b = mk();
    const char *ps[] = {"repeat", "aaaa", "zyxw", "hello world"};
    for (int k = 0; k < 4; k++) {
        int32_t p[16];
        int n = bytes_of(ps[k], p);
        greq g; greq_init(&g, p, n, 16);
        g.s.repetition_penalty = 4.0f;
        expect_ref(b, &g, p, n, 16, "repetition_penalty 4, greedy");
    }
}

static void c_smp_freq_partial(void)
{
    ilab_backend_t *b = mk();
    const char *ps[] = {"freq", "aaa", "hello", "ox"};
    for (int k = 0; k < 4; k++) {
        int32_t p[16];
        int n = bytes_of(ps[k], p);
        greq g; greq_init(&g, p, n, 20);
        g.s.frequency_penalty = 1.9f;
        expect_ref(b, &g, p, n, 20, "frequency_penalty 1.9 alone, greedy");
    }
}

static void c_smp_logprob_scaled(void)
{
    ilab_backend_t *b = mk();
    int32_t p[40] = {'l', 'p'};
    int n = 2;
    greq g; greq_init(&g, p, n, 8);
    g.s.temperature = 2.0f; g.s.seed = 3; g.r.top_logprobs = 0;
    coll c = {0};
    REQUIRE(run(b, &g, &c) == ILAB_OK);
    float *lg = malloc(sizeof(float) * VOC);
    int32_t seqt[40];
    memcpy(seqt, p, sizeof(int32_t) * n);
    int len = n;
    for (int i = 0; i < c.n; i++) {
        if (c.e[i].type != ILAB_EVENT_TOKEN) continue;
        fresh_logits(b, seqt, len, lg);
        double m = lg[0], s = 0;
        for (int v = 0; v < VOC; v++) m = lg[v] > m ? lg[v] : m;
        for (int v = 0; v < VOC; v++) s += exp(lg[v] - m);
        double want = lg[c.e[i].token] - m - log(s);
        CHECK(fabs(c.e[i].lp - want) <= 1e-4 + 1e-4 * fabs(want), "TOKEN %d logprob %f, log_softmax of the raw logits %f",
              i, c.e[i].lp, want);
        seqt[len++] = c.e[i].token;
    }
}

static void c_smp_topp_empty(void)
{
    ilab_backend_t *b = mk();
    const char *ps[] = {"nucleus", "pp", "qqq"};
    for (int k = 0; k < 3; k++) {
        int32_t p[16];
        int n = bytes_of(ps[k], p);
        greq g; greq_init(&g, p, n, 12);
        g.s.temperature = 1.0f; g.s.top_p = 1e-6f; g.s.seed = 7 + k;
        expect_ref(b, &g, p, n, 12, "top_p 1e-6");
    }
}

static void c_smp_toplp_cap(void)
{
    ilab_backend_t *b = mk();
    int32_t p[4] = {'c', 'a', 'p'};
    greq g; greq_init(&g, p, 3, 3);
    g.r.top_logprobs = TOPK;
    coll c = {0};
    REQUIRE(run(b, &g, &c) == ILAB_OK);
    REQUIRE(c.e[0].ntop == TOPK);
    g.r.top_logprobs = TOPK + 1;
    ilab_status st = run(b, &g, &c);
    CHECK(st == ILAB_INVALID_ARGUMENT && c.n == 1 && c.e[0].type == ILAB_EVENT_ERROR,
          "top_logprobs %d above topk_max %d: %s, %d events (%d TOKEN, %d top entries)", TOPK + 1, TOPK,
          ilab_status_name(st), c.n, n_tokens_of(&c), c.e[0].ntop);
}

/* -------- errors */

static void c_err_msg_stale(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t s = seq_new(b);
    REQUIRE(A->seq_free(b, s) == ILAB_OK);
    size_t n = 0;
    REQUIRE(A->tokenize(b, "x", 1, 1u << 9, NULL, 0, &n) == ILAB_INVALID_ARGUMENT);
    char before[1024], after[1024];
    lasterr(b, before, sizeof before);
    int32_t len;
    REQUIRE(A->seq_length(b, s, &len) == ILAB_INVALID_ARGUMENT);
    lasterr(b, after, sizeof after);
    CHECK(after[0] && strcmp(before, after), "seq_length(stale) failed but last_error still says \"%s\"", after);
}

static void c_err_lasterr_len(void)
{
    ilab_backend_t *b = mk();
    int32_t len;
    REQUIRE(A->seq_length(b, 12345, &len) == ILAB_INVALID_ARGUMENT);
    size_t full = lasterr(b, NULL, 0);
    char big[2048];
    REQUIRE(lasterr(b, big, sizeof big) == full && strlen(big) == full && full > 6);
    for (size_t cap = 1; cap < full + 2; cap++) {
        char buf[2048];
        memset(buf, 'Z', sizeof buf);
        size_t r = lasterr(b, buf, cap);
        CHECK(r == full, "last_error(cap %zu) returned %zu, the full length is %zu", cap, r, full);
        size_t want = cap - 1 < full ? cap - 1 : full;
        CHECK(strlen(buf) == want && !memcmp(buf, big, want), "last_error(cap %zu) copied the wrong bytes", cap);
    }
}

static void c_err_fork_null(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t s = seq_new(b);
    int32_t t[3] = {'a', 'b', 'c'};
    REQUIRE(eval1(b, s, t, 3, NULL) == ILAB_OK);
    ilab_status st = A->seq_fork(b, s, NULL);
    CHECK(st == ILAB_INVALID_ARGUMENT, "seq_fork(child NULL): %s", ilab_status_name(st));
    char m[256];
    CHECK(lasterr(b, m, sizeof m) > 0, "no message");
}

static void c_err_cfg_unavail(void)
{
    const char *bad[] = {"-5", "-1"};
    for (int i = 0; i < 2; i++) {
        ilab_config_entry_t c = {"seed", bad[i]};
        char err[256] = "";
        ilab_backend_t *b = (ilab_backend_t *)(uintptr_t)0x99;
        ilab_status st = A->create(&H, &c, 1, err, sizeof err, &b);
        CHECK(st == ILAB_INVALID_ARGUMENT, "seed=%s: create gave %s (\"%s\")", bad[i], ilab_status_name(st), err);
        CHECK(strstr(err, "seed") != NULL, "seed=%s: message does not name the key: \"%s\"", bad[i], err);
        CHECK(b == (ilab_backend_t *)(uintptr_t)0x99, "*out written");
        char r[256];
        st = A->probe(&H, &c, 1, r, sizeof r);
        CHECK(st == ILAB_INVALID_ARGUMENT, "seed=%s: probe gave %s", bad[i], ilab_status_name(st));
    }
}

/* -------- threads */

typedef struct side {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    int which; /* 0 last_error, 1 cancel */
    ilab_backend_t *b;
    uint64_t id;
    int started, blocked;
} side;
static side SIDE = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, NULL, 0, 0, 0};

static void *side_thread(void *arg)
{
    side *s = arg;
    char buf[64];
    if (s->which == 0) A->last_error(s->b, buf, sizeof buf);
    else A->cancel(s->b, s->id);
    pthread_mutex_lock(&s->mu);
    s->done = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}
static pthread_t side_tid;
static void side_hook(coll *c, const ilab_event_t *e)
{
    (void)c;
    if (e->type != ILAB_EVENT_TOKEN || SIDE.started) return;
    SIDE.started = 1;
    SIDE.id = e->request_id;
    pthread_create(&side_tid, NULL, side_thread, &SIDE);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 2;
    pthread_mutex_lock(&SIDE.mu);
    while (!SIDE.done)
        if (pthread_cond_timedwait(&SIDE.cv, &SIDE.mu, &dl) == ETIMEDOUT) break;
    SIDE.blocked = !SIDE.done;
    pthread_mutex_unlock(&SIDE.mu);
}
static void thr_case(int which)
{
    ilab_backend_t *b = mk();
    int32_t t;
    A->seq_length(b, 999, &t); /* something for last_error to hold */
    SIDE.which = which;
    SIDE.b = b;
    int32_t p[4] = {'t', 'h', 'r'};
    greq g; greq_init(&g, p, 3, 6);
    g.r.request_id = 31;
    coll c = {0};
    c.hook = side_hook;
    REQUIRE(run(b, &g, &c) == ILAB_OK);
    pthread_join(side_tid, NULL);
    CHECK(!SIDE.blocked, "%s() on another thread did not return within 2 s while generate() was running",
          which ? "cancel" : "last_error");
    if (which == 1)
        CHECK(n_tokens_of(&c) <= 3 && terminal(&c)->finish == ILAB_FINISH_CANCELLED,
              "cancel() from another thread: %d tokens, finish %s", n_tokens_of(&c), ilab_finish_reason_name(terminal(&c)->finish));
}
static void c_thr_lasterr_blocks(void) { thr_case(0); }
static void c_thr_cancel_blocks(void) { thr_case(1); }


static void c_tok_long_text(void)
{
    ilab_backend_t *b = mk();
    size_t L = 150000;
    char *txt = malloc(L);
    for (size_t i = 0; i < L; i++) txt[i] = "the quick brown fox jumps over a lazy dog\n"[i % 42];
    size_t cap = L + 8, n = 0, q = 0;
    int32_t *t = malloc(sizeof(int32_t) * cap);
    REQUIRE(A->tokenize(b, txt, L, ILAB_TOKENIZE_ADD_BOS, t, cap, &n) == ILAB_OK);
    ilab_status st = A->tokenize(b, txt, L, ILAB_TOKENIZE_ADD_BOS, NULL, 0, &q);
    CHECK(st == ILAB_BUFFER_TOO_SMALL && q == n, "size query for a %zu-byte text says %zu (%s), tokenize gave %zu ids", L, q,
          ilab_status_name(st), n);
    char *back = malloc(L + 1);
    size_t bl = 0;
    REQUIRE(A->detokenize(b, t, n, back, L + 1, &bl) == ILAB_OK);
    CHECK(bl == L && !memcmp(back, txt, L), "long text does not round-trip");
}

static void c_tok_piece_query(void)
{
    ilab_backend_t *b = mk();
    for (int tok = 0; tok < VOC; tok++) {
        char buf[64];
        size_t len = 0, q = 0;
        REQUIRE(A->token_piece(b, -1, tok, buf, sizeof buf, &len) == ILAB_OK);
        ilab_status st = A->token_piece(b, -1, tok, NULL, 0, &q);
        CHECK(st == ILAB_BUFFER_TOO_SMALL && q == len, "token_piece size query for token %d says %zu (%s), the piece is %zu bytes",
              tok, q, ilab_status_name(st), len);
        for (size_t cap = 1; cap <= len; cap++) {
            memset(buf, 'Z', sizeof buf);
            st = A->token_piece(b, -1, tok, buf, cap, &q);
            CHECK(st == ILAB_BUFFER_TOO_SMALL && q == len && buf[0] == 'Z', "token_piece(%d) cap %zu: %s", tok, cap, ilab_status_name(st));
        }
    }
}

static void c_cch_stats_size(void)
{
    ilab_backend_t *b = mk();
    uint32_t sizes[] = {4, 8, 12, 16, 20};
    for (int i = 0; i < 5; i++) {
        unsigned char buf[64];
        memset(buf, 0xCD, sizeof buf);
        ilab_cache_stats_t *cs = (ilab_cache_stats_t *)buf;
        cs->struct_size = sizes[i];
        ilab_status st = A->cache_stats(b, cs);
        CHECK(st == ILAB_ABI_MISMATCH, "cache_stats with struct_size %u (< %zu): %s", sizes[i], sizeof *cs, ilab_status_name(st));
        for (size_t k = 4; k < sizeof buf; k++) CHECK(buf[k] == 0xCD, "cache_stats(struct_size %u) wrote byte %zu", sizes[i], k);
    }
}

static void c_str_stop_long(void)
{
    ilab_backend_t *b = mk();
    int32_t p[4] = {'l'};
    greq g; greq_init(&g, p, 1, 40);
    coll c = {0};
    REQUIRE(run(b, &g, &c) == ILAB_OK);
    char out[256];
    size_t len = output_text(b, &c, p[0], out);
    if (len < 33) { printf("driver error: output only %zu bytes\n", len); fflush(stdout); _exit(2); }
    /* a 34-byte stop string whose first 32 bytes occur but which never occurs whole */
    char stop[64];
    memcpy(stop, out, 32);
    memcpy(stop + 32, "\x01\x02", 2);
    stop[34] = 0;
    REQUIRE(strlen(stop) == 34);
    const char *stops[1] = {stop};
    g.r.stop = stops; g.r.n_stop = 1;
    coll d = {0};
    REQUIRE(run(b, &g, &d) == ILAB_OK);
    char txt[512];
    size_t tl = stream_text(&d, txt);
    CHECK(terminal(&d)->finish == ILAB_FINISH_LENGTH && tl == len && !memcmp(txt, out, len),
          "a 34-byte stop string that never occurs ended the stream (%s) after %zu of %zu bytes",
          ilab_finish_reason_name(terminal(&d)->finish), tl, len);
    /* the whole of a long stop string still stops where it occurs */
    char stop2[64];
    memcpy(stop2, out + 1, 32);
    stop2[32] = 0;
    if (strlen(stop2) == 32 && memmem(out, len, stop2, 32) == out + 1) {
        stops[0] = stop2;
        REQUIRE(run(b, &g, &d) == ILAB_OK);
        tl = stream_text(&d, txt);
        CHECK(terminal(&d)->finish == ILAB_FINISH_STOP && tl == 1, "32-byte stop string: finish %s, %zu bytes",
              ilab_finish_reason_name(terminal(&d)->finish), tl);
    }
}

static ilab_backend_t *lag_b;
static void *lag_cancel(void *arg) { A->cancel(lag_b, *(uint64_t *)arg); return NULL; }
static int lag_at = -1;
static void lag_hook(coll *c, const ilab_event_t *e)
{
    if (e->type != ILAB_EVENT_TOKEN || lag_at >= 0) return;
    static uint64_t id;
    id = e->request_id;
    pthread_t th;
    pthread_create(&th, NULL, lag_cancel, &id);
    pthread_join(th, NULL); /* cancel() has returned */
    lag_at = n_tokens_of(c);
}
static void c_str_cancel_lag(void)
{
    ilab_backend_t *b = mk();
    lag_b = b;
    int32_t p[4] = {'c', 'x'};
    greq g; greq_init(&g, p, 2, 20);
    g.r.request_id = 404;
    coll c = {0};
    c.hook = lag_hook;
    REQUIRE(run(b, &g, &c) == ILAB_OK);
    int after = n_tokens_of(&c) - lag_at;
    CHECK(after <= 2 && terminal(&c)->finish == ILAB_FINISH_CANCELLED, "%d TOKEN events after cancel() returned, finish %s", after,
          ilab_finish_reason_name(terminal(&c)->finish));
}

static void c_abi_instance_table(void)
{
    for (int i = 0; i < 200; i++) {
        ilab_config_entry_t c = {"seed", "3"};
        char err[256] = "";
        ilab_backend_t *b = NULL;
        ilab_status st = A->create(&H, &c, 1, err, sizeof err, &b);
        CHECK(st == ILAB_OK, "create/destroy cycle %d: create gave %s (%s)", i, ilab_status_name(st), err);
        if (i % 2) { /* two instances at once, now and then */
            ilab_backend_t *b2 = NULL;
            st = A->create(&H, &c, 1, err, sizeof err, &b2);
            CHECK(st == ILAB_OK, "cycle %d: a second live instance: %s (%s)", i, ilab_status_name(st), err);
            A->destroy(b2);
        }
        A->destroy(b);
    }
}


/* ---- self-checks of the base on wider clauses (not variants; `./driver self_* freshc_base.so`) */
static uint64_t rs = 88172645463325252ull;
static uint64_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }

static void c_self_cache(void)
{
    ilab_backend_t *b = mk();
    int64_t f0 = free_pos(b);
    enum { NS = 6 };
    ilab_seq_t h[NS] = {0};
    int32_t tok[NS][64];
    int len[NS] = {0};
    float *lg = malloc(sizeof(float) * VOC * 40), *ref = malloc(sizeof(float) * VOC);
    for (int step = 0; step < 3000; step++) {
        int i = (int)(rnd() % NS), op = (int)(rnd() % 10);
        if (!h[i]) { h[i] = seq_new(b); len[i] = 0; continue; }
        if (op < 5) {
            int n = 1 + (int)(rnd() % 5);
            if (len[i] + n > CTX) { A->seq_truncate(b, h[i], (int32_t)(rnd() % (len[i] + 1))); len[i] = seq_len(b, h[i]); continue; }
            int32_t t[8];
            for (int k = 0; k < n; k++) t[k] = (int32_t)(rnd() % VOC);
            ilab_batch_item_t it = item(h[i], t, n, ILAB_EVAL_ALL_LOGITS, lg);
            const ilab_batch_item_t *pp = &it;
            ilab_status st = A->eval(b, &pp, 1);
            if (st == ILAB_OUT_OF_MEMORY) { A->seq_free(b, h[i]); h[i] = 0; continue; }
            REQUIRE(st == ILAB_OK);
            for (int k = 0; k < n; k++) {
                tok[i][len[i] + k] = t[k];
                fresh_logits(b, tok[i], len[i] + k + 1, ref);
                CHECK(tol_eq(lg + (size_t)k * VOC, ref, VOC), "self: step %d row %d differs from recompute", step, k);
            }
            len[i] += n;
        } else if (op < 7) {
            int j = (int)(rnd() % NS);
            if (j == i) continue;
            if (h[j]) A->seq_free(b, h[j]);
            ilab_status st = A->seq_fork(b, h[i], &h[j]);
            if (st != ILAB_OK) { h[j] = 0; continue; }
            memcpy(tok[j], tok[i], sizeof tok[i]);
            len[j] = len[i];
        } else if (op < 9) {
            int32_t n = (int32_t)(rnd() % (len[i] + 1));
            REQUIRE(A->seq_truncate(b, h[i], n) == ILAB_OK);
            len[i] = n;
        } else {
            REQUIRE(A->seq_free(b, h[i]) == ILAB_OK);
            h[i] = 0;
        }
        for (int k = 0; k < NS; k++) if (h[k]) CHECK(seq_len(b, h[k]) == len[k], "self: length mismatch");
        int64_t fp = free_pos(b);
        CHECK(fp >= 0 && fp <= f0, "self: free %lld", (long long)fp);
    }
    for (int k = 0; k < NS; k++) if (h[k]) A->seq_free(b, h[k]);
    CHECK(free_pos(b) == f0, "self: all freed, free %lld != %lld", (long long)free_pos(b), (long long)f0);
}

static void c_self_stream(void)
{
    ilab_backend_t *b = mk();
    for (int it = 0; it < 400; it++) {
        int32_t p[40];
        int n = 1 + (int)(rnd() % 30);
        for (int k = 0; k < n; k++) p[k] = (int32_t)(rnd() % VOC);
        greq g; greq_init(&g, p, n, 1 + (int)(rnd() % 40));
        g.s.temperature = (float)(rnd() % 4) * 0.6f;
        g.s.seed = rnd();
        g.r.ignore_eos = (int)(rnd() % 2);
        g.r.request_id = (uint64_t)it;
        g.r.top_logprobs = (int)(rnd() % (TOPK + 1));
        /* first a run without stops, to know the output text */
        coll c = {0};
        REQUIRE(run(b, &g, &c) == ILAB_OK);
        char out[512];
        size_t len = output_text(b, &c, p[n - 1], out);
        char txt[1024];
        size_t tl = stream_text(&c, txt);
        const ev *t = terminal(&c);
        CHECK(tl == len && !memcmp(txt, out, len), "self: text differs from output text (it %d)", it);
        CHECK(t->ct == (uint32_t)n_tokens_of(&c) && t->pt == (uint32_t)n, "self: usage");
        if (t->finish == ILAB_FINISH_LENGTH)
            CHECK(n_tokens_of(&c) == g.r.max_tokens || n_tokens_of(&c) == CTX - n + 1, "self: length with %d tokens", n_tokens_of(&c));
        for (int i = 0; i < c.n; i++) if (c.e[i].type == ILAB_EVENT_TOKEN) {
            CHECK(c.e[i].ntop == g.r.top_logprobs, "self: ntop");
            CHECK(isfinite(c.e[i].lp) && c.e[i].lp <= 0, "self: logprob");
        }
        if (len < 2) continue;
        /* a stop string from the output, maybe longer than a token */
        size_t a = rnd() % len, l = 1 + rnd() % 4;
        if (a + l > len) l = len - a;
        char stop[8];
        memcpy(stop, out + a, l);
        stop[l] = 0;
        if (strlen(stop) != l) continue;
        const char *stops[2] = {stop, "\x01\x02"};
        g.r.stop = stops; g.r.n_stop = 2;
        coll d = {0};
        REQUIRE(run(b, &g, &d) == ILAB_OK);
        /* shortest prefix containing it */
        char *occ = memmem(out, len, stop, l);
        REQUIRE(occ);
        size_t cut = (size_t)(occ - out);
        tl = stream_text(&d, txt);
        CHECK(terminal(&d)->finish == ILAB_FINISH_STOP && tl == cut && !memcmp(txt, out, cut),
              "self: stop \"%s\" cut %zu got %zu", stop, cut, tl);
        size_t total = 0, ends[256]; int ne = 0;
        for (int i = 0; i < d.n; i++) { total += d.e[i].text_len; ends[ne++] = total; }
        for (int i = 0; i < ne; i++) CHECK(!incomplete_at(txt, ends[i], total), "self: split code point");
    }
}

static void c_self_sampling(void)
{
    ilab_backend_t *b = mk();
    for (int k = 0; k < 20; k++) {
        int32_t p[8];
        int n = 1 + (int)(rnd() % 6);
        for (int i = 0; i < n; i++) p[i] = 'a' + (int32_t)(rnd() % 26);
        greq g; greq_init(&g, p, n, 10);
        coll gr = {0}, x = {0};
        REQUIRE(run(b, &g, &gr) == ILAB_OK);
        g.s.temperature = 1.3f; g.s.seed = rnd();
        g.s.top_k = 1; REQUIRE(run(b, &g, &x) == ILAB_OK); CHECK(same_tokens(&gr, &x), "self: top_k 1");
        g.s.top_k = 0; g.s.min_p = 1; REQUIRE(run(b, &g, &x) == ILAB_OK); CHECK(same_tokens(&gr, &x), "self: min_p 1");
        g.s.min_p = 0; g.s.top_p = 1e-6f; REQUIRE(run(b, &g, &x) == ILAB_OK); CHECK(same_tokens(&gr, &x), "self: top_p tiny");
    }
    /* distribution of the first token at T = 0.7 vs softmax(z / T): chi-square over the top tokens */
    int32_t p[2] = {'d', 'i'};
    float *lg = malloc(sizeof(float) * VOC);
    fresh_logits(b, p, 2, lg);
    double *pr = calloc(VOC, sizeof(double)), m = lg[0], s = 0;
    for (int v = 0; v < VOC; v++) m = lg[v] > m ? lg[v] : m;
    for (int v = 0; v < VOC; v++) s += pr[v] = exp((lg[v] - m) / 0.7);
    int *cnt = calloc(VOC, sizeof(int));
    int N = 20000;
    for (int i = 0; i < N; i++) {
        greq g; greq_init(&g, p, 2, 1);
        g.s.temperature = 0.7f; g.s.seed = 1000 + (uint64_t)i * 7919;
        coll c = {0};
        REQUIRE(run(b, &g, &c) == ILAB_OK);
        cnt[c.e[0].token]++;
    }
    double chi = 0, rest_e = 0, rest_o = 0; int df = 0;
    for (int v = 0; v < VOC; v++) {
        double e = N * pr[v] / s;
        if (e >= 5) { chi += (cnt[v] - e) * (cnt[v] - e) / e; df++; }
        else { rest_e += e; rest_o += cnt[v]; }
    }
    if (rest_e > 0) { chi += (rest_o - rest_e) * (rest_o - rest_e) / rest_e; df++; }
    printf("self: chi2 %.1f with %d cells\n", chi, df);
    CHECK(chi < df + 4 * sqrt(2.0 * df) + 10, "self: chi-square %.1f over %d cells", chi, df);
}


static void c_self_null(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t sq = seq_new(b);
    size_t n; int32_t t[4] = {'a'}; char buf[8];
    CHECK(A->model_info(b, NULL) == ILAB_INVALID_ARGUMENT, "mi");
    CHECK(A->tokenize(b, NULL, 3, 0, t, 4, &n) == ILAB_INVALID_ARGUMENT, "tok1");
    CHECK(A->tokenize(b, "a", 1, 0, NULL, 4, &n) == ILAB_INVALID_ARGUMENT, "tok2");
    CHECK(A->tokenize(b, "a", 1, 0, t, 4, NULL) == ILAB_INVALID_ARGUMENT, "tok3");
    CHECK(A->detokenize(b, NULL, 1, buf, 8, &n) == ILAB_INVALID_ARGUMENT, "det1");
    CHECK(A->detokenize(b, t, 1, NULL, 8, &n) == ILAB_INVALID_ARGUMENT, "det2");
    CHECK(A->detokenize(b, t, 1, buf, 8, NULL) == ILAB_INVALID_ARGUMENT, "det3");
    CHECK(A->token_piece(b, -1, 'a', NULL, 8, &n) == ILAB_INVALID_ARGUMENT, "tp1");
    CHECK(A->token_piece(b, -1, 'a', buf, 8, NULL) == ILAB_INVALID_ARGUMENT, "tp2");
    CHECK(A->seq_create(b, NULL) == ILAB_INVALID_ARGUMENT, "sc");
    CHECK(A->seq_free(b, 0) == ILAB_INVALID_ARGUMENT, "sf");
    CHECK(A->seq_fork(b, 0, &sq) == ILAB_INVALID_ARGUMENT, "fork");
    CHECK(A->seq_truncate(b, 0, 0) == ILAB_INVALID_ARGUMENT, "tr");
    CHECK(A->seq_length(b, sq, NULL) == ILAB_INVALID_ARGUMENT, "len");
    CHECK(A->eval(b, NULL, 1) == ILAB_INVALID_ARGUMENT, "ev1");
    const ilab_batch_item_t *np = NULL;
    CHECK(A->eval(b, &np, 1) == ILAB_INVALID_ARGUMENT, "ev2");
    ilab_batch_item_t it = item(sq, NULL, 1, 0, NULL); const ilab_batch_item_t *pp = &it;
    CHECK(A->eval(b, &pp, 1) == ILAB_INVALID_ARGUMENT, "ev3");
    it = item(sq, t, 0, 0, NULL);
    CHECK(A->eval(b, &pp, 1) == ILAB_INVALID_ARGUMENT, "ev4");
    it = item(sq, t, -3, 0, NULL);
    CHECK(A->eval(b, &pp, 1) == ILAB_INVALID_ARGUMENT, "ev5");
    it = item(sq, t, 1, 2, NULL);
    CHECK(A->eval(b, &pp, 1) == ILAB_INVALID_ARGUMENT, "ev6");
    it = item(sq, t, 1, 0, NULL); it.struct_size = 8;
    CHECK(A->eval(b, &pp, 1) == ILAB_ABI_MISMATCH, "ev7");
    CHECK(A->cache_stats(b, NULL) == ILAB_INVALID_ARGUMENT, "cs");
    coll c = {0}; greq g; greq_init(&g, t, 1, 2);
    CHECK(A->generate(b, NULL, on_ev, &c) == ILAB_INVALID_ARGUMENT && c.n == 0, "gen1");
    CHECK(A->generate(b, &g.r, NULL, &c) == ILAB_INVALID_ARGUMENT, "gen2");
    g.r.sampling = NULL; c.n = 0;
    CHECK(A->generate(b, &g.r, on_ev, &c) == ILAB_INVALID_ARGUMENT && c.n == 1, "gen3");
    CHECK(A->cancel(b, 12345) == ILAB_OK, "cancel");
    CHECK(A->last_error(NULL, buf, 8) == 0 && buf[0] == 0, "le");
    A->destroy(NULL);
    char r[64];
    CHECK(A->probe(NULL, NULL, 0, NULL, 0) == ILAB_OK && A->probe(&H, NULL, 0, r, 0) == ILAB_OK, "probe");
    ilab_config_entry_t bad = {"nope", "1"};
    ilab_backend_t *o = NULL;
    CHECK(A->create(&H, &bad, 1, r, sizeof r, &o) == ILAB_INVALID_ARGUMENT && strstr(r, "nope") && !o, "cfg");
    CHECK(A->create(&H, NULL, 0, r, sizeof r, NULL) == ILAB_INVALID_ARGUMENT, "out");
    ilab_model_info_t mi = {.struct_size = 8};
    CHECK(A->model_info(b, &mi) == ILAB_ABI_MISMATCH, "mi size");
    CHECK(lasterr(b, buf, sizeof buf) > 0, "msg");
}


static void c_err_event_msg(void)
{
    ilab_backend_t *b = mk();
    int32_t p[64];
    for (int i = 0; i < 64; i++) p[i] = 'a';
    greq g; greq_init(&g, p, CTX + 1, 3);
    coll c = {0};
    ilab_status st = run(b, &g, &c);
    CHECK(st == ILAB_CONTEXT_OVERFLOW && c.n == 1 && c.e[0].type == ILAB_EVENT_ERROR, "prompt past max_context: %s, %d events",
          ilab_status_name(st), c.n);
    CHECK(c.e[0].msg[0], "ERROR(CONTEXT_OVERFLOW) event with an empty message");
    greq_init(&g, p, 3, 0);
    st = run(b, &g, &c);
    CHECK(c.n == 1 && c.e[0].type == ILAB_EVENT_ERROR && c.e[0].msg[0], "ERROR event for max_tokens 0 without a message");
    greq_init(&g, p, 3, 3);
    g.r.struct_size = 8;
    st = run(b, &g, &c);
    CHECK(st == ILAB_ABI_MISMATCH && c.n == 1 && c.e[0].msg[0], "ERROR(ABI_MISMATCH) event with an empty message");
}

static void c_prb_slow(void)
{
    const char *dev[] = {"cpu", "gpu", "tpu"};
    for (int i = 0; i < 3; i++) {
        ilab_config_entry_t c = {"device", dev[i]};
        char r[256];
        uint64_t t0 = h_now(NULL);
        A->probe(&H, &c, 1, r, sizeof r);
        double sec = (double)(h_now(NULL) - t0) / 1e9;
        CHECK(sec < 2.0, "probe(device=%s) took %.2f s (limit 2 s)", dev[i], sec);
    }
}

/* ===================================================================== main */

typedef struct { const char *name; void (*fn)(void); } case_t;
#define C(x) {#x, c_##x}
static const case_t cases[] = {
    C(abi_minfo_size), C(abi_sampling_tail), C(abi_leak), C(abi_maxctx), C(abi_maxbatch),
    C(prb_reason_nul), C(prb_create_reason), C(prb_memo), C(prb_out_written),
    C(tok_size_eos), C(tok_detok_cap), C(tok_lookahead), C(tok_prev_range), C(tok_flags), C(tok_shared_table),
    C(log_null_skip), C(log_batch_pos), C(log_row_offset), C(log_dup_seq), C(log_mask_inf),
    C(cch_no_cow), C(cch_trunc_nofree), C(cch_trunc_high), C(cch_partial_apply), C(cch_exact_full),
    C(cch_handle_reuse), C(cch_oom_exact), C(cch_free_shared),
    C(str_stop_across), C(str_utf8_split), C(str_eos_counted), C(str_cancel_early), C(str_callback_ignored),
    C(str_held_lost), C(str_maxtok_zero), C(str_cancel_global), C(str_ctx_error), C(str_ctx_usage),
    C(smp_rng_static), C(smp_seed_signed), C(smp_topk_vocab), C(smp_tiny_temp), C(smp_presence_order),
    C(smp_rep_prompt_only), C(smp_freq_partial), C(smp_logprob_scaled), C(smp_topp_empty), C(smp_toplp_cap),
    C(err_msg_stale), C(err_lasterr_len), C(err_fork_null), C(err_cfg_unavail),
    C(thr_lasterr_blocks), C(thr_cancel_blocks),
    C(self_cache), C(self_null), C(self_stream), C(self_sampling),
    C(err_event_msg), C(prb_slow),
    C(tok_long_text), C(tok_piece_query), C(cch_stats_size), C(str_stop_long), C(str_cancel_lag), C(abi_instance_table),
};

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s CASE PLUGIN.so\n", argv[0]);
        return 2;
    }
    const case_t *k = NULL;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (!strcmp(cases[i].name, argv[1])) k = &cases[i];
    if (!k) {
        fprintf(stderr, "unknown case %s\n", argv[1]);
        return 2;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(30);
        load(argv[2]);
        k->fn();
        printf("no violation\n");
        fflush(stdout);
        _exit(1);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    if (WIFSIGNALED(ws)) {
        printf("violation: the plugin crashed or hung (signal %d: %s)\n", WTERMSIG(ws), strsignal(WTERMSIG(ws)));
        return 0;
    }
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 2;
}
