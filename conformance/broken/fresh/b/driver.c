/* driver CASE PLUGIN.so — loads the plugin as a host would and checks the one
 * clause CASE names. Exit 0 and "violation: ..." when the plugin breaks it,
 * exit 1 and "no violation" when it behaves. Each case runs in a child
 * process so a crash is a visible violation rather than a lost driver. */

#include <inferlab/inferlab.h>

#include <dlfcn.h>
#include <elf.h>
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

static const ilab_plugin_entry_t *E;
static const ilab_backend_api_t *A;
static const char *so_path;
static int V, BOSID, EOSID, CTX;

static char vmsg[1024];
static int VIOL(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(vmsg, sizeof vmsg, fmt, ap);
    va_end(ap);
    return 1;
}
#define CHECK(cond, ...) do { if (!(cond)) return VIOL(__VA_ARGS__); } while (0)
#define NEED(cond) do { if (!(cond)) { fprintf(stderr, "driver: setup failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); exit(3); } } while (0)

static ilab_backend_t *mk(void)
{
    ilab_backend_t *b = NULL;
    char err[256];
    NEED(A->create(NULL, NULL, 0, err, sizeof err, &b) == ILAB_OK && b);
    ilab_model_info_t mi = {.struct_size = sizeof mi};
    NEED(A->model_info(b, &mi) == ILAB_OK);
    V = mi.vocab_size, BOSID = mi.bos_id, EOSID = mi.eos_id, CTX = mi.max_context;
    return b;
}

static size_t tok(ilab_backend_t *b, const char *s, int32_t *out, size_t cap)
{
    size_t n = 0;
    NEED(A->tokenize(b, s, strlen(s), 0, out, cap, &n) == ILAB_OK);
    return n;
}

/* --- logits helpers -------------------------------------------------------- */

static ilab_status eval1(ilab_backend_t *b, ilab_seq_t s, const int32_t *t, int n, uint32_t flags, float *logits)
{
    ilab_batch_item_t it = {.struct_size = sizeof it, .seq = s, .tokens = t, .n_tokens = n, .flags = flags, .logits = logits};
    const ilab_batch_item_t *p = &it;
    return A->eval(b, &p, 1);
}

/* logits after the last of t[0..n) in a fresh sequence */
static void fresh(ilab_backend_t *b, const int32_t *t, int n, float *out)
{
    ilab_seq_t s;
    NEED(A->seq_create(b, &s) == ILAB_OK);
    NEED(eval1(b, s, t, n, 0, out) == ILAB_OK);
    NEED(A->seq_free(b, s) == ILAB_OK);
}

static int tol_eq(const float *a, const float *b, int n)
{
    int am = 0, bm = 0;
    for (int i = 0; i < n; i++) {
        if (!(fabsf(a[i] - b[i]) <= 1e-4f + 1e-4f * fabsf(b[i])))
            return 0;
        if (a[i] > a[am]) am = i;
        if (b[i] > b[bm]) bm = i;
    }
    return am == bm;
}

static void log_softmax(const float *z, int n, double *out)
{
    double mx = z[0], s = 0;
    for (int i = 1; i < n; i++) if (z[i] > mx) mx = z[i];
    for (int i = 0; i < n; i++) s += exp((double)z[i] - mx);
    for (int i = 0; i < n; i++) out[i] = (double)z[i] - mx - log(s);
}

/* --- generation helpers ---------------------------------------------------- */

#define MAXEV 1024
typedef struct evrec {
    int type, token, finish, status;
    char text[64];
    size_t text_len;
    float logprob;
    int n_top;
    ilab_logprob_t top[32];
    uint32_t prompt_tokens, completion_tokens;
    char message[256];
} evrec;

typedef struct gen {
    evrec ev[MAXEV];
    int n;
    int stop_after_tokens; /* callback returns 1 on this TOKEN (1-based); 0 never */
    int ntok;
    ilab_status ret;
    /* cancel test */
    int cancel_at;
    int tokens_after_cancel;
    int cancelled_done;
    pthread_mutex_t *mu;
    pthread_cond_t *cv;
    int *flag;
} gen;

static int on_ev(void *ud, const ilab_event_t *e)
{
    gen *g = ud;
    if (g->n < MAXEV) {
        evrec *r = &g->ev[g->n];
        memset(r, 0, sizeof *r);
        r->type = e->type;
        r->token = e->token;
        r->finish = e->finish_reason;
        r->status = e->status;
        r->text_len = e->text_len;
        if (e->text && e->text_len)
            memcpy(r->text, e->text, e->text_len < 64 ? e->text_len : 63);
        r->logprob = e->logprob;
        r->n_top = (int)e->n_top_logprobs;
        for (int i = 0; i < r->n_top && i < 32; i++)
            r->top[i] = e->top_logprobs[i];
        r->prompt_tokens = e->prompt_tokens;
        r->completion_tokens = e->completion_tokens;
        if (e->message)
            snprintf(r->message, sizeof r->message, "%s", e->message);
    }
    g->n++;
    if (e->type == ILAB_EVENT_TOKEN) {
        g->ntok++;
        if (g->cancelled_done)
            g->tokens_after_cancel++;
        if (g->cancel_at && g->ntok == g->cancel_at) {
            pthread_mutex_lock(g->mu);
            *g->flag = 1;
            pthread_cond_broadcast(g->cv);
            while (*g->flag != 2)
                pthread_cond_wait(g->cv, g->mu);
            pthread_mutex_unlock(g->mu);
            g->cancelled_done = 1;
        }
        if (g->stop_after_tokens && g->ntok == g->stop_after_tokens)
            return 1;
    }
    return 0;
}

typedef struct req {
    ilab_generate_request_t r;
    ilab_sampling_t s;
} req;

static void req_init(req *q, const int32_t *prompt, size_t n, int max_tokens)
{
    memset(q, 0, sizeof *q);
    q->s.struct_size = sizeof q->s;
    q->s.temperature = 0;
    q->s.top_p = 1;
    q->s.repetition_penalty = 1;
    q->r.struct_size = sizeof q->r;
    q->r.request_id = 1;
    q->r.prompt_tokens = prompt;
    q->r.n_prompt_tokens = n;
    q->r.sampling = &q->s;
    q->r.max_tokens = max_tokens;
    q->r.ignore_eos = 1;
}

static void run(ilab_backend_t *b, req *q, gen *g)
{
    memset(g, 0, offsetof(gen, mu));
    g->ret = A->generate(b, &q->r, on_ev, g);
}

static int ntokens(const gen *g)
{
    int n = 0;
    for (int i = 0; i < g->n; i++) n += g->ev[i].type == ILAB_EVENT_TOKEN;
    return n;
}

static const evrec *terminal(const gen *g) { return g->n ? &g->ev[g->n - 1] : NULL; }

/* the stream's text: TOKEN texts then FINISH text */
static size_t stream_text(const gen *g, char *out)
{
    size_t n = 0;
    for (int i = 0; i < g->n; i++) {
        memcpy(out + n, g->ev[i].text, g->ev[i].text_len);
        n += g->ev[i].text_len;
    }
    out[n] = 0;
    return n;
}

static size_t piece(ilab_backend_t *b, int32_t prev, int32_t t, char *out)
{
    size_t n = 0;
    NEED(A->token_piece(b, prev, t, out, 64, &n) == ILAB_OK);
    return n;
}

/* output text of tokens t[0..n) after prompt's last token prev0 */
static size_t out_text(ilab_backend_t *b, int32_t prev0, const int32_t *t, int n, char *out, size_t *ends)
{
    size_t len = 0;
    int32_t prev = prev0;
    for (int i = 0; i < n; i++) {
        len += piece(b, prev, t[i], out + len);
        prev = t[i];
        if (ends) ends[i] = len;
    }
    out[len] = 0;
    return len;
}

static int gen_tokens(const gen *g, int32_t *t)
{
    int n = 0;
    for (int i = 0; i < g->n; i++)
        if (g->ev[i].type == ILAB_EVENT_TOKEN) t[n++] = g->ev[i].token;
    return n;
}

/* --- ABI -------------------------------------------------------------------- */

static int c_minfo_size(void)
{
    ilab_backend_t *b = mk();
    unsigned char buf[sizeof(ilab_model_info_t) + 32];
    memset(buf, 0xab, sizeof buf);
    ilab_model_info_t *mi = (ilab_model_info_t *)buf;
    mi->struct_size = sizeof buf;
    CHECK(A->model_info(b, mi) == ILAB_OK, "model_info with a larger struct failed");
    CHECK(mi->struct_size == sizeof buf, "model_info rewrote struct_size %zu to %u", sizeof buf, mi->struct_size);
    for (size_t i = sizeof(ilab_model_info_t); i < sizeof buf; i++)
        CHECK(buf[i] == 0xab, "model_info wrote byte %zu past its sizeof", i);
    A->destroy(b);
    return 0;
}

static int c_sampling_tail(void)
{
    ilab_backend_t *b = mk();
    int32_t p[8];
    size_t n = tok(b, "hello", p, 8);
    req q;
    req_init(&q, p, n, 4);
    struct { ilab_sampling_t s; uint64_t extra; } big;
    memset(&big, 0, sizeof big);
    big.s = q.s;
    big.s.struct_size = sizeof big;
    big.extra = 7;
    q.r.sampling = &big.s;
    gen g;
    run(b, &q, &g);
    CHECK(g.n == 1 && g.ev[0].type == ILAB_EVENT_ERROR && g.ev[0].status == ILAB_ABI_MISMATCH,
          "a sampling struct with a non-zero unknown tail was accepted (%d events, first type %d)", g.n, g.n ? g.ev[0].type : 0);
    CHECK(g.ret == ILAB_ABI_MISMATCH, "generate returned %d", g.ret);
    A->destroy(b);
    return 0;
}

static int c_req_short(void)
{
    ilab_backend_t *b = mk();
    int32_t p[8];
    size_t n = tok(b, "hello", p, 8);
    req q;
    req_init(&q, p, n, 4);
    q.r.struct_size = offsetof(ilab_generate_request_t, top_logprobs);
    gen g;
    run(b, &q, &g);
    CHECK(g.n == 1 && g.ev[0].type == ILAB_EVENT_ERROR && g.ev[0].status == ILAB_ABI_MISMATCH,
          "a request with struct_size %u < ABI 1.0's %zu was run (%d events)", q.r.struct_size, sizeof q.r, g.n);
    A->destroy(b);
    return 0;
}

static int c_weak_hook(void)
{
    FILE *f = fopen(so_path, "rb");
    NEED(f);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *d = malloc((size_t)sz);
    NEED(fread(d, 1, (size_t)sz, f) == (size_t)sz);
    fclose(f);
    Elf64_Ehdr *eh = (Elf64_Ehdr *)d;
    Elf64_Shdr *sh = (Elf64_Shdr *)(d + eh->e_shoff);
    static const char *ok[] = {"__gmon_start__", "__cxa_finalize", "_ITM_registerTMCloneTable", "_ITM_deregisterTMCloneTable"};
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_DYNSYM)
            continue;
        Elf64_Sym *sym = (Elf64_Sym *)(d + sh[i].sh_offset);
        const char *str = (const char *)(d + sh[sh[i].sh_link].sh_offset);
        size_t cnt = sh[i].sh_size / sizeof *sym;
        for (size_t k = 1; k < cnt; k++) {
            const char *name = str + sym[k].st_name;
            if (sym[k].st_shndx == SHN_UNDEF && ELF64_ST_BIND(sym[k].st_info) == STB_WEAK) {
                int allowed = 0;
                for (size_t j = 0; j < sizeof ok / sizeof *ok; j++)
                    allowed |= !strcmp(name, ok[j]);
                CHECK(allowed, "undefined weak symbol '%s' in the dynamic symbol table", name);
            }
        }
    }
    free(d);
    return 0;
}

static int manifest_value(const char *key, char *out, size_t cap)
{
    const char *m = E->manifest_yaml;
    size_t kl = strlen(key);
    for (const char *l = m; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (!strncmp(l, key, kl) && l[kl] == ':') {
            const char *v = l + kl + 1;
            while (*v == ' ') v++;
            size_t n = strcspn(v, "\n");
            snprintf(out, cap, "%.*s", (int)n, v);
            return 1;
        }
    }
    return 0;
}

static int c_manifest_version(void)
{
    char v[64], name[64], abi[16], want[16];
    NEED(manifest_value("version", v, sizeof v) && manifest_value("name", name, sizeof name) &&
         manifest_value("abi", abi, sizeof abi));
    CHECK(!strcmp(v, E->version), "manifest version '%s' but entry version '%s'", v, E->version);
    CHECK(!strcmp(name, E->name), "manifest name '%s' but entry name '%s'", name, E->name);
    snprintf(want, sizeof want, "%u.%u", E->abi_major, E->abi_minor);
    CHECK(!strcmp(abi, want), "manifest abi '%s' but entry %s", abi, want);
    return 0;
}

static int c_maxbatch_off1(void)
{
    ilab_backend_t *b = mk();
    /* max_batch from the manifest: "batching: {max_batch: N}" */
    const char *p = strstr(E->manifest_yaml, "max_batch:");
    NEED(p);
    int mb = atoi(p + 10);
    NEED(mb >= 1 && mb <= 64);
    ilab_batch_item_t it[64];
    const ilab_batch_item_t *pp[64];
    int32_t t = 'a';
    for (int i = 0; i < mb; i++) {
        ilab_seq_t s;
        NEED(A->seq_create(b, &s) == ILAB_OK);
        it[i] = (ilab_batch_item_t){.struct_size = sizeof it[i], .seq = s, .tokens = &t, .n_tokens = 1};
        pp[i] = &it[i];
    }
    ilab_status st = A->eval(b, pp, (size_t)mb);
    CHECK(st == ILAB_OK, "eval of exactly max_batch=%d items gave %s", mb, ilab_status_name(st));
    A->destroy(b);
    return 0;
}

static size_t live_heap(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

static int c_destroy_leak(void)
{
    for (int i = 0; i < 3; i++)
        A->destroy(mk());
    size_t before = live_heap();
    for (int i = 0; i < 20; i++) {
        ilab_backend_t *b = mk();
        int32_t p[8];
        tok(b, "hello", p, 8);
        A->destroy(b);
    }
    size_t after = live_heap();
    CHECK(after <= before, "live heap grew by %zu bytes over 20 create/destroy cycles", after - before);
    return 0;
}

static int c_minfo_small_writes(void)
{
    ilab_backend_t *b = mk();
    unsigned char buf[sizeof(ilab_model_info_t)];
    for (uint32_t sz = 0; sz < sizeof(ilab_model_info_t); sz += 4) {
        memset(buf, 0xab, sizeof buf);
        memcpy(buf, &sz, 4);
        ilab_status st = A->model_info(b, (ilab_model_info_t *)buf);
        CHECK(st == ILAB_ABI_MISMATCH, "model_info with struct_size %u gave %s", sz, ilab_status_name(st));
        for (size_t i = 4; i < sizeof buf; i++)
            CHECK(buf[i] == 0xab, "model_info with struct_size %u wrote byte %zu", sz, i);
    }
    A->destroy(b);
    return 0;
}

/* --- PRB -------------------------------------------------------------------- */

static const ilab_config_entry_t accel_cfg[] = {{"device", "accel"}};

static int c_reason_overflow(void)
{
    for (size_t cap = 1; cap < 24; cap++) {
        char buf[64];
        memset(buf, 'Z', sizeof buf);
        ilab_status st = A->probe(NULL, accel_cfg, 1, buf, cap);
        CHECK(st == ILAB_UNAVAILABLE, "probe(device=accel) gave %s", ilab_status_name(st));
        for (size_t i = cap; i < sizeof buf; i++)
            CHECK(buf[i] == 'Z', "probe wrote byte %zu with reason_cap %zu", i, cap);
        CHECK(memchr(buf, 0, cap) != NULL, "reason not NUL-terminated within cap %zu", cap);
    }
    return 0;
}

static int c_create_reason(void)
{
    char r1[256], r2[256];
    ilab_status st = A->probe(NULL, accel_cfg, 1, r1, sizeof r1);
    NEED(st == ILAB_UNAVAILABLE);
    ilab_backend_t *b = (ilab_backend_t *)0x1;
    st = A->create(NULL, accel_cfg, 1, r2, sizeof r2, &b);
    CHECK(st == ILAB_UNAVAILABLE, "create of an unavailable config gave %s", ilab_status_name(st));
    CHECK(b == (ilab_backend_t *)0x1, "create wrote *out");
    CHECK(!strcmp(r1, r2), "probe said '%s' but create said '%s'", r1, r2);
    return 0;
}

static int c_probe_stateful(void)
{
    char r0[256];
    ilab_status s0 = A->probe(NULL, accel_cfg, 1, r0, sizeof r0);
    for (int i = 0; i < 4; i++) {
        char r[256];
        ilab_status s = A->probe(NULL, accel_cfg, 1, r, sizeof r);
        CHECK(s == s0 && !strcmp(r, r0), "probe call %d gave %s '%s', the first %s '%s'", i + 2,
              ilab_status_name(s), r, ilab_status_name(s0), r0);
    }
    return 0;
}

static int c_probe_ok_unterminated(void)
{
    for (size_t cap = 1; cap < 8; cap++) {
        char buf[16];
        memset(buf, 'Z', sizeof buf);
        ilab_status st = A->probe(NULL, NULL, 0, buf, cap);
        NEED(st == ILAB_OK);
        CHECK(memchr(buf, 0, cap) != NULL, "probe OK left reason (cap %zu) without a NUL", cap);
    }
    return 0;
}

static int c_probe_bad_device(void)
{
    ilab_config_entry_t cfg[] = {{"device", "gpu0"}};
    char r[256] = "";
    ilab_status st = A->probe(NULL, cfg, 1, r, sizeof r);
    CHECK(st == ILAB_INVALID_ARGUMENT, "probe with device='gpu0' (a value the plugin rejects) gave %s '%s'",
          ilab_status_name(st), r);
    CHECK(r[0], "empty reason");
    return 0;
}

/* --- TOK -------------------------------------------------------------------- */

static int c_size_query_eos(void)
{
    ilab_backend_t *b = mk();
    const char *s = "hello there";
    int32_t t[64];
    size_t base = tok(b, s, t, 64);
    uint32_t fl[] = {ILAB_TOKENIZE_ADD_BOS, ILAB_TOKENIZE_ADD_EOS, ILAB_TOKENIZE_ADD_BOS | ILAB_TOKENIZE_ADD_EOS};
    for (int i = 0; i < 3; i++) {
        size_t want = base + !!(fl[i] & 1) + !!(fl[i] & 2), n = 0;
        ilab_status st = A->tokenize(b, s, strlen(s), fl[i], NULL, 0, &n);
        CHECK(st == ILAB_BUFFER_TOO_SMALL && n == want, "size query with flags %u gave %s, %zu (want %zu)", fl[i],
              ilab_status_name(st), n, want);
    }
    A->destroy(b);
    return 0;
}

static int c_detok_exact_cap(void)
{
    ilab_backend_t *b = mk();
    int32_t t[16];
    size_t n = tok(b, "abc xyz", t, 16);
    char buf[32];
    size_t len = 0;
    NEED(A->detokenize(b, t, n, buf, sizeof buf, &len) == ILAB_OK);
    for (size_t cap = 0; cap <= len; cap++) {
        memset(buf, 'Z', sizeof buf);
        size_t l2 = 0;
        ilab_status st = A->detokenize(b, t, n, buf, cap, &l2);
        CHECK(st == ILAB_BUFFER_TOO_SMALL && l2 == len, "detokenize with cap %zu (len %zu) gave %s", cap, len,
              ilab_status_name(st));
        for (size_t i = 0; i < sizeof buf; i++)
            CHECK(buf[i] == 'Z', "detokenize with cap %zu wrote byte %zu", cap, i);
    }
    A->destroy(b);
    return 0;
}

static int c_piece_prev_range(void)
{
    ilab_backend_t *b = mk();
    int32_t bad[] = {-2, -100, INT32_MIN};
    for (int i = 0; i < 3; i++) {
        char buf[16];
        memset(buf, 'Z', sizeof buf);
        size_t len = 99;
        ilab_status st = A->token_piece(b, bad[i], 'a', buf, sizeof buf, &len);
        CHECK(st == ILAB_INVALID_ARGUMENT, "token_piece(prev=%d) gave %s", bad[i], ilab_status_name(st));
        CHECK(buf[0] == 'Z' && len == 99, "token_piece(prev=%d) wrote output", bad[i]);
    }
    A->destroy(b);
    return 0;
}

static int roundtrip(ilab_backend_t *b, const char *s, size_t n)
{
    int32_t t[256];
    size_t nt = 0;
    NEED(A->tokenize(b, s, n, 0, t, 256, &nt) == ILAB_OK);
    char out[512];
    size_t len = 0;
    NEED(A->detokenize(b, t, nt, out, sizeof out, &len) == ILAB_OK);
    return len == n && !memcmp(out, s, n);
}

static int c_crlf(void)
{
    ilab_backend_t *b = mk();
    const char *cases[] = {"line one\r\nline two\r\n", "a\r\n\r\nb", "\r\n", "tab\there  and\n\nnewlines"};
    for (int i = 0; i < 4; i++)
        CHECK(roundtrip(b, cases[i], strlen(cases[i])), "detokenize(tokenize(s)) != s for case %d", i);
    A->destroy(b);
    return 0;
}

static int c_eos_piece(void)
{
    ilab_backend_t *b = mk();
    int32_t prevs[] = {-1, 'a', BOSID, EOSID};
    for (int i = 0; i < 4; i++) {
        char buf[32];
        size_t len = 99;
        NEED(A->token_piece(b, prevs[i], EOSID, buf, sizeof buf, &len) == ILAB_OK);
        CHECK(len == 0, "token_piece(%d, EOS) is '%.*s', not empty", prevs[i], (int)len, buf);
        NEED(A->token_piece(b, prevs[i], BOSID, buf, sizeof buf, &len) == ILAB_OK);
        CHECK(len == 0, "token_piece(%d, BOS) is '%.*s', not empty", prevs[i], (int)len, buf);
    }
    A->destroy(b);
    return 0;
}

static int c_piece_space(void)
{
    ilab_backend_t *b = mk();
    const char *cases[] = {" hello", "  two spaces", "x y", " "};
    for (int i = 0; i < 4; i++) {
        int32_t t[64];
        size_t n = tok(b, cases[i], t, 64);
        char a[256], d[256];
        size_t la = out_text(b, -1, t, (int)n, a, NULL), ld = 0;
        NEED(A->detokenize(b, t, n, d, sizeof d, &ld) == ILAB_OK);
        CHECK(la == ld && !memcmp(a, d, la), "pieces of '%s' give '%s', detokenize '%s'", cases[i], a, d);
    }
    A->destroy(b);
    return 0;
}

static int c_flags_high(void)
{
    ilab_backend_t *b = mk();
    for (int bit = 2; bit < 32; bit++) {
        int32_t t[16];
        size_t n = 0;
        ilab_status st = A->tokenize(b, "abc", 3, 1u << bit, t, 16, &n);
        CHECK(st == ILAB_INVALID_ARGUMENT, "tokenize with flag bit %d gave %s", bit, ilab_status_name(st));
    }
    A->destroy(b);
    return 0;
}

/* --- LOG -------------------------------------------------------------------- */

static int c_allrows_shift(void)
{
    ilab_backend_t *b = mk();
    int32_t t[64];
    int n = (int)tok(b, "hello world", t, 64);
    ilab_seq_t s;
    NEED(A->seq_create(b, &s) == ILAB_OK);
    NEED(eval1(b, s, t, 4, 0, NULL) == ILAB_OK);
    float *rows = malloc(sizeof(float) * (size_t)V * (size_t)n);
    NEED(eval1(b, s, t + 4, n - 4, ILAB_EVAL_ALL_LOGITS, rows) == ILAB_OK);
    float *f = malloc(sizeof(float) * (size_t)V);
    for (int i = 0; i < n - 4; i++) {
        fresh(b, t, 4 + i + 1, f);
        CHECK(tol_eq(rows + (size_t)i * V, f, V), "ALL_LOGITS row %d differs from a fresh sequence's logits", i);
    }
    A->destroy(b);
    return 0;
}

static int c_null_logits(void)
{
    ilab_backend_t *b = mk();
    int32_t t[64];
    int n = (int)tok(b, "hello world", t, 64);
    ilab_seq_t s;
    NEED(A->seq_create(b, &s) == ILAB_OK);
    NEED(eval1(b, s, t, n, 0, NULL) == ILAB_OK);
    int32_t len = -1;
    NEED(A->seq_length(b, s, &len) == ILAB_OK);
    CHECK(len == n, "eval of %d tokens with logits NULL left length %d", n, len);
    A->destroy(b);
    return 0;
}

static int c_row_overrun(void)
{
    ilab_backend_t *b = mk();
    int32_t t[64];
    int n = (int)tok(b, "hello", t, 64);
    ilab_seq_t s;
    NEED(A->seq_create(b, &s) == ILAB_OK);
    size_t cap = (size_t)V * (size_t)n;
    float *buf = malloc(sizeof(float) * cap);
    for (size_t i = 0; i < cap; i++) buf[i] = -12345.0f;
    NEED(eval1(b, s, t, n, 0, buf) == ILAB_OK);
    for (size_t i = (size_t)V; i < cap; i++)
        CHECK(buf[i] == -12345.0f, "eval without ALL_LOGITS wrote float %zu, past its one row", i);
    float *f = malloc(sizeof(float) * (size_t)V);
    fresh(b, t, n, f);
    CHECK(tol_eq(buf, f, V), "the one row is not the logits after the last token");
    A->destroy(b);
    return 0;
}

static int c_batch_pos(void)
{
    ilab_backend_t *b = mk();
    int32_t ta[64], tb[64];
    int na = (int)tok(b, "abc", ta, 64), nb = (int)tok(b, "hello world", tb, 64);
    ilab_seq_t sa, sb;
    NEED(A->seq_create(b, &sa) == ILAB_OK && A->seq_create(b, &sb) == ILAB_OK);
    NEED(eval1(b, sa, ta, na - 1, 0, NULL) == ILAB_OK && eval1(b, sb, tb, nb - 1, 0, NULL) == ILAB_OK);
    float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V), *f = malloc(sizeof(float) * V);
    ilab_batch_item_t ia = {.struct_size = sizeof ia, .seq = sa, .tokens = ta + na - 1, .n_tokens = 1, .logits = la};
    ilab_batch_item_t ib = {.struct_size = sizeof ib, .seq = sb, .tokens = tb + nb - 1, .n_tokens = 1, .logits = lb};
    const ilab_batch_item_t *pp[2] = {&ia, &ib};
    NEED(A->eval(b, pp, 2) == ILAB_OK);
    fresh(b, ta, na, f);
    CHECK(tol_eq(la, f, V), "item 0 of a batch differs from its logits alone");
    fresh(b, tb, nb, f);
    CHECK(tol_eq(lb, f, V), "item 1 of a batch (a longer sequence) differs from its logits alone");
    A->destroy(b);
    return 0;
}

static int c_dup_seq(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t s;
    NEED(A->seq_create(b, &s) == ILAB_OK);
    int32_t x = 'x', y = 'y';
    ilab_batch_item_t i1 = {.struct_size = sizeof i1, .seq = s, .tokens = &x, .n_tokens = 1};
    ilab_batch_item_t i2 = {.struct_size = sizeof i2, .seq = s, .tokens = &y, .n_tokens = 1};
    const ilab_batch_item_t *pp[2] = {&i1, &i2};
    ilab_status st = A->eval(b, pp, 2);
    int32_t len = -1;
    NEED(A->seq_length(b, s, &len) == ILAB_OK);
    CHECK(st == ILAB_INVALID_ARGUMENT && len == 0, "a batch naming one sequence twice gave %s, length %d",
          ilab_status_name(st), len);
    A->destroy(b);
    return 0;
}

static int c_topk_count(void)
{
    ilab_backend_t *b = mk();
    int32_t p[16];
    size_t n = tok(b, "the cat", p, 16);
    for (int k = 1; k <= 20; k++) {
        req q;
        req_init(&q, p, n, 3);
        q.r.top_logprobs = k;
        gen g;
        run(b, &q, &g);
        NEED(g.ret == ILAB_OK);
        for (int i = 0; i < g.n; i++)
            if (g.ev[i].type == ILAB_EVENT_TOKEN)
                CHECK(g.ev[i].n_top == k, "top_logprobs %d gave %d entries", k, g.ev[i].n_top);
    }
    A->destroy(b);
    return 0;
}

static int c_neg_ntokens(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t s;
    NEED(A->seq_create(b, &s) == ILAB_OK);
    int32_t t[4] = {'a', 'b', 'c', 'd'};
    int bad[] = {-1, -5, 0};
    for (int i = 0; i < 3; i++) {
        ilab_status st = eval1(b, s, t, bad[i], 0, NULL);
        CHECK(st == ILAB_INVALID_ARGUMENT, "an item with n_tokens %d gave %s", bad[i], ilab_status_name(st));
    }
    A->destroy(b);
    return 0;
}

/* --- CCH -------------------------------------------------------------------- */

static int seq_logits_eq(ilab_backend_t *b, ilab_seq_t s, int32_t next, const int32_t *hist, int nh, const char *what)
{
    float *l = malloc(sizeof(float) * V), *f = malloc(sizeof(float) * V);
    NEED(eval1(b, s, &next, 1, 0, l) == ILAB_OK);
    int32_t all[512];
    memcpy(all, hist, sizeof(int32_t) * (size_t)nh);
    all[nh] = next;
    fresh(b, all, nh + 1, f);
    int ok = tol_eq(l, f, V);
    free(l), free(f);
    if (!ok)
        VIOL("%s: logits differ from a fresh sequence with the same tokens", what);
    return !ok;
}

static int c_fork_cow(void)
{
    ilab_backend_t *b = mk();
    int32_t h[64], c1[8], p1[8];
    int nh = (int)tok(b, "hello", h, 64);
    int nc = (int)tok(b, "abc", c1, 8), np = (int)tok(b, "xyz", p1, 8);
    ilab_seq_t par, ch;
    NEED(A->seq_create(b, &par) == ILAB_OK && eval1(b, par, h, nh, 0, NULL) == ILAB_OK);
    NEED(A->seq_fork(b, par, &ch) == ILAB_OK);
    NEED(eval1(b, ch, c1, nc, 0, NULL) == ILAB_OK);
    NEED(eval1(b, par, p1, np, 0, NULL) == ILAB_OK);
    int32_t hist[64];
    memcpy(hist, h, sizeof(int32_t) * nh);
    memcpy(hist + nh, c1, sizeof(int32_t) * nc);
    if (seq_logits_eq(b, ch, 'd', hist, nh + nc, "forked child after parent appended"))
        return 1;
    A->destroy(b);
    return 0;
}

static int c_trunc_floor(void)
{
    ilab_backend_t *b = mk();
    int32_t h[64];
    int nh = (int)tok(b, "hello world, again", h, 64);
    for (int keep = 1; keep < nh; keep++) {
        ilab_seq_t s;
        NEED(A->seq_create(b, &s) == ILAB_OK && eval1(b, s, h, nh, 0, NULL) == ILAB_OK);
        NEED(A->seq_truncate(b, s, keep) == ILAB_OK);
        char what[64];
        snprintf(what, sizeof what, "truncate to %d then append", keep);
        if (seq_logits_eq(b, s, 'Q', h, keep, what))
            return 1;
        NEED(A->seq_free(b, s) == ILAB_OK);
    }
    A->destroy(b);
    return 0;
}

static int c_trunc_tidy(void)
{
    ilab_backend_t *b = mk();
    int32_t h[64];
    int nh = (int)tok(b, "hello world", h, 64);
    ilab_seq_t par, ch;
    NEED(A->seq_create(b, &par) == ILAB_OK && eval1(b, par, h, nh, 0, NULL) == ILAB_OK);
    NEED(A->seq_fork(b, par, &ch) == ILAB_OK);
    NEED(A->seq_truncate(b, ch, 3) == ILAB_OK);
    if (seq_logits_eq(b, par, '!', h, nh, "parent after its child was truncated"))
        return 1;
    A->destroy(b);
    return 0;
}

static int c_overflow_partial(void)
{
    ilab_backend_t *b = mk();
    int32_t t[1024];
    for (int i = 0; i < CTX; i++) t[i] = 'a' + i % 26;
    int fill = CTX - 6;
    ilab_seq_t s;
    NEED(A->seq_create(b, &s) == ILAB_OK && eval1(b, s, t, fill, 0, NULL) == ILAB_OK);
    ilab_status st = eval1(b, s, t, 10, 0, NULL);
    int32_t len = -1;
    NEED(A->seq_length(b, s, &len) == ILAB_OK);
    CHECK(st == ILAB_CONTEXT_OVERFLOW, "a prefill of 10 at length %d of %d gave %s", fill, CTX, ilab_status_name(st));
    CHECK(len == fill, "the refused prefill changed the length from %d to %d", fill, len);
    A->destroy(b);
    return 0;
}

static int c_all_or_nothing(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t s1, s2;
    NEED(A->seq_create(b, &s1) == ILAB_OK && A->seq_create(b, &s2) == ILAB_OK);
    int32_t good[] = {'a', 'b'}, bad[] = {'c', 99999};
    ilab_batch_item_t i1 = {.struct_size = sizeof i1, .seq = s1, .tokens = good, .n_tokens = 2};
    ilab_batch_item_t i2 = {.struct_size = sizeof i2, .seq = s2, .tokens = bad, .n_tokens = 2};
    const ilab_batch_item_t *pp[2] = {&i1, &i2};
    ilab_status st = A->eval(b, pp, 2);
    int32_t l1 = -1, l2 = -1;
    NEED(A->seq_length(b, s1, &l1) == ILAB_OK && A->seq_length(b, s2, &l2) == ILAB_OK);
    CHECK(st == ILAB_INVALID_ARGUMENT, "a batch with a bad last item gave %s", ilab_status_name(st));
    CHECK(l1 == 0 && l2 == 0, "the refused batch changed lengths to %d, %d", l1, l2);
    A->destroy(b);
    return 0;
}

static int c_handle_reuse(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t seen[64];
    for (int i = 0; i < 64; i++) {
        NEED(A->seq_create(b, &seen[i]) == ILAB_OK);
        for (int j = 0; j < i; j++)
            CHECK(seen[j] != seen[i], "seq_create reissued handle %#llx", (unsigned long long)seen[i]);
        NEED(A->seq_free(b, seen[i]) == ILAB_OK);
        int32_t len;
        ilab_status st = A->seq_length(b, seen[i], &len);
        CHECK(st == ILAB_INVALID_ARGUMENT, "a freed handle gave %s in seq_length", ilab_status_name(st));
    }
    A->destroy(b);
    return 0;
}

static int c_fork_oom_status(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t s, first = 0;
    int n = 0;
    ilab_status st;
    while ((st = A->seq_create(b, &s)) == ILAB_OK && n < 100000) {
        if (!first) first = s;
        n++;
    }
    CHECK(st == ILAB_OUT_OF_MEMORY, "seq_create with no slot left gave %s", ilab_status_name(st));
    ilab_seq_t c;
    st = A->seq_fork(b, first, &c);
    CHECK(st == ILAB_OUT_OF_MEMORY, "seq_fork with no slot left gave %s", ilab_status_name(st));
    A->destroy(b);
    return 0;
}

static int c_chunk_pos(void)
{
    ilab_backend_t *b = mk();
    int32_t h[64];
    int nh = (int)tok(b, "hello world, chunked", h, 64);
    ilab_seq_t s;
    NEED(A->seq_create(b, &s) == ILAB_OK);
    NEED(eval1(b, s, h, 5, 0, NULL) == ILAB_OK);
    float *l = malloc(sizeof(float) * V), *f = malloc(sizeof(float) * V);
    NEED(eval1(b, s, h + 5, nh - 5, 0, l) == ILAB_OK);
    fresh(b, h, nh, f);
    CHECK(tol_eq(l, f, V), "a second chunk of %d tokens gives other logits than the prompt in one call", nh - 5);
    A->destroy(b);
    return 0;
}

static int c_decode_boundary(void)
{
    ilab_backend_t *b = mk();
    int32_t h[64];
    int nh = (int)tok(b, "hello world, this is a longer prompt", h, 64);
    ilab_seq_t s;
    NEED(A->seq_create(b, &s) == ILAB_OK);
    for (int i = 0; i < nh - 1; i++) {
        char what[64];
        snprintf(what, sizeof what, "decode at position %d", i);
        if (seq_logits_eq(b, s, h[i], h, i, what))
            return 1;
    }
    A->destroy(b);
    return 0;
}

static int c_free_shared_leak(void)
{
    ilab_backend_t *b = mk();
    int32_t h[8];
    int nh = (int)tok(b, "hello", h, 8);
    for (int i = 0; i < 2000; i++) {
        ilab_seq_t p, c;
        NEED(A->seq_create(b, &p) == ILAB_OK);
        ilab_status st = eval1(b, p, h, nh, 0, NULL);
        CHECK(st == ILAB_OK, "cycle %d of create/eval/fork/free: eval gave %s", i, ilab_status_name(st));
        NEED(A->seq_fork(b, p, &c) == ILAB_OK);
        NEED(A->seq_free(b, p) == ILAB_OK && A->seq_free(b, c) == ILAB_OK);
    }
    A->destroy(b);
    return 0;
}

static int c_batch_h_leak(void)
{
    ilab_backend_t *b = mk();
    int32_t ta[64], tb[64];
    int na = (int)tok(b, "first sequence", ta, 64), nb = (int)tok(b, "second", tb, 64);
    ilab_seq_t sa, sb;
    NEED(A->seq_create(b, &sa) == ILAB_OK && A->seq_create(b, &sb) == ILAB_OK);
    NEED(eval1(b, sa, ta, na - 1, 0, NULL) == ILAB_OK);
    float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V), *f = malloc(sizeof(float) * V);
    ilab_batch_item_t ia = {.struct_size = sizeof ia, .seq = sa, .tokens = ta + na - 1, .n_tokens = 1, .logits = la};
    ilab_batch_item_t ib = {.struct_size = sizeof ib, .seq = sb, .tokens = tb, .n_tokens = nb, .logits = lb};
    const ilab_batch_item_t *pp[2] = {&ia, &ib};
    NEED(A->eval(b, pp, 2) == ILAB_OK);
    fresh(b, ta, na, f);
    CHECK(tol_eq(la, f, V), "sequence A decoded beside B's prefill differs from A alone");
    fresh(b, tb, nb, f);
    CHECK(tol_eq(lb, f, V), "sequence B prefilled after A's decode in one batch differs from B alone");
    A->destroy(b);
    return 0;
}

/* --- STR -------------------------------------------------------------------- */

/* greedy run with ignore_eos: tokens and output text */
static int greedy_ref(ilab_backend_t *b, const int32_t *p, size_t n, int max, int32_t *t, char *text, size_t *ends)
{
    req q;
    req_init(&q, p, n, max);
    static gen g;
    run(b, &q, &g);
    NEED(g.ret == ILAB_OK);
    int nt = gen_tokens(&g, t);
    out_text(b, p[n - 1], t, nt, text, ends);
    return nt;
}

static int check_stop_string(void)
{
    ilab_backend_t *b = mk();
    int32_t p[16];
    size_t n = tok(b, "the cat", p, 16);
    int32_t t[64];
    char text[256];
    size_t ends[64];
    int nt = greedy_ref(b, p, n, 40, t, text, ends);
    int tried = 0;
    for (int k = 1; k < nt && tried < 6; k++) {
        size_t e = ends[k - 1];
        if (e == 0 || ends[k] == e || (k >= 2 && ends[k - 2] == e))
            continue;
        char stop[3] = {text[e - 1], text[e], 0};
        if (!stop[0] || !stop[1])
            continue;
        char *occ = strstr(text, stop);
        if (!occ || (size_t)(occ - text) != e - 1)
            continue;
        tried++;
        req q;
        req_init(&q, p, n, 40);
        const char *stops[] = {stop};
        q.r.stop = stops;
        q.r.n_stop = 1;
        static gen g;
        run(b, &q, &g);
        char st[512];
        size_t sl = stream_text(&g, st);
        const evrec *fin = terminal(&g);
        CHECK(fin && fin->type == ILAB_EVENT_FINISH && fin->finish == ILAB_FINISH_STOP,
              "stop string '%s' across tokens %d,%d: finish reason %d", stop, k - 1, k, fin ? fin->finish : -1);
        CHECK(ntokens(&g) == k + 1 && fin->completion_tokens == (uint32_t)(k + 1),
              "stop string completed by token %d: %d TOKEN events, completion_tokens %u (want %d)", k, ntokens(&g),
              fin->completion_tokens, k + 1);
        CHECK(sl == e - 1 && !memcmp(st, text, sl), "stream text (%zu bytes) is not the output cut before the stop (%zu)", sl,
              e - 1);
    }
    NEED(tried > 0);
    A->destroy(b);
    return 0;
}
static int c_stop_across(void) { return check_stop_string(); }
static int c_stop_not_emitted(void) { return check_stop_string(); }

static size_t utf8_complete(const char *s, size_t n)
{
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char c = (unsigned char)s[n - k];
        if ((c & 0xc0) == 0x80) continue;
        size_t need = (c >= 0xf0 && c <= 0xf4) ? 4 : (c >= 0xe0 && c <= 0xef) ? 3 : (c >= 0xc2 && c <= 0xdf) ? 2 : 1;
        return need > k ? n - k : n;
    }
    return n;
}

static int c_utf8_split(void)
{
    ilab_backend_t *b = mk();
    int32_t p[16];
    size_t n = tok(b, "the cat", p, 16);
    int splits_seen = 0;
    for (int seed = 1; seed <= 60; seed++) {
        req q;
        req_init(&q, p, n, 80);
        q.s.temperature = 3.0f;
        q.s.seed = (uint64_t)seed;
        static gen g;
        run(b, &q, &g);
        NEED(g.ret == ILAB_OK);
        for (int i = 0; i + 1 < g.n; i++) {
            const evrec *e = &g.ev[i];
            if (utf8_complete(e->text, e->text_len) == e->text_len)
                continue;
            /* ends inside a code point: violation when a later event continues it */
            for (int j = i + 1; j < g.n; j++) {
                if (!g.ev[j].text_len) continue;
                if (((unsigned char)g.ev[j].text[0] & 0xc0) == 0x80)
                    return VIOL("seed %d: event %d's text ends inside a code point that event %d completes", seed, i, j);
                break;
            }
            splits_seen++;
        }
    }
    (void)splits_seen;
    A->destroy(b);
    return 0;
}

static int c_last_holdback(void)
{
    ilab_backend_t *b = mk();
    int32_t p[16];
    size_t n = tok(b, "the cat", p, 16);
    for (int seed = 1; seed <= 200; seed++) {
        req q;
        req_init(&q, p, n, 12);
        q.s.temperature = 3.0f;
        q.s.seed = (uint64_t)seed;
        static gen g;
        run(b, &q, &g);
        const evrec *fin = terminal(&g);
        NEED(fin && fin->type == ILAB_EVENT_FINISH && fin->finish == ILAB_FINISH_LENGTH);
        CHECK(fin->text_len == 0, "seed %d: max_tokens reached but %zu held-back bytes rode on FINISH, not on the last TOKEN",
              seed, fin->text_len);
    }
    A->destroy(b);
    return 0;
}

static int c_finish_text_lost(void)
{
    ilab_backend_t *b = mk();
    int32_t p[16];
    size_t n = tok(b, "the cat", p, 16);
    int32_t t[64];
    char text[256];
    size_t ends[64];
    int nt = greedy_ref(b, p, n, 40, t, text, ends);
    NEED(!strchr(text, '\x01'));
    int tried = 0;
    for (int k = 1; k + 1 < nt && tried < 4; k++) {
        size_t st0 = ends[k - 1];
        if (ends[k] == st0) continue;
        int dup = 0;
        for (int j = 0; j <= k; j++) dup |= t[j] == t[k + 1];
        if (dup) continue;
        tried++;
        char stop[8];
        snprintf(stop, sizeof stop, "%.*s\x01", (int)(ends[k] - st0), text + st0);
        req q;
        req_init(&q, p, n, 40);
        const char *stops[] = {stop};
        q.r.stop = stops;
        q.r.n_stop = 1;
        q.r.stop_token_ids = &t[k + 1];
        q.r.n_stop_token_ids = 1;
        static gen g;
        run(b, &q, &g);
        const evrec *fin = terminal(&g);
        NEED(fin && fin->finish == ILAB_FINISH_STOP && ntokens(&g) == k + 1);
        char st[512];
        size_t sl = stream_text(&g, st);
        CHECK(sl == ends[k] && !memcmp(st, text, sl),
              "stream text is %zu bytes, the output text %zu: held-back bytes lost at a stop token id", sl, ends[k]);
    }
    NEED(tried);
    A->destroy(b);
    return 0;
}

static int c_usage_appended(void)
{
    ilab_backend_t *b = mk();
    int32_t p[16];
    size_t n = tok(b, "the cat", p, 16);
    int maxes[] = {1, 2, 7};
    for (int i = 0; i < 3; i++) {
        req q;
        req_init(&q, p, n, maxes[i]);
        static gen g;
        run(b, &q, &g);
        const evrec *fin = terminal(&g);
        NEED(fin && fin->type == ILAB_EVENT_FINISH);
        CHECK(fin->prompt_tokens == n, "prompt_tokens %u, want %zu", fin->prompt_tokens, n);
        CHECK(fin->completion_tokens == (uint32_t)ntokens(&g), "completion_tokens %u but %d TOKEN events",
              fin->completion_tokens, ntokens(&g));
    }
    A->destroy(b);
    return 0;
}

static int c_ctx_full_error(void)
{
    ilab_backend_t *b = mk();
    int32_t p[1024];
    int L = CTX - 2;
    for (int i = 0; i < L; i++) p[i] = 'a' + i % 26;
    req q;
    req_init(&q, p, (size_t)L, 100);
    static gen g;
    run(b, &q, &g);
    const evrec *fin = terminal(&g);
    CHECK(fin && fin->type == ILAB_EVENT_FINISH && fin->finish == ILAB_FINISH_LENGTH,
          "a full context ended with event type %d, reason %d, status %s", fin ? fin->type : 0, fin ? fin->finish : 0,
          fin ? ilab_status_name(fin->status) : "-");
    int nt = ntokens(&g);
    CHECK(nt == CTX - L + 1 || nt == CTX - L, "%d tokens at a full context (prompt %d, max_context %d)", nt, L, CTX);
    A->destroy(b);
    return 0;
}

static int c_stoptoken_emitted(void)
{
    ilab_backend_t *b = mk();
    int32_t p[16];
    size_t n = tok(b, "the cat", p, 16);
    int32_t t[64];
    char text[256];
    size_t ends[64];
    int nt = greedy_ref(b, p, n, 30, t, text, ends);
    int tried = 0;
    for (int k = 1; k < nt && tried < 4; k++) {
        int dup = 0;
        for (int j = 0; j < k; j++) dup |= t[j] == t[k];
        if (dup) continue;
        tried++;
        req q;
        req_init(&q, p, n, 30);
        q.r.stop_token_ids = &t[k];
        q.r.n_stop_token_ids = 1;
        static gen g;
        run(b, &q, &g);
        const evrec *fin = terminal(&g);
        for (int i = 0; i < g.n; i++)
            CHECK(!(g.ev[i].type == ILAB_EVENT_TOKEN && g.ev[i].token == t[k]), "stop token id %d was emitted", t[k]);
        CHECK(fin && fin->finish == ILAB_FINISH_STOP && ntokens(&g) == k && fin->completion_tokens == (uint32_t)k,
              "stop id at step %d: %d tokens, reason %d, completion %u", k, ntokens(&g), fin ? fin->finish : -1,
              fin ? fin->completion_tokens : 0);
    }
    NEED(tried);
    A->destroy(b);
    return 0;
}

typedef struct cancel_arg {
    ilab_backend_t *b;
    uint64_t id;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int flag;
} cancel_arg;

static void *canceller(void *p)
{
    cancel_arg *c = p;
    pthread_mutex_lock(&c->mu);
    while (c->flag != 1)
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    NEED(A->cancel(c->b, c->id) == ILAB_OK);
    pthread_mutex_lock(&c->mu);
    c->flag = 2;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static int c_cancel_late(void)
{
    ilab_backend_t *b = mk();
    int32_t p[16];
    size_t n = tok(b, "the cat", p, 16);
    for (int at = 1; at <= 10; at++) {
        cancel_arg c = {.b = b, .id = 500 + (uint64_t)at};
        pthread_mutex_init(&c.mu, NULL);
        pthread_cond_init(&c.cv, NULL);
        pthread_t th;
        pthread_create(&th, NULL, canceller, &c);
        req q;
        req_init(&q, p, n, 200);
        q.r.request_id = c.id;
        q.s.temperature = 1.0f;
        static gen g;
        memset(&g, 0, sizeof g);
        g.cancel_at = at;
        g.mu = &c.mu, g.cv = &c.cv, g.flag = &c.flag;
        g.ret = A->generate(b, &q.r, on_ev, &g);
        pthread_join(th, NULL);
        const evrec *fin = terminal(&g);
        CHECK(g.tokens_after_cancel <= 2, "cancel() after token %d: %d more TOKEN events followed", at, g.tokens_after_cancel);
        CHECK(fin && fin->finish == ILAB_FINISH_CANCELLED, "cancel after token %d: finish reason %d", at, fin ? fin->finish : -1);
    }
    A->destroy(b);
    return 0;
}

static int c_cancel_prearm(void)
{
    ilab_backend_t *b = mk();
    int32_t p[16];
    size_t n = tok(b, "the cat", p, 16);
    NEED(A->cancel(b, 77) == ILAB_OK);
    req q;
    req_init(&q, p, n, 5);
    q.r.request_id = 77;
    static gen g;
    run(b, &q, &g);
    const evrec *fin = terminal(&g);
    CHECK(fin && fin->finish == ILAB_FINISH_LENGTH && ntokens(&g) == 5,
          "a request whose id was cancelled before it started ended with reason %d after %d tokens",
          fin ? fin->finish : -1, ntokens(&g));
    A->destroy(b);
    return 0;
}

static int c_cb_stop_status(void)
{
    ilab_backend_t *b = mk();
    int32_t p[16];
    size_t n = tok(b, "the cat", p, 16);
    req q;
    req_init(&q, p, n, 10);
    static gen g;
    memset(&g, 0, sizeof g);
    g.stop_after_tokens = 2;
    g.ret = A->generate(b, &q.r, on_ev, &g);
    const evrec *fin = terminal(&g);
    CHECK(ntokens(&g) == 2, "%d TOKEN events after the callback returned nonzero on the 2nd", ntokens(&g));
    CHECK(fin && fin->finish == ILAB_FINISH_CANCELLED, "finish reason %d", fin ? fin->finish : -1);
    CHECK(g.ret == ILAB_OK, "generate returned %s after a callback stop", ilab_status_name(g.ret));
    A->destroy(b);
    return 0;
}

static int refused(ilab_backend_t *b, req *q, ilab_status want, const char *what)
{
    static gen g;
    run(b, q, &g);
    if (g.n == 1 && g.ev[0].type == ILAB_EVENT_ERROR && g.ev[0].status == want && g.ev[0].message[0] && g.ret == want)
        return 0;
    return VIOL("%s: %d events, first type %d status %s, returned %s (want one ERROR %s)", what, g.n, g.n ? g.ev[0].type : 0,
                g.n ? ilab_status_name(g.ev[0].status) : "-", ilab_status_name(g.ret), ilab_status_name(want));
}

static int c_toplp_neg(void)
{
    ilab_backend_t *b = mk();
    int32_t p[16];
    size_t n = tok(b, "the cat", p, 16);
    req q;
    req_init(&q, p, n, 5);
    q.r.top_logprobs = -1;
    if (refused(b, &q, ILAB_INVALID_ARGUMENT, "top_logprobs -1"))
        return 1;
    A->destroy(b);
    return 0;
}

/* --- SMP -------------------------------------------------------------------- */

/* a prompt whose logits tie at the maximum; returns n, sets the tied ids */
static size_t tie_prompt(ilab_backend_t *b, int32_t *p, int *tied, int *nt)
{
    float *f = malloc(sizeof(float) * V);
    for (int i = 0; i < 1000; i++) {
        char s[32];
        snprintf(s, sizeof s, "prompt %d", i);
        size_t n = tok(b, s, p, 32);
        fresh(b, p, (int)n, f);
        float mx = f[0];
        for (int v = 1; v < V; v++) if (f[v] > mx) mx = f[v];
        *nt = 0;
        for (int v = 0; v < V; v++) if (f[v] == mx) tied[(*nt)++] = v;
        if (*nt >= 2) {
            free(f);
            return n;
        }
    }
    NEED(0);
    return 0;
}

static int c_greedy_tie(void)
{
    ilab_backend_t *b = mk();
    int32_t p[32];
    int tied[300], nt;
    size_t n = tie_prompt(b, p, tied, &nt);
    for (uint64_t seed = 0; seed < 3; seed++) {
        req q;
        req_init(&q, p, n, 1);
        q.s.seed = seed;
        static gen g;
        run(b, &q, &g);
        NEED(g.ret == ILAB_OK && ntokens(&g) == 1);
        CHECK(g.ev[0].token == tied[0], "greedy picked %d among tied ids %d..%d (want the lowest)", g.ev[0].token, tied[0], tied[nt - 1]);
    }
    A->destroy(b);
    return 0;
}

static int c_topp_ties(void)
{
    ilab_backend_t *b = mk();
    int32_t p[32];
    int tied[300], nt;
    size_t n = tie_prompt(b, p, tied, &nt);
    for (uint64_t seed = 1; seed < 20; seed++) {
        req q;
        req_init(&q, p, n, 1);
        q.s.temperature = 1.0f;
        q.s.top_p = 1e-6f;
        q.s.seed = seed;
        static gen g;
        run(b, &q, &g);
        NEED(g.ret == ILAB_OK && ntokens(&g) == 1);
        CHECK(g.ev[0].token == tied[0], "top_p=1e-6 drew %d, greedy is %d", g.ev[0].token, tied[0]);
    }
    A->destroy(b);
    return 0;
}

static int c_minp_strict(void)
{
    ilab_backend_t *b = mk();
    int32_t p[32];
    int tied[300], nt;
    size_t n = tie_prompt(b, p, tied, &nt);
    int hit[300] = {0}, distinct = 0;
    for (uint64_t seed = 1; seed <= 200; seed++) {
        req q;
        req_init(&q, p, n, 1);
        q.s.temperature = 1.0f;
        q.s.min_p = 1.0f;
        q.s.seed = seed;
        static gen g;
        run(b, &q, &g);
        NEED(g.ret == ILAB_OK && ntokens(&g) == 1);
        int k = -1;
        for (int i = 0; i < nt; i++) if (tied[i] == g.ev[0].token) k = i;
        CHECK(k >= 0, "min_p=1 drew %d, not one of the tied maxima", g.ev[0].token);
        if (!hit[k]++) distinct++;
    }
    CHECK(distinct == nt, "min_p=1 over 200 draws gave %d of the %d tokens tied at the maximum", distinct, nt);
    A->destroy(b);
    return 0;
}

/* greedy with penalties, simulated from eval() logits */
static int sim_penalties(float rep, float pres, float freq, int steps, const char *what)
{
    ilab_backend_t *b = mk();
    float *z = malloc(sizeof(float) * V);
    for (int pi = 0; pi < 30; pi++) {
        char s[64];
        snprintf(s, sizeof s, "the the cat sat %d on a mat mat", pi);
        int32_t p[64];
        size_t n = tok(b, s, p, 64);
        req q;
        req_init(&q, p, n, steps);
        q.s.repetition_penalty = rep;
        q.s.presence_penalty = pres;
        q.s.frequency_penalty = freq;
        static gen g;
        run(b, &q, &g);
        NEED(g.ret == ILAB_OK);
        int32_t got[64];
        int ng = gen_tokens(&g, got);
        int32_t hist[128];
        memcpy(hist, p, n * sizeof *p);
        int nh = (int)n;
        int counts[512] = {0};
        for (int k = 0; k < ng; k++) {
            fresh(b, hist, nh, z);
            for (int v = 0; v < V; v++) {
                int seen = 0;
                for (int j = 0; j < nh; j++) seen |= hist[j] == v;
                if (rep != 1.0f && seen) z[v] = z[v] > 0 ? z[v] / rep : z[v] * rep;
                if (counts[v]) z[v] = z[v] - (pres * (counts[v] > 0 ? 1.0f : 0.0f) + freq * (float)counts[v]);
            }
            int best = 0;
            for (int v = 1; v < V; v++) if (z[v] > z[best]) best = v;
            CHECK(got[k] == best, "%s, prompt %d step %d: generated %d, penalised greedy is %d", what, pi, k, got[k], best);
            hist[nh++] = got[k];
            counts[got[k]]++;
        }
    }
    A->destroy(b);
    return 0;
}

static int c_rep_output_only(void) { return sim_penalties(2.5f, 0, 0, 8, "repetition_penalty 2.5"); }
static int c_freq_prompt(void) { return sim_penalties(1.0f, 0.5f, 1.0f, 8, "presence 0.5, frequency 1.0"); }
static int c_presence_as_count(void) { return sim_penalties(1.0f, 1.0f, 0, 40, "presence 1.0"); }

static int c_seed_shared(void)
{
    ilab_backend_t *b = mk();
    int32_t p[16];
    size_t n = tok(b, "the cat", p, 16);
    int32_t first[64];
    int nf = 0;
    for (int rep = 0; rep < 3; rep++) {
        req q;
        req_init(&q, p, n, 20);
        q.s.temperature = 1.0f;
        q.s.seed = 42;
        static gen g;
        run(b, &q, &g);
        int32_t t[64];
        int nt = gen_tokens(&g, t);
        if (rep == 0) {
            memcpy(first, t, sizeof t);
            nf = nt;
        } else
            CHECK(nt == nf && !memcmp(t, first, sizeof(int32_t) * (size_t)nt), "run %d with seed 42 gave other tokens than run 1", rep + 1);
    }
    A->destroy(b);
    return 0;
}

static int c_temp_topk_only(void)
{
    ilab_backend_t *b = mk();
    int32_t p[16];
    size_t n = tok(b, "the cat", p, 16);
    float *z = malloc(sizeof(float) * V);
    fresh(b, p, (int)n, z);
    const float T = 2.0f;
    double *pr = malloc(sizeof(double) * V);
    double mx = z[0], s = 0;
    for (int v = 0; v < V; v++) if (z[v] > mx) mx = z[v];
    for (int v = 0; v < V; v++) s += (pr[v] = exp(((double)z[v] - mx) / T));
    for (int v = 0; v < V; v++) pr[v] /= s;
    const int N = 4000;
    int *cnt = calloc((size_t)V, sizeof *cnt);
    for (int i = 0; i < N; i++) {
        req q;
        req_init(&q, p, n, 1);
        q.s.temperature = T;
        q.s.seed = 1000 + (uint64_t)i;
        static gen g;
        run(b, &q, &g);
        NEED(g.ret == ILAB_OK && ntokens(&g) == 1);
        cnt[g.ev[0].token]++;
    }
    /* pool categories with expected count < 5 */
    double chi = 0, pe = 0, po = 0;
    int df = -1;
    for (int v = 0; v < V; v++) {
        double e = pr[v] * N;
        if (e < 5) {
            pe += e;
            po += cnt[v];
            continue;
        }
        chi += (cnt[v] - e) * (cnt[v] - e) / e;
        df++;
    }
    if (pe > 0) {
        chi += (po - pe) * (po - pe) / pe;
        df++;
    }
    /* Wilson-Hilferty: chi-square quantile at p = 0.001 (z = 3.09) */
    double k = df, crit = k * pow(1 - 2 / (9 * k) + 3.09 * sqrt(2 / (9 * k)), 3);
    CHECK(chi <= crit, "chi-square %.1f over %d df (critical %.1f at p<0.001): draws do not follow softmax(z/T)", chi, df, crit);
    A->destroy(b);
    return 0;
}

static int c_neg_temp(void)
{
    ilab_backend_t *b = mk();
    int32_t p[16];
    size_t n = tok(b, "the cat", p, 16);
    req q;
    req_init(&q, p, n, 5);
    q.s.temperature = -1.0f;
    if (refused(b, &q, ILAB_INVALID_ARGUMENT, "temperature -1"))
        return 1;
    A->destroy(b);
    return 0;
}

static int c_logprob_tempered(void)
{
    ilab_backend_t *b = mk();
    int32_t p[16];
    size_t n = tok(b, "the cat", p, 16);
    req q;
    req_init(&q, p, n, 10);
    q.s.temperature = 0.6f;
    q.s.seed = 5;
    q.r.top_logprobs = 5;
    static gen g;
    run(b, &q, &g);
    NEED(g.ret == ILAB_OK);
    int32_t hist[64];
    memcpy(hist, p, n * sizeof *p);
    int nh = (int)n;
    float *z = malloc(sizeof(float) * V);
    double *lp = malloc(sizeof(double) * V);
    for (int i = 0; i < g.n; i++) {
        if (g.ev[i].type != ILAB_EVENT_TOKEN) continue;
        fresh(b, hist, nh, z);
        log_softmax(z, V, lp);
        double want = lp[g.ev[i].token];
        CHECK(fabs(g.ev[i].logprob - want) <= 1e-4 + 1e-4 * fabs(want), "TOKEN %d logprob %g, log_softmax of the raw logits %g",
              i, g.ev[i].logprob, want);
        hist[nh++] = g.ev[i].token;
    }
    A->destroy(b);
    return 0;
}

/* --- ERR -------------------------------------------------------------------- */

static int c_trunc_no_msg(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t s;
    NEED(A->seq_create(b, &s) == ILAB_OK);
    int32_t bad[] = {1, -1, 1000};
    for (int i = 0; i < 3; i++) {
        ilab_backend_t *f = mk();
        ilab_seq_t fs;
        NEED(A->seq_create(f, &fs) == ILAB_OK);
        ilab_status st = A->seq_truncate(f, fs, bad[i]);
        char msg[256];
        size_t len = A->last_error(f, msg, sizeof msg);
        CHECK(st == ILAB_INVALID_ARGUMENT, "truncate to %d of an empty sequence gave %s", bad[i], ilab_status_name(st));
        CHECK(len > 0 && msg[0], "truncate to %d failed with an empty last_error()", bad[i]);
        A->destroy(f);
    }
    A->destroy(b);
    return 0;
}

static int c_lasterr_len(void)
{
    ilab_backend_t *b = mk();
    int32_t len;
    NEED(A->seq_length(b, 12345, &len) == ILAB_INVALID_ARGUMENT);
    char full[1024];
    size_t n = A->last_error(b, full, sizeof full);
    NEED(n > 4 && n == strlen(full));
    for (size_t cap = 0; cap <= n + 1; cap++) {
        char buf[1024];
        memset(buf, 'Z', sizeof buf);
        size_t r = A->last_error(b, cap ? buf : NULL, cap);
        CHECK(r == n, "last_error with cap %zu returned %zu, the full length is %zu", cap, r, n);
    }
    A->destroy(b);
    return 0;
}

static int c_config_atoi(void)
{
    const char *bad[] = {"abc", "12x", ""};
    for (int i = 0; i < 3; i++) {
        ilab_config_entry_t cfg[] = {{"seed", bad[i]}};
        char err[256] = "";
        ilab_backend_t *b = (ilab_backend_t *)0x1;
        ilab_status st = A->create(NULL, cfg, 1, err, sizeof err, &b);
        CHECK(st == ILAB_INVALID_ARGUMENT, "create with seed='%s' gave %s", bad[i], ilab_status_name(st));
        CHECK(strstr(err, "seed") != NULL, "create's message '%s' does not name the key", err);
        CHECK(b == (ilab_backend_t *)0x1, "create wrote *out on failure");
    }
    return 0;
}

static int c_stats_undeclared(void)
{
    NEED(!strstr(E->manifest_yaml, "stats: true"));
    ilab_backend_t *b = mk();
    ilab_cache_stats_t cs = {.struct_size = sizeof cs};
    ilab_status st = A->cache_stats(b, &cs);
    char msg[256];
    A->last_error(b, msg, sizeof msg);
    CHECK(st == ILAB_UNSUPPORTED, "cache_stats without cache.stats declared gave %s", ilab_status_name(st));
    CHECK(strstr(msg, "cache.stats") != NULL, "message '%s' does not name the capability", msg);
    A->destroy(b);
    return 0;
}

static int c_null_ntokens(void)
{
    ilab_backend_t *b = mk();
    int32_t t[16];
    ilab_status st = A->tokenize(b, "abc", 3, 0, NULL, 0, NULL);
    CHECK(st == ILAB_INVALID_ARGUMENT, "tokenize with n_tokens NULL (size query) gave %s", ilab_status_name(st));
    st = A->tokenize(b, "abc", 3, 0, t, 16, NULL);
    CHECK(st == ILAB_INVALID_ARGUMENT, "tokenize with n_tokens NULL gave %s", ilab_status_name(st));
    A->destroy(b);
    return 0;
}

static int c_unknown_key_ignored(void)
{
    ilab_config_entry_t cfg[] = {{"colour", "red"}};
    char err[256] = "";
    ilab_backend_t *b = (ilab_backend_t *)0x1;
    ilab_status st = A->create(NULL, cfg, 1, err, sizeof err, &b);
    CHECK(st == ILAB_INVALID_ARGUMENT, "create with an unknown key 'colour' gave %s", ilab_status_name(st));
    CHECK(strstr(err, "colour") != NULL, "create's message '%s' does not name the key", err);
    CHECK(b == (ilab_backend_t *)0x1, "create wrote *out on failure");
    return 0;
}

static int c_gen_no_lasterr(void)
{
    ilab_backend_t *b = mk();
    int32_t len;
    NEED(A->seq_length(b, 12345, &len) == ILAB_INVALID_ARGUMENT);
    char m1[512], m2[512];
    A->last_error(b, m1, sizeof m1);
    int32_t p[16];
    size_t n = tok(b, "the cat", p, 16);
    req q;
    req_init(&q, p, n, 0); /* max_tokens 0: refused */
    static gen g;
    run(b, &q, &g);
    NEED(g.ret == ILAB_INVALID_ARGUMENT);
    A->last_error(b, m2, sizeof m2);
    CHECK(m2[0] && strcmp(m1, m2), "after a refused generate() last_error() still holds the earlier message '%s'", m2);
    A->destroy(b);
    return 0;
}

/* --- THR -------------------------------------------------------------------- */

typedef struct thr_arg {
    ilab_backend_t *b;
    int idx;
    int32_t tokens[300];
    int n;
    int bad;
    const float *expect;
    int32_t prompt[64];
    size_t np;
} thr_arg;

static void *gen_thread(void *p)
{
    thr_arg *a = p;
    req q;
    req_init(&q, a->prompt, a->np, 200);
    q.r.request_id = 100 + (uint64_t)a->idx;
    q.s.temperature = 1.0f;
    q.s.seed = 7 + (uint64_t)a->idx;
    gen *g = malloc(sizeof *g);
    run(a->b, &q, g);
    a->n = gen_tokens(g, a->tokens);
    free(g);
    return NULL;
}

static int c_shared_scratch(void)
{
    ilab_backend_t *b = mk();
    thr_arg ser[4], par[4];
    for (int i = 0; i < 4; i++) {
        memset(&ser[i], 0, sizeof ser[i]);
        ser[i].b = b;
        ser[i].idx = i;
        char s[32];
        snprintf(s, sizeof s, "thread %d says", i);
        ser[i].np = tok(b, s, ser[i].prompt, 64);
        gen_thread(&ser[i]);
    }
    for (int round = 0; round < 40; round++) {
        pthread_t th[4];
        for (int i = 0; i < 4; i++) {
            par[i] = ser[i];
            par[i].n = 0;
            pthread_create(&th[i], NULL, gen_thread, &par[i]);
        }
        for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
        for (int i = 0; i < 4; i++)
            CHECK(par[i].n == ser[i].n && !memcmp(par[i].tokens, ser[i].tokens, sizeof(int32_t) * (size_t)ser[i].n),
                  "round %d: concurrent generate() %d gave other tokens than alone", round, i);
    }
    A->destroy(b);
    return 0;
}

typedef struct tok_arg {
    ilab_backend_t *b;
    char text[4096];
    int32_t want[4096];
    size_t n;
    int bad;
} tok_arg;

static void *tok_thread(void *p)
{
    tok_arg *a = p;
    int32_t *got = malloc(sizeof(int32_t) * 4096);
    for (int it = 0; it < 3000 && !a->bad; it++) {
        size_t n = 0;
        if (A->tokenize(a->b, a->text, strlen(a->text), 0, got, 4096, &n) != ILAB_OK || n != a->n ||
            memcmp(got, a->want, n * sizeof *got))
            a->bad = 1;
    }
    free(got);
    return NULL;
}

static int c_tokenize_scratch(void)
{
    ilab_backend_t *b = mk();
    tok_arg *ar = calloc(3, sizeof *ar);
    for (int i = 0; i < 3; i++) {
        ar[i].b = b;
        for (int k = 0; k < 2000; k++)
            ar[i].text[k] = (char)("the quick brown fox jumps over"[(k * (i + 3)) % 30]);
        ar[i].n = tok(b, ar[i].text, ar[i].want, 4096);
    }
    pthread_t th[3];
    for (int i = 0; i < 3; i++) pthread_create(&th[i], NULL, tok_thread, &ar[i]);
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++)
        CHECK(!ar[i].bad, "thread %d: concurrent tokenize() of its own text gave other ids than alone", i);
    A->destroy(b);
    return 0;
}

static void *eval_thread(void *p)
{
    thr_arg *a = p;
    float *rows = malloc(sizeof(float) * (size_t)V * (size_t)a->np);
    for (int it = 0; it < 400 && !a->bad; it++) {
        ilab_seq_t s;
        if (A->seq_create(a->b, &s) != ILAB_OK) { a->bad = 1; break; }
        if (eval1(a->b, s, a->prompt, (int)a->np, ILAB_EVAL_ALL_LOGITS, rows) != ILAB_OK) { a->bad = 2; break; }
        if (memcmp(rows, a->expect, sizeof(float) * (size_t)V * a->np)) { a->bad = 3; break; }
        A->seq_free(a->b, s);
    }
    free(rows);
    return NULL;
}

static int c_eval_early_unlock(void)
{
    ilab_backend_t *b = mk();
    thr_arg ar[3];
    float *exp_rows[3];
    for (int i = 0; i < 3; i++) {
        memset(&ar[i], 0, sizeof ar[i]);
        ar[i].b = b;
        char s[64];
        snprintf(s, sizeof s, "sequence number %d of the concurrent eval test", i);
        ar[i].np = tok(b, s, ar[i].prompt, 64);
        exp_rows[i] = malloc(sizeof(float) * (size_t)V * ar[i].np);
        ilab_seq_t sq;
        NEED(A->seq_create(b, &sq) == ILAB_OK);
        NEED(eval1(b, sq, ar[i].prompt, (int)ar[i].np, ILAB_EVAL_ALL_LOGITS, exp_rows[i]) == ILAB_OK);
        NEED(A->seq_free(b, sq) == ILAB_OK);
        ar[i].expect = exp_rows[i];
    }
    pthread_t th[3];
    for (int i = 0; i < 3; i++) pthread_create(&th[i], NULL, eval_thread, &ar[i]);
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++)
        CHECK(!ar[i].bad, "thread %d: concurrent eval on its own sequences went wrong (%s)", i,
              ar[i].bad == 3 ? "logits differ from the serial result" : "a call failed");
    A->destroy(b);
    return 0;
}

/* --- dispatch ---------------------------------------------------------------- */

typedef struct kase {
    const char *name;
    int (*fn)(void);
} kase;

#define K(n) {#n, c_##n}
static const kase cases[] = {
    K(minfo_size), K(sampling_tail), K(req_short), K(weak_hook), K(manifest_version), K(maxbatch_off1),
    K(destroy_leak), K(reason_overflow), K(create_reason), K(probe_stateful), K(size_query_eos),
    K(detok_exact_cap), K(piece_prev_range), K(crlf), K(eos_piece), K(piece_space), K(flags_high),
    K(allrows_shift), K(null_logits), K(row_overrun), K(batch_pos), K(dup_seq), K(topk_count),
    K(fork_cow), K(trunc_floor), K(trunc_tidy), K(overflow_partial), K(all_or_nothing), K(handle_reuse),
    K(fork_oom_status), K(chunk_pos), K(decode_boundary), K(free_shared_leak), K(stop_across),
    K(stop_not_emitted), K(utf8_split), K(finish_text_lost), K(usage_appended), K(ctx_full_error),
    K(stoptoken_emitted), K(cancel_late), K(cancel_prearm), K(cb_stop_status), K(toplp_neg),
    K(greedy_tie), K(topp_ties), K(minp_strict), K(rep_output_only), K(freq_prompt), K(seed_shared),
    K(temp_topk_only), K(neg_temp), K(logprob_tempered), K(trunc_no_msg), K(lasterr_len), K(config_atoi),
    K(stats_undeclared), K(unknown_key_ignored), K(gen_no_lasterr), K(minfo_small_writes), K(probe_ok_unterminated),
    K(probe_bad_device), K(neg_ntokens), K(batch_h_leak), K(last_holdback), K(presence_as_count), K(tokenize_scratch), K(null_ntokens), K(shared_scratch), K(eval_early_unlock),
};

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--list")) {
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) puts(cases[i].name);
        return 0;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: driver CASE PLUGIN.so | driver --list\n");
        return 2;
    }
    const kase *k = NULL;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        if (!strcmp(cases[i].name, argv[1])) k = &cases[i];
    if (!k) {
        fprintf(stderr, "driver: unknown case '%s'\n", argv[1]);
        return 2;
    }
    so_path = argv[2];
    void *h = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("violation: dlopen failed: %s\n", dlerror());
        return 0;
    }
    E = dlsym(h, ILAB_PLUGIN_ENTRY_SYMBOL);
    if (!E || !E->backend) {
        printf("violation: no usable %s\n", ILAB_PLUGIN_ENTRY_SYMBOL);
        return 0;
    }
    A = E->backend;
    int fds[2];
    NEED(pipe(fds) == 0);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        alarm(120);
        int r = k->fn();
        if (r) {
            NEED(write(fds[1], vmsg, strlen(vmsg)) >= 0);
            _exit(10);
        }
        _exit(11);
    }
    close(fds[1]);
    char buf[1024] = "";
    ssize_t got = 0, r;
    while ((r = read(fds[0], buf + got, sizeof buf - 1 - (size_t)got)) > 0) got += r;
    buf[got > 0 ? got : 0] = 0;
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) {
        printf("violation: crashed with signal %d (%s)\n", WTERMSIG(status), strsignal(WTERMSIG(status)));
        return 0;
    }
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (code == 10) {
        printf("violation: %s\n", buf);
        return 0;
    }
    if (code == 11) {
        printf("no violation\n");
        return 1;
    }
    printf("driver error: case exited with %d\n", code);
    return 2;
}
