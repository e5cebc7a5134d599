/* selfcheck PLUGIN.so — broader randomised checks of the base plugin (not
 * tied to one variant): round trips, fork trees, truncates, batching,
 * capacity accounting, stale handles, NULL arguments. Exit 0 when all pass. */
#define _GNU_SOURCE
#include <inferlab/inferlab.h>

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const ilab_backend_api_t *A;
static ilab_backend_t *bref; /* a second instance, same seed: fresh recomputations */
static int V, C, fails, n_ok, n_oom, n_ovf, n_rows;
#define CHECK(c, ...)                                   \
    do {                                                \
        if (!(c)) {                                     \
            fails++;                                    \
            printf("FAIL line %d: ", __LINE__);         \
            printf(__VA_ARGS__);                        \
            printf("\n");                               \
        }                                               \
    } while (0)

static unsigned rng = 12345;
static unsigned rnd(unsigned n)
{
    rng = rng * 1664525u + 1013904223u;
    return (rng >> 8) % n;
}

static ilab_status ev(ilab_backend_t *b, ilab_seq_t s, const int32_t *t, int n, uint32_t f, float *l)
{
    ilab_batch_item_t it = {.struct_size = sizeof it, .seq = s, .tokens = t, .n_tokens = n, .flags = f,
                            .logits = l};
    const ilab_batch_item_t *p = &it;
    return A->eval(b, &p, 1);
}

static void fresh(ilab_backend_t *b0, const int32_t *t, int n, float *out)
{
    (void)b0;
    ilab_backend_t *b = bref;
    ilab_seq_t s;
    A->seq_create(b, &s);
    ilab_status st = ev(b, s, t, n, 0, out);
    CHECK(st == ILAB_OK, "fresh eval %d", st);
    A->seq_free(b, s);
}

static int same(const float *a, const float *r)
{
    for (int i = 0; i < V; i++)
        if (!(fabsf(a[i] - r[i]) <= 1e-4f + 1e-4f * fabsf(r[i])))
            return 0;
    return 1;
}

/* a model of sequences: the tokens each holds */
typedef struct {
    ilab_seq_t h;
    int32_t t[256];
    int n;
} mseq;

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("dlopen: %s\n", dlerror());
        return 2;
    }
    const ilab_plugin_entry_t *E = dlsym(h, "ilab_plugin_entry");
    A = E->backend;
    ilab_config_entry_t cfg[1] = {{"kv_blocks", "40"}};
    char err[128];
    ilab_backend_t *b = NULL;
    CHECK(A->create(NULL, cfg, 1, err, sizeof err, &b) == ILAB_OK, "create");
    CHECK(A->create(NULL, NULL, 0, err, sizeof err, &bref) == ILAB_OK, "create ref");
    ilab_model_info_t mi = {.struct_size = sizeof mi};
    A->model_info(b, &mi);
    V = mi.vocab_size;
    C = mi.max_context;
    float *l = malloc((size_t)V * 4 * 256), *r = malloc((size_t)V * 4);

    /* TOK-2/3/4: random byte strings round-trip; pieces concatenate */
    for (int k = 0; k < 300; k++) {
        char s[64], d[200];
        int32_t t[80];
        size_t n, len;
        int sl = (int)rnd(60);
        for (int i = 0; i < sl; i++)
            s[i] = rnd(3) ? "the at on in se ha\n\t"[rnd(20)] : (char)rnd(256);
        CHECK(A->tokenize(b, s, (size_t)sl, 3, t, 80, &n) == ILAB_OK, "tokenize");
        CHECK(t[0] == mi.bos_id && t[n - 1] == mi.eos_id, "flags");
        CHECK(A->detokenize(b, t, n, d, sizeof d, &len) == ILAB_OK && len == (size_t)sl &&
                  !memcmp(d, s, len), "round trip");
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            size_t pl;
            CHECK(A->token_piece(b, i ? t[i - 1] : -1, t[i], d + m, sizeof d - m, &pl) == ILAB_OK, "piece");
            m += pl;
        }
        CHECK(m == (size_t)sl && !memcmp(d, s, m), "pieces");
        for (size_t i = 0; i < n; i++)
            CHECK(t[i] >= 0 && t[i] < V && (i == 0 || i == n - 1 || (t[i] != mi.bos_id && t[i] != mi.eos_id)),
                  "ids");
    }

    /* CCH-1..4, 7, 9, 10: random operations against a model */
    mseq sq[12];
    int ns = 0;
    ilab_cache_stats_t s0 = {.struct_size = sizeof s0};
    A->cache_stats(b, &s0);
    for (int step = 0; step < 3000; step++) {
        int op = (int)rnd(10);
        if (ns == 0 || (op == 0 && ns < 12)) {
            CHECK(A->seq_create(b, &sq[ns].h) == ILAB_OK, "create");
            sq[ns++].n = 0;
        } else if (op == 1 && ns < 12) {
            int p = (int)rnd((unsigned)ns);
            if (A->seq_fork(b, sq[p].h, &sq[ns].h) == ILAB_OK) {
                memcpy(sq[ns].t, sq[p].t, sizeof sq[p].t);
                sq[ns].n = sq[p].n;
                ns++;
            }
        } else if (op == 2) {
            int p = (int)rnd((unsigned)ns);
            CHECK(A->seq_free(b, sq[p].h) == ILAB_OK, "free");
            CHECK(A->seq_free(b, sq[p].h) == ILAB_INVALID_ARGUMENT, "double free");
            sq[p] = sq[--ns];
        } else if (op == 3) {
            int p = (int)rnd((unsigned)ns);
            int k = (int)rnd((unsigned)sq[p].n + 1);
            CHECK(A->seq_truncate(b, sq[p].h, k) == ILAB_OK, "truncate");
            sq[p].n = k;
        } else {
            /* a batch of distinct sequences */
            int nb = 1 + (int)rnd(ns < 4 ? (unsigned)ns : 4u);
            int pick[4], cnt = 0;
            while (cnt < nb) {
                int p = (int)rnd((unsigned)ns), dup = 0;
                for (int j = 0; j < cnt; j++)
                    dup |= pick[j] == p;
                if (!dup)
                    pick[cnt++] = p;
            }
            ilab_batch_item_t it[4];
            const ilab_batch_item_t *pp[4];
            int32_t tok[4][24];
            int room = 1;
            for (int j = 0; j < nb; j++) {
                mseq *m = &sq[pick[j]];
                int n = 1 + (int)rnd(rnd(2) ? 1 : 20);
                if (m->n + n > C)
                    room = 0;
                for (int i = 0; i < n; i++)
                    tok[j][i] = (int32_t)rnd((unsigned)V);
                it[j] = (ilab_batch_item_t){.struct_size = sizeof it[j], .seq = m->h, .tokens = tok[j],
                                            .n_tokens = n, .flags = (uint32_t)rnd(2),
                                            .logits = l + (size_t)j * 24 * V};
                pp[j] = &it[j];
            }
            int32_t before[4];
            for (int j = 0; j < nb; j++)
                A->seq_length(b, sq[pick[j]].h, &before[j]);
            ilab_status st = A->eval(b, pp, (size_t)nb);
            if (!room) {
                CHECK(st == ILAB_CONTEXT_OVERFLOW, "overflow %d", st);
            }
            n_ok += st == ILAB_OK;
            n_oom += st == ILAB_OUT_OF_MEMORY;
            n_ovf += st == ILAB_CONTEXT_OVERFLOW;
            if (st != ILAB_OK) {
                CHECK(st == ILAB_CONTEXT_OVERFLOW || st == ILAB_OUT_OF_MEMORY, "status %d", st);
                for (int j = 0; j < nb; j++) {
                    int32_t n;
                    A->seq_length(b, sq[pick[j]].h, &n);
                    CHECK(n == before[j], "all-or-nothing");
                }
                /* make room: free a sequence */
                A->seq_free(b, sq[0].h);
                sq[0] = sq[--ns];
                continue;
            }
            for (int j = 0; j < nb; j++) {
                mseq *m = &sq[pick[j]];
                int all = (int)it[j].flags;
                for (int i = 0; i < it[j].n_tokens; i++)
                    m->t[m->n + i] = tok[j][i];
                int first = all ? 0 : it[j].n_tokens - 1;
                for (int i = first; i < it[j].n_tokens; i++) {
                    fresh(b, m->t, m->n + i + 1, r);
                    n_rows++;
                    CHECK(same(l + (size_t)j * 24 * V + (size_t)(all ? i : 0) * V, r),
                          "logits step %d item %d row %d", step, j, i);
                }
                m->n += it[j].n_tokens;
            }
        }
        for (int j = 0; j < ns; j++) {
            int32_t n;
            CHECK(A->seq_length(b, sq[j].h, &n) == ILAB_OK && n == sq[j].n, "length");
        }
        ilab_cache_stats_t cs = {.struct_size = sizeof cs};
        A->cache_stats(b, &cs);
        CHECK(cs.total_positions == s0.total_positions && cs.free_positions >= 0 &&
                  cs.free_positions % cs.block_size == 0, "stats");
    }
    for (int j = 0; j < ns; j++)
        A->seq_free(b, sq[j].h);
    ilab_cache_stats_t cs = {.struct_size = sizeof cs};
    A->cache_stats(b, &cs);
    CHECK(cs.free_positions == s0.free_positions, "free capacity back: %lld vs %lld",
          (long long)cs.free_positions, (long long)s0.free_positions);

    /* CCH-6: slot exhaustion */
    ilab_seq_t hs[64];
    int n = 0;
    while (n < 64 && A->seq_create(b, &hs[n]) == ILAB_OK)
        n++;
    ilab_seq_t x;
    CHECK(A->seq_create(b, &x) == ILAB_OUT_OF_MEMORY && A->last_error(b, NULL, 0) > 0, "slots");
    CHECK(A->seq_fork(b, hs[0], &x) == ILAB_OUT_OF_MEMORY, "fork slots");
    A->seq_free(b, hs[--n]);
    CHECK(A->seq_create(b, &hs[n++]) == ILAB_OK, "room again");
    while (n)
        A->seq_free(b, hs[--n]);

    /* ERR-3: NULLs and handle 0 */
    size_t sz;
    int32_t t1 = 1, len;
    CHECK(A->tokenize(b, NULL, 3, 0, &t1, 1, &sz) == ILAB_INVALID_ARGUMENT, "tok NULL");
    CHECK(A->tokenize(b, "a", 1, 0, &t1, 1, NULL) == ILAB_INVALID_ARGUMENT, "tok NULL n");
    CHECK(A->tokenize(b, "a", 1, 4, &t1, 1, &sz) == ILAB_INVALID_ARGUMENT, "tok flag");
    CHECK(A->detokenize(b, NULL, 2, NULL, 0, &sz) == ILAB_INVALID_ARGUMENT, "detok NULL");
    CHECK(A->token_piece(b, -1, 1, NULL, 0, NULL) == ILAB_INVALID_ARGUMENT, "piece NULL");
    CHECK(A->seq_length(b, 0, &len) == ILAB_INVALID_ARGUMENT, "handle 0");
    CHECK(A->seq_truncate(b, 0, 0) == ILAB_INVALID_ARGUMENT, "handle 0");
    CHECK(A->seq_free(b, 0) == ILAB_INVALID_ARGUMENT, "handle 0");
    CHECK(A->eval(b, NULL, 1) == ILAB_INVALID_ARGUMENT, "eval NULL");
    const ilab_batch_item_t *np = NULL;
    CHECK(A->eval(b, &np, 1) == ILAB_INVALID_ARGUMENT, "eval NULL item");
    CHECK(A->model_info(b, NULL) == ILAB_INVALID_ARGUMENT, "mi NULL");
    CHECK(A->cache_stats(b, NULL) == ILAB_INVALID_ARGUMENT, "stats NULL");
    char buf[8];
    CHECK(A->last_error(NULL, buf, sizeof buf) == 0 && buf[0] == 0, "last_error NULL");
    A->destroy(NULL);
    CHECK(A->create(NULL, NULL, 0, err, sizeof err, NULL) == ILAB_INVALID_ARGUMENT, "create out NULL");
    ilab_config_entry_t bad[1] = {{"colour", "red"}};
    ilab_backend_t *b2 = NULL;
    CHECK(A->create(NULL, bad, 1, err, sizeof err, &b2) == ILAB_INVALID_ARGUMENT && strstr(err, "colour"),
          "unknown key");
    CHECK(A->probe(NULL, bad, 1, NULL, 0) == ILAB_INVALID_ARGUMENT, "probe unknown key");
    A->destroy(b);
    printf("%s: %d evals ok, %d out of memory, %d overflow, %d rows compared; %d failures\n", argv[1],
           n_ok, n_oom, n_ovf, n_rows, fails);
    return fails != 0;
}
