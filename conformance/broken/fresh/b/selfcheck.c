/* selfcheck PLUGIN.so — randomised checks of the base beyond the per-case
 * drivers: stream text vs output text with random stop strings (STR-2, STR-6,
 * STR-7), top-k lists (LOG-4), tokenizer round-trips (TOK-2/4), and random
 * fork/truncate/eval programs against fresh recomputation (CCH-1..9).
 * Prints "selfcheck ok" or the first problem. */
#include <inferlab/inferlab.h>

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const ilab_backend_api_t *A;
static ilab_backend_t *B;
static int V, C;
static unsigned long long rs = 88172645463325252ull;
static unsigned rnd(unsigned n)
{
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (unsigned)(rs % n);
}
#define FAIL(...) do { printf("selfcheck FAIL: " __VA_ARGS__); printf("\n"); exit(1); } while (0)

typedef struct ev {
    int type, token, finish;
    char text[64];
    size_t len;
    float lp;
    int ntop;
    ilab_logprob_t top[20];
    unsigned comp;
} ev;
static ev evs[600];
static int nev;
static int cb(void *u, const ilab_event_t *e)
{
    (void)u;
    ev *r = &evs[nev++];
    r->type = e->type, r->token = e->token, r->finish = e->finish_reason, r->len = e->text_len;
    if (e->text_len) memcpy(r->text, e->text, e->text_len);
    r->lp = e->logprob, r->ntop = (int)e->n_top_logprobs, r->comp = e->completion_tokens;
    for (int i = 0; i < r->ntop; i++) r->top[i] = e->top_logprobs[i];
    return 0;
}

static void fresh(const int32_t *t, int n, float *out)
{
    ilab_seq_t s;
    A->seq_create(B, &s);
    ilab_batch_item_t it = {.struct_size = sizeof it, .seq = s, .tokens = t, .n_tokens = n, .logits = out};
    const ilab_batch_item_t *p = &it;
    if (A->eval(B, &p, 1) != ILAB_OK) FAIL("fresh eval");
    A->seq_free(B, s);
}

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

static int stats_fin[8], stats_stopstr;
static void streams(void)
{
    float *z = malloc(sizeof(float) * V);
    for (int iter = 0; iter < 3000; iter++) {
        int32_t p[300];
        int np = 1 + (int)rnd(iter % 10 == 0 ? (unsigned)C : 8);
        for (int i = 0; i < np; i++) p[i] = (int)rnd((unsigned)V);
        ilab_sampling_t s = {.struct_size = sizeof s, .temperature = rnd(3) ? 0.5f + rnd(30) / 10.0f : 0,
                             .top_p = 1, .repetition_penalty = 1, .seed = rnd(1000)};
        if (rnd(3) == 0) s.top_k = (int)rnd(50);
        if (rnd(3) == 0) s.top_p = 0.05f + rnd(95) / 100.0f;
        if (rnd(3) == 0) s.min_p = rnd(100) / 100.0f;
        char stops[3][8];
        const char *sp[3];
        int nstop = (int)rnd(4);
        for (int i = 0; i < nstop; i++) {
            int l = 1 + (int)rnd(3);
            for (int k = 0; k < l; k++) stops[i][k] = "etaoin s\xc3\xa9"[rnd(10)];
            stops[i][l] = 0;
            sp[i] = stops[i];
        }
        int32_t stop_ids[2] = {(int)rnd((unsigned)V), (int)rnd((unsigned)V)};
        ilab_generate_request_t r = {.struct_size = sizeof r, .request_id = (uint64_t)iter, .prompt_tokens = p,
                                     .n_prompt_tokens = (size_t)np, .sampling = &s, .max_tokens = 1 + (int)rnd(60),
                                     .stop = sp, .n_stop = (size_t)nstop, .stop_token_ids = stop_ids,
                                     .n_stop_token_ids = rnd(2) ? 2 : 0, .ignore_eos = (int)rnd(2),
                                     .top_logprobs = (int)rnd(21)};
        nev = 0;
        ilab_status st = A->generate(B, &r, cb, NULL);
        if (st != ILAB_OK || nev < 1 || evs[nev - 1].type != ILAB_EVENT_FINISH) FAIL("iter %d: status %d", iter, st);
        /* output text from pieces, then the expected cut */
        char out[1024], got[1024];
        size_t no = 0, ng = 0, ends[600];
        int nt = 0;
        int32_t prev = p[np - 1], hist[600];
        memcpy(hist, p, sizeof(int32_t) * (size_t)np);
        for (int i = 0; i < nev; i++) {
            if (evs[i].type == ILAB_EVENT_TOKEN) {
                size_t l;
                A->token_piece(B, prev, evs[i].token, out + no, 64, &l);
                no += l;
                ends[nt++] = no;
                prev = evs[i].token;
                /* LOG-4 / SMP-6 */
                fresh(hist, np + nt - 1, z);
                double mx = z[0], sum = 0;
                for (int v = 0; v < V; v++) if (z[v] > mx) mx = z[v];
                for (int v = 0; v < V; v++) sum += exp(z[v] - mx);
                double lse = mx + log(sum);
                double want = z[evs[i].token] - lse;
                if (fabs(evs[i].lp - want) > 1e-4 + 1e-4 * fabs(want)) FAIL("iter %d: logprob", iter);
                if (evs[i].ntop != (r.top_logprobs < V ? r.top_logprobs : V)) FAIL("iter %d: ntop", iter);
                for (int k = 0; k < evs[i].ntop; k++) {
                    double w = z[evs[i].top[k].token] - lse;
                    if (fabs(evs[i].top[k].logprob - w) > 1e-4 + 1e-4 * fabs(w)) FAIL("iter %d: top lp", iter);
                    if (k && (evs[i].top[k].logprob > evs[i].top[k - 1].logprob ||
                              (evs[i].top[k].logprob == evs[i].top[k - 1].logprob && evs[i].top[k].token < evs[i].top[k - 1].token)))
                        FAIL("iter %d: top order", iter);
                }
                if (evs[i].ntop) {
                    /* the k-th largest really is */
                    int cnt = 0;
                    float last = evs[i].top[evs[i].ntop - 1].logprob;
                    for (int v = 0; v < V; v++) cnt += (z[v] - lse) > last + 1e-5;
                    if (cnt > evs[i].ntop) FAIL("iter %d: top list misses larger entries", iter);
                }
                hist[np + nt - 1] = evs[i].token;
            }
            memcpy(got + ng, evs[i].text, evs[i].len);
            ng += evs[i].len;
            /* STR-7 */
            if (i + 1 < nev && utf8_complete(evs[i].text, evs[i].len) != evs[i].len) {
                for (int j = i + 1; j < nev; j++) {
                    if (!evs[j].len) continue;
                    if ((evs[j].text[0] & 0xc0) == 0x80) FAIL("iter %d: split code point", iter);
                    break;
                }
            }
        }
        out[no] = 0;
        /* expected: shortest prefix containing a stop */
        size_t cut = no;
        int fin_stop = 0;
        for (size_t e = 1; e <= no && !fin_stop; e++)
            for (int i = 0; i < nstop; i++) {
                size_t l = strlen(sp[i]);
                if (l <= e && !memcmp(out + e - l, sp[i], l)) {
                    if (!fin_stop || e - l < cut) cut = e - l;
                    fin_stop = 1;
                }
            }
        ev *fin = &evs[nev - 1];
        stats_fin[fin->finish]++; stats_stopstr += fin_stop;
        if (fin_stop) {
            if (fin->finish != ILAB_FINISH_STOP) FAIL("iter %d: stop string not detected", iter);
            if (ends[nt - 1] < cut + 1 || (nt >= 2 && ends[nt - 2] >= cut + strlen("x") && 0)) {}
        }
        if (ng != cut || memcmp(got, out, cut)) FAIL("iter %d: stream text %zu vs output %zu (stop %d)", iter, ng, cut, fin_stop);
        if (fin->comp != (unsigned)nt) FAIL("iter %d: usage", iter);
        if (fin->finish == ILAB_FINISH_LENGTH && nt != r.max_tokens && np + nt - 1 != C) FAIL("iter %d: length count %d", iter, nt);
        if (fin->finish == ILAB_FINISH_LENGTH && fin->len) FAIL("iter %d: FINISH(length) carries text", iter);
    }
    free(z);
}

static void tokens(void)
{
    for (int iter = 0; iter < 3000; iter++) {
        char s[200];
        int n = (int)rnd(200);
        for (int i = 0; i < n; i++) s[i] = (char)(rnd(3) ? "th in er\r\n"[rnd(10)] : rnd(256));
        int32_t t[400];
        size_t nt;
        if (A->tokenize(B, s, (size_t)n, 3, t, 400, &nt) != ILAB_OK) FAIL("tokenize");
        char d[400], pc[400];
        size_t ld, lp = 0;
        if (A->detokenize(B, t, nt, d, sizeof d, &ld) != ILAB_OK || ld != (size_t)n || memcmp(d, s, ld)) FAIL("roundtrip");
        int32_t prev = -1;
        for (size_t i = 0; i < nt; i++) {
            size_t l;
            if (A->token_piece(B, prev, t[i], pc + lp, 64, &l) != ILAB_OK) FAIL("piece");
            lp += l;
            prev = t[i];
        }
        if (lp != ld || memcmp(pc, d, lp)) FAIL("pieces");
    }
}

typedef struct mseq { ilab_seq_t h; int32_t t[300]; int n; } mseq;

static void cache(void)
{
    mseq m[20];
    int nm = 0;
    float *l = malloc(sizeof(float) * V * 300), *f = malloc(sizeof(float) * V);
    for (int iter = 0; iter < 20000; iter++) {
        int op = (int)rnd(6);
        if (op == 0 && nm < 20) {
            if (A->seq_create(B, &m[nm].h) != ILAB_OK) FAIL("create");
            m[nm++].n = 0;
        } else if (op == 1 && nm && nm < 20) {
            int k = (int)rnd((unsigned)nm);
            if (A->seq_fork(B, m[k].h, &m[nm].h) != ILAB_OK) FAIL("fork");
            memcpy(m[nm].t, m[k].t, sizeof m[k].t);
            m[nm++].n = m[k].n;
        } else if (op == 2 && nm) {
            int k = (int)rnd((unsigned)nm);
            int keep = (int)rnd((unsigned)m[k].n + 1);
            if (A->seq_truncate(B, m[k].h, keep) != ILAB_OK) FAIL("truncate");
            m[k].n = keep;
        } else if (op == 3 && nm) {
            int k = (int)rnd((unsigned)nm);
            if (A->seq_free(B, m[k].h) != ILAB_OK) FAIL("free");
            m[k] = m[--nm];
        } else if (nm) {
            /* batch of distinct sequences */
            int nb = 1 + (int)rnd(nm < 8 ? (unsigned)nm : 8u);
            int idx[8], used[20] = {0};
            ilab_batch_item_t it[8];
            const ilab_batch_item_t *pp[8];
            int32_t toks[8][40];
            float *rows[8];
            for (int i = 0; i < nb; i++) {
                int k;
                do k = (int)rnd((unsigned)nm); while (used[k]);
                used[k] = 1;
                idx[i] = k;
                int room = C - m[k].n;
                int nt = 1 + (int)rnd(rnd(4) ? 2 : 40);
                for (int j = 0; j < nt; j++) toks[i][j] = (int)rnd((unsigned)V);
                uint32_t flags = rnd(2);
                rows[i] = malloc(sizeof(float) * V * 40);
                it[i] = (ilab_batch_item_t){.struct_size = sizeof it[i], .seq = m[k].h, .tokens = toks[i], .n_tokens = nt,
                                            .flags = flags, .logits = rows[i]};
                pp[i] = &it[i];
                (void)room;
            }
            int over = 0;
            for (int i = 0; i < nb; i++) over |= m[idx[i]].n + it[i].n_tokens > C;
            ilab_status st = A->eval(B, pp, (size_t)nb);
            if (over) {
                if (st != ILAB_CONTEXT_OVERFLOW) FAIL("overflow status %d", st);
            } else {
                if (st != ILAB_OK) FAIL("eval %d", st);
                for (int i = 0; i < nb; i++) {
                    mseq *s = &m[idx[i]];
                    int all = it[i].flags & 1;
                    for (int j = 0; j < it[i].n_tokens; j++) {
                        s->t[s->n++] = toks[i][j];
                        if (all || j == it[i].n_tokens - 1) {
                            fresh(s->t, s->n, f);
                            if (memcmp(f, rows[i] + (all ? j : 0) * V, sizeof(float) * V)) FAIL("iter %d: logits differ", iter);
                        }
                    }
                }
            }
            for (int i = 0; i < nb; i++) free(rows[i]);
        }
        for (int k = 0; k < nm; k++) {
            int32_t len;
            if (A->seq_length(B, m[k].h, &len) != ILAB_OK || len != m[k].n) FAIL("length");
        }
    }
    (void)l;
}

static void nulls(void)
{
#define INV(x) do { ilab_status _s = (x); if (_s != ILAB_INVALID_ARGUMENT) FAIL("%s gave %d", #x, _s); } while (0)
    size_t n;
    int32_t t[4] = {1, 2, 3, 4}, len;
    char buf[16];
    ilab_seq_t s, c;
    INV(A->model_info(B, NULL));
    INV(A->model_info(NULL, NULL));
    INV(A->tokenize(B, NULL, 3, 0, t, 4, &n));
    INV(A->tokenize(B, "abc", 3, 0, NULL, 4, &n));
    INV(A->tokenize(B, "abc", 3, 0, t, 4, NULL));
    INV(A->tokenize(NULL, "abc", 3, 0, t, 4, &n));
    INV(A->detokenize(B, NULL, 2, buf, 16, &n));
    INV(A->detokenize(B, t, 2, NULL, 16, &n));
    INV(A->detokenize(B, t, 2, buf, 16, NULL));
    INV(A->token_piece(B, -1, 5, NULL, 16, &n));
    INV(A->token_piece(B, -1, 5, buf, 16, NULL));
    INV(A->token_piece(B, -1, -1, buf, 16, &n));
    INV(A->seq_create(B, NULL));
    INV(A->seq_create(NULL, &s));
    INV(A->seq_free(B, 0));
    INV(A->seq_free(NULL, 1));
    if (A->seq_create(B, &s) != ILAB_OK) FAIL("create");
    INV(A->seq_fork(B, s, NULL));
    INV(A->seq_fork(B, 0, &c));
    INV(A->seq_truncate(B, 0, 0));
    INV(A->seq_truncate(B, s, -1));
    INV(A->seq_truncate(B, s, 1));
    INV(A->seq_length(B, s, NULL));
    INV(A->seq_length(B, 0, &len));
    INV(A->eval(B, NULL, 1));
    const ilab_batch_item_t *np[1] = {NULL};
    INV(A->eval(B, np, 1));
    ilab_batch_item_t it = {.struct_size = sizeof it, .seq = s, .tokens = NULL, .n_tokens = 1};
    const ilab_batch_item_t *pp = &it;
    INV(A->eval(B, &pp, 1));
    it.tokens = t;
    it.n_tokens = -3;
    INV(A->eval(B, &pp, 1));
    it.n_tokens = 1;
    it.flags = 4;
    INV(A->eval(B, &pp, 1));
    it.flags = 0;
    INV(A->eval(B, &pp, 0));
    INV(A->eval(B, &pp, 9));
    it.struct_size = 8;
    if (A->eval(B, &pp, 1) != ILAB_ABI_MISMATCH) FAIL("small item");
    struct { ilab_batch_item_t i; uint64_t x; } big = {.i = it, .x = 1};
    big.i.struct_size = sizeof big;
    const ilab_batch_item_t *bp = &big.i;
    if (A->eval(B, &bp, 1) != ILAB_ABI_MISMATCH) FAIL("tail item");
    big.x = 0;
    if (A->eval(B, &bp, 1) != ILAB_OK) FAIL("zero tail item");
    if (A->seq_length(B, s, &len) != ILAB_OK || len != 1) FAIL("len");
    INV(A->generate(B, NULL, cb, NULL));
    ilab_sampling_t sm = {.struct_size = sizeof sm, .top_p = 1, .repetition_penalty = 1};
    ilab_generate_request_t r = {.struct_size = sizeof r, .prompt_tokens = t, .n_prompt_tokens = 1, .sampling = &sm, .max_tokens = 1};
    INV(A->generate(B, &r, NULL, NULL));
    nev = 0;
    r.sampling = NULL;
    INV(A->generate(B, &r, cb, NULL));
    if (nev != 1 || evs[0].type != ILAB_EVENT_ERROR) FAIL("sampling NULL events");
    r.sampling = &sm;
    float bad[][7] = {{-1, 0, 1, 0, 1, 0, 0}, {NAN, 0, 1, 0, 1, 0, 0}, {1, -1, 1, 0, 1, 0, 0}, {1, 0, 0, 0, 1, 0, 0},
                      {1, 0, 1.5f, 0, 1, 0, 0}, {1, 0, 1, -0.1f, 1, 0, 0}, {1, 0, 1, 1.1f, 1, 0, 0}, {1, 0, 1, 0, 0, 0, 0},
                      {1, 0, 1, 0, -1, 0, 0}, {1, 0, 1, 0, 1, 2.5f, 0}, {1, 0, 1, 0, 1, 0, -2.5f}, {INFINITY, 0, 1, 0, 1, 0, 0}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ilab_sampling_t x = {.struct_size = sizeof x, .temperature = bad[i][0], .top_k = (int)bad[i][1], .top_p = bad[i][2],
                             .min_p = bad[i][3], .repetition_penalty = bad[i][4], .presence_penalty = bad[i][5],
                             .frequency_penalty = bad[i][6]};
        r.sampling = &x;
        nev = 0;
        INV(A->generate(B, &r, cb, NULL));
        if (nev != 1 || evs[0].type != ILAB_EVENT_ERROR) FAIL("bad sampling %zu events", i);
        char m[256];
        if (!A->last_error(B, m, sizeof m)) FAIL("no message");
    }
    r.sampling = &sm;
    r.top_logprobs = 21;
    nev = 0;
    INV(A->generate(B, &r, cb, NULL));
    r.top_logprobs = 0;
    const char *es[1] = {""};
    r.stop = es, r.n_stop = 1;
    nev = 0;
    INV(A->generate(B, &r, cb, NULL));
    r.n_stop = 0;
    int32_t big_prompt[300] = {0};
    r.prompt_tokens = big_prompt, r.n_prompt_tokens = 257;
    nev = 0;
    if (A->generate(B, &r, cb, NULL) != ILAB_CONTEXT_OVERFLOW || nev != 1) FAIL("long prompt");
    r.n_prompt_tokens = 256;
    nev = 0;
    if (A->generate(B, &r, cb, NULL) != ILAB_OK || nev != 2) FAIL("full prompt");
    if (A->cancel(B, 12345) != ILAB_OK) FAIL("cancel unknown");
    ilab_cache_stats_t cs = {.struct_size = sizeof cs};
    if (A->cache_stats(B, &cs) != ILAB_UNSUPPORTED) FAIL("stats");
    char lb[8] = "xxxxxxx";
    A->last_error(NULL, lb, sizeof lb);
    if (lb[0]) FAIL("last_error NULL");
    A->destroy(NULL);
    char reason[4];
    if (A->probe(NULL, NULL, 0, NULL, 0) != ILAB_OK) FAIL("probe null");
    ilab_config_entry_t cfg = {"device", "accel"};
    if (A->probe(NULL, &cfg, 1, reason, sizeof reason) != ILAB_UNAVAILABLE || strlen(reason) != 3) FAIL("probe trunc");
    if (A->probe(NULL, NULL, 1, reason, sizeof reason) != ILAB_INVALID_ARGUMENT) FAIL("probe config NULL");
    ilab_backend_t *o = (ilab_backend_t *)0x5;
    if (A->create(NULL, &cfg, 1, NULL, 0, &o) != ILAB_UNAVAILABLE || o != (ilab_backend_t *)0x5) FAIL("create null err");
    if (A->create(NULL, NULL, 0, reason, sizeof reason, NULL) != ILAB_INVALID_ARGUMENT) FAIL("create out NULL");
    A->seq_free(B, s);
}

int main(int argc, char **argv)
{
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h || argc < 2) FAIL("dlopen");
    const ilab_plugin_entry_t *e = dlsym(h, "ilab_plugin_entry");
    A = e->backend;
    char err[128];
    if (A->create(NULL, NULL, 0, err, sizeof err, &B) != ILAB_OK) FAIL("create");
    ilab_model_info_t mi = {.struct_size = sizeof mi};
    A->model_info(B, &mi);
    V = mi.vocab_size, C = mi.max_context;
    nulls();
    tokens();
    cache();
    streams();
    A->destroy(B);
    printf("selfcheck ok (finish stop %d [stop strings %d], length %d)\n", stats_fin[1], stats_stopstr, stats_fin[2]);
    return 0;
}
