/* driver CASE PLUGIN.so — loads the plugin as a host would (dlopen, the
 * ABI entry) and checks one contract clause. Exit 0 and "violation: ..."
 * when the plugin breaks it; exit 1 and "no violation" when it keeps it.
 * Every case runs in a forked child, so a crash is reported as a violation. */
#define _GNU_SOURCE
#include <inferlab/inferlab.h>

#include <dlfcn.h>
#include <elf.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const ilab_plugin_entry_t *E;
static const ilab_backend_api_t *A;
static const char *so_path;
static char why[1024];
static int V, C; /* vocab_size, max_context */

#define VIOL(...)                                   \
    do {                                            \
        snprintf(why, sizeof why, __VA_ARGS__);     \
        return 1;                                   \
    } while (0)
#define OK 0

/* --- helpers ------------------------------------------------------------------ */

static ilab_backend_t *mk(const char *kv_blocks)
{
    ilab_config_entry_t cfg[2] = {{"seed", "7"}, {"kv_blocks", kv_blocks ? kv_blocks : "48"}};
    char err[256];
    ilab_backend_t *b = NULL;
    ilab_status st = A->create(NULL, cfg, 2, err, sizeof err, &b);
    if (st != ILAB_OK || !b) {
        fprintf(stderr, "driver: create failed: %s (%s)\n", ilab_status_name(st), err);
        exit(2);
    }
    ilab_model_info_t mi = {.struct_size = sizeof mi};
    if (A->model_info(b, &mi) != ILAB_OK) {
        fprintf(stderr, "driver: model_info failed\n");
        exit(2);
    }
    V = mi.vocab_size;
    C = mi.max_context;
    return b;
}

static ilab_seq_t newseq(ilab_backend_t *b)
{
    ilab_seq_t s = 0;
    if (A->seq_create(b, &s) != ILAB_OK) {
        fprintf(stderr, "driver: seq_create failed\n");
        exit(2);
    }
    return s;
}

static ilab_status ev(ilab_backend_t *b, ilab_seq_t s, const int32_t *t, int n, uint32_t flags,
                      float *logits)
{
    ilab_batch_item_t it = {.struct_size = sizeof it, .seq = s, .tokens = t, .n_tokens = n,
                            .flags = flags, .logits = logits};
    const ilab_batch_item_t *p = &it;
    return A->eval(b, &p, 1);
}

static void must(ilab_status st, const char *what)
{
    if (st != ILAB_OK) {
        fprintf(stderr, "driver: %s failed: %s\n", what, ilab_status_name(st));
        exit(2);
    }
}

/* A deterministic token string: ids in [0, 256) plus some merges. */
static void gen(int32_t *t, int n, int salt)
{
    for (int i = 0; i < n; i++)
        t[i] = (int32_t)((i * 37 + salt * 101 + (i * i) % 7) % 290);
}

/* Logits after the last of t[0..n) in a fresh sequence (one prefill). */
static void fresh(ilab_backend_t *b, const int32_t *t, int n, float *out)
{
    ilab_seq_t s = newseq(b);
    must(ev(b, s, t, n, 0, out), "fresh eval");
    must(A->seq_free(b, s), "seq_free");
}

static int tol_eq(const float *a, const float *r, int n)
{
    int am = 0, bm = 0;
    for (int i = 0; i < n; i++) {
        if (!(fabsf(a[i] - r[i]) <= 1e-4f + 1e-4f * fabsf(r[i])))
            return 0;
        if (a[i] > a[am])
            am = i;
        if (r[i] > r[bm])
            bm = i;
    }
    return am == bm;
}

static int32_t seqlen(ilab_backend_t *b, ilab_seq_t s)
{
    int32_t n = -1;
    must(A->seq_length(b, s, &n), "seq_length");
    return n;
}

static size_t errlen(ilab_backend_t *b)
{
    char buf[1024];
    return A->last_error(b, buf, sizeof buf);
}

static const char *errmsg(ilab_backend_t *b)
{
    static char buf[1024];
    A->last_error(b, buf, sizeof buf);
    return buf;
}

static ilab_cache_stats_t stats(ilab_backend_t *b)
{
    ilab_cache_stats_t s = {.struct_size = sizeof s};
    must(A->cache_stats(b, &s), "cache_stats");
    return s;
}

static size_t live_heap(void)
{
    struct mallinfo2 m = mallinfo2();
    return m.uordblks;
}

/* The value of `key:` in the manifest (first occurrence), copied. */
static int manifest_value(const char *key, char *out, size_t cap)
{
    const char *m = E->manifest_yaml;
    size_t kl = strlen(key);
    for (const char *p = m; (p = strstr(p, key)); p++) {
        if ((p == m || p[-1] == ' ' || p[-1] == '\n' || p[-1] == '{') && p[kl] == ':') {
            p += kl + 1;
            while (*p == ' ')
                p++;
            size_t n = strcspn(p, ",}\n");
            if (n >= cap)
                n = cap - 1;
            memcpy(out, p, n);
            out[n] = 0;
            while (n && out[n - 1] == ' ')
                out[--n] = 0;
            return 1;
        }
    }
    return 0;
}

/* --- ABI -------------------------------------------------------------------- */

static int c_mi_struct_size(void)
{
    ilab_backend_t *b = mk(NULL);
    unsigned char buf[sizeof(ilab_model_info_t) + 32];
    memset(buf, 0, sizeof buf);
    ilab_model_info_t *mi = (ilab_model_info_t *)buf;
    mi->struct_size = sizeof buf;
    ilab_status st = A->model_info(b, mi);
    if (st != ILAB_OK)
        VIOL("model_info with a larger struct_size gave %s", ilab_status_name(st));
    if (mi->struct_size != sizeof buf)
        VIOL("model_info changed the caller's struct_size %zu to %u", sizeof buf, mi->struct_size);
    for (size_t i = sizeof(ilab_model_info_t); i < sizeof buf; i++)
        if (buf[i])
            VIOL("model_info wrote byte %zu past its own struct", i);
    A->destroy(b);
    return OK;
}

static int c_mi_small_write(void)
{
    ilab_backend_t *b = mk(NULL);
    unsigned char buf[sizeof(ilab_model_info_t)], ref[sizeof buf];
    memset(buf, 0xAA, sizeof buf);
    ((ilab_model_info_t *)buf)->struct_size = 8;
    memcpy(ref, buf, sizeof buf);
    ilab_status st = A->model_info(b, (ilab_model_info_t *)buf);
    if (st != ILAB_ABI_MISMATCH)
        VIOL("model_info with struct_size 8 gave %s, not ABI_MISMATCH", ilab_status_name(st));
    for (size_t i = 0; i < sizeof buf; i++)
        if (buf[i] != ref[i])
            VIOL("model_info refused struct_size 8 but wrote byte %zu of *info", i);
    A->destroy(b);
    return OK;
}

static int c_item_tail(void)
{
    ilab_backend_t *b = mk(NULL);
    ilab_seq_t s = newseq(b);
    struct {
        ilab_batch_item_t it;
        uint64_t newer_member;
    } big;
    memset(&big, 0, sizeof big);
    int32_t t[3] = {1, 2, 3};
    big.it.struct_size = sizeof big;
    big.it.seq = s;
    big.it.tokens = t;
    big.it.n_tokens = 3;
    big.newer_member = 1;
    const ilab_batch_item_t *p = &big.it;
    ilab_status st = A->eval(b, &p, 1);
    if (st != ILAB_ABI_MISMATCH)
        VIOL("eval accepted an item with a non-zero unknown tail: %s", ilab_status_name(st));
    if (seqlen(b, s) != 0)
        VIOL("refused eval changed the sequence length");
    A->destroy(b);
    return OK;
}

static int c_item_small(void)
{
    ilab_backend_t *b = mk(NULL);
    ilab_seq_t s = newseq(b);
    int32_t t[3] = {1, 2, 3};
    ilab_batch_item_t it = {.struct_size = offsetof(ilab_batch_item_t, logits), .seq = s,
                            .tokens = t, .n_tokens = 3};
    const ilab_batch_item_t *p = &it;
    ilab_status st = A->eval(b, &p, 1);
    if (st != ILAB_ABI_MISMATCH)
        VIOL("eval accepted an item of struct_size %u (< ABI 1.0's %zu): %s", it.struct_size,
             sizeof it, ilab_status_name(st));
    if (seqlen(b, s) != 0)
        VIOL("refused eval changed the sequence length");
    A->destroy(b);
    return OK;
}

static int c_manifest_version(void)
{
    char v[64], n[64], abi[16], want[16];
    if (!manifest_value("version", v, sizeof v) || !manifest_value("name", n, sizeof n) ||
        !manifest_value("abi", abi, sizeof abi))
        VIOL("manifest lacks name, version or abi");
    if (strcmp(v, E->version))
        VIOL("manifest version '%s' != entry version '%s'", v, E->version);
    if (strcmp(n, E->name))
        VIOL("manifest name '%s' != entry name '%s'", n, E->name);
    snprintf(want, sizeof want, "%u.%u", E->abi_major, E->abi_minor);
    if (strcmp(abi, want))
        VIOL("manifest abi '%s' != entry abi %s", abi, want);
    return OK;
}

static int c_max_batch(void)
{
    char mb[16];
    if (!manifest_value("max_batch", mb, sizeof mb))
        VIOL("manifest has no max_batch");
    int n = atoi(mb);
    ilab_backend_t *b = mk(NULL);
    ilab_batch_item_t it[64];
    const ilab_batch_item_t *p[64];
    int32_t t[64];
    for (int i = 0; i < n; i++) {
        t[i] = 'a' + i % 26;
        it[i] = (ilab_batch_item_t){.struct_size = sizeof it[i], .seq = newseq(b), .tokens = &t[i],
                                    .n_tokens = 1};
        p[i] = &it[i];
    }
    ilab_status st = A->eval(b, p, (size_t)n);
    if (st != ILAB_OK)
        VIOL("eval of exactly max_batch=%d items gave %s (%s)", n, ilab_status_name(st), errmsg(b));
    A->destroy(b);
    return OK;
}

static int c_instance_leak(void)
{
    for (int i = 0; i < 3; i++)
        A->destroy(mk(NULL));
    for (int round = 0; round < 3; round++) {
        size_t h0 = live_heap();
        for (int i = 0; i < 40; i++)
            A->destroy(mk(NULL));
        size_t h1 = live_heap();
        if (round == 2 && h1 > h0)
            VIOL("live heap grew by %zu bytes over 40 create/destroy cycles", h1 - h0);
    }
    return OK;
}

static int c_weak_hook(void)
{
    FILE *f = fopen(so_path, "rb");
    if (!f)
        VIOL("cannot open %s", so_path);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *d = malloc((size_t)sz);
    if (fread(d, 1, (size_t)sz, f) != (size_t)sz) {
        fclose(f);
        VIOL("cannot read %s", so_path);
    }
    fclose(f);
    Elf64_Ehdr *eh = (Elf64_Ehdr *)d;
    Elf64_Shdr *sh = (Elf64_Shdr *)(d + eh->e_shoff);
    static const char *allowed[] = {"__gmon_start__", "__cxa_finalize", "_ITM_registerTMCloneTable",
                                    "_ITM_deregisterTMCloneTable"};
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_DYNSYM)
            continue;
        Elf64_Sym *sym = (Elf64_Sym *)(d + sh[i].sh_offset);
        const char *str = (const char *)(d + sh[sh[i].sh_link].sh_offset);
        size_t n = sh[i].sh_size / sizeof *sym;
        for (size_t k = 1; k < n; k++) {
            if (sym[k].st_shndx != SHN_UNDEF || ELF64_ST_BIND(sym[k].st_info) != STB_WEAK)
                continue;
            const char *nm = str + sym[k].st_name;
            int ok = 0;
            for (size_t a = 0; a < sizeof allowed / sizeof *allowed; a++)
                ok |= !strcmp(nm, allowed[a]);
            if (!ok)
                VIOL("undefined weak dynamic symbol '%s'", nm);
        }
    }
    free(d);
    return OK;
}

static int c_table_short(void)
{
    char st[16] = "";
    const char *m = strstr(E->manifest_yaml, "stats: true");
    (void)st;
    size_t need = offsetof(ilab_backend_api_t, cache_stats) + sizeof(void *);
    if (m && (A->struct_size < need || !A->cache_stats))
        VIOL("manifest declares cache.stats but the backend table (struct_size %u) does not reach "
             "cache_stats (%zu): the host answers UNSUPPORTED", A->struct_size, need);
    if (m) {
        ilab_backend_t *b = mk(NULL);
        ilab_cache_stats_t s = {.struct_size = sizeof s};
        ilab_status r = A->cache_stats(b, &s);
        if (r == ILAB_UNSUPPORTED)
            VIOL("declared cache_stats answers UNSUPPORTED");
        A->destroy(b);
    }
    return OK;
}

/* --- PRB -------------------------------------------------------------------- */

static const ilab_config_entry_t cuda_cfg[1] = {{"device", "cuda"}};

static int c_probe_overrun(void)
{
    char buf[64];
    for (size_t cap = 1; cap < 40; cap++) {
        memset(buf, 0x55, sizeof buf);
        ilab_status st = A->probe(NULL, cuda_cfg, 1, buf, cap);
        if (st != ILAB_UNAVAILABLE)
            VIOL("probe(device=cuda) gave %s", ilab_status_name(st));
        for (size_t i = cap; i < sizeof buf; i++)
            if ((unsigned char)buf[i] != 0x55)
                VIOL("probe with reason_cap %zu wrote byte %zu", cap, i);
        if (!memchr(buf, 0, cap))
            VIOL("probe reason not NUL-terminated within cap %zu", cap);
    }
    return OK;
}

static int c_probe_ok_nonul(void)
{
    char buf[32];
    memset(buf, 'X', sizeof buf);
    ilab_status st = A->probe(NULL, NULL, 0, buf, sizeof buf);
    if (st != ILAB_OK)
        VIOL("probe() with defaults gave %s", ilab_status_name(st));
    if (!memchr(buf, 0, sizeof buf))
        VIOL("probe returned OK without NUL-terminating reason (cap %zu)", sizeof buf);
    return OK;
}

static int c_probe_counter(void)
{
    char r1[256], r2[256];
    ilab_status s1 = A->probe(NULL, cuda_cfg, 1, r1, sizeof r1);
    ilab_status s2 = A->probe(NULL, cuda_cfg, 1, r2, sizeof r2);
    if (s1 != s2 || strcmp(r1, r2))
        VIOL("two probes with one configuration differ: %s '%s' vs %s '%s'", ilab_status_name(s1), r1,
             ilab_status_name(s2), r2);
    return OK;
}

static int c_create_out_null(void)
{
    char err[256];
    ilab_backend_t *sentinel = (ilab_backend_t *)(uintptr_t)0x1234, *b = sentinel;
    ilab_status st = A->create(NULL, cuda_cfg, 1, err, sizeof err, &b);
    if (st != ILAB_UNAVAILABLE)
        VIOL("create(device=cuda) gave %s", ilab_status_name(st));
    if (b != sentinel)
        VIOL("unavailable create() wrote %p to *out", (void *)b);
    return OK;
}

static int c_create_reason(void)
{
    char r[256], e[256];
    ilab_backend_t *b = NULL;
    A->probe(NULL, cuda_cfg, 1, r, sizeof r);
    ilab_status st = A->create(NULL, cuda_cfg, 1, e, sizeof e, &b);
    if (st != ILAB_UNAVAILABLE)
        VIOL("create(device=cuda) gave %s", ilab_status_name(st));
    if (strcmp(r, e))
        VIOL("create's reason '%s' differs from probe's '%s'", e, r);
    return OK;
}

/* --- TOK -------------------------------------------------------------------- */

static int c_tok_partial(void)
{
    ilab_backend_t *b = mk(NULL);
    const char *s = "the rest of the tokens in this sentence";
    size_t need = 0;
    if (A->tokenize(b, s, strlen(s), ILAB_TOKENIZE_ADD_BOS, NULL, 0, &need) != ILAB_BUFFER_TOO_SMALL)
        VIOL("size query did not give BUFFER_TOO_SMALL");
    for (size_t cap = 1; cap < need; cap++) {
        int32_t buf[128];
        for (int i = 0; i < 128; i++)
            buf[i] = -77;
        size_t n = 0;
        ilab_status st = A->tokenize(b, s, strlen(s), ILAB_TOKENIZE_ADD_BOS, buf, cap, &n);
        if (st != ILAB_BUFFER_TOO_SMALL || n != need)
            VIOL("tokenize cap %zu gave %s n=%zu (need %zu)", cap, ilab_status_name(st), n, need);
        for (int i = 0; i < 128; i++)
            if (buf[i] != -77)
                VIOL("tokenize with cap %zu < %zu wrote tokens[%d]", cap, need, i);
    }
    A->destroy(b);
    return OK;
}

static int c_detok_nul(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t t[6] = {'h', 258, 'l', 'l', 'o', 300 - 1};
    size_t len = 0;
    if (A->detokenize(b, t, 6, NULL, 0, &len) != ILAB_BUFFER_TOO_SMALL)
        VIOL("size query did not give BUFFER_TOO_SMALL");
    char buf[64];
    memset(buf, 0x55, sizeof buf);
    size_t l2 = 0;
    ilab_status st = A->detokenize(b, t, 6, buf, len, &l2);
    if (st != ILAB_BUFFER_TOO_SMALL)
        VIOL("detokenize with cap == len (%zu, no room for NUL) gave %s", len, ilab_status_name(st));
    for (size_t i = 0; i < sizeof buf; i++)
        if ((unsigned char)buf[i] != 0x55)
            VIOL("detokenize with cap == len wrote byte %zu", i);
    A->destroy(b);
    return OK;
}

static int c_detok_size(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t t[5] = {'a', 259, ' ', 256, 'z'};
    char buf[64];
    size_t q = 0, full = 0;
    ilab_status st = A->detokenize(b, t, 5, NULL, 0, &q);
    must(A->detokenize(b, t, 5, buf, sizeof buf, &full), "detokenize");
    if (st != ILAB_BUFFER_TOO_SMALL || q != full)
        VIOL("detokenize size query gave %s len=%zu, but the text is %zu bytes",
             ilab_status_name(st), q, full);
    size_t pq = 0, pf = 0;
    st = A->token_piece(b, -1, 259, NULL, 0, &pq);
    must(A->token_piece(b, -1, 259, buf, sizeof buf, &pf), "token_piece");
    if (st != ILAB_BUFFER_TOO_SMALL || pq != pf)
        VIOL("token_piece size query gave %s len=%zu, piece is %zu bytes", ilab_status_name(st), pq, pf);
    A->destroy(b);
    return OK;
}

static int c_tok_empty_flags(void)
{
    ilab_backend_t *b = mk(NULL);
    ilab_model_info_t mi = {.struct_size = sizeof mi};
    A->model_info(b, &mi);
    int32_t t[8];
    size_t n = 0;
    must(A->tokenize(b, "", 0, ILAB_TOKENIZE_ADD_BOS | ILAB_TOKENIZE_ADD_EOS, t, 8, &n), "tokenize");
    if (n != 2 || t[0] != mi.bos_id || t[1] != mi.eos_id)
        VIOL("tokenize(\"\", BOS|EOS) gave %zu tokens, expected [BOS, EOS]", n);
    A->destroy(b);
    return OK;
}

static int c_piece_prev(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t bad[3] = {-2, V, V + 10};
    for (int i = 0; i < 3; i++) {
        char buf[16];
        memset(buf, 0x55, sizeof buf);
        size_t len = 999;
        ilab_status st = A->token_piece(b, bad[i], 'a', buf, sizeof buf, &len);
        if (st != ILAB_INVALID_ARGUMENT)
            VIOL("token_piece(prev_token=%d, 'a') gave %s", bad[i], ilab_status_name(st));
        if ((unsigned char)buf[0] != 0x55 || len != 999)
            VIOL("refused token_piece wrote its outputs");
    }
    A->destroy(b);
    return OK;
}

static int c_detok_badid_write(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t t[4] = {'a', 'b', 270, V + 5};
    char buf[64];
    memset(buf, 0x55, sizeof buf);
    size_t len = 999;
    ilab_status st = A->detokenize(b, t, 4, buf, sizeof buf, &len);
    if (st != ILAB_INVALID_ARGUMENT)
        VIOL("detokenize with id %d gave %s", V + 5, ilab_status_name(st));
    for (size_t i = 0; i < sizeof buf; i++)
        if ((unsigned char)buf[i] != 0x55)
            VIOL("detokenize refused id %d but wrote byte %zu of text", V + 5, i);
    if (len != 999)
        VIOL("refused detokenize wrote *len");
    A->destroy(b);
    return OK;
}

static int c_piece_dummy(void)
{
    ilab_backend_t *b = mk(NULL);
    ilab_model_info_t mi = {.struct_size = sizeof mi};
    A->model_info(b, &mi);
    int32_t seqs[3][5] = {{mi.bos_id, ' ', 'a', 285, ' '}, {' ', 'x', mi.eos_id, ' ', 'y'},
                          {mi.bos_id, 284, ' ', ' ', 'q'}};
    for (int k = 0; k < 3; k++) {
        char cat[128] = "", d[128], p[16];
        size_t n = 0, l;
        for (int i = 0; i < 5; i++) {
            must(A->token_piece(b, i ? seqs[k][i - 1] : -1, seqs[k][i], p, sizeof p, &l), "token_piece");
            memcpy(cat + n, p, l);
            n += l;
        }
        must(A->detokenize(b, seqs[k], 5, d, sizeof d, &l), "detokenize");
        if (l != n || memcmp(cat, d, n))
            VIOL("pieces of sequence %d concatenate to '%.*s' (%zu bytes), detokenize gives '%.*s'", k,
                 (int)n, cat, n, (int)l, d);
    }
    A->destroy(b);
    return OK;
}

static int c_tok_overread(void)
{
    ilab_backend_t *b = mk(NULL);
    /* texts whose bytes in memory continue past len */
    static const char mem[] = "xthe cat sat on the mat; at the end";
    for (size_t len = 1; len < sizeof mem - 1; len++) {
        int32_t t[64];
        size_t n;
        char out[64];
        size_t l;
        must(A->tokenize(b, mem, len, 0, t, 64, &n), "tokenize");
        must(A->detokenize(b, t, n, out, sizeof out, &l), "detokenize");
        if (l != len || memcmp(out, mem, len))
            VIOL("detokenize(tokenize('%.*s')) = '%.*s'", (int)len, mem, (int)l, out);
    }
    A->destroy(b);
    return OK;
}

/* --- LOG -------------------------------------------------------------------- */

static int c_row_offset(void)
{
    ilab_backend_t *b = mk(NULL);
    ilab_seq_t s = newseq(b);
    int32_t t[3] = {'a', 'b', 'c'};
    float *lg = malloc(3 * (size_t)V * sizeof *lg);
    for (int i = 0; i < 3 * V; i++)
        lg[i] = NAN;
    must(ev(b, s, t, 3, 0, lg), "eval");
    for (int i = 0; i < V; i++)
        if (!isfinite(lg[i]))
            VIOL("row 0 element %d not written (without ALL_LOGITS)", i);
    for (int i = V; i < 3 * V; i++)
        if (!isnan(lg[i]))
            VIOL("eval without ALL_LOGITS wrote float %d, past the one row", i);
    free(lg);
    A->destroy(b);
    return OK;
}

static int c_causal(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t t[12];
    gen(t, 12, 3);
    float *all = malloc(12 * (size_t)V * sizeof *all), *r = malloc((size_t)V * sizeof *r);
    ilab_seq_t s = newseq(b);
    must(ev(b, s, t, 12, ILAB_EVAL_ALL_LOGITS, all), "eval");
    for (int i = 0; i < 12; i++) {
        fresh(b, t, i + 1, r);
        if (!tol_eq(all + (size_t)i * V, r, V))
            VIOL("ALL_LOGITS row %d differs from the logits after token %d in a fresh sequence", i, i);
    }
    A->destroy(b);
    return OK;
}

static int c_sorted_out(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t pa[6], pb[9];
    gen(pa, 6, 1);
    gen(pb, 9, 2);
    ilab_seq_t sa = newseq(b), sb = newseq(b);
    must(ev(b, sa, pa, 5, 0, NULL), "prefill");
    float *la = malloc((size_t)V * 4), *lb = malloc((size_t)V * 4), *r = malloc((size_t)V * 4);
    ilab_batch_item_t ia = {.struct_size = sizeof ia, .seq = sa, .tokens = pa + 5, .n_tokens = 1,
                            .logits = la};
    ilab_batch_item_t ib = {.struct_size = sizeof ib, .seq = sb, .tokens = pb, .n_tokens = 9,
                            .logits = lb};
    const ilab_batch_item_t *p[2] = {&ia, &ib};
    must(A->eval(b, p, 2), "batched eval");
    fresh(b, pa, 6, r);
    if (!tol_eq(la, r, V))
        VIOL("item 0 (a decode) in a batch beside a prefill differs from its logits alone");
    fresh(b, pb, 9, r);
    if (!tol_eq(lb, r, V))
        VIOL("item 1 (a prefill) in a batch beside a decode differs from its logits alone");
    A->destroy(b);
    return OK;
}

static int c_dup_seq(void)
{
    ilab_backend_t *b = mk(NULL);
    ilab_seq_t sa = newseq(b), sb = newseq(b);
    int32_t t[2] = {'a', 'b'};
    ilab_batch_item_t i1 = {.struct_size = sizeof i1, .seq = sa, .tokens = t, .n_tokens = 2};
    ilab_batch_item_t i2 = {.struct_size = sizeof i2, .seq = sb, .tokens = t, .n_tokens = 2};
    ilab_batch_item_t i3 = {.struct_size = sizeof i3, .seq = sa, .tokens = t, .n_tokens = 1};
    const ilab_batch_item_t *p[3] = {&i1, &i2, &i3};
    ilab_status st = A->eval(b, p, 3);
    if (st != ILAB_INVALID_ARGUMENT)
        VIOL("eval with sequence named by items 0 and 2 gave %s", ilab_status_name(st));
    if (seqlen(b, sa) || seqlen(b, sb))
        VIOL("refused eval changed a sequence");
    A->destroy(b);
    return OK;
}

static int c_zero_tokens(void)
{
    ilab_backend_t *b = mk(NULL);
    ilab_seq_t s = newseq(b);
    int32_t t[1] = {'a'};
    ilab_status st = ev(b, s, t, 0, 0, NULL);
    if (st != ILAB_INVALID_ARGUMENT)
        VIOL("eval of an item with n_tokens 0 gave %s", ilab_status_name(st));
    A->destroy(b);
    return OK;
}

static int c_phys_pos(void)
{
    int32_t p[12], q[20];
    gen(p, 12, 4);
    gen(q, 20, 5);
    ilab_backend_t *b1 = mk(NULL);
    float *l1 = malloc((size_t)V * 4), *l2 = malloc((size_t)V * 4);
    fresh(b1, p, 12, l1);
    ilab_backend_t *b2 = mk(NULL);
    ilab_seq_t busy = newseq(b2);
    must(ev(b2, busy, q, 20, 0, NULL), "eval");
    fresh(b2, p, 12, l2);
    if (memcmp(l1, l2, (size_t)V * 4))
        VIOL("the same tokens in a fresh sequence give different logits after another sequence "
             "used the instance");
    A->destroy(b1);
    A->destroy(b2);
    return OK;
}

/* --- CCH -------------------------------------------------------------------- */

static int c_fork_no_cow(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t p[22];
    gen(p, 22, 6);
    float *l = malloc((size_t)V * 4), *r = malloc((size_t)V * 4);
    ilab_seq_t a = newseq(b), c;
    must(ev(b, a, p, 20, 0, NULL), "prefill");
    must(A->seq_fork(b, a, &c), "fork");
    int32_t x = 'x', y = p[20], w = p[21];
    must(ev(b, a, &y, 1, 0, NULL), "parent decode");
    must(ev(b, c, &x, 1, 0, NULL), "child decode");
    must(ev(b, a, &w, 1, 0, l), "parent decode");
    fresh(b, p, 22, r);
    if (!tol_eq(l, r, V))
        VIOL("parent's logits changed after its fork child appended (shared block written)");
    A->destroy(b);
    return OK;
}

static int c_free_shared(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t p[21], q[40];
    gen(p, 21, 7);
    gen(q, 40, 8);
    float *l = malloc((size_t)V * 4), *r = malloc((size_t)V * 4);
    ilab_seq_t a = newseq(b), c;
    must(ev(b, a, p, 20, 0, NULL), "prefill");
    must(A->seq_fork(b, a, &c), "fork");
    must(A->seq_free(b, a), "free parent");
    ilab_seq_t o = newseq(b);
    must(ev(b, o, q, 40, 0, NULL), "other eval");
    must(ev(b, c, p + 20, 1, 0, l), "child decode");
    fresh(b, p, 21, r);
    if (!tol_eq(l, r, V))
        VIOL("fork child's logits changed after its parent was freed and another sequence grew");
    A->destroy(b);
    return OK;
}

static int c_trunc_floor(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t p[20], q[32], k[19];
    gen(p, 20, 9);
    gen(q, 32, 10);
    float *l = malloc((size_t)V * 4), *r = malloc((size_t)V * 4);
    ilab_seq_t a = newseq(b);
    must(ev(b, a, p, 20, 0, NULL), "prefill");
    must(A->seq_truncate(b, a, 18), "truncate");
    ilab_seq_t o = newseq(b);
    must(ev(b, o, q, 32, 0, NULL), "other eval");
    int32_t x = 'x';
    must(ev(b, a, &x, 1, 0, l), "decode");
    memcpy(k, p, 18 * 4);
    k[18] = x;
    fresh(b, k, 19, r);
    if (!tol_eq(l, r, V))
        VIOL("after truncate(20 -> 18) an append differs from a fresh sequence of the kept tokens");
    A->destroy(b);
    return OK;
}

static int c_trunc_beyond(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t p[5] = {1, 2, 3, 4, 5};
    ilab_seq_t a = newseq(b);
    must(ev(b, a, p, 5, 0, NULL), "prefill");
    for (int n = 6; n <= 40; n++) {
        ilab_status st = A->seq_truncate(b, a, n);
        if (st != ILAB_INVALID_ARGUMENT)
            VIOL("seq_truncate(len 5, n_keep %d) gave %s", n, ilab_status_name(st));
        if (seqlen(b, a) != 5)
            VIOL("refused truncate changed the length to %d", seqlen(b, a));
    }
    if (A->seq_truncate(b, a, -1) != ILAB_INVALID_ARGUMENT)
        VIOL("seq_truncate(-1) accepted");
    A->destroy(b);
    return OK;
}

static int c_ctx_exact(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t *p = malloc((size_t)C * 4);
    gen(p, C, 11);
    ilab_seq_t a = newseq(b), c = newseq(b);
    ilab_status st = ev(b, a, p, C, 0, NULL);
    if (st != ILAB_OK || seqlen(b, a) != C)
        VIOL("prefill of exactly max_context=%d tokens gave %s", C, ilab_status_name(st));
    must(ev(b, c, p, C - 1, 0, NULL), "prefill");
    st = ev(b, c, p, 1, 0, NULL);
    if (st != ILAB_OK || seqlen(b, c) != C)
        VIOL("decode filling to exactly max_context=%d gave %s", C, ilab_status_name(st));
    if (ev(b, c, p, 1, 0, NULL) != ILAB_CONTEXT_OVERFLOW)
        VIOL("decode past max_context not refused");
    A->destroy(b);
    return OK;
}

static int c_ctx_straddle(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t *p = malloc((size_t)C * 4 + 64);
    gen(p, C + 16, 12);
    ilab_seq_t a = newseq(b);
    must(ev(b, a, p, C - 8, 0, NULL), "prefill");
    ilab_status st = ev(b, a, p, 16, 0, NULL);
    if (st != ILAB_CONTEXT_OVERFLOW)
        VIOL("prefill of 16 at length %d (max_context %d) gave %s", C - 8, C, ilab_status_name(st));
    if (seqlen(b, a) != C - 8)
        VIOL("refused eval changed the length to %d", seqlen(b, a));
    if (!errlen(b))
        VIOL("CONTEXT_OVERFLOW without a message");
    A->destroy(b);
    return OK;
}

static int c_handle_reuse(void)
{
    ilab_backend_t *b = mk(NULL);
    ilab_seq_t h1 = newseq(b);
    must(A->seq_free(b, h1), "free");
    ilab_seq_t h2 = newseq(b);
    if (h2 == h1)
        VIOL("seq_create reissued freed handle %#llx", (unsigned long long)h1);
    int32_t n;
    if (A->seq_length(b, h1, &n) != ILAB_INVALID_ARGUMENT)
        VIOL("a freed handle still answers seq_length");
    A->destroy(b);
    return OK;
}

static int c_seq_leak(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t p[20];
    gen(p, 20, 13);
    for (int round = 0; round < 2; round++) {
        size_t h0 = live_heap();
        for (int i = 0; i < 40; i++) {
            ilab_seq_t s = newseq(b);
            must(ev(b, s, p, 20, 0, NULL), "eval");
            must(A->seq_free(b, s), "free");
        }
        size_t h1 = live_heap();
        if (round == 1 && h1 > h0)
            VIOL("live heap grew by %zu bytes over 40 create/eval/free cycles", h1 - h0);
    }
    A->destroy(b);
    return OK;
}

static int c_oom_partial(void)
{
    ilab_backend_t *b = mk("4");
    int32_t p[64];
    gen(p, 64, 14);
    ilab_seq_t a = newseq(b), c = newseq(b);
    ilab_batch_item_t i1 = {.struct_size = sizeof i1, .seq = a, .tokens = p, .n_tokens = 16};
    ilab_batch_item_t i2 = {.struct_size = sizeof i2, .seq = c, .tokens = p, .n_tokens = 64};
    const ilab_batch_item_t *pp[2] = {&i1, &i2};
    ilab_status st = A->eval(b, pp, 2);
    if (st != ILAB_OUT_OF_MEMORY)
        VIOL("eval needing 5 blocks of a 4-block pool gave %s", ilab_status_name(st));
    if (seqlen(b, a) != 0 || seqlen(b, c) != 0)
        VIOL("eval failed with OUT_OF_MEMORY but item 0's sequence now has length %d", seqlen(b, a));
    if (stats(b).free_positions != stats(b).total_positions)
        VIOL("failed eval kept cache blocks");
    A->destroy(b);
    return OK;
}

static int c_stats_double(void)
{
    ilab_backend_t *b = mk("8");
    int32_t p[128];
    gen(p, 128, 15);
    ilab_seq_t a = newseq(b), f;
    must(ev(b, a, p, 32, 0, NULL), "prefill");
    ilab_cache_stats_t s0 = stats(b);
    must(A->seq_fork(b, a, &f), "fork");
    ilab_cache_stats_t s1 = stats(b);
    int64_t free_blocks = s1.free_positions / s1.block_size;
    if (s1.free_positions > s0.free_positions)
        VIOL("fork raised free capacity");
    /* one block more than free must fail */
    ilab_seq_t c = newseq(b);
    int n_more = (int)(free_blocks + 1) * s1.block_size;
    if (n_more <= C) {
        ilab_status st = ev(b, c, p, n_more, 0, NULL);
        if (st != ILAB_OUT_OF_MEMORY)
            VIOL("cache_stats says %lld blocks free after a fork, but an eval needing %lld blocks gave %s",
                 (long long)free_blocks, (long long)free_blocks + 1, ilab_status_name(st));
    }
    ilab_status st = ev(b, c, p, (int)free_blocks * s1.block_size, 0, NULL);
    if (st != ILAB_OK)
        VIOL("eval needing exactly the %lld free blocks gave %s", (long long)free_blocks,
             ilab_status_name(st));
    A->destroy(b);
    return OK;
}

static int c_trunc_keep_blocks(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t p[40];
    gen(p, 40, 16);
    ilab_cache_stats_t s0 = stats(b);
    ilab_seq_t a = newseq(b);
    must(ev(b, a, p, 40, 0, NULL), "prefill");
    ilab_cache_stats_t s1 = stats(b);
    int64_t bs = s0.block_size;
    if (s0.free_positions - s1.free_positions != ((40 + bs - 1) / bs) * bs)
        VIOL("40 positions took %lld positions of capacity",
             (long long)(s0.free_positions - s1.free_positions));
    must(A->seq_truncate(b, a, 10), "truncate");
    ilab_cache_stats_t s2 = stats(b);
    if (s0.free_positions - s2.free_positions != ((10 + bs - 1) / bs) * bs)
        VIOL("after truncate to 10 the sequence still holds %lld positions of capacity",
             (long long)(s0.free_positions - s2.free_positions));
    must(A->seq_free(b, a), "free");
    if (stats(b).free_positions != s0.free_positions)
        VIOL("free capacity did not come back after seq_free");
    A->destroy(b);
    return OK;
}

static int c_oom_reserve(void)
{
    ilab_backend_t *b = mk("4");
    int32_t p[80];
    gen(p, 80, 17);
    ilab_cache_stats_t s = stats(b);
    int n = (int)s.free_positions;
    ilab_seq_t a = newseq(b);
    ilab_status st = ev(b, a, p, n, 0, NULL);
    if (st != ILAB_OK)
        VIOL("eval needing exactly the %lld free positions gave %s", (long long)s.free_positions,
             ilab_status_name(st));
    ilab_seq_t c = newseq(b);
    st = ev(b, c, p, 1, 0, NULL);
    if (st != ILAB_OUT_OF_MEMORY)
        VIOL("eval with no free block gave %s", ilab_status_name(st));
    A->destroy(b);
    return OK;
}

static int c_stats_small(void)
{
    ilab_backend_t *b = mk(NULL);
    unsigned char buf[sizeof(ilab_cache_stats_t)], ref[sizeof buf];
    memset(buf, 0xAA, sizeof buf);
    ((ilab_cache_stats_t *)buf)->struct_size = 8;
    memcpy(ref, buf, sizeof buf);
    ilab_status st = A->cache_stats(b, (ilab_cache_stats_t *)buf);
    if (st != ILAB_ABI_MISMATCH)
        VIOL("cache_stats with struct_size 8 gave %s", ilab_status_name(st));
    if (memcmp(buf, ref, sizeof buf))
        VIOL("cache_stats with struct_size 8 wrote into *stats");
    A->destroy(b);
    return OK;
}

static int c_decode_boundary(void)
{
    ilab_backend_t *b = mk(NULL);
    int n = 40;
    int32_t p[40];
    gen(p, n, 18);
    float *l = malloc((size_t)V * 4), *r = malloc((size_t)V * 4);
    ilab_seq_t a = newseq(b);
    must(ev(b, a, p, 3, 0, NULL), "prefill");
    for (int i = 3; i < n; i++) {
        must(ev(b, a, p + i, 1, 0, l), "decode");
        fresh(b, p, i + 1, r);
        if (!tol_eq(l, r, V))
            VIOL("decode at position %d differs from a full recomputation", i);
    }
    A->destroy(b);
    return OK;
}

static int c_chunk_pos(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t p[30];
    gen(p, 30, 19);
    float *one = malloc(30 * (size_t)V * 4), *ch = malloc(30 * (size_t)V * 4);
    ilab_seq_t a = newseq(b), c = newseq(b);
    must(ev(b, a, p, 30, ILAB_EVAL_ALL_LOGITS, one), "eval");
    int cuts[4] = {0, 7, 18, 30};
    for (int k = 0; k < 3; k++)
        must(ev(b, c, p + cuts[k], cuts[k + 1] - cuts[k], ILAB_EVAL_ALL_LOGITS, ch + (size_t)cuts[k] * V),
             "chunk");
    for (int i = 0; i < 30; i++)
        if (!tol_eq(ch + (size_t)i * V, one + (size_t)i * V, V))
            VIOL("chunked prefill (7+11+12) row %d differs from the one-call prefill", i);
    A->destroy(b);
    return OK;
}

/* --- ERR -------------------------------------------------------------------- */

static int c_trunc_nomsg(void)
{
    ilab_backend_t *b = mk(NULL);
    ilab_seq_t a = newseq(b);
    int32_t p[3] = {1, 2, 3};
    must(ev(b, a, p, 3, 0, NULL), "eval");
    ilab_status st = A->seq_truncate(b, a, 9);
    if (st != ILAB_INVALID_ARGUMENT)
        VIOL("truncate past the length gave %s", ilab_status_name(st));
    if (!errlen(b))
        VIOL("seq_truncate returned %s with an empty last_error()", ilab_status_name(st));
    A->destroy(b);
    return OK;
}

static int c_lasterr_len(void)
{
    ilab_backend_t *b = mk(NULL);
    ilab_seq_t bogus = 0x7777000000000003ull;
    int32_t n;
    if (A->seq_length(b, bogus, &n) != ILAB_INVALID_ARGUMENT)
        VIOL("bogus handle accepted");
    size_t full = A->last_error(b, NULL, 0);
    char big[1024];
    size_t l2 = A->last_error(b, big, sizeof big);
    if (full == 0 || l2 != full || strlen(big) != full)
        VIOL("last_error lengths disagree: %zu (cap 0) vs %zu", full, l2);
    char small[5];
    memset(small, 0x55, sizeof small);
    size_t l3 = A->last_error(b, small, sizeof small);
    if (l3 != full)
        VIOL("last_error with cap 5 returned %zu, not the full length %zu", l3, full);
    if (small[4] != 0 || memcmp(small, big, 4))
        VIOL("last_error with cap 5 did not copy 4 bytes and a NUL");
    A->destroy(b);
    return OK;
}

static int c_cancel_ok(void)
{
    if (!strstr(E->manifest_yaml, "cancel: false"))
        return OK;
    ilab_backend_t *b = mk(NULL);
    ilab_status st = A->cancel(b, 42);
    if (st != ILAB_UNSUPPORTED)
        VIOL("cancel() of an undeclared capability gave %s", ilab_status_name(st));
    if (!strstr(errmsg(b), "cancel"))
        VIOL("UNSUPPORTED message does not name 'cancel': '%s'", errmsg(b));
    A->destroy(b);
    return OK;
}

static int n_events, n_err_unsup;
static int on_ev(void *u, const ilab_event_t *e)
{
    (void)u;
    n_events++;
    if (e->type == ILAB_EVENT_ERROR && e->status == ILAB_UNSUPPORTED && e->message && *e->message)
        n_err_unsup++;
    return 0;
}

static int c_gen_msg(void)
{
    if (!strstr(E->manifest_yaml, "sampling: host"))
        return OK;
    ilab_backend_t *b = mk(NULL);
    int32_t prompt[3] = {1, 2, 3};
    ilab_sampling_t smp = {.struct_size = sizeof smp, .top_p = 1, .repetition_penalty = 1};
    ilab_generate_request_t rq = {.struct_size = sizeof rq, .request_id = 9, .prompt_tokens = prompt,
                                  .n_prompt_tokens = 3, .sampling = &smp, .max_tokens = 4};
    ilab_status st = A->generate(b, &rq, on_ev, NULL);
    if (st != ILAB_UNSUPPORTED)
        VIOL("undeclared generate() gave %s", ilab_status_name(st));
    if (n_events > 1 || (n_events == 1 && n_err_unsup != 1))
        VIOL("undeclared generate() emitted %d events", n_events);
    if (!strstr(errmsg(b), "sampling"))
        VIOL("UNSUPPORTED message does not name the capability 'sampling: backend': '%s'", errmsg(b));
    A->destroy(b);
    return OK;
}

static int c_length_null(void)
{
    ilab_backend_t *b = mk(NULL);
    ilab_seq_t a = newseq(b);
    ilab_status st = A->seq_length(b, a, NULL);
    if (st != ILAB_INVALID_ARGUMENT)
        VIOL("seq_length(length NULL) gave %s", ilab_status_name(st));
    ilab_seq_t *none = NULL;
    if (A->seq_fork(b, a, none) != ILAB_INVALID_ARGUMENT || A->seq_create(b, NULL) != ILAB_INVALID_ARGUMENT)
        VIOL("NULL out-parameter accepted");
    A->destroy(b);
    return OK;
}

static int c_config_status(void)
{
    const char *bad[] = {"0", "-3", "100000"};
    for (int i = 0; i < 3; i++) {
        ilab_config_entry_t cfg[1] = {{"kv_blocks", bad[i]}};
        char err[256] = "";
        ilab_backend_t *b = NULL;
        ilab_status st = A->create(NULL, cfg, 1, err, sizeof err, &b);
        if (st != ILAB_INVALID_ARGUMENT)
            VIOL("create(kv_blocks=%s) gave %s (%s), not INVALID_ARGUMENT", bad[i], ilab_status_name(st),
                 err);
        if (!strstr(err, "kv_blocks"))
            VIOL("create's message does not name the key: '%s'", err);
        char r[256];
        st = A->probe(NULL, cfg, 1, r, sizeof r);
        if (st != ILAB_INVALID_ARGUMENT)
            VIOL("probe(kv_blocks=%s) gave %s", bad[i], ilab_status_name(st));
    }
    return OK;
}

/* --- THR -------------------------------------------------------------------- */

#define THR_N 3
#define THR_LEN 48
static ilab_backend_t *tb;
static float *thr_ref[THR_N];
static int32_t thr_tok[THR_N][THR_LEN];
static volatile int thr_bad;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Race loops run until a mismatch, or for at least `min_iter` iterations and
 * until `secs` have passed (so a loaded machine still gets overlap). */
static int keep_going(int it, double t0, int min_iter, double secs)
{
    return !thr_bad && (it < min_iter || now_s() - t0 < secs);
}

static void *thr_eval(void *arg)
{
    int k = (int)(intptr_t)arg;
    float *l = malloc(THR_LEN * (size_t)V * 4);
    double t0 = now_s();
    for (int it = 0; keep_going(it, t0, 400, 1.5); it++) {
        ilab_seq_t s;
        if (A->seq_create(tb, &s) != ILAB_OK) {
            thr_bad = 2;
            break;
        }
        if (ev(tb, s, thr_tok[k], THR_LEN, ILAB_EVAL_ALL_LOGITS, l) != ILAB_OK ||
            memcmp(l, thr_ref[k], THR_LEN * (size_t)V * 4))
            thr_bad = 1;
        A->seq_free(tb, s);
    }
    free(l);
    return NULL;
}

static int c_thr_scratch(void)
{
    tb = mk(NULL);
    for (int k = 0; k < THR_N; k++) {
        gen(thr_tok[k], THR_LEN, 20 + k);
        thr_ref[k] = malloc(THR_LEN * (size_t)V * 4);
        ilab_seq_t s = newseq(tb);
        must(ev(tb, s, thr_tok[k], THR_LEN, ILAB_EVAL_ALL_LOGITS, thr_ref[k]), "eval");
        A->seq_free(tb, s);
    }
    pthread_t th[THR_N];
    for (int k = 0; k < THR_N; k++)
        pthread_create(&th[k], NULL, thr_eval, (void *)(intptr_t)k);
    for (int k = 0; k < THR_N; k++)
        pthread_join(th[k], NULL);
    if (thr_bad)
        VIOL("concurrent evals of different sequences gave logits that differ from serial ones");
    A->destroy(tb);
    return OK;
}

#define TOK_LEN 6000
static char *tok_text[THR_N];
static int32_t *tok_ref[THR_N];
static size_t tok_nref[THR_N];

static void *thr_tok_fn(void *arg)
{
    int k = (int)(intptr_t)arg;
    int32_t *t = malloc((TOK_LEN + 2) * 4);
    double t0 = now_s();
    for (int it = 0; keep_going(it, t0, 3000, 1.5); it++) {
        size_t n = 0;
        if (A->tokenize(tb, tok_text[k], TOK_LEN, 0, t, TOK_LEN + 2, &n) != ILAB_OK ||
            n != tok_nref[k] || memcmp(t, tok_ref[k], n * 4))
            thr_bad = 1;
    }
    free(t);
    return NULL;
}

static int c_tok_scratch(void)
{
    tb = mk(NULL);
    static const char *words[] = {"the ", "cat ", "sat ", "on ", "mat ", "at ", "tea ", "x", "qq "};
    for (int k = 0; k < THR_N; k++) {
        tok_text[k] = malloc(TOK_LEN + 1);
        size_t n = 0;
        unsigned r = 1 + k;
        while (n < TOK_LEN) {
            r = r * 1103515245u + 12345u;
            const char *w = words[(r >> 16) % 9];
            for (; *w && n < TOK_LEN; w++)
                tok_text[k][n++] = *w;
        }
        tok_ref[k] = malloc((TOK_LEN + 2) * 4);
        must(A->tokenize(tb, tok_text[k], TOK_LEN, 0, tok_ref[k], TOK_LEN + 2, &tok_nref[k]), "tokenize");
    }
    pthread_t th[THR_N];
    for (int k = 0; k < THR_N; k++)
        pthread_create(&th[k], NULL, thr_tok_fn, (void *)(intptr_t)k);
    for (int k = 0; k < THR_N; k++)
        pthread_join(th[k], NULL);
    if (thr_bad)
        VIOL("concurrent tokenize() calls gave ids that differ from serial ones");
    A->destroy(tb);
    return OK;
}

static void *thr_create_fn(void *arg)
{
    int32_t t[3] = {'a', 'b', (int32_t)(intptr_t)arg};
    double t0 = now_s();
    for (int it = 0; keep_going(it, t0, 20000, 2.5); it++) {
        ilab_seq_t s[3];
        int32_t n = -1;
        for (int k = 0; k < 3; k++)
            if (A->seq_create(tb, &s[k]) != ILAB_OK)
                thr_bad = 1;
        for (int k = 0; k < 3 && !thr_bad; k++)
            if (ev(tb, s[k], t, 3, 0, NULL) != ILAB_OK)
                thr_bad = 1;
        for (int k = 0; k < 3 && !thr_bad; k++)
            if (A->seq_length(tb, s[k], &n) != ILAB_OK || n != 3 || A->seq_free(tb, s[k]) != ILAB_OK)
                thr_bad = 1;
    }
    return NULL;
}

static int c_create_nolock(void)
{
    tb = mk("4096"); /* a large pool: each new sequence's block table takes a while to set up */
    pthread_t th[4];
    for (int k = 0; k < 4; k++)
        pthread_create(&th[k], NULL, thr_create_fn, (void *)(intptr_t)('a' + k));
    for (int k = 0; k < 4; k++)
        pthread_join(th[k], NULL);
    if (thr_bad)
        VIOL("concurrent seq_create/eval/seq_length/seq_free on different sequences failed or "
             "gave a wrong length (two threads got one sequence)");
    A->destroy(tb);
    return OK;
}

static int c_tok_flags(void)
{
    ilab_backend_t *b = mk(NULL);
    for (int bit = 2; bit < 32; bit++) {
        int32_t t[8] = {-9, -9, -9, -9, -9, -9, -9, -9};
        size_t n = 77;
        ilab_status st = A->tokenize(b, "ab", 2, 1u << bit, t, 8, &n);
        if (st != ILAB_INVALID_ARGUMENT)
            VIOL("tokenize with unknown flag bit %d gave %s", bit, ilab_status_name(st));
        if (t[0] != -9 || n != 77)
            VIOL("refused tokenize wrote its outputs");
    }
    A->destroy(b);
    return OK;
}

static int c_fork_len(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t p[40];
    gen(p, 40, 30);
    for (int len = 0; len <= 40; len += 5) {
        ilab_seq_t a = newseq(b), c;
        if (len)
            must(ev(b, a, p, len, 0, NULL), "prefill");
        must(A->seq_fork(b, a, &c), "fork");
        if (seqlen(b, c) != len)
            VIOL("fork of a sequence of length %d has length %d", len, seqlen(b, c));
        A->seq_free(b, a);
        A->seq_free(b, c);
    }
    A->destroy(b);
    return OK;
}

static int c_trunc_stale(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t p[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    ilab_seq_t old = newseq(b);
    must(A->seq_free(b, old), "free");
    ilab_seq_t cur = newseq(b); /* most likely the same slot */
    must(ev(b, cur, p, 8, 0, NULL), "eval");
    if (cur == old)
        VIOL("handle reissued");
    ilab_status st = A->seq_truncate(b, old, 2);
    if (st != ILAB_INVALID_ARGUMENT)
        VIOL("seq_truncate of a freed handle gave %s", ilab_status_name(st));
    if (seqlen(b, cur) != 8)
        VIOL("seq_truncate of a freed handle truncated the sequence now in its slot to %d",
             seqlen(b, cur));
    A->destroy(b);
    return OK;
}

static int c_batch_trunc32(void)
{
    ilab_backend_t *b = mk(NULL);
    ilab_seq_t s = newseq(b);
    int32_t t[2] = {'a', 'b'};
    ilab_batch_item_t it = {.struct_size = sizeof it, .seq = s, .tokens = t, .n_tokens = 2};
    const ilab_batch_item_t *p[1] = {&it};
    size_t n = ((size_t)1 << 32) + 1;
    ilab_status st = A->eval(b, p, n);
    if (st != ILAB_INVALID_ARGUMENT)
        VIOL("eval with n_items = 2^32 + 1 (> max_batch) gave %s", ilab_status_name(st));
    if (seqlen(b, s) != 0)
        VIOL("refused eval changed the sequence");
    A->destroy(b);
    return OK;
}

static int c_detok_cap32(void)
{
    ilab_backend_t *b = mk(NULL);
    int32_t t[4] = {'a', 260, 'c', 'd'};
    char buf[64];
    size_t len = 0;
    size_t caps[3] = {sizeof buf, ((size_t)1 << 32) + 2, ((size_t)1 << 33)};
    for (int i = 0; i < 3; i++) {
        ilab_status st = A->detokenize(b, t, 4, buf, caps[i], &len);
        if (st != ILAB_OK || len != 5 || memcmp(buf, "aincd", 6))
            VIOL("detokenize of 5 bytes with cap %zu gave %s len %zu", caps[i], ilab_status_name(st), len);
    }
    A->destroy(b);
    return OK;
}

static int c_lasterr_clear(void)
{
    ilab_backend_t *b = mk(NULL);
    ilab_seq_t s = newseq(b);
    int32_t t[2] = {'a', 'b'};
    if (A->seq_truncate(b, s, 5) != ILAB_INVALID_ARGUMENT)
        VIOL("bad truncate accepted");
    char m1[1024];
    A->last_error(b, m1, sizeof m1);
    must(ev(b, s, t, 2, 0, NULL), "eval");
    if (strcmp(errmsg(b), m1))
        VIOL("a successful eval changed last_error() from '%.200s' to '%.200s' (it is the most recent non-OK "
             "status's message)", m1, errmsg(b));
    A->destroy(b);
    return OK;
}

static const ilab_config_entry_t bad_cfg[1] = {{"kv_blocks", "0"}};
static char probe_ref[2][512];

static void *thr_probe_fn(void *arg)
{
    int k = (int)(intptr_t)arg;
    char r[512];
    double t0 = now_s();
    for (int it = 0; keep_going(it, t0, 20000, 1.5); it++) {
        A->probe(NULL, k ? bad_cfg : cuda_cfg, 1, r, sizeof r);
        if (strcmp(r, probe_ref[k]))
            thr_bad = 1;
    }
    return NULL;
}

static int c_probe_static(void)
{
    A->probe(NULL, cuda_cfg, 1, probe_ref[0], sizeof probe_ref[0]);
    A->probe(NULL, bad_cfg, 1, probe_ref[1], sizeof probe_ref[1]);
    pthread_t th[2];
    for (int k = 0; k < 2; k++)
        pthread_create(&th[k], NULL, thr_probe_fn, (void *)(intptr_t)k);
    for (int k = 0; k < 2; k++)
        pthread_join(th[k], NULL);
    if (thr_bad)
        VIOL("concurrent probe() calls with two configurations gave reasons that differ from serial ones");
    return OK;
}

/* --- main ------------------------------------------------------------------- */

static const struct {
    const char *name;
    int (*fn)(void);
} cases[] = {
    {"mi_struct_size", c_mi_struct_size}, {"mi_small_write", c_mi_small_write},
    {"item_tail", c_item_tail}, {"item_small", c_item_small},
    {"manifest_version", c_manifest_version}, {"max_batch", c_max_batch},
    {"instance_leak", c_instance_leak}, {"weak_hook", c_weak_hook},
    {"table_short", c_table_short}, {"probe_overrun", c_probe_overrun},
    {"probe_ok_nonul", c_probe_ok_nonul}, {"probe_counter", c_probe_counter},
    {"create_out_null", c_create_out_null}, {"create_reason", c_create_reason},
    {"tok_partial", c_tok_partial}, {"detok_nul", c_detok_nul},
    {"detok_size", c_detok_size}, {"tok_empty_flags", c_tok_empty_flags},
    {"piece_prev", c_piece_prev}, {"detok_badid_write", c_detok_badid_write},
    {"piece_dummy", c_piece_dummy}, {"tok_overread", c_tok_overread},
    {"row_offset", c_row_offset}, {"causal", c_causal},
    {"sorted_out", c_sorted_out}, {"dup_seq", c_dup_seq},
    {"zero_tokens", c_zero_tokens}, {"phys_pos", c_phys_pos},
    {"fork_no_cow", c_fork_no_cow}, {"free_shared", c_free_shared},
    {"trunc_floor", c_trunc_floor}, {"trunc_beyond", c_trunc_beyond},
    {"ctx_exact", c_ctx_exact}, {"ctx_straddle", c_ctx_straddle},
    {"handle_reuse", c_handle_reuse}, {"seq_leak", c_seq_leak},
    {"oom_partial", c_oom_partial}, {"stats_double", c_stats_double},
    {"trunc_keep_blocks", c_trunc_keep_blocks}, {"oom_reserve", c_oom_reserve},
    {"stats_small", c_stats_small}, {"decode_boundary", c_decode_boundary},
    {"chunk_pos", c_chunk_pos}, {"trunc_nomsg", c_trunc_nomsg},
    {"lasterr_len", c_lasterr_len}, {"cancel_ok", c_cancel_ok},
    {"gen_msg", c_gen_msg}, {"length_null", c_length_null},
    {"config_status", c_config_status}, {"thr_scratch", c_thr_scratch},
    {"tok_scratch", c_tok_scratch}, {"create_nolock", c_create_nolock},
    {"batch_trunc32", c_batch_trunc32}, {"detok_cap32", c_detok_cap32},
    {"lasterr_clear", c_lasterr_clear}, {"probe_static", c_probe_static},
    {"tok_flags", c_tok_flags}, {"fork_len", c_fork_len}, {"trunc_stale", c_trunc_stale},
};

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: driver CASE PLUGIN.so\n");
        return 2;
    }
    int (*fn)(void) = NULL;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        if (!strcmp(cases[i].name, argv[1]))
            fn = cases[i].fn;
    if (!fn) {
        fprintf(stderr, "driver: unknown case '%s'\n", argv[1]);
        return 2;
    }
    so_path = argv[2];
    void *h = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("violation: dlopen refused: %s\n", dlerror());
        return 0;
    }
    E = dlsym(h, ILAB_PLUGIN_ENTRY_SYMBOL);
    if (!E || !E->backend) {
        printf("violation: no usable ilab_plugin_entry\n");
        return 0;
    }
    A = E->backend;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(60);
        int v = fn();
        if (v)
            printf("violation: %s\n", why);
        else
            printf("no violation\n");
        fflush(stdout);
        _exit(v ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) {
        printf("violation: the plugin crashed (signal %d) in case %s\n", WTERMSIG(status), argv[1]);
        return 0;
    }
    int rc = WEXITSTATUS(status);
    return rc == 2 ? 2 : rc;
}
