/* driver PLUGIN.so CASE — one contract check against an inferlab backend plugin.
 *
 * Loads the plugin through its only entry point (ilab_plugin_entry, as the SDK
 * headers describe), runs the check named by CASE in a child process (a crash
 * or a 120 s hang is a violation) and prints "OK" (exit 0) or
 * "VIOLATION: ..." (exit 1).  Written from docs/contract.md and the SDK
 * headers only; independent of the conformance harness.
 *
 * The checks assume the plugin's config keys (seed, cache_blocks, model_name,
 * byte_fallback, weights) and a byte-exact tokenizer; everything else comes
 * from the contract and the plugin's own answers (model_info, manifest). */
#include <inferlab/inferlab.h>

#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *PATH;
static const ilab_plugin_entry_t *E;
static const ilab_backend_api_t *A;
static ilab_host_t HOST;
static int VOC, BOSID, EOSID, MAXCTX, MAXBATCH;

static void V(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void V(const char *fmt, ...)
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

static const char *sn(int st) { return ilab_status_name(st); }

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

/* --- configuration ------------------------------------------------------------ */

typedef struct cfgset {
    ilab_config_entry_t e[8];
    size_t n;
    char vals[8][600];
} cfgset;

/* Defaults as the host fills them in, then NULL-terminated key/value overrides. */
static void cfg_make(cfgset *c, ...)
{
    static const char *keys[] = {"seed", "cache_blocks", "model_name", "byte_fallback", "weights"};
    static const char *defs[] = {"0", "256", "bpkv-tiny", "true", ""};
    c->n = 5;
    for (int i = 0; i < 5; i++) {
        c->e[i].key = keys[i];
        snprintf(c->vals[i], sizeof c->vals[i], "%s", defs[i]);
    }
    va_list ap;
    va_start(ap, c);
    const char *k;
    while ((k = va_arg(ap, const char *))) {
        const char *v = va_arg(ap, const char *);
        size_t i;
        for (i = 0; i < c->n; i++)
            if (!strcmp(c->e[i].key, k))
                break;
        if (i == c->n) {
            c->e[i].key = k;
            c->n++;
        }
        snprintf(c->vals[i], sizeof c->vals[i], "%s", v);
    }
    va_end(ap);
    for (size_t i = 0; i < c->n; i++)
        c->e[i].value = c->vals[i];
}

static ilab_backend_t *mk_cfg(cfgset *c)
{
    char err[512] = "";
    ilab_backend_t *b = NULL;
    ilab_status st = A->create(&HOST, c->e, c->n, err, sizeof err, &b);
    if (st != ILAB_OK || !b)
        V("create() with a valid configuration failed: %s '%s'", sn(st), err);
    return b;
}
#define MK(...) ({ cfgset _c; cfg_make(&_c, __VA_ARGS__, (const char *)NULL); mk_cfg(&_c); })

static ilab_backend_t *mk(void)
{
    cfgset c;
    cfg_make(&c, (const char *)NULL);
    return mk_cfg(&c);
}

static void lasterr(ilab_backend_t *b, char *buf, size_t cap) { A->last_error(b, buf, cap); }

/* --- helpers over an instance ----------------------------------------------------- */

static ilab_model_info_t info_of(ilab_backend_t *b)
{
    ilab_model_info_t i;
    memset(&i, 0, sizeof i);
    i.struct_size = sizeof i;
    ilab_status st = A->model_info(b, &i);
    if (st != ILAB_OK)
        V("model_info: %s", sn(st));
    return i;
}

static ilab_seq_t seq(ilab_backend_t *b)
{
    ilab_seq_t s = 0;
    ilab_status st = A->seq_create(b, &s);
    if (st != ILAB_OK)
        V("seq_create: %s", sn(st));
    return s;
}

static int32_t slen(ilab_backend_t *b, ilab_seq_t s)
{
    int32_t n = -7;
    ilab_status st = A->seq_length(b, s, &n);
    if (st != ILAB_OK)
        V("seq_length of a live sequence: %s", sn(st));
    return n;
}

static ilab_batch_item_t item(ilab_seq_t s, const int32_t *t, int32_t n, uint32_t fl, float *lg)
{
    ilab_batch_item_t it;
    memset(&it, 0, sizeof it);
    it.struct_size = sizeof it;
    it.seq = s;
    it.tokens = t;
    it.n_tokens = n;
    it.flags = fl;
    it.logits = lg;
    return it;
}

static ilab_status ev(ilab_backend_t *b, ilab_seq_t s, const int32_t *t, int32_t n, uint32_t fl,
                      float *lg)
{
    ilab_batch_item_t it = item(s, t, n, fl, lg);
    const ilab_batch_item_t *p = &it;
    return A->eval(b, &p, 1);
}

static void ev_ok(ilab_backend_t *b, ilab_seq_t s, const int32_t *t, int32_t n, uint32_t fl,
                  float *lg)
{
    ilab_status st = ev(b, s, t, n, fl, lg);
    if (st != ILAB_OK) {
        char m[256];
        lasterr(b, m, sizeof m);
        V("eval of %d valid tokens: %s '%s'", n, sn(st), m);
    }
}

/* Pseudo-random token stream over the whole vocabulary. */
static void toks(int32_t *t, int n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 12345;
    for (int i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        t[i] = (int32_t)((x >> 8) % (uint32_t)VOC);
    }
}

/* The logits after the whole of t, recomputed in a fresh sequence of a fresh
 * instance (the contract's reference). */
static void ref_logits(const int32_t *t, int n, float *out)
{
    ilab_backend_t *b = mk();
    ilab_seq_t s = seq(b);
    ev_ok(b, s, t, n, 0, out);
    A->destroy(b);
}

static int tol_eq(const float *a, const float *r, int n)
{
    int am = 0, rm = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !(fabsf(a[i] - r[i]) <= 1e-4f + 1e-4f * fabsf(r[i])))
            return 0;
        if (a[i] > a[am])
            am = i;
        if (r[i] > r[rm])
            rm = i;
    }
    return am == rm;
}

static void expect_ref(const float *got, const int32_t *t, int n, const char *what)
{
    float *r = malloc(sizeof(float) * (size_t)VOC);
    ref_logits(t, n, r);
    if (!tol_eq(got, r, VOC))
        V("%s: logits after %d tokens differ from a fresh recomputation", what, n);
    free(r);
}

static ilab_cache_stats_t stats(ilab_backend_t *b)
{
    ilab_cache_stats_t s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    ilab_status st = A->cache_stats(b, &s);
    if (st != ILAB_OK)
        V("cache_stats: %s", sn(st));
    return s;
}

static size_t tokz(ilab_backend_t *b, const char *s, size_t len, uint32_t fl, int32_t *out,
                   size_t cap)
{
    size_t n = 0;
    ilab_status st = A->tokenize(b, s, len, fl, out, cap, &n);
    if (st != ILAB_OK)
        V("tokenize(%zu bytes, flags %u): %s", len, fl, sn(st));
    return n;
}

static size_t detok(ilab_backend_t *b, const int32_t *t, size_t n, char *out, size_t cap)
{
    size_t len = 0;
    ilab_status st = A->detokenize(b, t, n, out, cap, &len);
    if (st != ILAB_OK)
        V("detokenize(%zu ids): %s", n, sn(st));
    return len;
}

static void roundtrip(ilab_backend_t *b, const char *s, size_t len, const char *what)
{
    int32_t t[4096];
    char out[8192];
    size_t n = tokz(b, s, len, 0, t, 4096);
    for (size_t i = 0; i < n; i++)
        if (t[i] < 0 || t[i] >= VOC)
            V("%s: tokenize returned id %d out of range", what, t[i]);
    size_t l = detok(b, t, n, out, sizeof out);
    if (l != len || memcmp(out, s, len))
        V("%s: detokenize(tokenize(s)) != s (%zu bytes in, %zu out)", what, len, l);
}

static size_t heap_now(void)
{
    struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
}

static int fd_count(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while ((e = readdir(d)))
        n++;
    closedir(d);
    return n;
}

/* --- manifest and ELF -------------------------------------------------------------- */

/* Value of a "key: value" line whose key starts at column `indent`. */
static int man_get(const char *key, int indent, char *out, size_t cap)
{
    const char *p = E->manifest_yaml;
    size_t kl = strlen(key);
    while (p && *p) {
        const char *eol = strchr(p, '\n');
        size_t ll = eol ? (size_t)(eol - p) : strlen(p);
        int ind = 0;
        while (ind < (int)ll && p[ind] == ' ')
            ind++;
        if (ind == indent && ll > ind + kl && !strncmp(p + ind, key, kl) && p[ind + kl] == ':') {
            const char *v = p + ind + kl + 1;
            while (*v == ' ')
                v++;
            size_t vl = (size_t)(p + ll - v);
            if (vl >= cap)
                vl = cap - 1;
            memcpy(out, v, vl);
            out[vl] = 0;
            if (vl >= 2 && out[0] == '"' && out[vl - 1] == '"') {
                memmove(out, out + 1, vl - 2);
                out[vl - 2] = 0;
            }
            return 1;
        }
        p = eol ? eol + 1 : NULL;
    }
    return 0;
}

static int man_int(const char *key, int indent, int dflt)
{
    char v[64];
    return man_get(key, indent, v, sizeof v) ? atoi(v) : dflt;
}

typedef struct dsym {
    char name[128];
    int defined, weak;
} dsym;

static int elf_dynsyms(dsym *out, int max)
{
    FILE *f = fopen(PATH, "rb");
    if (!f)
        V("cannot read %s", PATH);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *d = malloc((size_t)sz);
    if (fread(d, 1, (size_t)sz, f) != (size_t)sz)
        V("short read of %s", PATH);
    fclose(f);
    Elf64_Ehdr *eh = (Elf64_Ehdr *)d;
    Elf64_Shdr *sh = (Elf64_Shdr *)(d + eh->e_shoff);
    int n = 0;
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_DYNSYM)
            continue;
        Elf64_Sym *sy = (Elf64_Sym *)(d + sh[i].sh_offset);
        const char *str = (const char *)(d + sh[sh[i].sh_link].sh_offset);
        size_t cnt = sh[i].sh_size / sizeof *sy;
        for (size_t k = 1; k < cnt && n < max; k++) {
            snprintf(out[n].name, sizeof out[n].name, "%s", str + sy[k].st_name);
            out[n].defined = sy[k].st_shndx != SHN_UNDEF;
            out[n].weak = ELF64_ST_BIND(sy[k].st_info) == STB_WEAK;
            n++;
        }
    }
    free(d);
    return n;
}

/* --- checks --------------------------------------------------------------------------- */

static void c_abi1(void)
{
    if (E->struct_size < ILAB_PLUGIN_ENTRY_SIZE_1_0)
        V("entry struct_size %u < ABI 1.0's %u", E->struct_size, ILAB_PLUGIN_ENTRY_SIZE_1_0);
    if (!E->name || !E->version || !E->manifest_yaml || !E->backend)
        V("entry has a NULL pointer");
    if (E->backend->struct_size < ILAB_BACKEND_API_SIZE_1_0)
        V("backend table struct_size %u < ABI 1.0's", E->backend->struct_size);
}

static void c_abi5(void)
{
    char v[64];
    if (!man_get("name", 0, v, sizeof v) || strcmp(v, E->name))
        V("manifest name '%s' != entry name '%s'", v, E->name);
    if (!man_get("version", 0, v, sizeof v) || strcmp(v, E->version))
        V("manifest version '%s' != entry version '%s'", v, E->version);
    char want[32];
    snprintf(want, sizeof want, "%u.%u", E->abi_major, E->abi_minor);
    if (!man_get("abi", 0, v, sizeof v) || strcmp(v, want))
        V("manifest abi '%s' != entry abi %s", v, want);
}

#define HAS_MEMBER(m) (A->struct_size >= offsetof(ilab_backend_api_t, m) + sizeof(void *) && A->m)
static void c_abi6(void)
{
    char v[64];
    const char *missing = NULL;
    if (!HAS_MEMBER(probe) || !HAS_MEMBER(create) || !HAS_MEMBER(destroy) ||
        !HAS_MEMBER(last_error) || !HAS_MEMBER(model_info))
        missing = "lifecycle";
    if (man_get("tokenizer", 2, v, sizeof v) && strcmp(v, "false") &&
        (!HAS_MEMBER(tokenize) || !HAS_MEMBER(detokenize) || !HAS_MEMBER(token_piece)))
        missing = "tokenizer";
    if (man_get("logits", 2, v, sizeof v) && !strcmp(v, "full") &&
        (!HAS_MEMBER(seq_create) || !HAS_MEMBER(seq_free) || !HAS_MEMBER(seq_length) ||
         !HAS_MEMBER(eval)))
        missing = "logits";
    if (man_get("cache", 2, v, sizeof v)) {
        if (strstr(v, "fork: true") && !HAS_MEMBER(seq_fork))
            missing = "cache.fork";
        if (strstr(v, "truncate: true") && !HAS_MEMBER(seq_truncate))
            missing = "cache.truncate";
        if (strstr(v, "stats: true") && !HAS_MEMBER(cache_stats))
            missing = "cache.stats";
    }
    if (man_get("chat", 2, v, sizeof v) && !strcmp(v, "true") &&
        (!HAS_MEMBER(eog_ids) || !HAS_MEMBER(chat_template)))
        missing = "chat";
    if (missing)
        V("declared capability '%s' has a member that is NULL or past struct_size %u", missing,
          A->struct_size);
}

static void c_abi8(void)
{
    dsym s[512];
    int n = elf_dynsyms(s, 512), def = 0;
    for (int i = 0; i < n; i++)
        if (s[i].defined && s[i].name[0]) {
            def++;
            if (strcmp(s[i].name, "ilab_plugin_entry"))
                V("dynamic symbol table defines '%s' besides ilab_plugin_entry", s[i].name);
        }
    if (def != 1)
        V("dynamic symbol table defines %d symbols", def);
}

static void c_abi4(void)
{
    static const char *ok[] = {"__gmon_start__", "__cxa_finalize", "_ITM_registerTMCloneTable",
                               "_ITM_deregisterTMCloneTable"};
    dsym s[512];
    int n = elf_dynsyms(s, 512);
    for (int i = 0; i < n; i++) {
        if (s[i].defined || !s[i].weak)
            continue;
        int allowed = 0;
        for (size_t k = 0; k < 4; k++)
            allowed |= !strcmp(s[i].name, ok[k]);
        if (!allowed)
            V("undefined weak symbol '%s'", s[i].name);
    }
}

static char WFILE[64];
static void make_weights(void)
{
    snprintf(WFILE, sizeof WFILE, "/tmp/bpkv-weights-%d", (int)getpid());
    FILE *f = fopen(WFILE, "wb");
    fputs("WEIGHTS!0123456789", f);
    fclose(f);
}

static void c_abi7_fd(void)
{
    make_weights();
    cfgset c;
    cfg_make(&c, "weights", WFILE, (const char *)NULL);
    for (int i = 0; i < 3; i++)
        A->destroy(mk_cfg(&c));
    int before = fd_count();
    for (int i = 0; i < 20; i++)
        A->destroy(mk_cfg(&c));
    int after = fd_count();
    unlink(WFILE);
    if (after != before)
        V("open file descriptors grew from %d to %d over 20 create/destroy cycles", before, after);
}

static void c_abi7_heap(void)
{
    for (int i = 0; i < 3; i++)
        A->destroy(mk());
    size_t before = heap_now();
    for (int i = 0; i < 20; i++) {
        ilab_backend_t *b = mk();
        ilab_seq_t s = seq(b);
        int32_t t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        ev_ok(b, s, t, 8, 0, NULL);
        A->destroy(b);
    }
    size_t after = heap_now();
    if (after > before)
        V("live heap grew by %zu bytes over 20 create/destroy cycles", after - before);
}

static void c_abi9(void)
{
    int mc = man_int("max_context", 2, -1);
    ilab_backend_t *b = mk();
    ilab_model_info_t i = info_of(b);
    if (mc != 0 && mc != i.max_context)
        V("manifest max_context %d != model_info().max_context %d", mc, i.max_context);
    ilab_model_info_t j = info_of(b);
    if (memcmp(&i, &j, sizeof i))
        V("model_info() differs between calls");
}

static void c_abi3_info_size(void)
{
    ilab_backend_t *b = mk();
    unsigned char buf[256];
    memset(buf, 0xA5, sizeof buf);
    ilab_model_info_t *i = (ilab_model_info_t *)buf;
    i->struct_size = 200;
    ilab_status st = A->model_info(b, i);
    if (st != ILAB_OK)
        V("model_info with struct_size 200: %s", sn(st));
    if (i->struct_size != 200)
        V("model_info changed the caller's struct_size 200 to %u", i->struct_size);
    for (size_t k = 200; k < sizeof buf; k++)
        if (buf[k] != 0xA5)
            V("model_info wrote byte %zu past struct_size 200", k);
}

static void c_abi3_info_small(void)
{
    ilab_backend_t *b = mk();
    unsigned char buf[256];
    memset(buf, 0xA5, sizeof buf);
    ilab_model_info_t *i = (ilab_model_info_t *)buf;
    i->struct_size = 100;
    ilab_status st = A->model_info(b, i);
    if (st != ILAB_ABI_MISMATCH)
        V("model_info with struct_size 100: %s, want ABI_MISMATCH", sn(st));
    for (size_t k = 4; k < sizeof buf; k++)
        if (buf[k] != 0xA5)
            V("model_info refused struct_size 100 but wrote byte %zu", k);
    char m[256];
    lasterr(b, m, sizeof m);
    if (!m[0])
        V("ABI_MISMATCH without a message");
}

static void c_abi3_item_small(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t s = seq(b);
    int32_t t[2] = {5, 6};
    ilab_batch_item_t it = item(s, t, 2, 0, NULL);
    it.struct_size = 16;
    const ilab_batch_item_t *p = &it;
    ilab_status st = A->eval(b, &p, 1);
    if (st != ILAB_ABI_MISMATCH)
        V("eval item with struct_size 16: %s, want ABI_MISMATCH", sn(st));
    if (slen(b, s) != 0)
        V("refused eval changed the sequence");
}

static void c_abi3_item_tail(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t s = seq(b);
    int32_t t[2] = {5, 6};
    struct {
        ilab_batch_item_t it;
        uint64_t extra;
    } big;
    memset(&big, 0, sizeof big);
    big.it = item(s, t, 2, 0, NULL);
    big.it.struct_size = sizeof big;
    const ilab_batch_item_t *p = &big.it;
    ilab_status st = A->eval(b, &p, 1);
    if (st != ILAB_OK)
        V("eval item larger than the plugin's with a zero tail: %s, want OK", sn(st));
    big.extra = 7;
    st = A->eval(b, &p, 1);
    if (st != ILAB_ABI_MISMATCH)
        V("eval item with a non-zero unknown tail: %s, want ABI_MISMATCH", sn(st));
    if (slen(b, s) != 2)
        V("refused eval changed the sequence");
}

static void c_prb1(void)
{
    cfgset c;
    cfg_make(&c, "weights", "/nonexistent/bpkv/weights.bin", (const char *)NULL);
    for (size_t cap = 1; cap < 80; cap++) {
        char r[128];
        memset(r, 'Z', sizeof r);
        ilab_status st = A->probe(&HOST, c.e, c.n, r, cap);
        if (st != ILAB_UNAVAILABLE)
            V("probe with a missing weights file: %s, want UNAVAILABLE", sn(st));
        if (!memchr(r, 0, cap))
            V("probe reason not NUL-terminated within reason_cap %zu", cap);
        for (size_t k = cap; k < sizeof r; k++)
            if (r[k] != 'Z')
                V("probe wrote past reason_cap %zu", cap);
        if (cap >= 2 && !r[0])
            V("probe UNAVAILABLE with an empty reason (cap %zu)", cap);
    }
}

static void c_prb3(void)
{
    cfgset bad, good;
    cfg_make(&bad, "weights", "/nonexistent/bpkv/weights.bin", (const char *)NULL);
    cfg_make(&good, (const char *)NULL);
    char r[256];
    ilab_status s1 = A->probe(&HOST, bad.e, bad.n, r, sizeof r);
    ilab_status s2 = A->probe(&HOST, good.e, good.n, r, sizeof r);
    ilab_status s3 = A->probe(&HOST, bad.e, bad.n, r, sizeof r);
    if (s1 != ILAB_UNAVAILABLE || s3 != s1)
        V("probe with a missing weights file: %s then %s", sn(s1), sn(s3));
    if (s2 != ILAB_OK)
        V("probe with the default configuration after another probe: %s '%s'", sn(s2), r);
    A->destroy(mk_cfg(&good));
}

static void c_prb2_reason(void)
{
    cfgset c;
    cfg_make(&c, "weights", "/nonexistent/bpkv/weights.bin", (const char *)NULL);
    char r[512], e[512];
    ilab_status s1 = A->probe(&HOST, c.e, c.n, r, sizeof r);
    ilab_backend_t *b = NULL;
    ilab_status s2 = A->create(&HOST, c.e, c.n, e, sizeof e, &b);
    if (s1 != ILAB_UNAVAILABLE || s2 != ILAB_UNAVAILABLE)
        V("probe %s / create %s for a missing weights file", sn(s1), sn(s2));
    if (strcmp(r, e))
        V("create's reason '%s' differs from probe's '%s'", e, r);
}

static void c_prb2_out(void)
{
    cfgset c;
    cfg_make(&c, "weights", "/nonexistent/bpkv/weights.bin", (const char *)NULL);
    char e[512];
    ilab_backend_t *sentinel = (ilab_backend_t *)(uintptr_t)0x1234;
    ilab_backend_t *b = sentinel;
    ilab_status st = A->create(&HOST, c.e, c.n, e, sizeof e, &b);
    if (st == ILAB_OK)
        V("create with a missing weights file succeeded");
    if (b != sentinel)
        V("failed create() wrote *out (%p)", (void *)b);
}

static void c_err5_unknown(void)
{
    cfgset c;
    cfg_make(&c, "cache_block", "64", (const char *)NULL);
    char e[512] = "";
    ilab_backend_t *b = NULL;
    ilab_status st = A->create(&HOST, c.e, c.n, e, sizeof e, &b);
    if (st != ILAB_INVALID_ARGUMENT)
        V("create with unknown config key 'cache_block': %s, want INVALID_ARGUMENT", sn(st));
    if (!strstr(e, "cache_block"))
        V("message '%s' does not name the key", e);
}

static void c_cch10_config(void)
{
    for (int v = 0; v <= 8; v++) {
        char val[16];
        snprintf(val, sizeof val, "%d", v);
        cfgset c;
        cfg_make(&c, "cache_blocks", val, (const char *)NULL);
        char e[512];
        ilab_backend_t *b = NULL;
        ilab_status st = A->create(&HOST, c.e, c.n, e, sizeof e, &b);
        if (st == ILAB_OK) {
            ilab_cache_stats_t s = stats(b);
            if (s.block_size < 1 || s.total_positions < 1)
                V("cache_blocks=%d accepted but cache_stats says block_size %d total %lld", v,
                  s.block_size, (long long)s.total_positions);
            A->destroy(b);
        } else if (st != ILAB_INVALID_ARGUMENT)
            V("cache_blocks=%d: %s", v, sn(st));
    }
}

static void c_err5_range(void)
{
    const char *vals[] = {"5000", "4097", "-1", "99999999"};
    for (int i = 0; i < 4; i++) {
        cfgset c;
        cfg_make(&c, "cache_blocks", vals[i], (const char *)NULL);
        char e[512] = "";
        ilab_backend_t *b = NULL;
        ilab_status st = A->create(&HOST, c.e, c.n, e, sizeof e, &b);
        if (st == ILAB_OK) {
            A->destroy(b);
            continue;
        }
        if (st != ILAB_INVALID_ARGUMENT)
            V("create with cache_blocks=%s: %s, want INVALID_ARGUMENT (UNAVAILABLE is only "
              "for 'cannot run here')", vals[i], sn(st));
        if (!strstr(e, "cache_blocks"))
            V("message '%s' does not name the key", e);
    }
}

static void c_tok1_name(void)
{
    for (int len = 60; len <= 66; len++) {
        char name[80];
        memset(name, 'a', (size_t)len);
        name[len] = 0;
        cfgset c;
        cfg_make(&c, "model_name", name, (const char *)NULL);
        char e[512];
        ilab_backend_t *b = NULL;
        ilab_status st = A->create(&HOST, c.e, c.n, e, sizeof e, &b);
        if (st != ILAB_OK)
            continue;
        ilab_model_info_t i = info_of(b);
        if (!memchr(i.name, 0, sizeof i.name))
            V("model_info name not NUL-terminated (model_name of %d bytes)", len);
        if (!i.name[0])
            V("empty model name");
        A->destroy(b);
    }
}

static void c_tok1(void)
{
    ilab_backend_t *b = mk();
    ilab_model_info_t i = info_of(b);
    if (i.vocab_size <= 0)
        V("vocab_size %d", i.vocab_size);
    if (i.bos_id < -1 || i.bos_id >= i.vocab_size)
        V("bos_id %d not in [0, %d) or -1", i.bos_id, i.vocab_size);
    if (i.eos_id < -1 || i.eos_id >= i.vocab_size)
        V("eos_id %d not in [0, %d) or -1", i.eos_id, i.vocab_size);
    if (i.max_context <= 0)
        V("max_context %d", i.max_context);
    if (!memchr(i.name, 0, sizeof i.name) || !i.name[0])
        V("bad name");
    if (!memchr(i.digest, 0, sizeof i.digest) || (i.digest[0] && strncmp(i.digest, "sha256:", 7)))
        V("bad digest '%.80s'", i.digest);
}

static void c_tok2_strict(void)
{
    ilab_backend_t *b = MK("byte_fallback", "false");
    const char *s[] = {"\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf", "x\xf4\x8f\x80\x80y",
                       "\xf3\xa0\x80\x81", "\xf0\x9f\x98\x80 ok", "\xe2\x82\xac\xc3\xa9"};
    for (int i = 0; i < 6; i++)
        roundtrip(b, s[i], strlen(s[i]), "byte_fallback=false, valid 4-byte UTF-8");
}

static void c_err1(void)
{
    ilab_backend_t *b = mk();
    int32_t n;
    ilab_status st = A->seq_length(b, (ilab_seq_t)0x4242, &n);
    if (st != ILAB_INVALID_ARGUMENT)
        V("seq_length of a never-issued handle: %s", sn(st));
    char m[256];
    lasterr(b, m, sizeof m);
    if (!m[0])
        V("seq_length refused a never-issued handle with an empty last_error()");
}

static void c_err4(void)
{
    ilab_backend_t *b = mk();
    int32_t n;
    A->seq_length(b, (ilab_seq_t)0x4242, &n);
    char full[1024];
    size_t L = A->last_error(b, full, sizeof full);
    if (L != strlen(full) || L < 5)
        V("last_error returned %zu for a %zu-byte message", L, strlen(full));
    for (size_t cap = 0; cap < 6; cap++) {
        char buf[16];
        memset(buf, 'Z', sizeof buf);
        size_t r = A->last_error(b, buf, cap);
        if (r != L)
            V("last_error(cap %zu) returned %zu, want the full length %zu", cap, r, L);
        if (cap == 0 && buf[0] != 'Z')
            V("last_error(cap 0) wrote");
        if (cap && (buf[cap - 1] != 0 || memcmp(buf, full, cap - 1)))
            V("last_error(cap %zu) copy wrong", cap);
        if (buf[cap] != 'Z')
            V("last_error wrote past cap %zu", cap);
    }
}

static void c_err3_detok(void)
{
    ilab_backend_t *b = mk();
    char buf[64];
    size_t len = 99;
    ilab_status st = A->detokenize(b, NULL, 3, buf, sizeof buf, &len);
    if (st != ILAB_INVALID_ARGUMENT)
        V("detokenize(NULL tokens, 3): %s", sn(st));
    st = A->tokenize(b, NULL, 3, 0, (int32_t *)buf, 4, &len);
    if (st != ILAB_INVALID_ARGUMENT)
        V("tokenize(NULL text, 3): %s", sn(st));
}

static void c_err2_cancel(void)
{
    char v[16];
    if (man_get("cancel", 2, v, sizeof v) && !strcmp(v, "true"))
        return;
    ilab_backend_t *b = mk();
    ilab_status st = A->cancel(b, 12345);
    if (st != ILAB_UNSUPPORTED)
        V("cancel() of an undeclared capability: %s, want UNSUPPORTED", sn(st));
    char m[256];
    lasterr(b, m, sizeof m);
    if (!strstr(m, "cancel"))
        V("message '%s' does not name the capability", m);
}

typedef struct evlog {
    int n, n_error, bad;
    char msg[256];
    int status;
} evlog;
static int on_ev(void *u, const ilab_event_t *e)
{
    evlog *l = u;
    l->n++;
    if (e->type == ILAB_EVENT_ERROR) {
        l->n_error++;
        l->status = e->status;
        snprintf(l->msg, sizeof l->msg, "%s", e->message ? e->message : "");
    } else
        l->bad++;
    return 0;
}

static void c_err2_generate(void)
{
    ilab_backend_t *b = mk();
    ilab_sampling_t smp;
    memset(&smp, 0, sizeof smp);
    smp.struct_size = sizeof smp;
    smp.top_p = 1;
    smp.repetition_penalty = 1;
    int32_t prompt[3] = {'h', 'i', ' '};
    ilab_generate_request_t rq;
    memset(&rq, 0, sizeof rq);
    rq.struct_size = sizeof rq;
    rq.request_id = 7;
    rq.prompt_tokens = prompt;
    rq.n_prompt_tokens = 3;
    rq.sampling = &smp;
    rq.max_tokens = 4;
    evlog l = {0};
    ilab_status st = A->generate(b, &rq, on_ev, &l);
    if (st != ILAB_UNSUPPORTED)
        V("undeclared generate(): %s", sn(st));
    if (l.bad || l.n > 1)
        V("undeclared generate() emitted %d events (%d non-ERROR)", l.n, l.bad);
    if (l.n == 1 && (l.status != ILAB_UNSUPPORTED || !l.msg[0]))
        V("generate's ERROR event: status %s, message '%s'", sn(l.status), l.msg);
}

/* tokenize capacities 0..need+1 for a set of strings and flags */
static void c_tok7_tokenize(void)
{
    ilab_backend_t *b = mk();
    const char *s[] = {"", "a", "the thing\r\n", "caf\xc3\xa9 \xe2\x82\xac", "hello  world"};
    uint32_t fl[] = {0, ILAB_TOKENIZE_ADD_BOS, ILAB_TOKENIZE_ADD_EOS,
                     ILAB_TOKENIZE_ADD_BOS | ILAB_TOKENIZE_ADD_EOS};
    for (int i = 0; i < 5; i++)
        for (int f = 0; f < 4; f++) {
            size_t need = 0;
            ilab_status st = A->tokenize(b, s[i], strlen(s[i]), fl[f], NULL, 0, &need);
            if (st != (need ? ILAB_BUFFER_TOO_SMALL : ILAB_OK))
                V("size query (NULL, 0): %s for %zu tokens", sn(st), need);
            for (size_t cap = 0; cap <= need + 1; cap++) {
                /* a fresh instance each time: the first call on a text counts */
                A->destroy(b);
                b = mk();
                int32_t buf[64];
                for (int k = 0; k < 64; k++)
                    buf[k] = -12345;
                size_t n = 777;
                st = A->tokenize(b, s[i], strlen(s[i]), fl[f], buf, cap, &n);
                if (cap < need) {
                    if (st != ILAB_BUFFER_TOO_SMALL || n != need)
                        V("tokenize cap %zu < %zu: %s n=%zu", cap, need, sn(st), n);
                    for (int k = 0; k < 64; k++)
                        if (buf[k] != -12345)
                            V("tokenize wrote element %d on BUFFER_TOO_SMALL (cap %zu)", k, cap);
                } else {
                    if (st != ILAB_OK || n != need)
                        V("tokenize cap %zu >= %zu: %s n=%zu", cap, need, sn(st), n);
                    for (int k = (int)n; k < 64; k++)
                        if (buf[k] != -12345)
                            V("tokenize wrote element %d past the %zu ids (cap %zu, flags %u)", k,
                              n, cap, fl[f]);
                }
            }
        }
}

static void c_tok7_detok(void)
{
    ilab_backend_t *b = mk();
    int32_t t[64];
    size_t n = tokz(b, "the caf\xc3\xa9 ok", 12, 0, t, 64);
    t[n++] = BOSID;
    t[n++] = 'x';
    size_t need = 0;
    ilab_status st = A->detokenize(b, t, n, NULL, 0, &need);
    if (st != ILAB_BUFFER_TOO_SMALL)
        V("detokenize size query: %s", sn(st));
    for (size_t cap = 0; cap <= need + 2; cap++) {
        char buf[64];
        memset(buf, 'Z', sizeof buf);
        size_t len = 999;
        st = A->detokenize(b, t, n, buf, cap, &len);
        if (cap < need + 1) {
            if (st != ILAB_BUFFER_TOO_SMALL || len != need)
                V("detokenize cap %zu (need %zu + NUL): %s len=%zu", cap, need, sn(st), len);
            for (int k = 0; k < 64; k++)
                if (buf[k] != 'Z')
                    V("detokenize wrote byte %d on BUFFER_TOO_SMALL (cap %zu)", k, cap);
        } else {
            if (st != ILAB_OK || len != need || buf[len] != 0)
                V("detokenize cap %zu: %s len=%zu", cap, sn(st), len);
            for (size_t k = len + 1; k < 64; k++)
                if (buf[k] != 'Z')
                    V("detokenize wrote past len+1");
        }
    }
}

static void c_tok7_piece(void)
{
    ilab_backend_t *b = mk();
    int32_t ids[] = {'a', 0, BOSID, EOSID, 'z'};
    for (int i = 0; i < 5; i++) {
        size_t len = 999;
        ilab_status st = A->token_piece(b, -1, ids[i], NULL, 0, &len);
        if (st != ILAB_BUFFER_TOO_SMALL)
            V("token_piece size query (NULL, 0) for token %d: %s", ids[i], sn(st));
        char buf[32];
        memset(buf, 'Z', sizeof buf);
        size_t l2 = 0;
        st = A->token_piece(b, -1, ids[i], buf, len + 1, &l2);
        if (st != ILAB_OK || l2 != len || buf[len] != 0 || buf[len + 1] != 'Z')
            V("token_piece with cap len+1: %s", sn(st));
    }
}

static void c_tok2_len(void)
{
    ilab_backend_t *b = mk();
    static const char buf[] = "the thing inn  an\r\nerll \xc3\xa9\xe2\x82\xac";
    for (size_t len = 0; len < sizeof buf - 1; len++)
        roundtrip(b, buf, len, "prefix of a longer buffer (text not NUL-terminated)");
}

static void c_tok2_nul(void)
{
    ilab_backend_t *b = mk();
    static const char s[] = "a\0b\0\0the\0";
    roundtrip(b, s, sizeof s - 1, "text with U+0000");
    roundtrip(b, "\0", 1, "a lone U+0000");
}

static void c_tok4(void)
{
    ilab_backend_t *b = mk();
    int32_t seqs[4][6] = {{BOSID, 256, 'x', 257, 258, EOSID},
                          {BOSID, ' ', 't', 'h', 'e', 'y'},
                          {'a', BOSID, 264, 'b', 256, 268},
                          {EOSID, BOSID, 264, 265, 266, 267}};
    for (int q = 0; q < 4; q++) {
        char whole[256], cat[256];
        size_t wl = detok(b, seqs[q], 6, whole, sizeof whole), cl = 0;
        for (int i = 0; i < 6; i++) {
            size_t pl = 0;
            ilab_status st = A->token_piece(b, i ? seqs[q][i - 1] : -1, seqs[q][i], cat + cl,
                                            sizeof cat - cl, &pl);
            if (st != ILAB_OK)
                V("token_piece: %s", sn(st));
            cl += pl;
        }
        if (cl != wl || memcmp(cat, whole, wl))
            V("concatenated token_piece (%zu bytes) != detokenize (%zu bytes), sequence %d", cl,
              wl, q);
    }
}

static void c_tok6_piece(void)
{
    ilab_backend_t *b = mk();
    struct { int32_t prev, tok; } bad[] = {{VOC, 'a'}, {-2, 'a'}, {'a', VOC}, {'a', -1},
                                           {VOC + 5, 0}, {INT32_MIN, 0}};
    for (int i = 0; i < 6; i++) {
        char buf[16];
        memset(buf, 'Z', sizeof buf);
        size_t len = 4242;
        ilab_status st = A->token_piece(b, bad[i].prev, bad[i].tok, buf, sizeof buf, &len);
        if (st != ILAB_INVALID_ARGUMENT)
            V("token_piece(prev %d, token %d): %s", bad[i].prev, bad[i].tok, sn(st));
        if (buf[0] != 'Z' || len != 4242)
            V("refused token_piece wrote");
    }
}

static void c_tok6_detok(void)
{
    ilab_backend_t *b = mk();
    int32_t bad[] = {-1, -2, VOC, VOC + 1};
    for (int i = 0; i < 4; i++) {
        int32_t t[3] = {'a', bad[i], 'b'};
        char buf[16];
        memset(buf, 'Z', sizeof buf);
        size_t len = 4242;
        ilab_status st = A->detokenize(b, t, 3, buf, sizeof buf, &len);
        if (st != ILAB_INVALID_ARGUMENT)
            V("detokenize with id %d: %s", bad[i], sn(st));
        if (buf[0] != 'Z')
            V("refused detokenize wrote");
    }
}

static void c_tok8(void)
{
    ilab_backend_t *b = mk();
    const char *s[] = {"", "x", "the", "\xc3\xa9"};
    for (int i = 0; i < 4; i++) {
        int32_t base[32], t[32];
        size_t n0 = tokz(b, s[i], strlen(s[i]), 0, base, 32);
        for (uint32_t f = 1; f <= 3; f++) {
            size_t n = tokz(b, s[i], strlen(s[i]), f, t, 32);
            size_t k = 0;
            int ok = 1;
            if (f & 1)
                ok &= n > k && t[k++] == BOSID;
            ok &= n >= k + n0 && !memcmp(t + k, base, n0 * sizeof *t);
            k += n0;
            if (f & 2)
                ok &= n > k && t[k++] == EOSID;
            if (!ok || n != k)
                V("tokenize('%s', flags %u) gave %zu ids, not BOS?/ids/EOS? around %zu", s[i], f,
                  n, n0);
        }
        size_t n = 0;
        if (A->tokenize(b, s[i], strlen(s[i]), 1u << 5, t, 32, &n) != ILAB_INVALID_ARGUMENT)
            V("unknown tokenize flag accepted");
    }
}

static void c_tok9(void)
{
    ilab_backend_t *b = mk();
    int32_t prevs[] = {-1, 'a', BOSID, EOSID, 256};
    int32_t sp[2] = {BOSID, EOSID};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 5; i++) {
            char buf[32];
            size_t len = 99;
            ilab_status st = A->token_piece(b, prevs[i], sp[k], buf, sizeof buf, &len);
            if (st != ILAB_OK || len != 0)
                V("token_piece(%d, %s) = %zu bytes '%.*s', want \"\"", prevs[i],
                  k ? "EOS" : "BOS", len, (int)len, buf);
        }
        char buf[8];
        if (detok(b, &sp[k], 1, buf, sizeof buf) != 0)
            V("detokenize of BOS/EOS not empty");
    }
}

static size_t eogs(ilab_backend_t *b, int32_t *ids, size_t cap)
{
    size_t n = 0;
    ilab_status st = A->eog_ids(b, ids, cap, &n);
    if (st != ILAB_OK)
        V("eog_ids: %s", sn(st));
    return n;
}

static void c_tok11(void)
{
    ilab_backend_t *b = mk();
    int32_t ids[16];
    size_t n = eogs(b, ids, 16);
    for (size_t i = 0; i < n; i++) {
        if (ids[i] == EOSID)
            continue;
        char text[64];
        size_t l = detok(b, &ids[i], 1, text, sizeof text);
        if (!l)
            continue;
        int32_t t[64];
        size_t m = tokz(b, text, l, ILAB_TOKENIZE_PARSE_SPECIAL, t, 64);
        if (m != 1 || t[0] != ids[i])
            V("tokenize('%s', PARSE_SPECIAL) gave %zu ids (first %d), want [%d]", text, m, t[0],
              ids[i]);
        m = tokz(b, text, l, ILAB_TOKENIZE_PARSE_SPECIAL | ILAB_TOKENIZE_ADD_BOS, t, 64);
        if (m != 2 || t[1] != ids[i])
            V("tokenize('%s', PARSE_SPECIAL|ADD_BOS) wrong", text);
    }
}

static void c_tok11_plain(void)
{
    ilab_backend_t *b = mk();
    const char *s[] = {"<|im_end|>", "a<|im_end|>b", "<|im_start|>user\nhi<|im_end|>\n"};
    int32_t eg[16];
    size_t ne = eogs(b, eg, 16);
    for (int i = 0; i < 3; i++) {
        int32_t t[128];
        size_t n = tokz(b, s[i], strlen(s[i]), 0, t, 128);
        for (size_t k = 0; k < n; k++) {
            if (t[k] == BOSID || t[k] == EOSID)
                V("tokenize without PARSE_SPECIAL returned BOS/EOS");
            for (size_t e = 0; e < ne; e++)
                if (t[k] == eg[e])
                    V("tokenize('%s') without PARSE_SPECIAL returned end-of-generation id %d",
                      s[i], t[k]);
        }
        roundtrip(b, s[i], strlen(s[i]), "special-token text without the flag");
    }
}

static void c_tok12(void)
{
    ilab_backend_t *b = mk();
    int32_t ids[16];
    size_t n = eogs(b, ids, 16);
    if (n < 1 || ids[0] != EOSID)
        V("eog_ids does not start with EOS %d (got %d)", EOSID, n ? ids[0] : -9);
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= VOC)
            V("eog id %d out of range", ids[i]);
        if (i >= 2 && ids[i] <= ids[i - 1])
            V("eog ids after EOS not ascending");
        for (size_t j = 0; j < i; j++)
            if (ids[j] == ids[i])
                V("eog id repeated");
    }
    for (size_t cap = 0; cap < n; cap++) {
        int32_t buf[16];
        for (int k = 0; k < 16; k++)
            buf[k] = -5;
        size_t m = 0;
        if (A->eog_ids(b, cap ? buf : NULL, cap, &m) != ILAB_BUFFER_TOO_SMALL || m != n)
            V("eog_ids cap %zu", cap);
        for (int k = 0; k < 16; k++)
            if (buf[k] != -5)
                V("eog_ids wrote on BUFFER_TOO_SMALL");
    }
}

static void c_tok13(void)
{
    ilab_backend_t *b = mk();
    size_t need = 0;
    ilab_status st = A->chat_template(b, NULL, 0, &need);
    if (st != ILAB_BUFFER_TOO_SMALL)
        V("chat_template size query: %s", sn(st));
    char *full = malloc(need + 1);
    size_t l = 0;
    if (A->chat_template(b, full, need + 1, &l) != ILAB_OK || l != need || full[need])
        V("chat_template with cap len+1");
    if (strlen(full) != need)
        V("chat_template has a NUL inside");
    for (size_t cap = 1; cap <= need; cap += (cap < 20 ? 1 : 37)) {
        char *buf = malloc(need + 8);
        memset(buf, 'Z', need + 8);
        size_t m = 0;
        st = A->chat_template(b, buf, cap, &m);
        if (st != ILAB_BUFFER_TOO_SMALL || m != need)
            V("chat_template cap %zu: %s", cap, sn(st));
        for (size_t k = 0; k < need + 8; k++)
            if (buf[k] != 'Z')
                V("chat_template wrote byte %zu on BUFFER_TOO_SMALL (cap %zu)", k, cap);
        free(buf);
    }
}

static void c_tok3_memo(void)
{
    ilab_backend_t *b = mk();
    char buf[32];
    const char *w[] = {"the cat", "a dog!!", "the cat", "xyz 123"};
    int32_t first[32];
    size_t n_first = 0;
    for (int r = 0; r < 4; r++) {
        memcpy(buf, w[r], 8);
        int32_t t[32];
        size_t n = tokz(b, buf, 7, 0, t, 32);
        if (r == 0) {
            memcpy(first, t, sizeof t);
            n_first = n;
        }
        if (r == 2 && (n != n_first || memcmp(t, first, n * sizeof *t)))
            V("tokenize of the same text gave different ids");
        char out[32];
        size_t l = detok(b, t, n, out, sizeof out);
        if (l != 7 || memcmp(out, w[r], 7))
            V("tokenize('%s') in a reused buffer decodes to '%.*s'", w[r], (int)l, out);
    }
}

static void c_tok5(void)
{
    ilab_backend_t *b = mk();
    const char *s[] = {"a\xe2\x82", "\xc3", "\xf0\x9f\x98", "\xff", "x\x80y", "\xed\xa0\x80",
                       "\xc0\xaf", "ab\xe2"};
    for (int i = 0; i < 8; i++) {
        int32_t t[32];
        size_t n = 0;
        ilab_status st = A->tokenize(b, s[i], strlen(s[i]), 0, t, 32, &n);
        if (st == ILAB_INVALID_ARGUMENT)
            continue;
        if (st != ILAB_OK)
            V("tokenize of invalid UTF-8: %s", sn(st));
        char out[64];
        size_t l = detok(b, t, n, out, sizeof out);
        if (l != strlen(s[i]) || memcmp(out, s[i], l))
            V("invalid UTF-8 input %d accepted but does not round-trip (%zu bytes in, %zu out)",
              i, strlen(s[i]), l);
    }
}

static void c_log1_rows(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t s = seq(b);
    int32_t t[20];
    toks(t, 20, 1);
    size_t rows = 24;
    float *lg = malloc(rows * (size_t)VOC * sizeof *lg);
    for (size_t k = 0; k < rows * (size_t)VOC; k++)
        lg[k] = NAN;
    ev_ok(b, s, t, 7, ILAB_EVAL_ALL_LOGITS, lg);
    for (size_t k = 7 * (size_t)VOC; k < rows * (size_t)VOC; k++)
        if (!isnan(lg[k]))
            V("eval with ALL_LOGITS of 7 tokens wrote float %zu (row %zu)", k, k / (size_t)VOC);
    for (size_t k = 0; k < 7 * (size_t)VOC; k++)
        if (!isfinite(lg[k]))
            V("row %zu not finite", k / (size_t)VOC);
    for (size_t k = 0; k < rows * (size_t)VOC; k++)
        lg[k] = NAN;
    ev_ok(b, s, t + 7, 3, 0, lg);
    for (size_t k = (size_t)VOC; k < rows * (size_t)VOC; k++)
        if (!isnan(lg[k]))
            V("eval without ALL_LOGITS wrote past one row");
}

static void c_log1_null(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t s = seq(b);
    int32_t t[10];
    toks(t, 10, 2);
    ev_ok(b, s, t, 6, 0, NULL);
    if (slen(b, s) != 6)
        V("eval with logits NULL did not append (length %d)", slen(b, s));
    float *lg = malloc(sizeof(float) * (size_t)VOC);
    ev_ok(b, s, t + 6, 4, 0, lg);
    expect_ref(lg, t, 10, "after an eval with logits NULL");
}

static void c_log1_finite(void)
{
    ilab_backend_t *b = mk();
    float *lg = malloc(sizeof(float) * (size_t)VOC * 40);
    for (int r = 0; r < 5; r++) {
        ilab_seq_t s = seq(b);
        int32_t t[40];
        toks(t, 40, 10 + (uint32_t)r);
        ev_ok(b, s, t, 40, ILAB_EVAL_ALL_LOGITS, lg);
        for (size_t k = 0; k < 40 * (size_t)VOC; k++)
            if (!isfinite(lg[k]))
                V("logit %zu of row %zu is not finite (%f)", k % (size_t)VOC, k / (size_t)VOC,
                  lg[k]);
    }
}

static void c_log2(void)
{
    ilab_backend_t *b = mk();
    float *x = malloc(sizeof(float) * (size_t)VOC), *y = malloc(sizeof(float) * (size_t)VOC);
    int32_t h1[3] = {'a', 'q', 'b'}, h2[2] = {'x', 'b'};
    ilab_seq_t s1 = seq(b);
    ev_ok(b, s1, h1, 3, 0, x);
    ilab_seq_t s2 = seq(b);
    ev_ok(b, s2, h2, 2, 0, x);
    ilab_backend_t *c = mk();
    ilab_seq_t s3 = seq(c);
    ev_ok(c, s3, h2, 2, 0, y);
    if (memcmp(x, y, sizeof(float) * (size_t)VOC))
        V("same tokens in a fresh sequence give different logits after another history");
}

static void c_log3(void)
{
    ilab_backend_t *b = mk();
    int32_t t[4][12];
    for (int i = 0; i < 4; i++)
        toks(t[i], 12, 20 + (uint32_t)i);
    ilab_seq_t s[4];
    for (int i = 0; i < 4; i++)
        s[i] = seq(b);
    ev_ok(b, s[2], t[2], 5, 0, NULL); /* a decode item in the batch */
    float *lg[4];
    ilab_batch_item_t it[4];
    const ilab_batch_item_t *p[4];
    int32_t n[4] = {7, 9, 1, 4};
    const int32_t *src[4] = {t[0], t[1], t[2] + 5, t[3]};
    for (int i = 0; i < 4; i++) {
        lg[i] = malloc(sizeof(float) * (size_t)VOC);
        it[i] = item(s[i], src[i], n[i], 0, lg[i]);
        p[i] = &it[i];
    }
    ilab_status st = A->eval(b, p, 4);
    if (st != ILAB_OK)
        V("batch of 4: %s", sn(st));
    expect_ref(lg[0], t[0], 7, "batch item 0");
    expect_ref(lg[1], t[1], 9, "batch item 1 (empty sequence after another prefill)");
    expect_ref(lg[2], t[2], 6, "batch item 2 (decode)");
    expect_ref(lg[3], t[3], 4, "batch item 3");
}

static void c_log5(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t s = seq(b);
    int32_t t[30];
    toks(t, 30, 3);
    ev_ok(b, s, t, 12, 0, NULL);
    size_t rows = 64;
    float *lg = malloc(rows * (size_t)VOC * sizeof *lg);
    for (size_t k = 0; k < rows * (size_t)VOC; k++)
        lg[k] = NAN;
    ev_ok(b, s, t + 12, 6, ILAB_EVAL_ALL_LOGITS, lg);
    for (size_t k = 6 * (size_t)VOC; k < rows * (size_t)VOC; k++)
        if (!isnan(lg[k]))
            V("ALL_LOGITS into a sequence of 12 wrote row %zu of a 6-row item", k / (size_t)VOC);
    for (int r = 0; r < 6; r++)
        expect_ref(lg + (size_t)r * (size_t)VOC, t, 12 + r + 1, "ALL_LOGITS row");
}

static void c_log6_size(void)
{
    ilab_backend_t *b = mk();
    int mb = MAXBATCH;
    ilab_seq_t s[64];
    int32_t t[2] = {'a', 'b'};
    ilab_batch_item_t it[65];
    const ilab_batch_item_t *p[65];
    for (int n = 1; n <= mb + 1; n++) {
        for (int i = 0; i < n; i++) {
            s[i] = seq(b);
            it[i] = item(s[i], t, 2, 0, NULL);
            p[i] = &it[i];
        }
        ilab_status st = A->eval(b, p, (size_t)n);
        if (n <= mb && st != ILAB_OK)
            V("eval of %d items (max_batch %d): %s", n, mb, sn(st));
        if (n > mb && st != ILAB_INVALID_ARGUMENT)
            V("eval of %d items (max_batch %d): %s", n, mb, sn(st));
        for (int i = 0; i < n; i++)
            A->seq_free(b, s[i]);
    }
}

static void c_log6_dup(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t s[3] = {seq(b), seq(b), seq(b)};
    int32_t t[2] = {'a', 'b'};
    ilab_batch_item_t it[3] = {item(s[0], t, 2, 0, NULL), item(s[1], t, 2, 0, NULL),
                               item(s[0], t, 1, 0, NULL)};
    const ilab_batch_item_t *p[3] = {&it[0], &it[1], &it[2]};
    ilab_status st = A->eval(b, p, 3);
    if (st != ILAB_INVALID_ARGUMENT)
        V("batch naming one sequence in items 0 and 2: %s", sn(st));
    if (slen(b, s[0]) || slen(b, s[1]))
        V("refused batch changed a sequence");
}

static void c_log6_flags(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t s = seq(b);
    int32_t t[2] = {'a', 'b'};
    for (int bit = 1; bit < 32; bit++) {
        ilab_status st = ev(b, s, t, 2, 1u << bit, NULL);
        if (st != ILAB_INVALID_ARGUMENT)
            V("eval item flag bit %d: %s", bit, sn(st));
    }
    if (slen(b, s))
        V("refused eval changed the sequence");
}

static void c_log6_ntok(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t s = seq(b);
    int32_t t[4] = {'a', 'b', 'c', 'd'};
    ev_ok(b, s, t, 4, 0, NULL);
    int32_t bad[] = {0, -1, -4, INT32_MIN};
    for (int i = 0; i < 4; i++) {
        ilab_status st = ev(b, s, t, bad[i], 0, NULL);
        if (st != ILAB_INVALID_ARGUMENT)
            V("eval item with n_tokens %d: %s", bad[i], sn(st));
    }
    if (slen(b, s) != 4)
        V("refused eval changed the length");
}

static void c_cch3_cow(void)
{
    ilab_backend_t *b = mk();
    int32_t p[30], c[3];
    toks(p, 30, 4);
    toks(c, 3, 5);
    ilab_seq_t par = seq(b);
    ev_ok(b, par, p, 20, 0, NULL);
    ilab_seq_t ch = 0;
    if (A->seq_fork(b, par, &ch) != ILAB_OK)
        V("seq_fork failed");
    float *lg = malloc(sizeof(float) * (size_t)VOC);
    ev_ok(b, par, p + 20, 3, 0, NULL);
    ev_ok(b, ch, c, 3, 0, NULL);
    ev_ok(b, par, p + 23, 1, 0, lg);
    expect_ref(lg, p, 24, "parent after its child appended into a shared block");
    int32_t cc[24];
    memcpy(cc, p, 20 * sizeof *p);
    memcpy(cc + 20, c, 3 * sizeof *c);
    cc[23] = 'k';
    ev_ok(b, ch, cc + 23, 1, 0, lg);
    expect_ref(lg, cc, 24, "child after fork");
}

static void c_cch3_parent_free(void)
{
    ilab_backend_t *b = MK("cache_blocks", "16");
    int32_t p[30], x[200];
    toks(p, 30, 6);
    toks(x, 200, 7);
    ilab_seq_t par = seq(b);
    ev_ok(b, par, p, 20, 0, NULL);
    ilab_seq_t ch = 0;
    if (A->seq_fork(b, par, &ch) != ILAB_OK)
        V("seq_fork failed");
    A->seq_free(b, par);
    ilab_seq_t o = seq(b);
    ev_ok(b, o, x, 200, 0, NULL);
    float *lg = malloc(sizeof(float) * (size_t)VOC);
    ev_ok(b, ch, p + 20, 1, 0, lg);
    expect_ref(lg, p, 21, "child after its parent was freed and the cache reused");
}

static void c_cch3_empty(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t par = seq(b), ch = 0;
    ilab_status st = A->seq_fork(b, par, &ch);
    if (st != ILAB_OK)
        V("seq_fork of an empty sequence: %s", sn(st));
    if (slen(b, ch) != 0)
        V("fork of an empty sequence has length %d", slen(b, ch));
    int32_t t[5] = {'a', 'b', 'c', 'd', 'e'};
    float *lg = malloc(sizeof(float) * (size_t)VOC);
    ev_ok(b, ch, t, 5, 0, lg);
    expect_ref(lg, t, 5, "fork of an empty sequence");
}

static void c_cch4_blocks(void)
{
    ilab_backend_t *b = mk();
    ilab_cache_stats_t first = stats(b);
    int32_t t[60], u[10];
    toks(t, 60, 8);
    toks(u, 10, 9);
    ilab_seq_t s = seq(b);
    ev_ok(b, s, t, 40, 0, NULL);
    if (A->seq_truncate(b, s, 20) != ILAB_OK)
        V("truncate 40 -> 20 failed");
    ilab_cache_stats_t now = stats(b);
    int64_t held = ((20 + now.block_size - 1) / now.block_size) * (int64_t)now.block_size;
    if (now.free_positions != first.free_positions - held)
        V("after truncate to 20, free %lld, want %lld", (long long)now.free_positions,
          (long long)(first.free_positions - held));
    ilab_seq_t o = seq(b);
    ev_ok(b, o, u, 10, 0, NULL);
    float *lg = malloc(sizeof(float) * (size_t)VOC);
    ev_ok(b, s, t + 40, 1, 0, lg);
    int32_t r[21];
    memcpy(r, t, 20 * sizeof *t);
    r[20] = t[40];
    expect_ref(lg, r, 21, "append after truncate");
}

static void c_cch4_range(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t s = seq(b);
    int32_t t[10];
    toks(t, 10, 11);
    ev_ok(b, s, t, 10, 0, NULL);
    int32_t bad[] = {11, 12, -1, 100000};
    for (int i = 0; i < 4; i++) {
        ilab_status st = A->seq_truncate(b, s, bad[i]);
        if (st != ILAB_INVALID_ARGUMENT)
            V("seq_truncate(%d) of a length-10 sequence: %s", bad[i], sn(st));
        if (slen(b, s) != 10)
            V("refused truncate changed the length to %d", slen(b, s));
    }
    if (A->seq_truncate(b, s, 10) != ILAB_OK || slen(b, s) != 10)
        V("truncate to the current length");
}

static void c_cch5_exact(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t s = seq(b);
    int32_t *t = malloc(sizeof(int32_t) * (size_t)(MAXCTX + 1));
    toks(t, MAXCTX + 1, 12);
    ev_ok(b, s, t, MAXCTX - 5, 0, NULL);
    ilab_status st = ev(b, s, t + MAXCTX - 5, 5, 0, NULL);
    if (st != ILAB_OK)
        V("filling a sequence to exactly max_context %d: %s", MAXCTX, sn(st));
    st = ev(b, s, t + MAXCTX, 1, 0, NULL);
    if (st != ILAB_CONTEXT_OVERFLOW)
        V("one past max_context: %s", sn(st));
}

static void c_cch5_straddle(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t s = seq(b);
    int32_t *t = malloc(sizeof(int32_t) * (size_t)(MAXCTX + 40));
    toks(t, MAXCTX + 40, 13);
    ev_ok(b, s, t, MAXCTX - 12, 0, NULL);
    ilab_status st = ev(b, s, t + MAXCTX - 12, 20, 0, NULL);
    if (st != ILAB_CONTEXT_OVERFLOW)
        V("prefill straddling max_context: %s", sn(st));
    char m[256];
    lasterr(b, m, sizeof m);
    if (!m[0])
        V("CONTEXT_OVERFLOW without a message");
    if (slen(b, s) != MAXCTX - 12)
        V("refused prefill changed the length to %d (was %d)", slen(b, s), MAXCTX - 12);
    float *lg = malloc(sizeof(float) * (size_t)VOC);
    ev_ok(b, s, t + MAXCTX - 12, 1, 0, lg);
    expect_ref(lg, t, MAXCTX - 11, "after a refused overflow");
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void c_cch6_unique(void)
{
    ilab_backend_t *b = mk();
    size_t N = 70000;
    uint64_t *h = malloc(N * sizeof *h);
    for (size_t i = 0; i < N; i++) {
        h[i] = seq(b);
        if (!h[i])
            V("seq_create gave handle 0");
        A->seq_free(b, h[i]);
    }
    qsort(h, N, sizeof *h, cmp_u64);
    for (size_t i = 1; i < N; i++)
        if (h[i] == h[i - 1])
            V("handle %#llx issued twice within %zu creates", (unsigned long long)h[i], N);
}

static void c_cch6_stale(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t a = seq(b);
    int32_t t[3] = {1, 2, 3};
    ev_ok(b, a, t, 3, 0, NULL);
    A->seq_free(b, a);
    ilab_seq_t c = seq(b);
    ev_ok(b, c, t, 2, 0, NULL);
    int32_t n = -9;
    ilab_status st = A->seq_length(b, a, &n);
    if (st != ILAB_INVALID_ARGUMENT)
        V("seq_length of a freed handle (slot reused): %s, length %d", sn(st), n);
    if (A->seq_free(b, a) != ILAB_INVALID_ARGUMENT)
        V("seq_free twice");
    if (ev(b, a, t, 1, 0, NULL) != ILAB_INVALID_ARGUMENT)
        V("eval of a freed handle");
    if (A->seq_truncate(b, a, 0) != ILAB_INVALID_ARGUMENT)
        V("truncate of a freed handle");
    if (slen(b, c) != 2)
        V("stale-handle calls changed the live sequence");
}

static void c_cch6_slots(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t s[4096];
    int n = 0;
    ilab_status st;
    for (;;) {
        st = A->seq_create(b, &s[n]);
        if (st != ILAB_OK)
            break;
        if (++n == 4096)
            return;
    }
    if (st != ILAB_OUT_OF_MEMORY)
        V("seq_create with no slot left: %s", sn(st));
    ilab_seq_t c = 0;
    st = A->seq_fork(b, s[0], &c);
    if (st != ILAB_OUT_OF_MEMORY)
        V("seq_fork with no slot left: %s, want OUT_OF_MEMORY", sn(st));
    A->seq_free(b, s[3]);
    if (A->seq_create(b, &c) != ILAB_OK)
        V("freeing a sequence did not make room");
}

static void c_cch6_heap(void)
{
    ilab_backend_t *b = mk();
    int32_t t[20];
    toks(t, 20, 14);
    for (int r = 0; r < 2; r++) {
        ilab_seq_t s = seq(b);
        ev_ok(b, s, t, 20, 0, NULL);
        A->seq_free(b, s);
    }
    size_t before = heap_now();
    for (int r = 0; r < 50; r++) {
        ilab_seq_t s = seq(b);
        ev_ok(b, s, t, 20, 0, NULL);
        ilab_seq_t c = 0;
        A->seq_fork(b, s, &c);
        A->seq_free(b, c);
        A->seq_free(b, s);
    }
    size_t after = heap_now();
    if (after > before)
        V("live heap grew by %zu bytes over 50 create/eval/fork/free cycles", after - before);
}

static void c_cch6_refused_heap(void)
{
    ilab_backend_t *b = MK("cache_blocks", "8");
    ilab_cache_stats_t st0 = stats(b);
    int32_t *t = malloc(sizeof(int32_t) * 600);
    toks(t, 600, 15);
    ilab_seq_t s = seq(b);
    ev_ok(b, s, t, (int32_t)st0.total_positions, 0, NULL);
    ilab_seq_t o = seq(b);
    for (int r = 0; r < 3; r++)
        ev(b, o, t, 4, 0, NULL);
    size_t before = heap_now();
    for (int r = 0; r < 50; r++) {
        ilab_status st = ev(b, o, t, 4, 0, NULL);
        if (st != ILAB_OUT_OF_MEMORY)
            V("eval with the pool full: %s", sn(st));
    }
    size_t after = heap_now();
    if (after != before)
        V("live heap moved by %ld bytes over 50 refused (OUT_OF_MEMORY) evals",
          (long)after - (long)before);
}

static void c_cch7(void)
{
    ilab_backend_t *b = mk();
    int32_t a[20], c[10];
    toks(a, 20, 16);
    toks(c, 10, 17);
    ilab_seq_t sa = seq(b), sc = seq(b);
    ev_ok(b, sa, a, 8, 0, NULL);
    ilab_batch_item_t it[2] = {item(sa, a + 8, 1, 0, NULL), item(sc, c, 5, 0, NULL)};
    const ilab_batch_item_t *p[2] = {&it[0], &it[1]};
    if (A->eval(b, p, 2) != ILAB_OK)
        V("batch failed");
    float *lg = malloc(sizeof(float) * (size_t)VOC);
    ev_ok(b, sa, a + 9, 1, 0, lg);
    expect_ref(lg, a, 10, "single decode after a batched decode of the same sequence");
}

static void c_cch8_tok(void)
{
    ilab_backend_t *b = mk();
    ilab_seq_t s[3] = {seq(b), seq(b), seq(b)};
    int32_t good[4] = {'a', 'b', 'c', 'd'}, bad[3] = {'x', VOC, 'y'};
    ilab_batch_item_t it[3] = {item(s[0], good, 4, 0, NULL), item(s[1], good, 2, 0, NULL),
                               item(s[2], bad, 3, 0, NULL)};
    const ilab_batch_item_t *p[3] = {&it[0], &it[1], &it[2]};
    ilab_status st = A->eval(b, p, 3);
    if (st != ILAB_INVALID_ARGUMENT)
        V("batch whose last item has id %d: %s", VOC, sn(st));
    for (int i = 0; i < 3; i++)
        if (slen(b, s[i]))
            V("refused batch changed sequence %d (length %d)", i, slen(b, s[i]));
}

static void c_cch8_oom(void)
{
    ilab_backend_t *b = MK("cache_blocks", "8");
    ilab_cache_stats_t st0 = stats(b);
    int bs = st0.block_size;
    int blocks = (int)(st0.free_positions / bs);
    int32_t *t = malloc(sizeof(int32_t) * 600);
    toks(t, 600, 18);
    int each = (blocks / 2 + 1) * bs; /* each item alone fits, together they do not */
    ilab_seq_t s[2] = {seq(b), seq(b)};
    ilab_batch_item_t it[2] = {item(s[0], t, each, 0, NULL), item(s[1], t, each, 0, NULL)};
    const ilab_batch_item_t *p[2] = {&it[0], &it[1]};
    ilab_status st = A->eval(b, p, 2);
    if (st == ILAB_OK)
        V("batch needing %d blocks with %d free succeeded", 2 * (blocks / 2 + 1), blocks);
    if (slen(b, s[0]) || slen(b, s[1]))
        V("refused batch (%s) changed sequences (lengths %d, %d)", sn(st), slen(b, s[0]),
          slen(b, s[1]));
    if (st != ILAB_OUT_OF_MEMORY)
        V("batch past the pool: %s, want OUT_OF_MEMORY", sn(st));
    if (stats(b).free_positions != st0.free_positions)
        V("refused batch changed free capacity");
}

static void c_cch9_fork(void)
{
    ilab_backend_t *b = mk();
    int32_t t[30];
    toks(t, 30, 19);
    for (int n = 1; n < 30; n += 3) {
        ilab_seq_t p = seq(b), c = 0;
        ev_ok(b, p, t, n, 0, NULL);
        if (A->seq_fork(b, p, &c) != ILAB_OK)
            V("fork failed");
        if (slen(b, c) != n)
            V("fork of a length-%d sequence has length %d", n, slen(b, c));
        A->seq_free(b, c);
        A->seq_free(b, p);
    }
}

static void c_cch10_cow(void)
{
    ilab_backend_t *b = mk();
    ilab_cache_stats_t first = stats(b);
    int32_t t[30];
    toks(t, 30, 20);
    ilab_seq_t p = seq(b), c = 0;
    ev_ok(b, p, t, 20, 0, NULL);
    if (A->seq_fork(b, p, &c) != ILAB_OK)
        V("fork failed");
    ev_ok(b, c, t + 20, 2, 0, NULL);
    ev_ok(b, p, t + 22, 2, 0, NULL);
    A->seq_free(b, c);
    A->seq_free(b, p);
    ilab_cache_stats_t now = stats(b);
    if (now.free_positions != first.free_positions)
        V("every sequence freed, free_positions %lld != first figure %lld",
          (long long)now.free_positions, (long long)first.free_positions);
}

static void c_cch10_exact(void)
{
    ilab_backend_t *b = MK("cache_blocks", "8");
    ilab_cache_stats_t st0 = stats(b);
    if (st0.block_size < 1 || st0.total_positions < 1 || st0.free_positions > st0.total_positions)
        V("bad stats");
    int32_t *t = malloc(sizeof(int32_t) * 600);
    toks(t, 600, 21);
    int64_t fp = st0.free_positions;
    if (fp > MAXCTX)
        V("test assumes the pool is smaller than max_context");
    ilab_seq_t s = seq(b), o = seq(b);
    ilab_status st = ev(b, s, t, (int32_t)fp, 0, NULL);
    if (st != ILAB_OK)
        V("eval needing exactly the %lld free positions: %s", (long long)fp, sn(st));
    if (stats(b).free_positions != 0)
        V("free_positions %lld after taking all", (long long)stats(b).free_positions);
    st = ev(b, o, t, 1, 0, NULL);
    if (st != ILAB_OUT_OF_MEMORY)
        V("eval needing one block more: %s", sn(st));
}

static void c_cch1(void)
{
    ilab_backend_t *b = mk();
    int32_t ta[50], tb[50];
    toks(ta, 50, 22);
    toks(tb, 50, 23);
    ilab_seq_t a = seq(b), c = seq(b);
    float *la = malloc(sizeof(float) * (size_t)VOC), *lb = malloc(sizeof(float) * (size_t)VOC);
    float *r = malloc(sizeof(float) * (size_t)VOC * 50);
    ilab_backend_t *rb = mk();
    ilab_seq_t rs = seq(rb);
    ev_ok(rb, rs, ta, 50, ILAB_EVAL_ALL_LOGITS, r);
    for (int i = 0; i < 40; i++) {
        ev_ok(b, a, ta + i, 1, 0, la);
        ev_ok(b, c, tb + i, 1, 0, lb);
        if (!tol_eq(la, r + (size_t)i * (size_t)VOC, VOC))
            V("decode at position %d differs from a full recomputation", i);
    }
}

static void c_cch2(void)
{
    ilab_backend_t *b = mk();
    int32_t t[40], d[8];
    toks(t, 40, 24);
    toks(d, 8, 25);
    float *one = malloc(sizeof(float) * (size_t)VOC * 40);
    ilab_seq_t r = seq(b);
    ev_ok(b, r, t, 40, ILAB_EVAL_ALL_LOGITS, one);
    int cuts[][4] = {{5, 20, 15, 0}, {3, 3, 30, 4}, {17, 1, 22, 0}, {9, 9, 9, 13}};
    float *lg = malloc(sizeof(float) * (size_t)VOC * 40);
    for (int c = 0; c < 4; c++) {
        ilab_seq_t s = seq(b), other = seq(b);
        int pos = 0;
        for (int k = 0; k < 4 && cuts[c][k]; k++) {
            int n = cuts[c][k];
            ev_ok(b, s, t + pos, n, ILAB_EVAL_ALL_LOGITS, lg);
            for (int i = 0; i < n; i++)
                if (!tol_eq(lg + (size_t)i * (size_t)VOC, one + (size_t)(pos + i) * (size_t)VOC, VOC))
                    V("chunked prefill (split %d) row %d differs from the prompt in one call", c,
                      pos + i);
            pos += n;
            ev_ok(b, other, d + k, 1, 0, NULL); /* other work between chunks */
        }
        A->seq_free(b, s);
        A->seq_free(b, other);
    }
}

/* --- threads ---------------------------------------------------------------------------- */

static ilab_backend_t *TB;
static volatile int TFAIL;
static char TMSG[256];
static double deadline;
static double now_s(void) { return (double)host_now(NULL) / 1e9; }

static void *thr_tok(void *arg)
{
    int id = (int)(intptr_t)arg;
    char s[600];
    for (int i = 0; i < 599; i++)
        s[i] = id ? "the thing " [i % 10] : (char)('a' + i % 7);
    s[599] = 0;
    int32_t t[1024];
    char out[1024];
    while (!TFAIL && now_s() < deadline) {
        size_t n = 0, l = 0;
        if (A->tokenize(TB, s, 599, 0, t, 1024, &n) != ILAB_OK ||
            A->detokenize(TB, t, n, out, sizeof out, &l) != ILAB_OK || l != 599 ||
            memcmp(out, s, 599)) {
            snprintf(TMSG, sizeof TMSG, "concurrent tokenize gave a wrong result (thread %d)", id);
            TFAIL = 1;
        }
    }
    return NULL;
}

static void *thr_seq(void *arg)
{
    int id = (int)(intptr_t)arg;
    int32_t t[3] = {id, 'b', 'c'};
    while (!TFAIL && now_s() < deadline) {
        ilab_seq_t s = 0;
        int32_t n = -1;
        if (A->seq_create(TB, &s) != ILAB_OK || ev(TB, s, t, 3, 0, NULL) != ILAB_OK ||
            A->seq_length(TB, s, &n) != ILAB_OK || n != 3 || A->seq_free(TB, s) != ILAB_OK) {
            snprintf(TMSG, sizeof TMSG, "concurrent create/eval/length/free failed (thread %d, "
                     "handle %#llx)", id, (unsigned long long)s);
            TFAIL = 1;
        }
    }
    return NULL;
}

static float *TREF[4][3];
static int32_t TTOK[4][48];
static const int TCUT[3] = {7, 27, 48}; /* the three chunks end here */
static void *thr_eval(void *arg)
{
    int id = (int)(intptr_t)arg;
    float *lg = malloc(sizeof(float) * (size_t)VOC);
    while (!TFAIL && now_s() < deadline) {
        ilab_seq_t s = 0;
        if (A->seq_create(TB, &s) != ILAB_OK) {
            snprintf(TMSG, sizeof TMSG, "seq_create failed");
            TFAIL = 1;
            break;
        }
        for (int c = 0; c < 3 && !TFAIL; c++) {
            int from = c ? TCUT[c - 1] : 0;
            int ok = ev(TB, s, TTOK[id] + from, TCUT[c] - from, 0, lg) == ILAB_OK;
            if (!ok || !tol_eq(lg, TREF[id][c], VOC)) {
                snprintf(TMSG, sizeof TMSG, "concurrent evals of different sequences: thread %d "
                         "got %s after %d tokens", id, ok ? "wrong logits" : "a failed eval",
                         TCUT[c]);
                TFAIL = 1;
            }
        }
        A->seq_free(TB, s);
    }
    free(lg);
    return NULL;
}

static void run_threads_n(void *(*fn)(void *), double secs, int n)
{
    deadline = now_s() + secs;
    pthread_t th[8];
    for (int i = 0; i < n; i++)
        pthread_create(&th[i], NULL, fn, (void *)(intptr_t)i);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    if (TFAIL)
        V("%s", TMSG);
}

static void c_thr_tok(void)
{
    TB = mk();
    run_threads_n(thr_tok, 12, 4);
}
static void c_thr_seq(void)
{
    TB = mk();
    run_threads_n(thr_seq, 12, 4);
}
static void c_thr_eval(void)
{
    TB = mk();
    for (int i = 0; i < 4; i++) {
        toks(TTOK[i], 48, 30 + (uint32_t)i);
        for (int c = 0; c < 3; c++) {
            TREF[i][c] = malloc(sizeof(float) * (size_t)VOC);
            ref_logits(TTOK[i], TCUT[c], TREF[i][c]);
        }
    }
    ilab_cache_stats_t first = stats(TB);
    run_threads_n(thr_eval, 15, 4);
    if (stats(TB).free_positions != first.free_positions)
        V("after concurrent evals and frees, free_positions %lld != first %lld",
          (long long)stats(TB).free_positions, (long long)first.free_positions);
}

/* --- the table ----------------------------------------------------------------------------- */

typedef struct kase {
    int id;
    void (*fn)(void);
} kase;

static const kase CASES[] = {
    {1, c_abi1},           {2, c_abi6},          {3, c_abi5},         {4, c_abi5},
    {5, c_abi6},           {6, c_abi8},          {7, c_abi4},         {8, c_abi7_fd},
    {9, c_abi7_heap},      {10, c_abi9},         {11, c_abi3_info_size}, {12, c_abi3_info_small},
    {13, c_abi3_item_small}, {14, c_abi3_item_tail}, {15, c_prb1},     {16, c_prb3},
    {17, c_prb2_reason},   {18, c_prb2_out},     {19, c_err5_unknown}, {20, c_cch10_config},
    {21, c_err5_range},    {22, c_tok1_name},    {23, c_tok2_strict}, {24, c_err1},
    {25, c_err4},          {26, c_err3_detok},   {27, c_err2_cancel}, {28, c_err2_generate},
    {29, c_tok7_tokenize}, {30, c_tok7_tokenize}, {31, c_tok7_detok}, {32, c_tok7_piece},
    {33, c_tok7_detok},    {34, c_tok2_len},     {35, c_tok2_nul},    {36, c_tok4},
    {37, c_tok6_piece},    {38, c_tok6_detok},   {39, c_tok8},        {40, c_tok9},
    {41, c_tok11},         {42, c_tok11_plain},  {43, c_tok12},       {44, c_tok13},
    {45, c_tok3_memo},     {46, c_tok5},         {47, c_tok1},        {48, c_log1_rows},
    {49, c_log1_null},     {50, c_log1_finite},  {51, c_log2},        {52, c_log3},
    {53, c_log5},          {54, c_log6_size},    {55, c_log6_dup},    {56, c_log6_flags},
    {57, c_log6_ntok},     {58, c_cch3_cow},     {59, c_cch3_parent_free}, {60, c_cch3_empty},
    {61, c_cch4_blocks},   {62, c_cch4_range},   {63, c_cch5_exact},  {64, c_cch5_straddle},
    {65, c_cch6_unique},   {66, c_cch6_stale},   {67, c_cch6_slots},  {68, c_cch6_heap},
    {69, c_cch6_refused_heap}, {70, c_cch7},     {71, c_cch8_tok},    {72, c_cch8_oom},
    {73, c_cch9_fork},     {74, c_cch10_cow},    {76, c_cch10_exact}, {77, c_cch1},
    {78, c_cch2},          {79, c_thr_tok},      {80, c_thr_seq},     {81, c_thr_eval},
};

static void run_case(void (*fn)(void))
{
    void *h = dlopen(PATH, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        V("dlopen refused the plugin: %s", dlerror());
    E = dlsym(h, ILAB_PLUGIN_ENTRY_SYMBOL);
    if (!E)
        V("no symbol %s", ILAB_PLUGIN_ENTRY_SYMBOL);
    if (E->abi_major != ILAB_ABI_MAJOR || E->abi_minor > ILAB_ABI_MINOR)
        V("ABI %u.%u not loadable by this driver (%d.%d)", E->abi_major, E->abi_minor,
          ILAB_ABI_MAJOR, ILAB_ABI_MINOR);
    A = E->backend;
    if (!A)
        V("entry has no backend table");
    HOST.struct_size = sizeof HOST;
    HOST.abi_major = ILAB_ABI_MAJOR;
    HOST.abi_minor = ILAB_ABI_MINOR;
    HOST.log = host_log;
    HOST.now_ns = host_now;
    MAXBATCH = man_int("max_batch", 4, 0);
    if (!MAXBATCH) {
        char v[128];
        if (man_get("batching", 2, v, sizeof v) && strstr(v, "max_batch:"))
            MAXBATCH = atoi(strstr(v, "max_batch:") + 10);
    }
    if (fn != c_abi1 && fn != c_abi5 && fn != c_abi6 && fn != c_abi8 && fn != c_abi4) {
        ilab_backend_t *b = mk();
        ilab_model_info_t i = info_of(b);
        VOC = i.vocab_size;
        BOSID = i.bos_id;
        EOSID = i.eos_id;
        MAXCTX = i.max_context;
        A->destroy(b);
    }
    fn();
    printf("OK\n");
    fflush(stdout);
    _exit(0);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s PLUGIN.so CASE|--manifest\n", argv[0]);
        return 2;
    }
    static char pathbuf[4096];
    if (!strchr(argv[1], '/')) { /* a bare file name is the file in the current folder */
        snprintf(pathbuf, sizeof pathbuf, "./%s", argv[1]);
        PATH = pathbuf;
    } else
        PATH = argv[1];
    if (!strcmp(argv[2], "--manifest")) { /* print the embedded manifest */
        void *h = dlopen(PATH, RTLD_NOW | RTLD_LOCAL);
        const ilab_plugin_entry_t *e = h ? dlsym(h, ILAB_PLUGIN_ENTRY_SYMBOL) : NULL;
        if (!e)
            return 1;
        fputs(e->manifest_yaml, stdout);
        return 0;
    }
    int id = atoi(argv[2]);
    void (*fn)(void) = NULL;
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++)
        if (CASES[i].id == id)
            fn = CASES[i].fn;
    if (!fn) {
        fprintf(stderr, "unknown case %s\n", argv[2]);
        return 2;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(120);
        run_case(fn);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) {
        if (WTERMSIG(status) == SIGALRM)
            printf("VIOLATION: hang (no answer within 120 s)\n");
        else
            printf("VIOLATION: crashed with signal %d (%s)\n", WTERMSIG(status),
                   strsignal(WTERMSIG(status)));
    }
    return 1;
}
