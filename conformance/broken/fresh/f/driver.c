/* driver PLUGIN.so CASE — one contract check (docs/contract.md, ABI 1.2),
 * written from the contract text alone. Loads the plugin as docs/sdk.md
 * describes (dlopen RTLD_NOW|RTLD_LOCAL, symbol ilab_plugin_entry), runs the
 * check in a forked child (a crash, or a hang past 120 s, is a violation),
 * prints "OK" (exit 0) or "VIOLATION: ..." (exit 1). */
#include <inferlab/inferlab.h>

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *so_path;
static const ilab_plugin_entry_t *E;
static const ilab_backend_api_t *A;
static int VOC = 0, BOSID = -1, EOSID = -1, MAXCTX = 0;

static void viol(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void viol(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("VIOLATION: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    _exit(1);
}
#define CHECK(cond, ...) do { if (!(cond)) viol(__VA_ARGS__); } while (0)

/* --- host ---------------------------------------------------------------------- */
static int host_log_calls;
static void host_log(const ilab_host_t *h, ilab_log_level l, const char *p, const char *m)
{
    (void)h, (void)l, (void)p, (void)m;
    host_log_calls++;
}
static uint64_t host_now(const ilab_host_t *h)
{
    (void)h;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
static ilab_host_t HOST = {sizeof(ilab_host_t), 1, 2, NULL, host_log, host_now};

/* --- helpers --------------------------------------------------------------------- */
static ilab_backend_t *mkv(ilab_status *stp, char *err, size_t cap, const char *k, va_list ap)
{
    ilab_config_entry_t cfg[16];
    size_t n = 0;
    while (k) {
        cfg[n].key = k;
        cfg[n].value = va_arg(ap, const char *);
        n++;
        k = va_arg(ap, const char *);
    }
    ilab_backend_t *b = NULL;
    ilab_status st = A->create(&HOST, cfg, n, err, cap, &b);
    if (stp)
        *stp = st;
    return st == ILAB_OK ? b : NULL;
}
/* create with key, value, ..., NULL; a failure is a violation */
static ilab_backend_t *mk(const char *k, ...)
{
    char err[512] = "";
    ilab_status st;
    va_list ap;
    va_start(ap, k);
    ilab_backend_t *b = mkv(&st, err, sizeof err, k, ap);
    va_end(ap);
    CHECK(b, "create() failed with %s: %s (valid configuration)", ilab_status_name(st), err);
    return b;
}
static ilab_status mk_try(ilab_backend_t **out, char *err, size_t cap, const char *k, ...)
{
    ilab_status st;
    va_list ap;
    va_start(ap, k);
    *out = mkv(&st, err, cap, k, ap);
    va_end(ap);
    return st;
}
static void load_info(void)
{
    ilab_backend_t *b = mk(NULL);
    ilab_model_info_t mi;
    memset(&mi, 0, sizeof mi);
    mi.struct_size = sizeof mi;
    CHECK(A->model_info(b, &mi) == ILAB_OK, "model_info failed");
    VOC = mi.vocab_size;
    BOSID = mi.bos_id;
    EOSID = mi.eos_id;
    MAXCTX = mi.max_context;
    A->destroy(b);
}
static size_t lasterr(ilab_backend_t *b, char *buf, size_t cap) { return A->last_error(b, buf, cap); }

static size_t tok(ilab_backend_t *b, const char *s, size_t len, uint32_t flags, int32_t *out,
                  size_t cap)
{
    size_t n = 0;
    ilab_status st = A->tokenize(b, s, len, flags, out, cap, &n);
    CHECK(st == ILAB_OK, "tokenize(\"%.40s\", flags %u) gave %s", s, flags, ilab_status_name(st));
    return n;
}
static size_t detok(ilab_backend_t *b, const int32_t *t, size_t n, char *out, size_t cap)
{
    size_t len = 0;
    ilab_status st = A->detokenize(b, t, n, out, cap, &len);
    CHECK(st == ILAB_OK, "detokenize of %zu ids gave %s", n, ilab_status_name(st));
    return len;
}
static ilab_seq_t seq_new(ilab_backend_t *b)
{
    ilab_seq_t s = 0;
    ilab_status st = A->seq_create(b, &s);
    CHECK(st == ILAB_OK, "seq_create gave %s", ilab_status_name(st));
    return s;
}
static int32_t seqlen(ilab_backend_t *b, ilab_seq_t s)
{
    int32_t n = -7;
    ilab_status st = A->seq_length(b, s, &n);
    CHECK(st == ILAB_OK, "seq_length gave %s", ilab_status_name(st));
    return n;
}
static ilab_batch_item_t item(ilab_seq_t s, const int32_t *t, int32_t n, uint32_t flags, float *lg)
{
    ilab_batch_item_t it;
    memset(&it, 0, sizeof it);
    it.struct_size = sizeof it;
    it.seq = s;
    it.tokens = t;
    it.n_tokens = n;
    it.flags = flags;
    it.logits = lg;
    return it;
}
static ilab_status ev1(ilab_backend_t *b, ilab_seq_t s, const int32_t *t, int32_t n, uint32_t flags,
                       float *lg)
{
    ilab_batch_item_t it = item(s, t, n, flags, lg);
    const ilab_batch_item_t *p = &it;
    return A->eval(b, &p, 1);
}
static void ev_ok(ilab_backend_t *b, ilab_seq_t s, const int32_t *t, int32_t n, float *lg)
{
    ilab_status st = ev1(b, s, t, n, 0, lg);
    CHECK(st == ILAB_OK, "eval of %d tokens gave %s", n, ilab_status_name(st));
}
/* logits after the last of t[0..n) in a fresh sequence */
static void fresh(ilab_backend_t *b, const int32_t *t, int32_t n, float *row)
{
    ilab_seq_t s = seq_new(b);
    ev_ok(b, s, t, n, row);
    CHECK(A->seq_free(b, s) == ILAB_OK, "seq_free failed");
}
static float *rowbuf(size_t rows) { return calloc(rows * (size_t)VOC + 64, sizeof(float)); }
/* TOL of the contract: |a-b| <= 1e-4 + 1e-4|b| and the same argmax */
static int tol_eq(const float *a, const float *b)
{
    int am = 0, bm = 0;
    for (int v = 0; v < VOC; v++) {
        if (!(fabsf(a[v] - b[v]) <= 1e-4f + 1e-4f * fabsf(b[v])))
            return 0;
        if (a[v] > a[am])
            am = v;
        if (b[v] > b[bm])
            bm = v;
    }
    return am == bm;
}
static int argmax(const float *r)
{
    int m = 0;
    for (int v = 1; v < VOC; v++)
        if (r[v] > r[m])
            m = v;
    return m;
}
static void prompt(int32_t *t, int n, uint32_t seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = (int32_t)((seed >> 8) % (uint32_t)VOC);
    }
}
static size_t live_heap(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}
static ilab_cache_stats_t stats(ilab_backend_t *b)
{
    ilab_cache_stats_t cs;
    memset(&cs, 0, sizeof cs);
    cs.struct_size = sizeof cs;
    ilab_status st = A->cache_stats(b, &cs);
    CHECK(st == ILAB_OK, "cache_stats gave %s", ilab_status_name(st));
    return cs;
}
static const char *manifest_value(const char *key, char *out, size_t cap)
{
    /* top-level "key: value" or "  key: value" line; first match */
    const char *m = E->manifest_yaml;
    size_t kl = strlen(key);
    for (const char *line = m; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        const char *p = line;
        while (*p == ' ')
            p++;
        if (!strncmp(p, key, kl) && p[kl] == ':') {
            p += kl + 1;
            while (*p == ' ')
                p++;
            size_t n = strcspn(p, "\n");
            if (n >= cap)
                n = cap - 1;
            memcpy(out, p, n);
            out[n] = 0;
            return out;
        }
    }
    return NULL;
}

/* --- ELF: the plugin's dynamic symbols ------------------------------------------------ */
typedef void (*sym_fn)(const char *name, int bind, int type, int defined, int abs_, void *ud);
static void each_dynsym(sym_fn fn, void *ud)
{
    int fd = open(so_path, O_RDONLY);
    CHECK(fd >= 0, "cannot open %s", so_path);
    struct stat st;
    fstat(fd, &st);
    unsigned char *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    CHECK(m != MAP_FAILED, "cannot map %s", so_path);
    Elf64_Ehdr *eh = (Elf64_Ehdr *)m;
    Elf64_Shdr *sh = (Elf64_Shdr *)(m + eh->e_shoff);
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_DYNSYM)
            continue;
        Elf64_Sym *sy = (Elf64_Sym *)(m + sh[i].sh_offset);
        const char *str = (const char *)(m + sh[sh[i].sh_link].sh_offset);
        size_t n = sh[i].sh_size / sizeof *sy;
        for (size_t j = 1; j < n; j++)
            fn(str + sy[j].st_name, ELF64_ST_BIND(sy[j].st_info), ELF64_ST_TYPE(sy[j].st_info),
               sy[j].st_shndx != SHN_UNDEF, sy[j].st_shndx == SHN_ABS, ud);
    }
    munmap(m, (size_t)st.st_size);
    close(fd);
}

/* ======================================================================================
 * The checks. Each names its clause.
 * ==================================================================================== */

/* ABI-1: the entry's struct_size and pointers */
static void c_entry(void)
{
    CHECK(E->struct_size >= ILAB_PLUGIN_ENTRY_SIZE_1_0,
          "ABI-1: entry struct_size %u < ABI 1.0's %u", E->struct_size, ILAB_PLUGIN_ENTRY_SIZE_1_0);
    CHECK(E->abi_major == 1, "ABI-1: abi_major %u", E->abi_major);
    CHECK(E->name && E->version && E->manifest_yaml && E->backend, "ABI-1: NULL pointer in the entry");
    CHECK(A->struct_size >= ILAB_BACKEND_API_SIZE_1_0, "ABI-3: backend table struct_size %u",
          A->struct_size);
}

/* ABI-3.2: model_info with a larger caller struct: struct_size kept, nothing past sizeof */
static void c_mi_large(void)
{
    ilab_backend_t *b = mk(NULL);
    unsigned char buf[256];
    memset(buf, 0xAB, sizeof buf);
    ilab_model_info_t *mi = (ilab_model_info_t *)buf;
    mi->struct_size = 200;
    ilab_status st = A->model_info(b, mi);
    CHECK(st == ILAB_OK, "ABI-3: model_info with struct_size 200 gave %s", ilab_status_name(st));
    CHECK(mi->struct_size == 200, "ABI-3: model_info changed the caller's struct_size 200 to %u",
          mi->struct_size);
    for (size_t i = sizeof(ilab_model_info_t); i < sizeof buf; i++)
        CHECK(buf[i] == 0xAB, "ABI-3: model_info wrote byte %zu, past its own sizeof %zu", i,
              sizeof(ilab_model_info_t));
    A->destroy(b);
}

/* ABI-3.2: a struct_size below ABI 1.0's is ABI_MISMATCH, nothing written */
static void c_mi_small(void)
{
    ilab_backend_t *b = mk(NULL);
    uint32_t sizes[] = {0, 4, 20, 100, ILAB_MODEL_INFO_SIZE_1_0 - 1};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        unsigned char buf[256], ref[256];
        memset(buf, 0xCD, sizeof buf);
        ((ilab_model_info_t *)buf)->struct_size = sizes[k];
        memcpy(ref, buf, sizeof buf);
        ilab_status st = A->model_info(b, (ilab_model_info_t *)buf);
        CHECK(st == ILAB_ABI_MISMATCH, "ABI-3: model_info with struct_size %u gave %s, not ABI_MISMATCH",
              sizes[k], ilab_status_name(st));
        CHECK(!memcmp(buf, ref, sizeof buf), "ABI-3: model_info with struct_size %u wrote into *info",
              sizes[k]);
        char e[256];
        CHECK(lasterr(b, e, sizeof e) > 0, "ERR-1: no message for ABI_MISMATCH");
    }
    A->destroy(b);
}

/* ABI-3.3: batch item larger than the plugin's sizeof */
static void c_item_tail(void)
{
    ilab_backend_t *b = mk(NULL);
    ilab_seq_t s = seq_new(b);
    int32_t t[3] = {300, 301, 302};
    struct { ilab_batch_item_t it; unsigned char tail[8]; } big;
    memset(&big, 0, sizeof big);
    big.it = item(s, t, 3, 0, NULL);
    big.it.struct_size = sizeof big;
    big.tail[3] = 1;
    const ilab_batch_item_t *p = &big.it;
    ilab_status st = A->eval(b, &p, 1);
    CHECK(st == ILAB_ABI_MISMATCH, "ABI-3: batch item with struct_size %zu and a non-zero unknown "
          "tail gave %s, not ABI_MISMATCH", sizeof big, ilab_status_name(st));
    CHECK(seqlen(b, s) == 0, "ABI-3/CCH-8: refused item changed the sequence length to %d", seqlen(b, s));
    big.tail[3] = 0;
    st = A->eval(b, &p, 1);
    CHECK(st == ILAB_OK, "ABI-3: batch item with a zero tail gave %s", ilab_status_name(st));
    CHECK(seqlen(b, s) == 3, "CCH-9: length %d after 3 tokens", seqlen(b, s));
    A->destroy(b);
}

/* ABI-3.4: the host table: read no member past its struct_size */
static int trap_called;
static void trap_log(const ilab_host_t *h, ilab_log_level l, const char *p, const char *m)
{
    (void)h, (void)l, (void)p, (void)m;
    trap_called = 1;
}
static uint64_t trap_now(const ilab_host_t *h) { (void)h; trap_called = 1; return 0; }
static void c_host_short(void)
{
    ilab_host_t h = {(uint32_t)offsetof(ilab_host_t, log), 1, 2, NULL, trap_log, trap_now};
    char err[256] = "";
    ilab_backend_t *b = NULL;
    ilab_status st = A->probe(&h, NULL, 0, err, sizeof err);
    (void)st;
    A->create(&h, NULL, 0, err, sizeof err, &b);
    if (b) {
        int32_t t[4];
        size_t n = 0;
        A->tokenize(b, "hi there", 8, 0, t, 4, &n);
        A->destroy(b);
    }
    CHECK(!trap_called, "ABI-3: the plugin called a host member past the host table's struct_size %u",
          h.struct_size);
}

/* ABI-4: no undefined weak symbol besides the C runtime's */
static void weak_cb(const char *name, int bind, int type, int defined, int abs_, void *ud)
{
    (void)type, (void)abs_;
    if (defined || bind != STB_WEAK)
        return;
    static const char *ok[] = {"__gmon_start__", "__cxa_finalize", "_ITM_registerTMCloneTable",
                               "_ITM_deregisterTMCloneTable"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        if (!strcmp(name, ok[i]))
            return;
    if (!strncmp(name, "__asan", 6) || !strncmp(name, "__ubsan", 7) || !strncmp(name, "__lsan", 6) ||
        !strncmp(name, "__sanitizer", 11))
        return;
    snprintf((char *)ud, 256, "%s", name);
}
static void c_weak(void)
{
    char bad[256] = "";
    each_dynsym(weak_cb, bad);
    CHECK(!bad[0], "ABI-4: undefined weak symbol '%s' in the plugin", bad);
}

/* ABI-5: manifest name, version, abi equal the entry's */
static void c_manifest_ids(void)
{
    char v[128], want[32];
    CHECK(manifest_value("name", v, sizeof v) && !strcmp(v, E->name), "ABI-5: manifest name '%s' != entry '%s'",
          manifest_value("name", v, sizeof v) ? v : "?", E->name);
    CHECK(manifest_value("version", v, sizeof v) && !strcmp(v, E->version),
          "ABI-5: manifest version '%s' != entry version '%s'", v, E->version);
    snprintf(want, sizeof want, "%u.%u", E->abi_major, E->abi_minor);
    CHECK(manifest_value("abi", v, sizeof v) && !strcmp(v, want), "ABI-5: manifest abi '%s' != entry %s", v, want);
}

/* ABI-6: every member a declared capability needs is within struct_size, non-NULL, and answers */
#define HAS(m) (A->struct_size >= offsetof(ilab_backend_api_t, m) + sizeof(void *) && A->m)
static void c_members(void)
{
    const char *y = E->manifest_yaml;
    CHECK(HAS(probe) && HAS(create) && HAS(destroy) && HAS(last_error) && HAS(model_info),
          "ABI-6: a lifecycle member is missing");
    if (strstr(y, "tokenizer: true"))
        CHECK(HAS(tokenize) && HAS(detokenize) && HAS(token_piece), "ABI-6: tokenizer member missing");
    if (strstr(y, "logits: full"))
        CHECK(HAS(seq_create) && HAS(seq_free) && HAS(seq_length) && HAS(eval), "ABI-6: logits member missing");
    if (strstr(y, "fork: true"))
        CHECK(HAS(seq_fork), "ABI-6: cache.fork declared, seq_fork missing");
    if (strstr(y, "truncate: true"))
        CHECK(HAS(seq_truncate), "ABI-6: cache.truncate declared, seq_truncate missing");
    if (strstr(y, "stats: true"))
        CHECK(HAS(cache_stats), "ABI-6: cache.stats declared, cache_stats is NULL or past struct_size %u",
              A->struct_size);
    if (strstr(y, "chat: true"))
        CHECK(HAS(eog_ids) && HAS(chat_template), "ABI-6: chat declared, eog_ids/chat_template missing");
    ilab_backend_t *b = mk(NULL);
    ilab_cache_stats_t cs = stats(b);
    (void)cs;
    size_t n;
    CHECK(A->eog_ids(b, NULL, 0, &n) != ILAB_UNSUPPORTED, "ABI-6: eog_ids UNSUPPORTED");
    A->destroy(b);
}

/* ABI-7: create/destroy cycles leave the live heap where it was */
static void cycle(int n)
{
    for (int i = 0; i < n; i++) {
        ilab_backend_t *b = mk(NULL);
        ilab_seq_t s = seq_new(b);
        int32_t t[4] = {300, 301, 302, 303};
        ev_ok(b, s, t, 4, NULL);
        A->destroy(b); /* with the sequence still live */
    }
}
static void c_leak_cycles(void)
{
    cycle(20);
    size_t h0 = live_heap();
    cycle(100);
    size_t h1 = live_heap();
    CHECK(h1 <= h0, "ABI-7: live heap grew by %zu bytes over 100 create/destroy cycles", h1 - h0);
}

/* ABI-8: exactly one defined dynamic symbol */
static void exp_cb(const char *name, int bind, int type, int defined, int abs_, void *ud)
{
    (void)bind, (void)type;
    char *acc = ud;
    if (!defined || abs_)
        return;
    if (!strncmp(name, "__odr_asan", 10) || !strncmp(name, "__asan", 6)) /* sanitizer build artifacts */
        return;
    if (strlen(acc) < 400) {
        strcat(acc, name);
        strcat(acc, " ");
    }
}
static void c_exports(void)
{
    char acc[512] = "";
    each_dynsym(exp_cb, acc);
    CHECK(!strcmp(acc, "ilab_plugin_entry "), "ABI-8: defined dynamic symbols are: %s", acc);
}

/* ABI-9: model_info the same on every call (every byte); manifest max_context */
static void c_mi_stable(void)
{
    ilab_backend_t *b = mk(NULL);
    ilab_model_info_t m1, m2, m3;
    memset(&m1, 0, sizeof m1), memset(&m2, 0, sizeof m2), memset(&m3, 0, sizeof m3);
    m1.struct_size = m2.struct_size = m3.struct_size = sizeof m1;
    CHECK(A->model_info(b, &m1) == ILAB_OK, "model_info failed");
    ilab_seq_t s = seq_new(b);
    int32_t t[5] = {300, 301, 302, 303, 304};
    float *r = rowbuf(1);
    ev_ok(b, s, t, 5, r);
    CHECK(A->model_info(b, &m2) == ILAB_OK, "model_info failed");
    int32_t tt[16];
    tok(b, "hello", 5, 0, tt, 16);
    CHECK(A->model_info(b, &m3) == ILAB_OK, "model_info failed");
    CHECK(!memcmp(&m1, &m2, sizeof m1) && !memcmp(&m2, &m3, sizeof m1),
          "ABI-9: model_info differs between calls (digest '%s' before an eval, '%s' after)", m1.digest,
          m2.digest);
    char v[64];
    if (manifest_value("max_context", v, sizeof v) && atoi(v) != 0)
        CHECK(atoi(v) == m1.max_context, "ABI-9: manifest max_context %s != %d", v, m1.max_context);
    free(r);
    A->destroy(b);
}

/* PRB-1: reason buffer: NUL-terminated, nothing past reason_cap */
static void c_probe_reason(void)
{
    ilab_config_entry_t c = {"model", "/nonexistent/spm/weights.bin"};
    for (size_t cap = 1; cap < 40; cap++) {
        char buf[128];
        memset(buf, 'Z', sizeof buf);
        ilab_status st = A->probe(&HOST, &c, 1, buf, cap);
        CHECK(st == ILAB_UNAVAILABLE, "PRB-1: probe with a missing model file gave %s", ilab_status_name(st));
        for (size_t i = cap; i < sizeof buf; i++)
            CHECK(buf[i] == 'Z', "PRB-1: probe with reason_cap %zu wrote reason[%zu]", cap, i);
        CHECK(memchr(buf, 0, cap), "PRB-1: reason not NUL-terminated within reason_cap %zu", cap);
        if (cap >= 2)
            CHECK(buf[0], "PRB-1: empty reason on UNAVAILABLE");
    }
    char z[4] = "ZZZ";
    CHECK(A->probe(&HOST, &c, 1, z, 0) == ILAB_UNAVAILABLE && z[0] == 'Z',
          "PRB-1: probe with reason_cap 0 wrote the reason");
    CHECK(A->probe(&HOST, &c, 1, NULL, 0) == ILAB_UNAVAILABLE, "PRB-1: probe with NULL reason");
}

/* PRB-1/ERR-5: a configuration value the plugin rejects is INVALID_ARGUMENT in probe and create */
static void c_probe_range(void)
{
    const char *bad[][2] = {{"cache_blocks", "0"}, {"cache_blocks", "65537"}, {"max_sequences", "0"},
                            {"seed", "-1"}, {"logit_scale", "0"}, {"model_name", ""}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ilab_config_entry_t c = {bad[i][0], bad[i][1]};
        char r[512] = "";
        ilab_status st = A->probe(&HOST, &c, 1, r, sizeof r);
        CHECK(st == ILAB_INVALID_ARGUMENT, "PRB-1: probe(%s=%s) gave %s (%s), not INVALID_ARGUMENT",
              bad[i][0], bad[i][1], ilab_status_name(st), r);
        CHECK(strstr(r, bad[i][0]), "ERR-5: probe's reason '%s' does not name the key", r);
        ilab_backend_t *b = (ilab_backend_t *)0x1;
        st = A->create(&HOST, &c, 1, r, sizeof r, &b);
        CHECK(st == ILAB_INVALID_ARGUMENT, "ERR-5: create(%s=%s) gave %s, not INVALID_ARGUMENT",
              bad[i][0], bad[i][1], ilab_status_name(st));
        CHECK(strstr(r, bad[i][0]), "ERR-5: create's message '%s' does not name the key", r);
    }
}

/* PRB-2: create of an unavailable configuration: UNAVAILABLE, the probe's reason, *out untouched */
static void c_probe_create_same(void)
{
    ilab_config_entry_t c = {"model", "/nonexistent/spm/weights.bin"};
    char r1[512], r2[512];
    memset(r1, 0, sizeof r1), memset(r2, 0, sizeof r2);
    ilab_status s1 = A->probe(&HOST, &c, 1, r1, sizeof r1);
    ilab_backend_t *b = (ilab_backend_t *)0x1234;
    ilab_status s2 = A->create(&HOST, &c, 1, r2, sizeof r2, &b);
    CHECK(s1 == ILAB_UNAVAILABLE && s2 == ILAB_UNAVAILABLE, "PRB-2: probe %s, create %s",
          ilab_status_name(s1), ilab_status_name(s2));
    CHECK(!strcmp(r1, r2), "PRB-2: create's reason '%s' differs from probe's '%s'", r2, r1);
    CHECK(b == (ilab_backend_t *)0x1234, "PRB-2: create wrote *out on UNAVAILABLE");
}

/* PRB-3: probe repeatable, no side effects: an earlier probe never changes a later answer */
static void c_probe_repeat(void)
{
    ilab_config_entry_t ca = {"model", "/nonexistent/spm/weights.bin"}, cb = {"seed", "5"};
    char r[512];
    ilab_status a1 = A->probe(&HOST, &ca, 1, r, sizeof r);
    char ra1[512];
    strcpy(ra1, r);
    ilab_status b1 = A->probe(&HOST, &cb, 1, r, sizeof r);
    ilab_status a2 = A->probe(&HOST, &ca, 1, r, sizeof r);
    CHECK(a1 == ILAB_UNAVAILABLE, "PRB-1: probe(missing model) gave %s", ilab_status_name(a1));
    CHECK(a2 == a1 && !strcmp(r, ra1), "PRB-3: probe(missing model) gave %s then %s", ilab_status_name(a1),
          ilab_status_name(a2));
    ilab_backend_t *b = mk("seed", "5", NULL);
    A->destroy(b);
    CHECK(b1 == ILAB_OK, "PRB-3/PRB-2: probe(seed=5) gave %s after probe(missing model), yet create(seed=5) "
          "succeeds", ilab_status_name(b1));
}

/* TOK-1: model_info fields; name NUL-terminated also for the longest configured name */
static void check_tok1(ilab_backend_t *b)
{
    ilab_model_info_t mi;
    memset(&mi, 0x5A, sizeof mi);
    mi.struct_size = sizeof mi;
    CHECK(A->model_info(b, &mi) == ILAB_OK, "model_info failed");
    CHECK(mi.vocab_size > 0 && mi.max_context > 0, "TOK-1: vocab_size %d max_context %d", mi.vocab_size,
          mi.max_context);
    CHECK((mi.bos_id >= -1 && mi.bos_id < mi.vocab_size) && (mi.eos_id >= -1 && mi.eos_id < mi.vocab_size),
          "TOK-1: bos %d eos %d", mi.bos_id, mi.eos_id);
    CHECK(memchr(mi.name, 0, sizeof mi.name) && mi.name[0], "TOK-1: name is empty or not NUL-terminated");
    CHECK(memchr(mi.digest, 0, sizeof mi.digest), "TOK-1: digest not NUL-terminated");
    CHECK(!mi.digest[0] || !strncmp(mi.digest, "sha256:", 7), "TOK-1: digest '%s'", mi.digest);
}
static void c_tok1(void)
{
    char n63[64], n64[65];
    memset(n63, 'x', 63), n63[63] = 0;
    memset(n64, 'y', 64), n64[64] = 0;
    ilab_backend_t *b = mk("model_name", n63, NULL);
    check_tok1(b);
    A->destroy(b);
    char err[256];
    ilab_status st = mk_try(&b, err, sizeof err, "model_name", n64, NULL);
    if (st == ILAB_OK) {
        check_tok1(b);
        A->destroy(b);
    }
}

/* TOK-3: every id tokenize returns is in [0, vocab_size) */
static const char *texts[] = {
    "hello world", "Hello world, the quick brown fox jumps over the lazy dog.", " leading", "trailing ",
    "  repeated   spaces  ", "tabs\tand\nnewlines\r\nCRLF", "caf\xC3\xA9 \xC3\xBC" "ber na\xC3\xAFve",
    "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xE4\xB8\xAD\xE6\x96\x87", "emoji \xF0\x9F\x98\x80\xF0\x9F\x98\x81!",
    "e\xCC\x81 combining", "\xE2\x96\x81literal marker\xE2\x96\x81", "<|im_end|> <s></s> <|end|>", "x",
    " ", "  ", "\x01\x02\x1F control", "world world world", "1234567890 {}[]()<>|\\/",
};
#define NTEXTS (sizeof texts / sizeof *texts)
static void c_tok3(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t t[512], t2[512];
    for (size_t i = 0; i < NTEXTS; i++) {
        size_t n = tok(b, texts[i], strlen(texts[i]), 0, t, 512);
        for (size_t j = 0; j < n; j++)
            CHECK(t[j] >= 0 && t[j] < VOC, "TOK-3: tokenize(\"%s\") returned id %d, vocab_size %d", texts[i],
                  t[j], VOC);
        size_t n2 = tok(b, texts[i], strlen(texts[i]), 0, t2, 512);
        CHECK(n == n2 && !memcmp(t, t2, n * 4), "TOK-3: tokenize not deterministic");
    }
    A->destroy(b);
}

static void roundtrip(ilab_backend_t *b, const char *s, size_t len, const char *clause)
{
    int32_t *t = malloc((len + 16) * 4);
    char *out = malloc(len * 4 + 64);
    size_t n = tok(b, s, len, 0, t, len + 16);
    size_t m = detok(b, t, n, out, len * 4 + 64);
    CHECK(m == len && !memcmp(out, s, len), "%s: detokenize(tokenize(s)) != s for s = \"%.*s\" (%zu bytes; got "
          "%zu bytes \"%.*s\")", clause, (int)len, s, len, m, (int)m, out);
    free(t);
    free(out);
}

/* TOK-2: round trip, including U+0000 */
static void c_tok2_nul(void)
{
    ilab_backend_t *b = mk(NULL);
    for (size_t i = 0; i < NTEXTS; i++)
        roundtrip(b, texts[i], strlen(texts[i]), "TOK-2");
    roundtrip(b, "a\0b c\0", 6, "TOK-2");
    roundtrip(b, "\0", 1, "TOK-2");
    roundtrip(b, "x\0\0 y", 5, "TOK-2");
    A->destroy(b);
}

/* TOK-4: pieces concatenate to detokenize, for every sequence of in-range ids */
static void pieces_eq(ilab_backend_t *b, const int32_t *t, size_t n)
{
    char d[4096], p[4096], one[256];
    size_t dl = detok(b, t, n, d, sizeof d), pl = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = 0;
        ilab_status st = A->token_piece(b, i ? t[i - 1] : -1, t[i], one, sizeof one, &l);
        CHECK(st == ILAB_OK, "token_piece(%d, %d) gave %s", i ? t[i - 1] : -1, t[i], ilab_status_name(st));
        memcpy(p + pl, one, l);
        pl += l;
    }
    if (pl != dl || memcmp(p, d, dl)) {
        char ids[256] = "";
        for (size_t i = 0; i < n && strlen(ids) < 200; i++)
            sprintf(ids + strlen(ids), "%d ", t[i]);
        viol("TOK-4: pieces of [%s] give \"%.*s\", detokenize gives \"%.*s\"", ids, (int)pl, p, (int)dl, d);
    }
}
static void c_tok4(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t t[512];
    for (size_t i = 0; i < NTEXTS; i++) {
        size_t n = tok(b, texts[i], strlen(texts[i]), ILAB_TOKENIZE_ADD_BOS | ILAB_TOKENIZE_ADD_EOS, t, 512);
        pieces_eq(b, t, n);
        n = tok(b, texts[i], strlen(texts[i]), 0, t, 512);
        pieces_eq(b, t, n);
    }
    uint32_t seed = 7;
    for (int k = 0; k < 3000; k++) {
        int n = 1 + k % 9;
        for (int i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            t[i] = (int32_t)((seed >> 8) % (uint32_t)VOC);
        }
        pieces_eq(b, t, (size_t)n);
    }
    A->destroy(b);
}

/* TOK-2 with the other setting of add_dummy_prefix */
static void c_tok2_noprefix(void)
{
    const char *extra[] = {" hello", "  two spaces", " ", "hello world", " the end "};
    for (int pass = 0; pass < 2; pass++) {
        ilab_backend_t *b = mk("add_dummy_prefix", pass ? "false" : "true", NULL);
        for (size_t i = 0; i < NTEXTS; i++)
            roundtrip(b, texts[i], strlen(texts[i]), pass ? "TOK-2 (add_dummy_prefix=false)" : "TOK-2");
        for (size_t i = 0; i < sizeof extra / sizeof *extra; i++)
            roundtrip(b, extra[i], strlen(extra[i]), pass ? "TOK-2 (add_dummy_prefix=false)" : "TOK-2");
        A->destroy(b);
    }
}

/* TOK-5: invalid UTF-8 round-trips or is INVALID_ARGUMENT; the input ends at len */
static void c_tok5_invalid(void)
{
    ilab_backend_t *b = mk(NULL);
    const struct { const char *buf; size_t len; } cases[] = {
        {"ab\xF0XYZ", 3}, {"ab\xE2\x82" "cdef", 4}, {"\xC3", 1}, {"\xF0\x9F\x98" "ok", 3}, {"\x80\xBF", 2},
        {"\xC0\xAF", 2}, {"\xED\xA0\x80", 3}, {"x\xFF\xFE", 3}, {"\xE2\x96", 2}, {"hi \xF4", 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int32_t t[64];
        size_t n = 0;
        ilab_status st = A->tokenize(b, cases[i].buf, cases[i].len, 0, t, 64, &n);
        if (st == ILAB_INVALID_ARGUMENT)
            continue;
        CHECK(st == ILAB_OK, "TOK-5: tokenize of invalid UTF-8 gave %s", ilab_status_name(st));
        char out[256];
        size_t m = detok(b, t, n, out, sizeof out);
        CHECK(m == cases[i].len && !memcmp(out, cases[i].buf, m),
              "TOK-5: invalid UTF-8 case %zu (%zu bytes) neither refused nor round-tripped: got %zu bytes", i,
              cases[i].len, m);
    }
    A->destroy(b);
}

/* TOK-5: empty input gives zero tokens (plus BOS/EOS when asked) */
static void c_tok5_empty(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t t[8];
    size_t n = tok(b, "", 0, 0, t, 8);
    CHECK(n == 0, "TOK-5: tokenize(\"\") gave %zu tokens (first %d)", n, n ? t[0] : -1);
    n = tok(b, NULL, 0, 0, t, 8);
    CHECK(n == 0, "TOK-5: tokenize(NULL, 0) gave %zu tokens", n);
    n = tok(b, "", 0, ILAB_TOKENIZE_ADD_BOS | ILAB_TOKENIZE_ADD_EOS, t, 8);
    CHECK(n == 2 && t[0] == BOSID && t[1] == EOSID, "TOK-5: tokenize(\"\", BOS|EOS) gave %zu tokens", n);
    A->destroy(b);
}

/* TOK-6: an out-of-range id is INVALID_ARGUMENT and writes nothing */
static void c_tok6(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t bad[][3] = {{300, 301, VOC}, {300, -1, 301}, {VOC + 5, 300, 300}, {300, 300, -2}};
    for (int k = 0; k < 4; k++) {
        char buf[256];
        memset(buf, 'Q', sizeof buf);
        size_t len = 777;
        ilab_status st = A->detokenize(b, bad[k], 3, buf, sizeof buf, &len);
        CHECK(st == ILAB_INVALID_ARGUMENT, "TOK-6: detokenize with id out of range gave %s", ilab_status_name(st));
        for (size_t i = 0; i < sizeof buf; i++)
            CHECK(buf[i] == 'Q', "TOK-6: detokenize refused an out-of-range id but wrote text[%zu]", i);
        CHECK(len == 777, "TOK-6: detokenize refused but wrote *len");
    }
    char buf[64];
    size_t len = 5;
    int32_t pv[] = {-2, VOC, VOC + 100};
    for (int k = 0; k < 3; k++)
        CHECK(A->token_piece(b, pv[k], 300, buf, sizeof buf, &len) == ILAB_INVALID_ARGUMENT,
              "TOK-6: token_piece prev %d accepted", pv[k]);
    CHECK(A->token_piece(b, -1, VOC, buf, sizeof buf, &len) == ILAB_INVALID_ARGUMENT, "TOK-6: token vocab_size");
    A->destroy(b);
}

/* TOK-7: tokenize() caller buffer at every capacity */
static void c_tok7_tokenize(void)
{
    ilab_backend_t *b = mk(NULL);
    for (size_t k = 0; k < NTEXTS; k++) {
        const char *s = texts[k];
        size_t need = 0;
        CHECK(A->tokenize(b, s, strlen(s), ILAB_TOKENIZE_ADD_BOS, NULL, 0, &need) == ILAB_BUFFER_TOO_SMALL,
              "TOK-7: size query failed");
        for (size_t cap = 0; cap <= need; cap++) {
            int32_t t[600];
            for (int i = 0; i < 600; i++)
                t[i] = -99;
            size_t n = 0;
            ilab_status st = A->tokenize(b, s, strlen(s), ILAB_TOKENIZE_ADD_BOS, t, cap, &n);
            if (cap < need) {
                CHECK(st == ILAB_BUFFER_TOO_SMALL && n == need, "TOK-7: tokenize cap %zu < %zu gave %s n %zu", cap,
                      need, ilab_status_name(st), n);
                for (int i = 0; i < 600; i++)
                    CHECK(t[i] == -99, "TOK-7: tokenize with cap %zu < needed %zu wrote tokens[%d]", cap, need, i);
            } else {
                CHECK(st == ILAB_OK && n == need, "TOK-7: tokenize with cap == need gave %s", ilab_status_name(st));
                for (int i = (int)n; i < 600; i++)
                    CHECK(t[i] == -99, "TOK-7: tokenize wrote past n");
            }
        }
    }
    A->destroy(b);
}

/* TOK-7: detokenize() / token_piece() at every capacity, cap == len included */
static void c_tok7_detok(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t t[64];
    size_t n = tok(b, "hello world, the end", 20, 0, t, 64);
    size_t len = 0;
    CHECK(A->detokenize(b, t, n, NULL, 0, &len) == ILAB_BUFFER_TOO_SMALL && len == 20,
          "TOK-7: detokenize size query gave len %zu", len);
    for (size_t cap = 0; cap <= len + 1; cap++) {
        char buf[64];
        memset(buf, 'Q', sizeof buf);
        size_t l = 0;
        ilab_status st = A->detokenize(b, t, n, buf, cap, &l);
        if (cap < len + 1) {
            CHECK(st == ILAB_BUFFER_TOO_SMALL && l == len, "TOK-7: detokenize cap %zu (len %zu) gave %s", cap, len,
                  ilab_status_name(st));
            for (size_t i = 0; i < sizeof buf; i++)
                CHECK(buf[i] == 'Q', "TOK-7: detokenize with cap %zu wrote byte %zu", cap, i);
        } else {
            CHECK(st == ILAB_OK && l == len && buf[len] == 0 && buf[len + 1] == 'Q', "TOK-7: detokenize cap len+1");
        }
    }
    A->destroy(b);
}

/* TOK-8: ADD_BOS / ADD_EOS around exactly tokenize(s, 0) */
static void c_tok8(void)
{
    ilab_backend_t *b = mk(NULL);
    for (size_t k = 0; k < NTEXTS; k++) {
        const char *s = texts[k];
        int32_t t0[512], t1[512];
        size_t n0 = tok(b, s, strlen(s), 0, t0, 512);
        uint32_t fl[3] = {ILAB_TOKENIZE_ADD_BOS, ILAB_TOKENIZE_ADD_EOS, ILAB_TOKENIZE_ADD_BOS | ILAB_TOKENIZE_ADD_EOS};
        for (int f = 0; f < 3; f++) {
            size_t n1 = tok(b, s, strlen(s), fl[f], t1, 512);
            int hb = !!(fl[f] & 1), he = !!(fl[f] & 2);
            CHECK(n1 == n0 + (size_t)hb + (size_t)he && (!hb || t1[0] == BOSID) && (!he || t1[n1 - 1] == EOSID) &&
                  !memcmp(t1 + hb, t0, n0 * 4), "TOK-8: tokenize(\"%s\", flags %u) is not tokenize(s, 0) with "
                  "BOS/EOS around it (%zu vs %zu ids)", s, fl[f], n1, n0);
        }
    }
    int32_t t[8];
    size_t n = 0;
    CHECK(A->tokenize(b, "a", 1, 1u << 5, t, 8, &n) == ILAB_INVALID_ARGUMENT, "TOK-8: unknown flag bit accepted");
    A->destroy(b);
}

/* TOK-9: BOS/EOS decode to "" and never come out of tokenize without the flags */
static void c_tok9(void)
{
    ilab_backend_t *b = mk(NULL);
    char buf[64];
    int32_t t[2] = {BOSID, EOSID};
    CHECK(detok(b, t, 2, buf, sizeof buf) == 0, "TOK-9: detokenize([BOS, EOS]) = \"%s\"", buf);
    CHECK(detok(b, &t[1], 1, buf, sizeof buf) == 0, "TOK-9: detokenize([EOS]) = \"%s\"", buf);
    int32_t prevs[] = {-1, BOSID, EOSID, 300, 10};
    for (int i = 0; i < 5; i++)
        for (int k = 0; k < 2; k++) {
            size_t l = 99;
            CHECK(A->token_piece(b, prevs[i], t[k], buf, sizeof buf, &l) == ILAB_OK && l == 0,
                  "TOK-9: token_piece(%d, %d) = \"%.*s\"", prevs[i], t[k], (int)l, buf);
        }
    int32_t tt[64];
    size_t n = tok(b, "<s> </s> hi", 11, 0, tt, 64);
    for (size_t i = 0; i < n; i++)
        CHECK(tt[i] != BOSID && tt[i] != EOSID, "TOK-9: tokenize returned BOS/EOS without flags");
    A->destroy(b);
}

/* TOK-11: PARSE_SPECIAL: the text of each eog id other than EOS gives exactly [t] */
static void c_tok11(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t ids[16];
    size_t n = 0;
    CHECK(A->eog_ids(b, ids, 16, &n) == ILAB_OK, "eog_ids failed");
    for (size_t i = 0; i < n; i++) {
        if (ids[i] == EOSID)
            continue;
        char txt[128];
        size_t l = detok(b, &ids[i], 1, txt, sizeof txt);
        if (!l)
            continue;
        uint32_t fl[4] = {0, ILAB_TOKENIZE_ADD_BOS, ILAB_TOKENIZE_ADD_EOS, 3};
        for (int f = 0; f < 4; f++) {
            int32_t t[64];
            size_t m = tok(b, txt, l, ILAB_TOKENIZE_PARSE_SPECIAL | fl[f], t, 64);
            int hb = fl[f] & 1, he = !!(fl[f] & 2);
            CHECK(m == 1u + (size_t)hb + (size_t)he && t[hb] == ids[i],
                  "TOK-11: tokenize(\"%s\", PARSE_SPECIAL|%u) gave %zu ids (first %d), not [%d]", txt, fl[f], m,
                  t[0], ids[i]);
        }
    }
    for (size_t k = 0; k < NTEXTS; k++) {
        if (strstr(texts[k], "<|"))
            continue;
        int32_t a[512], c[512];
        size_t na = tok(b, texts[k], strlen(texts[k]), 0, a, 512);
        size_t nc = tok(b, texts[k], strlen(texts[k]), ILAB_TOKENIZE_PARSE_SPECIAL, c, 512);
        CHECK(na == nc && !memcmp(a, c, na * 4), "TOK-11: \"%s\" spells no special token but gives other ids "
              "with PARSE_SPECIAL", texts[k]);
    }
    A->destroy(b);
}

/* TOK-11: without the flag a special's text is plain text, whatever other flags are set */
static void c_tok11_plain(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t ids[16];
    size_t n = 0;
    CHECK(A->eog_ids(b, ids, 16, &n) == ILAB_OK, "eog_ids failed");
    const char *s = "<|im_start|>user hi<|im_end|><|end|>";
    uint32_t fl[4] = {0, ILAB_TOKENIZE_ADD_BOS, ILAB_TOKENIZE_ADD_EOS, 3};
    for (int f = 0; f < 4; f++) {
        int32_t t[128];
        size_t m = tok(b, s, strlen(s), fl[f], t, 128);
        for (size_t j = 0; j < m; j++)
            for (size_t i = 0; i < n; i++)
                CHECK(t[j] != ids[i] || (ids[i] == EOSID && (fl[f] & 2) && j == m - 1),
                      "TOK-11: tokenize without PARSE_SPECIAL (flags %u) returned end-of-generation id %d", fl[f],
                      ids[i]);
    }
    int32_t t[8];
    CHECK(tok(b, "<|im_end|>", 10, ILAB_TOKENIZE_PARSE_SPECIAL, t, 8) == 1, "TOK-11: <|im_end|> with the flag");
    A->destroy(b);
}

/* TOK-12: eog_ids: EOS first, the rest ascending, each once, in range, sizes */
static void c_tok12(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t ids[16];
    size_t n = 0;
    CHECK(A->eog_ids(b, NULL, 0, &n) == ILAB_BUFFER_TOO_SMALL && n >= 1, "TOK-12: size query");
    size_t need = n;
    CHECK(A->eog_ids(b, ids, 16, &n) == ILAB_OK && n == need, "TOK-12: eog_ids");
    CHECK(EOSID < 0 || ids[0] == EOSID, "TOK-12: first eog id is %d, EOS is %d", ids[0], EOSID);
    for (size_t i = 0; i < n; i++) {
        CHECK(ids[i] >= 0 && ids[i] < VOC, "TOK-12: id out of range");
        if (i >= 2)
            CHECK(ids[i] > ids[i - 1], "TOK-12: ids after EOS not ascending");
        for (size_t j = 0; j < i; j++)
            CHECK(ids[i] != ids[j], "TOK-12: duplicate id");
    }
    A->destroy(b);
}

/* TOK-13: chat_template sizes as detokenize, no NUL inside, stable */
static void c_tok13(void)
{
    ilab_backend_t *b = mk(NULL);
    size_t len = 0;
    ilab_status st = A->chat_template(b, NULL, 0, &len);
    CHECK(st == ILAB_BUFFER_TOO_SMALL || (st == ILAB_OK && len == 0), "TOK-13: size query gave %s", ilab_status_name(st));
    char *ref = malloc(len + 1);
    size_t l = 0;
    CHECK(A->chat_template(b, ref, len + 1, &l) == ILAB_OK && l == len && ref[len] == 0, "TOK-13: cap len+1");
    CHECK(strlen(ref) == len, "TOK-13: NUL inside the template");
    for (size_t cap = 0; cap <= len; cap++) {
        char *buf = malloc(len + 16);
        memset(buf, 'Q', len + 16);
        size_t ll = 0;
        st = A->chat_template(b, buf, cap, &ll);
        CHECK(st == ILAB_BUFFER_TOO_SMALL && ll == len, "TOK-13: chat_template with cap %zu (len %zu) gave %s", cap,
              len, ilab_status_name(st));
        for (size_t i = 0; i < len + 16; i++)
            CHECK(buf[i] == 'Q', "TOK-13: chat_template with cap %zu wrote byte %zu", cap, i);
        free(buf);
    }
    free(ref);
    A->destroy(b);
}

/* LOG-1: exactly the rows, every float finite, nothing outside */
static void c_log1(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t t[5] = {300, 301, 302, 303, 304};
    for (int all = 0; all < 2; all++) {
        size_t rows = all ? 5 : 1, tot = rows * (size_t)VOC + 64;
        float *r = malloc(tot * sizeof *r);
        for (size_t i = 0; i < tot; i++)
            r[i] = -12345.0f;
        ilab_seq_t s = seq_new(b);
        CHECK(ev1(b, s, t, 5, all ? ILAB_EVAL_ALL_LOGITS : 0, r) == ILAB_OK, "eval failed");
        for (size_t i = 0; i < rows * (size_t)VOC; i++)
            CHECK(isfinite(r[i]) && r[i] != -12345.0f, "LOG-1: float %zu of the rows not written/finite", i);
        for (size_t i = rows * (size_t)VOC; i < tot; i++)
            CHECK(r[i] == -12345.0f, "LOG-1: eval wrote float %zu, past its %zu row(s) of %d", i, rows, VOC);
        free(r);
        A->seq_free(b, s);
    }
    A->destroy(b);
}

/* LOG-2: every instance with the same configuration gives the same logits, whatever came
 * before it in the process (compared across two processes) */
static void logits_seed7(float **out, int first_other)
{
    ilab_model_info_t mi;
    memset(&mi, 0, sizeof mi);
    mi.struct_size = sizeof mi;
    if (first_other) {
        ilab_backend_t *o = mk("seed", "3", NULL);
        A->model_info(o, &mi);
        VOC = mi.vocab_size;
        float *r = rowbuf(1);
        int32_t t[3] = {400, 401, 402};
        fresh(o, t, 3, r);
        free(r);
        A->destroy(o);
    }
    ilab_backend_t *b = mk("seed", "7", NULL);
    A->model_info(b, &mi);
    VOC = mi.vocab_size;
    *out = rowbuf(1);
    int32_t t[6] = {300, 310, 320, 330, 340, 350};
    fresh(b, t, 6, *out);
    A->destroy(b);
}
static void c_log2_instances(void)
{
    /* no instance exists in this process yet (main skips load_info for this case) */
    int fd[2];
    CHECK(pipe(fd) == 0, "pipe");
    pid_t p = fork();
    if (p == 0) {
        float *r;
        logits_seed7(&r, 0);
        ssize_t w = write(fd[1], r, (size_t)VOC * sizeof(float));
        _exit(w == (ssize_t)((size_t)VOC * sizeof(float)) ? 0 : 1);
    }
    float *r;
    logits_seed7(&r, 1);
    float *ref = rowbuf(1);
    size_t got = 0;
    while (got < (size_t)VOC * sizeof(float)) {
        ssize_t k = read(fd[0], (char *)ref + got, (size_t)VOC * sizeof(float) - got);
        CHECK(k > 0, "LOG-2: reference process failed");
        got += (size_t)k;
    }
    waitpid(p, NULL, 0);
    CHECK(!memcmp(r, ref, (size_t)VOC * sizeof(float)),
          "LOG-2: an instance with seed=7 created after an instance with seed=3 gives other logits than one "
          "created first (argmax %d vs %d)", argmax(r), argmax(ref));
}

/* LOG-2: the same tokens in a fresh sequence: bit-identical logits after any history */
static void c_log2_history(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t t[7] = {300, 320, 12, 330, 400, 401, 402};
    float *r1 = rowbuf(1), *r2 = rowbuf(1);
    fresh(b, t, 7, r1);
    ilab_seq_t keep[3];
    for (int i = 0; i < 3; i++) {
        keep[i] = seq_new(b);
        ev_ok(b, keep[i], t + i, 3, NULL);
        fresh(b, t, 7, r2);
        CHECK(!memcmp(r1, r2, (size_t)VOC * 4), "LOG-2: the same 7 tokens in a fresh sequence give other logits "
              "while %d other sequence(s) are live (argmax %d vs %d)", i + 1, argmax(r2), argmax(r1));
    }
    for (int i = 0; i < 3; i++)
        A->seq_free(b, keep[i]);
    fresh(b, t, 7, r2);
    CHECK(!memcmp(r1, r2, (size_t)VOC * 4), "LOG-2: logits changed after history");
    A->destroy(b);
}

/* LOG-3: items beside others in one batch equal their logits alone */
static void c_log3(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t pa[9], pb[6], pc[11], pd[1] = {350};
    prompt(pa, 9, 1), prompt(pb, 6, 2), prompt(pc, 11, 3);
    float *ra = rowbuf(1), *rb = rowbuf(1), *rc = rowbuf(1), *rd = rowbuf(1), *x = rowbuf(1);
    /* alone */
    ilab_seq_t a = seq_new(b);
    ev_ok(b, a, pa, 9, NULL);
    int32_t full[10];
    memcpy(full, pa, sizeof pa);
    full[9] = 350;
    /* batch: decode on a, prefill b, prefill c, prefill d */
    ilab_seq_t sb = seq_new(b), sc = seq_new(b), sd = seq_new(b);
    ilab_batch_item_t it[4] = {item(a, pd, 1, 0, ra), item(sb, pb, 6, 0, rb), item(sc, pc, 11, 0, rc),
                               item(sd, pd, 1, 0, rd)};
    const ilab_batch_item_t *p[4] = {&it[0], &it[1], &it[2], &it[3]};
    CHECK(A->eval(b, p, 4) == ILAB_OK, "eval of a batch of 4 failed");
    fresh(b, full, 10, x);
    CHECK(tol_eq(ra, x), "LOG-3: decode item 0 differs from alone");
    fresh(b, pb, 6, x);
    CHECK(tol_eq(rb, x), "LOG-3: prefill of a fresh sequence at batch position 1 differs from the same prefill alone");
    fresh(b, pc, 11, x);
    CHECK(tol_eq(rc, x), "LOG-3: prefill at batch position 2 differs from alone");
    fresh(b, pd, 1, x);
    CHECK(tol_eq(rd, x), "LOG-3: prefill at batch position 3 differs from alone");
    A->destroy(b);
}

/* LOG-5: ALL_LOGITS into a non-empty sequence: n_tokens rows, row i after token i */
static void c_log5(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t t[6];
    prompt(t, 6, 9);
    ilab_seq_t s = seq_new(b);
    ev_ok(b, s, t, 3, NULL);
    size_t tot = 8 * (size_t)VOC;
    float *r = malloc(tot * 4);
    for (size_t i = 0; i < tot; i++)
        r[i] = -777.0f;
    CHECK(ev1(b, s, t + 3, 3, ILAB_EVAL_ALL_LOGITS, r) == ILAB_OK, "eval failed");
    for (size_t i = 3 * (size_t)VOC; i < tot; i++)
        CHECK(r[i] == -777.0f, "LOG-5/LOG-1: eval of 3 tokens with ALL_LOGITS wrote float %zu (row %zu)", i,
              i / (size_t)VOC);
    float *x = rowbuf(1);
    for (int i = 0; i < 3; i++) {
        fresh(b, t, 4 + i, x);
        CHECK(tol_eq(r + (size_t)i * VOC, x), "LOG-5: row %d is not the logits after the prefix of %d tokens", i, 4 + i);
    }
    A->destroy(b);
}

/* LOG-6: every n_items from 1 to max_batch accepted, max_batch+1 and 0 refused */
static void c_log6_batch(void)
{
    char v[32];
    int mb = manifest_value("max_batch", v, sizeof v) ? atoi(v) : 0;
    if (!mb) { /* "batching: {max_batch: 32}" */
        const char *p = strstr(E->manifest_yaml, "max_batch:");
        mb = p ? atoi(p + 10) : 1;
    }
    ilab_backend_t *b = mk(NULL);
    ilab_seq_t s[64];
    int32_t t[1] = {300};
    ilab_batch_item_t it[64];
    const ilab_batch_item_t *p[64];
    for (int i = 0; i < mb + 1; i++) {
        s[i] = seq_new(b);
        it[i] = item(s[i], t, 1, 0, NULL);
        p[i] = &it[i];
    }
    for (int n = 1; n <= mb; n++) {
        ilab_status st = A->eval(b, p, (size_t)n);
        CHECK(st == ILAB_OK, "LOG-6: eval of %d items (max_batch %d) gave %s", n, mb, ilab_status_name(st));
        for (int i = 0; i < n; i++)
            A->seq_truncate(b, s[i], 0);
    }
    CHECK(A->eval(b, p, (size_t)mb + 1) == ILAB_INVALID_ARGUMENT, "LOG-6: max_batch+1 items accepted");
    CHECK(A->eval(b, p, 0) == ILAB_INVALID_ARGUMENT, "LOG-6: 0 items accepted");
    A->destroy(b);
}

/* LOG-6: bad items refused, nothing changed */
static void c_log6_items(void)
{
    ilab_backend_t *b = mk(NULL);
    ilab_seq_t s = seq_new(b);
    int32_t t[2] = {300, 301};
    ev_ok(b, s, t, 2, NULL);
    ilab_batch_item_t it = item(s, t, 0, 0, NULL);
    const ilab_batch_item_t *p = &it;
    ilab_status st = A->eval(b, &p, 1);
    CHECK(st == ILAB_INVALID_ARGUMENT, "LOG-6: an item with n_tokens 0 gave %s", ilab_status_name(st));
    CHECK(seqlen(b, s) == 2, "LOG-6: refused item changed the length");
    it = item(s, NULL, 1, 0, NULL);
    CHECK(A->eval(b, &p, 1) == ILAB_INVALID_ARGUMENT, "LOG-6: NULL tokens accepted");
    it = item(s, t, -1, 0, NULL);
    CHECK(A->eval(b, &p, 1) == ILAB_INVALID_ARGUMENT, "LOG-6: n_tokens -1 accepted");
    it = item(s, t, 1, 1u << 4, NULL);
    CHECK(A->eval(b, &p, 1) == ILAB_INVALID_ARGUMENT, "LOG-6: unknown flag accepted");
    const ilab_batch_item_t *np[1] = {NULL};
    CHECK(A->eval(b, np, 1) == ILAB_INVALID_ARGUMENT, "LOG-6: NULL item accepted");
    ilab_batch_item_t i2[2] = {item(s, t, 1, 0, NULL), item(s, t, 1, 0, NULL)};
    const ilab_batch_item_t *pp[2] = {&i2[0], &i2[1]};
    CHECK(A->eval(b, pp, 2) == ILAB_INVALID_ARGUMENT, "LOG-6: one sequence named by two items accepted");
    CHECK(seqlen(b, s) == 2, "LOG-6: refused items changed the length");
    A->destroy(b);
}

/* CCH-1: prefill then decode one token at a time equals full recomputation */
static void c_cch1(void)
{
    ilab_backend_t *b = mk(NULL);
    enum { N = 40 };
    int32_t t[N];
    prompt(t, N, 11);
    float *rows = rowbuf(N), *r = rowbuf(1);
    ilab_seq_t all = seq_new(b);
    CHECK(ev1(b, all, t, N, ILAB_EVAL_ALL_LOGITS, rows) == ILAB_OK, "eval failed");
    ilab_seq_t s = seq_new(b);
    ev_ok(b, s, t, 3, r);
    for (int i = 3; i < N; i++) {
        ev_ok(b, s, t + i, 1, r);
        CHECK(tol_eq(r, rows + (size_t)i * VOC), "CCH-1: decode at position %d differs from a full recomputation", i);
    }
    A->destroy(b);
}

/* CCH-2: any split into chunks gives the same rows */
static void c_cch2(void)
{
    ilab_backend_t *b = mk(NULL);
    enum { N = 30 };
    int32_t t[N];
    prompt(t, N, 12);
    float *ref = rowbuf(N), *rows = rowbuf(N);
    ilab_seq_t a = seq_new(b);
    CHECK(ev1(b, a, t, N, ILAB_EVAL_ALL_LOGITS, ref) == ILAB_OK, "eval failed");
    int chunks[] = {7, 1, 12, 10};
    ilab_seq_t s = seq_new(b);
    int off = 0;
    for (int c = 0; c < 4; c++) {
        CHECK(ev1(b, s, t + off, chunks[c], ILAB_EVAL_ALL_LOGITS, rows + (size_t)off * VOC) == ILAB_OK, "eval failed");
        off += chunks[c];
    }
    for (int i = 0; i < N; i++)
        CHECK(tol_eq(rows + (size_t)i * VOC, ref + (size_t)i * VOC), "CCH-2: chunks 7+1+12+10: row %d differs from the "
              "prompt in one call", i);
    A->destroy(b);
}

/* CCH-3: fork isolation */
static void expect_next(ilab_backend_t *b, ilab_seq_t s, const int32_t *hist, int n, int32_t next, const char *what)
{
    float *r = rowbuf(1), *x = rowbuf(1);
    ev_ok(b, s, &next, 1, r);
    int32_t *full = malloc((size_t)(n + 1) * 4);
    memcpy(full, hist, (size_t)n * 4);
    full[n] = next;
    fresh(b, full, n + 1, x);
    CHECK(tol_eq(r, x), "%s", what);
    free(full), free(r), free(x);
}
static void c_cch3(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t p[5] = {300, 301, 302, 303, 304};
    ilab_seq_t par = seq_new(b);
    ev_ok(b, par, p, 5, NULL);
    ilab_seq_t ch = 0;
    CHECK(A->seq_fork(b, par, &ch) == ILAB_OK, "seq_fork failed");
    CHECK(seqlen(b, ch) == 5, "CCH-3: child length %d", seqlen(b, ch));
    int32_t hp[7] = {300, 301, 302, 303, 304, 410, 0}, hc[7] = {300, 301, 302, 303, 304, 420, 0};
    expect_next(b, par, hp, 5, 410, "CCH-3: parent's first append after the fork");
    expect_next(b, ch, hc, 5, 420, "CCH-3: child's first append");
    expect_next(b, par, hp, 6, 411, "CCH-3: parent's decode after the child appended (the child changed it)");
    expect_next(b, ch, hc, 6, 421, "CCH-3: child's decode after the parent appended");
    /* fork of a fork, then free the parent */
    ilab_seq_t g = 0;
    CHECK(A->seq_fork(b, ch, &g) == ILAB_OK, "fork of fork failed");
    A->seq_free(b, ch);
    int32_t hg[8] = {300, 301, 302, 303, 304, 420, 421, 0};
    ilab_seq_t other = seq_new(b);
    int32_t junk[20];
    prompt(junk, 20, 5);
    ev_ok(b, other, junk, 20, NULL);
    expect_next(b, g, hg, 7, 430, "CCH-3: fork of a fork after its parent was freed");
    A->destroy(b);
}

/* CCH-4: truncate keeps the first n positions */
static void c_cch4(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t t[12];
    prompt(t, 12, 21);
    ilab_seq_t a = seq_new(b);
    ev_ok(b, a, t, 12, NULL);
    CHECK(A->seq_truncate(b, a, 10) == ILAB_OK, "truncate failed");
    CHECK(seqlen(b, a) == 10, "CCH-4: length %d after truncate to 10", seqlen(b, a));
    ilab_seq_t o = seq_new(b);
    int32_t junk[16];
    prompt(junk, 16, 22);
    ev_ok(b, o, junk, 16, NULL);
    expect_next(b, a, t, 10, 333, "CCH-4: append after truncate to 10 (of 12), with another sequence evaluated "
                "in between, differs from a fresh sequence holding the kept tokens");
    CHECK(A->seq_truncate(b, a, 11) == ILAB_OK && A->seq_truncate(b, a, 0) == ILAB_OK, "truncate failed");
    expect_next(b, a, t, 0, 334, "CCH-4: truncate to 0");
    CHECK(A->seq_truncate(b, a, 2) == ILAB_INVALID_ARGUMENT && seqlen(b, a) == 1, "CCH-4: n > length accepted");
    A->destroy(b);
}

/* CCH-5: filling to exactly max_context succeeds; one more is CONTEXT_OVERFLOW */
static void c_cch5(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t *t = malloc((size_t)(MAXCTX + 16) * 4);
    prompt(t, MAXCTX + 16, 31);
    ilab_seq_t s = seq_new(b);
    ilab_status st = ev1(b, s, t, MAXCTX, 0, NULL);
    CHECK(st == ILAB_OK, "CCH-5: a prefill of exactly max_context %d tokens gave %s", MAXCTX, ilab_status_name(st));
    ilab_seq_t d = seq_new(b);
    ev_ok(b, d, t, MAXCTX - 1, NULL);
    st = ev1(b, d, t, 1, 0, NULL);
    CHECK(st == ILAB_OK, "CCH-5: the decode that fills the context exactly gave %s", ilab_status_name(st));
    st = ev1(b, d, t, 1, 0, NULL);
    CHECK(st == ILAB_CONTEXT_OVERFLOW && seqlen(b, d) == MAXCTX, "CCH-5: decode past max_context gave %s",
          ilab_status_name(st));
    A->destroy(b);
}

/* CCH-6: handles never repeat and are never 0 */
static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}
static void c_cch6_handles(void)
{
    ilab_backend_t *b = mk(NULL);
    enum { N = 70000 };
    uint64_t *h = malloc(N * sizeof *h);
    ilab_seq_t keep = seq_new(b);
    for (int i = 0; i < N; i++) {
        h[i] = seq_new(b);
        CHECK(h[i] != 0, "CCH-6: seq_create issued handle 0 (issue %d)", i);
        CHECK(A->seq_free(b, h[i]) == ILAB_OK, "seq_free failed at issue %d", i);
    }
    CHECK(A->seq_length(b, h[0], &(int32_t){0}) == ILAB_INVALID_ARGUMENT || h[0] == keep, "CCH-6: stale handle");
    qsort(h, N, sizeof *h, cmp_u64);
    for (int i = 1; i < N; i++)
        CHECK(h[i] != h[i - 1], "CCH-6: handle %llu issued twice within %d issues", (unsigned long long)h[i], N);
    for (int i = 0; i < N; i++)
        CHECK(h[i] != keep, "CCH-6: a live handle was issued again");
    A->destroy(b);
}

/* CCH-6: refused calls leave the live heap where it was */
static void refuse_round(ilab_backend_t *b, ilab_seq_t s, const int32_t *t)
{
    CHECK(ev1(b, s, t, 100, 0, NULL) == ILAB_CONTEXT_OVERFLOW, "overflow expected");
    int32_t bad = -5;
    CHECK(ev1(b, s, &bad, 1, 0, NULL) == ILAB_INVALID_ARGUMENT, "bad token expected");
    CHECK(ev1(b, 987654321, t, 1, 0, NULL) == ILAB_INVALID_ARGUMENT, "stale expected");
}
static void c_cch6_heap(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t *t = malloc((size_t)MAXCTX * 4);
    prompt(t, MAXCTX, 41);
    ilab_seq_t s = seq_new(b);
    ev_ok(b, s, t, MAXCTX - 50, NULL);
    for (int i = 0; i < 50; i++)
        refuse_round(b, s, t);
    size_t h0 = live_heap();
    for (int i = 0; i < 500; i++)
        refuse_round(b, s, t);
    size_t h1 = live_heap();
    CHECK(h1 <= h0, "CCH-6: live heap grew by %zu bytes over 500 rounds of refused evals", h1 - h0);
    A->destroy(b);
}

/* CCH-7: interleaving sequences over time */
static void c_cch7(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t pa[7], pb[7];
    prompt(pa, 5, 51), prompt(pb, 5, 52);
    ilab_seq_t a = seq_new(b), c = seq_new(b);
    ev_ok(b, a, pa, 5, NULL);
    ev_ok(b, c, pb, 5, NULL);
    expect_next(b, a, pa, 5, 360, "CCH-7: A's decode after B (same length) was evaluated differs from A alone");
    pa[5] = 360;
    expect_next(b, c, pb, 5, 361, "CCH-7: B's decode after A's differs from B alone");
    pb[5] = 361;
    expect_next(b, a, pa, 6, 362, "CCH-7: A's second decode");
    A->destroy(b);
}

/* CCH-8: all-or-nothing whichever item is bad */
static void c_cch8(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t t[4] = {300, 301, 302, 303};
    ilab_seq_t a = seq_new(b), c = seq_new(b), dead = seq_new(b);
    ev_ok(b, a, t, 2, NULL);
    A->seq_free(b, dead);
    for (int pos = 0; pos < 3; pos++) {
        ilab_batch_item_t it[3] = {item(a, t, 2, 0, NULL), item(c, t, 3, 0, NULL), item(a, t, 1, 0, NULL)};
        it[1] = item(c, t, 3, 0, NULL);
        it[2] = item(dead, t, 1, 0, NULL);
        /* move the bad item to position pos */
        ilab_batch_item_t tmp = it[pos];
        it[pos] = it[2];
        it[2] = tmp;
        const ilab_batch_item_t *p[3] = {&it[0], &it[1], &it[2]};
        ilab_status st = A->eval(b, p, 3);
        CHECK(st == ILAB_INVALID_ARGUMENT, "CCH-6: eval naming a freed sequence gave %s", ilab_status_name(st));
        CHECK(seqlen(b, a) == 2 && seqlen(b, c) == 0, "CCH-8: refused eval (stale handle at item %d) changed lengths "
              "to %d and %d (were 2 and 0)", pos, seqlen(b, a), seqlen(b, c));
    }
    expect_next(b, a, t, 2, 302, "CCH-8: logits after a refused eval");
    A->destroy(b);
}

/* CCH-9: seq_length exact */
static void c_cch9(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t t[16];
    prompt(t, 16, 61);
    ilab_seq_t s = seq_new(b);
    CHECK(seqlen(b, s) == 0, "CCH-9: length after create");
    int steps[] = {5, 3, 2, 1, 1};
    int L = 0;
    for (int i = 0; i < 5; i++) {
        ev_ok(b, s, t, steps[i], NULL);
        L += steps[i];
        CHECK(seqlen(b, s) == L, "CCH-9: length %d after %d tokens appended", seqlen(b, s), L);
    }
    ilab_seq_t c = 0;
    A->seq_fork(b, s, &c);
    CHECK(seqlen(b, c) == L, "CCH-9: child length %d, parent %d", seqlen(b, c), L);
    A->seq_truncate(b, s, 3);
    CHECK(seqlen(b, s) == 3, "CCH-9: length %d after truncate to 3", seqlen(b, s));
    A->destroy(b);
}

/* CCH-10: whole blocks, the first figure, agreement with OUT_OF_MEMORY */
static void c_cch10_blocks(void)
{
    ilab_backend_t *b = mk("cache_blocks", "16", NULL);
    ilab_cache_stats_t c0 = stats(b);
    int64_t bs = c0.block_size, first = c0.free_positions;
    CHECK(bs >= 1 && c0.total_positions >= 1 && first % bs == 0 && c0.total_positions % bs == 0,
          "CCH-10: first answer");
    int32_t t[64];
    prompt(t, 64, 71);
    ilab_seq_t s = seq_new(b);
    int L = 0;
    int add[] = {1, 2, 5, 3, 9, 1};
    for (int i = 0; i < 6; i++) {
        ev_ok(b, s, t, add[i], NULL);
        L += add[i];
        ilab_cache_stats_t c = stats(b);
        int64_t want = first - bs * ((L + bs - 1) / bs);
        CHECK(c.free_positions == want && c.free_positions % bs == 0 && c.total_positions == c0.total_positions &&
              c.block_size == bs, "CCH-10: length %d: free_positions %lld, want %lld (block_size %lld)", L,
              (long long)c.free_positions, (long long)want, (long long)bs);
    }
    A->seq_truncate(b, s, 4);
    CHECK(stats(b).free_positions == first - bs * ((4 + bs - 1) / bs), "CCH-10: truncate");
    A->seq_free(b, s);
    CHECK(stats(b).free_positions == first, "CCH-10: free");
    A->destroy(b);
}

/* CCH-10 / CCH-6: a refused fork (no slot left) gives nothing away; all freed = first figure */
static void c_cch10_fork(void)
{
    ilab_backend_t *b = mk("max_sequences", "2", "cache_blocks", "32", NULL);
    int64_t first = stats(b).free_positions;
    int32_t t[20];
    prompt(t, 20, 81);
    ilab_seq_t a = seq_new(b), c = seq_new(b), x = 0;
    ev_ok(b, a, t, 20, NULL);
    ilab_status st = A->seq_fork(b, a, &x);
    CHECK(st == ILAB_OUT_OF_MEMORY, "CCH-6: seq_fork with no slot left gave %s", ilab_status_name(st));
    ilab_seq_t y = 0;
    CHECK(A->seq_create(b, &y) == ILAB_OUT_OF_MEMORY, "CCH-6: seq_create with no slot left");
    A->seq_free(b, a);
    A->seq_free(b, c);
    int64_t now = stats(b).free_positions;
    CHECK(now == first, "CCH-10: every sequence freed after a refused fork: free_positions %lld, first figure %lld",
          (long long)now, (long long)first);
    A->destroy(b);
}

/* ERR-1: a non-OK status on an instance comes with a message */
static void c_err1(void)
{
    struct { int which; } w;
    for (w.which = 0; w.which < 5; w.which++) {
        ilab_backend_t *b = mk(NULL);
        ilab_status st = ILAB_OK;
        int32_t n = 0;
        int32_t t = 300;
        switch (w.which) {
        case 0: st = A->seq_length(b, 424242, &n); break;
        case 1: st = A->seq_free(b, 424242); break;
        case 2: st = A->seq_truncate(b, 424242, 0); break;
        case 3: st = ev1(b, 424242, &t, 1, 0, NULL); break;
        case 4: st = A->seq_fork(b, 424242, &(ilab_seq_t){0}); break;
        }
        char e[256] = "";
        size_t l = lasterr(b, e, sizeof e);
        CHECK(st == ILAB_INVALID_ARGUMENT, "CCH-6: never-issued handle gave %s (call %d)", ilab_status_name(st), w.which);
        CHECK(l > 0 && e[0], "ERR-1: call %d on a never-issued handle returned INVALID_ARGUMENT with no message",
              w.which);
        A->destroy(b);
    }
}

/* ERR-2: undeclared capabilities fail closed, naming the capability */
static int n_events, last_type;
static ilab_status last_ev_status;
static int on_ev(void *ud, const ilab_event_t *e)
{
    (void)ud;
    n_events++;
    last_type = e->type;
    last_ev_status = e->status;
    return 0;
}
static void c_err2(void)
{
    ilab_backend_t *b = mk(NULL);
    ilab_status st = A->cancel(b, 12345);
    char e[512] = "";
    lasterr(b, e, sizeof e);
    CHECK(st == ILAB_UNSUPPORTED, "ERR-2: cancel of an unknown id gave %s; 'cancel' is not declared", ilab_status_name(st));
    CHECK(strstr(e, "cancel"), "ERR-2: cancel's message '%s' does not name the capability", e);
    ilab_sampling_t sp;
    memset(&sp, 0, sizeof sp);
    sp.struct_size = sizeof sp;
    sp.top_p = 1.0f;
    sp.repetition_penalty = 1.0f;
    int32_t pr[2] = {300, 301};
    ilab_generate_request_t rq;
    memset(&rq, 0, sizeof rq);
    rq.struct_size = sizeof rq;
    rq.request_id = 9;
    rq.prompt_tokens = pr;
    rq.n_prompt_tokens = 2;
    rq.sampling = &sp;
    rq.max_tokens = 4;
    st = A->generate(b, &rq, on_ev, NULL);
    CHECK(st == ILAB_UNSUPPORTED, "ERR-2: generate gave %s", ilab_status_name(st));
    CHECK(n_events == 0 || (n_events == 1 && last_type == ILAB_EVENT_ERROR && last_ev_status == ILAB_UNSUPPORTED),
          "ERR-2: generate emitted %d events", n_events);
    lasterr(b, e, sizeof e);
    CHECK(strstr(e, "sampling"), "ERR-2: generate's message '%s' does not name the capability", e);
    A->destroy(b);
}

/* ERR-3: NULL arguments are INVALID_ARGUMENT, never a crash */
static void c_err3(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t t[16];
    size_t n;
    char buf[32];
    CHECK(A->tokenize(b, NULL, 5, 0, t, 16, &n) == ILAB_INVALID_ARGUMENT, "ERR-3: tokenize(text NULL, len 5)");
    CHECK(A->tokenize(b, "abc", 3, 0, t, 16, NULL) == ILAB_INVALID_ARGUMENT, "ERR-3: tokenize n NULL");
    CHECK(A->tokenize(b, "abc", 3, 0, NULL, 16, &n) == ILAB_INVALID_ARGUMENT, "ERR-3: tokenize tokens NULL cap 16");
    CHECK(A->detokenize(b, NULL, 3, buf, 32, &n) == ILAB_INVALID_ARGUMENT, "ERR-3: detokenize NULL tokens");
    CHECK(A->token_piece(b, -1, 300, buf, 32, NULL) == ILAB_INVALID_ARGUMENT, "ERR-3: token_piece NULL len");
    CHECK(A->model_info(b, NULL) == ILAB_INVALID_ARGUMENT, "ERR-3: model_info NULL");
    CHECK(A->seq_create(b, NULL) == ILAB_INVALID_ARGUMENT, "ERR-3: seq_create NULL");
    CHECK(A->eval(b, NULL, 1) == ILAB_INVALID_ARGUMENT, "ERR-3: eval NULL");
    CHECK(A->cache_stats(b, NULL) == ILAB_INVALID_ARGUMENT, "ERR-3: cache_stats NULL");
    CHECK(A->eog_ids(b, t, 16, NULL) == ILAB_INVALID_ARGUMENT, "ERR-3: eog_ids NULL");
    CHECK(A->chat_template(b, buf, 32, NULL) == ILAB_INVALID_ARGUMENT, "ERR-3: chat_template NULL");
    CHECK(A->seq_length(b, 0, (int32_t *)t) == ILAB_INVALID_ARGUMENT, "ERR-3: handle 0");
    A->destroy(NULL);
    A->destroy(b);
}

/* ERR-4: last_error returns the full length whatever cap is */
static void c_err4(void)
{
    ilab_backend_t *b = mk(NULL);
    A->seq_length(b, 31337, &(int32_t){0});
    size_t full = lasterr(b, NULL, 0);
    CHECK(full > 8, "ERR-1: message too short");
    for (size_t cap = 1; cap <= full + 2; cap++) {
        char buf[512];
        memset(buf, 'Q', sizeof buf);
        size_t r = lasterr(b, buf, cap);
        size_t copied = cap - 1 < full ? cap - 1 : full;
        CHECK(r == full, "ERR-4: last_error with cap %zu returned %zu, full length is %zu", cap, r, full);
        CHECK(buf[copied] == 0 && buf[copied + 1] == 'Q' && strlen(buf) == copied, "ERR-4: copy with cap %zu", cap);
    }
    char z = 'Q';
    CHECK(lasterr(b, &z, 0) == full && z == 'Q', "ERR-4: cap 0");
    A->destroy(b);
}

/* ERR-5: an unknown key is INVALID_ARGUMENT naming the key, *out untouched */
static void c_err5_unknown(void)
{
    ilab_config_entry_t c[2] = {{"seed", "1"}, {"bogus_key", "1"}};
    char e[512] = "";
    ilab_backend_t *b = (ilab_backend_t *)0x77;
    ilab_status st = A->create(&HOST, c, 2, e, sizeof e, &b);
    if (st == ILAB_OK)
        A->destroy(b);
    CHECK(st == ILAB_INVALID_ARGUMENT, "ERR-5: create with unknown key 'bogus_key' gave %s", ilab_status_name(st));
    CHECK(strstr(e, "bogus_key"), "ERR-5: message '%s' does not name the key", e);
    CHECK(b == (ilab_backend_t *)0x77, "ERR-5: *out written");
    char r[512] = "";
    CHECK(A->probe(&HOST, c, 2, r, sizeof r) == ILAB_INVALID_ARGUMENT, "PRB-1: probe with unknown key");
}

/* ERR-5: on any failure *out is untouched */
static void c_err5_out(void)
{
    const char *bad[][2] = {{"bogus", "1"}, {"cache_blocks", "0"}, {"model", "/nonexistent/w.bin"},
                            {"add_dummy_prefix", "maybe"}};
    for (int i = 0; i < 4; i++) {
        ilab_config_entry_t c = {bad[i][0], bad[i][1]};
        char e[512];
        ilab_backend_t *b = (ilab_backend_t *)0x99;
        ilab_status st = A->create(&HOST, &c, 1, e, sizeof e, &b);
        CHECK(st != ILAB_OK, "create(%s=%s) succeeded", bad[i][0], bad[i][1]);
        CHECK(b == (ilab_backend_t *)0x99, "ERR-5: create(%s=%s) failed with %s but wrote *out (%p)", bad[i][0],
              bad[i][1], ilab_status_name(st), (void *)b);
        CHECK(e[0], "ERR-1: create failure without message");
    }
}

/* THR-2: seq_create concurrently with other calls */
typedef struct thr_arg {
    ilab_backend_t *b;
    int id;
    uint64_t *h;
    int n;
    int bad;
    char why[200];
} thr_arg;
static void *thr_create(void *p)
{
    thr_arg *a = p;
    int k = 0;
    for (int i = 0; i < a->n / 8; i++) {
        ilab_seq_t s[8];
        for (int j = 0; j < 8; j++) {
            s[j] = 0;
            if (A->seq_create(a->b, &s[j]) != ILAB_OK) {
                a->bad = 1;
                snprintf(a->why, sizeof a->why, "seq_create failed with 64 slots and at most 64 live sequences");
                continue;
            }
            a->h[k++] = s[j];
        }
        for (int j = 0; j < 8; j++) {
            int32_t len = -1;
            if (s[j] && (A->seq_length(a->b, s[j], &len) != ILAB_OK || len != 0)) {
                a->bad = 1;
                snprintf(a->why, sizeof a->why, "seq_length of a new handle gave len %d / an error", len);
            }
        }
        for (int j = 0; j < 8; j++)
            if (s[j] && A->seq_free(a->b, s[j]) != ILAB_OK) {
                a->bad = 1;
                snprintf(a->why, sizeof a->why, "seq_free of a just-created handle failed");
            }
    }
    return NULL;
}
static void c_thr_create(void)
{
    enum { T = 8, N = 20000, ROUNDS = 12 };
    uint64_t *all = calloc(T * N, sizeof *all);
    for (int round = 0; round < ROUNDS; round++) {
        ilab_backend_t *b = mk("max_sequences", "64", NULL);
        pthread_t th[T];
        thr_arg a[T];
        memset(all, 0, T * N * sizeof *all);
        for (int i = 0; i < T; i++) {
            memset(&a[i], 0, sizeof a[i]);
            a[i].b = b, a[i].id = i, a[i].h = all + i * N, a[i].n = N;
            pthread_create(&th[i], NULL, thr_create, &a[i]);
        }
        for (int i = 0; i < T; i++)
            pthread_join(th[i], NULL);
        for (int i = 0; i < T; i++)
            CHECK(!a[i].bad, "THR-2: concurrent seq_create/seq_length/seq_free on different sequences (round %d): %s",
                  round, a[i].why);
        qsort(all, T * N, sizeof *all, cmp_u64);
        for (int i = 1; i < T * N; i++)
            CHECK(!all[i] || all[i] != all[i - 1], "THR-2/CCH-6: concurrent seq_create issued handle %llu twice",
                  (unsigned long long)all[i]);
        A->destroy(b);
    }
    free(all);
}

/* THR-2: tokenize concurrently */
static char *ttext[8];
static int32_t *texp[8];
static size_t texpn[8];
static void *thr_tok(void *p)
{
    thr_arg *a = p;
    int32_t *t = malloc(8192 * 4);
    for (int i = 0; i < a->n && !a->bad; i++) {
        int k = (a->id + i) % 8;
        size_t n = 0;
        if (A->tokenize(a->b, ttext[k], strlen(ttext[k]), 0, t, 8192, &n) != ILAB_OK || n != texpn[k] ||
            memcmp(t, texp[k], n * 4)) {
            a->bad = 1;
            snprintf(a->why, sizeof a->why, "tokenize of text %d gave other ids than serially", k);
        }
    }
    free(t);
    return NULL;
}
static void c_thr_tok(void)
{
    ilab_backend_t *b = mk(NULL);
    for (int k = 0; k < 8; k++) {
        size_t len = 200 + (size_t)k * 500;
        ttext[k] = malloc(len + 1);
        for (size_t i = 0; i < len; i++)
        {
            const char *src = texts[(k + i / 7) % NTEXTS];
            size_t sl = strlen(src);
            ttext[k][i] = src[i % sl];
        }
        ttext[k][len] = 0;
        texp[k] = malloc(8192 * 4);
        texpn[k] = tok(b, ttext[k], len, 0, texp[k], 8192);
    }
    enum { T = 8 };
    pthread_t th[T];
    thr_arg a[T];
    for (int i = 0; i < T; i++) {
        memset(&a[i], 0, sizeof a[i]);
        a[i].b = b, a[i].id = i, a[i].n = 400;
        pthread_create(&th[i], NULL, thr_tok, &a[i]);
    }
    for (int i = 0; i < T; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < T; i++)
        CHECK(!a[i].bad, "THR-2: concurrent tokenize: %s", a[i].why);
    A->destroy(b);
}

/* THR-1: eval of different sequences from several threads */
static int32_t thp[8][64];
static float *thref[8];
static void *thr_eval(void *p)
{
    thr_arg *a = p;
    float *r = rowbuf(1);
    for (int i = 0; i < a->n && !a->bad; i++) {
        ilab_seq_t s = 0;
        if (A->seq_create(a->b, &s) != ILAB_OK) {
            a->bad = 1;
            snprintf(a->why, sizeof a->why, "seq_create failed");
            break;
        }
        if (ev1(a->b, s, thp[a->id], 64, 0, r) != ILAB_OK || memcmp(r, thref[a->id], (size_t)VOC * 4)) {
            a->bad = 1;
            snprintf(a->why, sizeof a->why, "thread %d, round %d: logits differ from the serial ones", a->id, i);
        }
        A->seq_free(a->b, s);
    }
    free(r);
    return NULL;
}
static void c_thr_eval(void)
{
    ilab_backend_t *b = mk(NULL);
    enum { T = 8 };
    for (int k = 0; k < T; k++) {
        prompt(thp[k], 64, 100 + (uint32_t)k);
        thref[k] = rowbuf(1);
        fresh(b, thp[k], 64, thref[k]);
    }
    pthread_t th[T];
    thr_arg a[T];
    for (int i = 0; i < T; i++) {
        memset(&a[i], 0, sizeof a[i]);
        a[i].b = b, a[i].id = i, a[i].n = 300;
        pthread_create(&th[i], NULL, thr_eval, &a[i]);
    }
    for (int i = 0; i < T; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < T; i++)
        CHECK(!a[i].bad, "THR-1: concurrent eval of different sequences: %s", a[i].why);
    A->destroy(b);
}

/* DIF-1: the same non-empty digest claims the same weights */
static void c_dif1(void)
{
    ilab_backend_t *x = mk("seed", "1", NULL), *y = mk("seed", "2", NULL);
    ilab_model_info_t mx, my;
    memset(&mx, 0, sizeof mx), memset(&my, 0, sizeof my);
    mx.struct_size = my.struct_size = sizeof mx;
    A->model_info(x, &mx);
    A->model_info(y, &my);
    if (mx.digest[0] && !strcmp(mx.digest, my.digest)) {
        int32_t t[64];
        size_t n = tok(x, "hello world", 11, ILAB_TOKENIZE_ADD_BOS, t, 64);
        float *rx = rowbuf(1), *ry = rowbuf(1);
        ilab_seq_t sx = seq_new(x), sy = seq_new(y);
        ev_ok(x, sx, t, (int32_t)n, rx);
        ev_ok(y, sy, t, (int32_t)n, ry);
        for (int step = 0; step < 16; step++) {
            int gx = argmax(rx), gy = argmax(ry);
            CHECK(gx == gy, "DIF-1: instances seed=1 and seed=2 both report digest %.20s..., but greedy token %d "
                  "differs (%d vs %d)", mx.digest, step, gx, gy);
            int32_t g = gx;
            ev_ok(x, sx, &g, 1, rx);
            ev_ok(y, sy, &g, 1, ry);
        }
    }
    A->destroy(x);
    A->destroy(y);
}

/* ====================================================================================== */
typedef struct { int id; void (*fn)(void); } case_t;
static const case_t cases[] = {
    {1, c_entry},          {2, c_mi_large},        {3, c_mi_small},       {4, c_item_tail},
    {5, c_host_short},     {6, c_weak},            {7, c_manifest_ids},   {8, c_members},
    {9, c_leak_cycles},    {10, c_exports},        {11, c_mi_stable},     {12, c_probe_reason},
    {13, c_probe_range},   {14, c_probe_create_same}, {15, c_probe_repeat}, {16, c_tok1},
    {17, c_tok3},          {18, c_tok2_nul},       {19, c_tok4},          {20, c_tok2_noprefix},
    {21, c_tok5_invalid},  {22, c_tok5_empty},     {23, c_tok6},          {24, c_tok7_tokenize},
    {25, c_tok7_detok},    {26, c_tok8},           {27, c_tok9},          {28, c_tok11},
    {29, c_tok11_plain},   {30, c_tok12},          {31, c_tok13},         {32, c_log1},
    {33, c_log2_instances}, {34, c_log2_history},  {35, c_log3},          {36, c_log5},
    {37, c_log6_batch},    {38, c_log6_items},     {39, c_cch1},          {40, c_cch2},
    {41, c_cch3},          {42, c_cch4},           {43, c_cch5},          {44, c_cch6_handles},
    {45, c_cch6_heap},     {46, c_cch7},           {47, c_cch8},          {48, c_cch9},
    {49, c_cch10_blocks},  {50, c_cch10_fork},     {51, c_err1},          {52, c_err2},
    {53, c_err3},          {54, c_err4},           {55, c_err5_unknown},  {56, c_err5_out},
    {57, c_thr_create},    {58, c_thr_tok},        {59, c_thr_eval},      {60, c_dif1},
};

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s PLUGIN.so CASE\n", argv[0]);
        return 2;
    }
    so_path = argv[1];
    int id = atoi(argv[2]);
    const case_t *c = NULL;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        if (cases[i].id == id)
            c = &cases[i];
    if (!c) {
        fprintf(stderr, "unknown case %s\n", argv[2]);
        return 2;
    }
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        alarm(120);
        void *h = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
        if (!h)
            viol("ABI-4: dlopen refused: %s", dlerror());
        E = dlsym(h, ILAB_PLUGIN_ENTRY_SYMBOL);
        if (!E)
            viol("ABI-1: no symbol %s", ILAB_PLUGIN_ENTRY_SYMBOL);
        A = E->backend;
        if (!A)
            viol("ABI-1: backend NULL");
        if (id != 1 && id != 6 && id != 7 && id != 10 && id != 33)
            load_info();
        c->fn();
        printf("OK\n");
        fflush(stdout);
        _exit(0);
    }
    int status = 0;
    waitpid(p, &status, 0);
    if (WIFSIGNALED(status)) {
        printf("VIOLATION: the check's process died of signal %d (%s)%s\n", WTERMSIG(status),
               strsignal(WTERMSIG(status)), WTERMSIG(status) == SIGALRM ? ": hang past 120 s" : ": a crash");
        return 1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
