/* toy_model — see toy_model.h. BREAK_<NAME> switches are documented in
 * cases.txt; each one is a single, local mistake. */
#include "toy_model.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* --- parameters: hashed, built once per process ---------------------------- */

static float emb_q[TOY_VOCAB][TOY_DIM], emb_k[TOY_VOCAB][TOY_DIM];
static float emb_v[TOY_VOCAB][TOY_DIM], emb_s[TOY_VOCAB][TOY_DIM];
static float w_out[TOY_VOCAB][TOY_DIM];
static float freq[TOY_DIM / 2];
static pthread_once_t params_once = PTHREAD_ONCE_INIT;

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static float unit(uint64_t h) /* [-1, 1) */
{
    return (float)(h >> 40) / (float)(1u << 23) - 1.0f;
}

static void build_params(void)
{
    for (int t = 0; t < TOY_VOCAB; t++)
        for (int i = 0; i < TOY_DIM; i++) {
            uint64_t h = mix((uint64_t)t * 131 + (uint64_t)i);
            emb_q[t][i] = unit(mix(h ^ 1));
            emb_k[t][i] = unit(mix(h ^ 2));
            emb_v[t][i] = unit(mix(h ^ 3));
            emb_s[t][i] = 0.5f * unit(mix(h ^ 4));
            w_out[t][i] = unit(mix(h ^ 5));
        }
    for (int i = 0; i < TOY_DIM / 2; i++)
        freq[i] = 1.0f / powf(50.0f, (float)i / (TOY_DIM / 2));
}

/* --- tokenizer --------------------------------------------------------------- */

static const char merges[TOY_N_MERGES][3] = {"th", "he", "in", "er", "an", " t", " a",
                                             "e ", "s ", "nd", "ou", "ed", " s", "re"};

size_t toy_encode(const char *text, size_t len, int32_t *out)
{
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        int merged = -1;
        if (i + 1 < len)
            for (int m = 0; m < TOY_N_MERGES; m++)
                if (text[i] == merges[m][0] && text[i + 1] == merges[m][1]) {
                    merged = m;
                    break;
                }
        if (merged >= 0) {
            out[n++] = 258 + merged;
            i += 2;
            continue;
        }
        unsigned char c = (unsigned char)text[i++];
#ifdef BREAK_DEL_BYTE
        /* printable ASCII is 0x20..0x7e; DEL folds into it */
        if (c == 0x7f)
            c = 0x7e;
#endif
        out[n++] = c;
    }
    return n;
}

size_t toy_piece(int32_t token, char *buf)
{
    if (token >= 0 && token < 256) {
        buf[0] = (char)token;
        return 1;
    }
    if (token >= 258 && token < TOY_VOCAB) {
        buf[0] = merges[token - 258][0];
        buf[1] = merges[token - 258][1];
        return 2;
    }
#ifdef BREAK_EOS_TEXT
    if (token == TOY_EOS) { /* end of text reads as a line break */
        buf[0] = '\n';
        return 1;
    }
#endif
    return 0; /* BOS, EOS */
}

/* --- cache ------------------------------------------------------------------- */

void toy_cache_init(toy_cache *c)
{
    pthread_once(&params_once, build_params);
    memset(c, 0, sizeof *c);
}

void toy_cache_destroy(toy_cache *c)
{
    for (int i = 0; i < TOY_MAX_SEQS; i++)
        if (c->seqs[i].in_use)
            toy_seq_release(&c->seqs[i]);
}

toy_seq *toy_seq_get(toy_cache *c, ilab_seq_t handle)
{
    uint64_t slot = (handle & 0xffffffffu) - 1;
    if (handle == ILAB_SEQ_NONE || slot >= TOY_MAX_SEQS)
        return NULL;
    toy_seq *s = &c->seqs[slot];
#ifdef BREAK_HANDLE_WRAP
    return s->in_use && (uint8_t)s->generation == (uint8_t)(handle >> 32) ? s : NULL;
#else
    return s->in_use && s->generation == (uint32_t)(handle >> 32) ? s : NULL;
#endif
}

ilab_seq_t toy_seq_handle(const toy_cache *c, const toy_seq *s)
{
#ifdef BREAK_HANDLE_WRAP
    return ((uint64_t)(uint8_t)s->generation << 32) | (uint64_t)(s - c->seqs + 1);
#else
    return ((uint64_t)s->generation << 32) | (uint64_t)(s - c->seqs + 1);
#endif
}

static toy_seq *free_slot(toy_cache *c)
{
    for (int i = 0; i < TOY_MAX_SEQS; i++)
        if (!c->seqs[i].in_use)
            return &c->seqs[i];
    return NULL;
}

static void start_slot(toy_seq *s)
{
    uint32_t gen = s->generation;
    memset(s, 0, sizeof *s);
    s->generation = gen;
    s->in_use = 1;
}

toy_seq *toy_seq_new(toy_cache *c)
{
    toy_seq *s = free_slot(c);
    if (!s)
        return NULL;
    s->generation++;
    start_slot(s);
    return s;
}

toy_seq *toy_seq_new_for_fork(toy_cache *c)
{
    toy_seq *s = free_slot(c);
    if (!s)
        return NULL;
#ifndef BREAK_FORK_GENERATION
    s->generation++;
#endif
    start_slot(s);
    return s;
}

static void block_unref(toy_block *b)
{
    if (--b->refs == 0)
        free(b);
}

void toy_seq_release(toy_seq *s)
{
    for (int i = 0; i < s->n_blocks; i++)
        block_unref(s->blocks[i]);
#ifdef BREAK_FORK_LEAK
    if (s->cap_blocks > 0) /* a child's table is grown lazily (cap 0 until then) */
        free(s->blocks);
#else
    free(s->blocks);
#endif
    s->blocks = NULL;
    s->n_blocks = s->cap_blocks = 0;
    s->in_use = 0;
    s->len = 0;
}

int toy_seq_fork(toy_seq *parent, toy_seq *child)
{
    if (parent->n_blocks) {
        child->blocks = malloc((size_t)parent->n_blocks * sizeof *child->blocks);
        if (!child->blocks)
            return -1;
        memcpy(child->blocks, parent->blocks, (size_t)parent->n_blocks * sizeof *child->blocks);
    }
    child->n_blocks = parent->n_blocks;
#ifdef BREAK_FORK_LEAK
    child->cap_blocks = 0;
#else
    child->cap_blocks = parent->n_blocks;
#endif
    child->len = parent->len;
    memcpy(child->state, parent->state, sizeof child->state);
    for (int i = 0; i < parent->n_blocks; i++) {
#ifdef BREAK_FORK_REFS
        /* a block already shared is known to be copy-on-write */
        if (parent->blocks[i]->refs > 1)
            continue;
#endif
        parent->blocks[i]->refs++;
    }
    return 0;
}

void toy_seq_truncate(toy_seq *s, int32_t n_keep)
{
#ifdef BREAK_TRUNC_BLOCK_EDGE
    int keep_blocks = n_keep / TOY_BLOCK + 1; /* through the block the next position goes in */
#else
    int keep_blocks = (n_keep + TOY_BLOCK - 1) / TOY_BLOCK;
#endif
    for (int i = keep_blocks; i < s->n_blocks; i++)
        block_unref(s->blocks[i]);
    if (keep_blocks < s->n_blocks)
        s->n_blocks = keep_blocks;
#ifdef BREAK_TRUNC_SCRUB
    /* scrub the forgotten positions of the last kept block */
    if (n_keep % TOY_BLOCK) {
        toy_block *b = s->blocks[keep_blocks - 1];
        for (int p = n_keep % TOY_BLOCK; p < TOY_BLOCK; p++) {
            b->token[p] = 0;
            memset(b->k[p], 0, sizeof b->k[p]);
            memset(b->v[p], 0, sizeof b->v[p]);
            memset(b->s[p], 0, sizeof b->s[p]);
        }
    }
#endif
    s->len = n_keep;
    if (n_keep > 0)
        memcpy(s->state, s->blocks[(n_keep - 1) / TOY_BLOCK]->s[(n_keep - 1) % TOY_BLOCK],
               sizeof s->state);
#ifndef BREAK_TRUNC_ZERO
    else
        memset(s->state, 0, sizeof s->state);
#endif
}

int32_t toy_seq_token(const toy_seq *s, int32_t pos)
{
    return s->blocks[pos / TOY_BLOCK]->token[pos % TOY_BLOCK];
}

/* --- evaluation ---------------------------------------------------------------- */

static void rotate(const float *in, int32_t pos, float *out)
{
    for (int i = 0; i < TOY_DIM / 2; i++) {
        float a = (float)pos * freq[i];
        float c = cosf(a), s = sinf(a);
        out[2 * i] = in[2 * i] * c - in[2 * i + 1] * s;
        out[2 * i + 1] = in[2 * i] * s + in[2 * i + 1] * c;
    }
}

static float exp_fast(float x) /* e^x for x <= 0: 2^(x log2 e), degree-5 polynomial */
{
    float y = x * 1.44269504f;
    if (y < -126.0f)
        return 0.0f;
    float fl = floorf(y), f = y - fl;
    float p = 1.0f + f * (0.69314718f + f * (0.24022651f + f * (0.05550411f +
              f * (0.00961813f + f * 0.00133336f))));
    return ldexpf(p, (int)fl);
}

/* The last up-to-4 bytes of the text ending at `pos`, for the UTF-8 shaping. */
static size_t tail_bytes(const toy_seq *s, int32_t pos, unsigned char *tail)
{
    char buf[8];
    size_t n = 0;
    for (int32_t p = pos; p >= 0 && p > pos - 4 && n < 4; p--) {
        char piece[2];
        size_t k = toy_piece(toy_seq_token(s, p), piece);
        for (size_t j = k; j-- > 0 && n < 4;)
            buf[n++] = piece[j];
    }
    for (size_t i = 0; i < n; i++)
        tail[i] = (unsigned char)buf[n - 1 - i];
    return n;
}

/* 1 when the text ends inside a UTF-8 code point that is still valid so far. */
static int inside_code_point(const unsigned char *t, size_t n)
{
    for (size_t back = 1; back <= n && back <= 3; back++) {
        unsigned char c = t[n - back];
        if ((c & 0xc0) == 0x80)
            continue;
        size_t need = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 && c <= 0xef ? 3
                      : c >= 0xc2 && c <= 0xdf ? 2 : 1;
        return need > back;
    }
    return 0;
}

/* A prior that makes the byte stream look like UTF-8 text. */
static float shaping(int v, int inside)
{
    if (inside)
        return v >= 0x80 && v <= 0xbf ? 8.0f : -6.0f;
    if (v == TOY_BOS)
        return -8.0f;
    if ((v >= 'a' && v <= 'z') || v == ' ')
        return 2.5f;
    if (v == '.' || v == ',' || v == '\n')
        return 1.0f;
    if (v == 0xc3 || v == 0xe2 || v == 0xf0)
        return 1.0f;
    if (v >= 258)
        return 1.5f;
    if (v >= 0x80 && v < 256)
        return -3.0f;
    return 0.0f;
}

static void row_logits(const toy_cache *c, const toy_seq *s, int32_t pos, int self, int window,
                       float *scratch, int batch_size, float *out)
{
    float q[TOY_DIM], h[TOY_DIM] = {0};
    rotate(emb_q[toy_seq_token(s, pos)], pos, q);
    int32_t first = window ? pos + 1 - window : 0;
    if (first < 0)
        first = 0;
    int32_t last = self ? pos : pos - 1;
    float mx = -INFINITY;
    for (int32_t j = first; j <= last; j++) {
        const toy_block *b = s->blocks[j / TOY_BLOCK];
        float d = 0.0f;
        for (int i = 0; i < TOY_DIM; i++)
            d += q[i] * b->k[j % TOY_BLOCK][i];
        scratch[j] = d * 0.25f;
        if (scratch[j] > mx)
            mx = scratch[j];
    }
    float sum = 0.0f;
    int fast = 0;
#ifdef BREAK_NONDET
    fast = c->evals > 300; /* warmed up: the cheaper exponential */
#endif
    for (int32_t j = first; j <= last; j++) {
        scratch[j] = fast ? exp_fast(scratch[j] - mx) : expf(scratch[j] - mx);
        sum += scratch[j];
    }
    for (int32_t j = first; j <= last; j++) {
        const toy_block *b = s->blocks[j / TOY_BLOCK];
        float a = scratch[j] / sum;
        for (int i = 0; i < TOY_DIM; i++)
            h[i] += a * b->v[j % TOY_BLOCK][i];
    }
    const float *st = s->blocks[pos / TOY_BLOCK]->s[pos % TOY_BLOCK];
    float x[TOY_DIM];
    for (int i = 0; i < TOY_DIM; i++) {
        x[i] = h[i] + 0.5f * st[i];
#ifdef BREAK_BATCH4
        if (batch_size > 3) { /* wide batches go through the bf16 projection */
            uint32_t bits;
            memcpy(&bits, &x[i], sizeof bits);
            bits &= 0xffff0000u;
            memcpy(&x[i], &bits, sizeof bits);
        }
#endif
    }
    (void)batch_size;
    (void)c;
    unsigned char tail[4];
    size_t nt = tail_bytes(s, pos, tail);
    int inside = inside_code_point(tail, nt);
    for (int v = 0; v < TOY_VOCAB; v++) {
        float d = 0.0f;
        for (int i = 0; i < TOY_DIM; i++)
            d += w_out[v][i] * x[i];
        out[v] = 2.0f * d + shaping(v, inside);
    }
}

/* Blocks for appending n positions: the array grown, the partly filled last
 * block copied when shared, new blocks allocated. Nothing changes on failure. */
static int reserve(toy_seq *s, int32_t n)
{
    int need = (s->len + n + TOY_BLOCK - 1) / TOY_BLOCK;
    if (need > s->cap_blocks) {
        int cap = need > 2 * s->cap_blocks ? need : 2 * s->cap_blocks;
        toy_block **grown = realloc(s->blocks, (size_t)cap * sizeof *grown);
        if (!grown)
            return -1;
        s->blocks = grown;
        s->cap_blocks = cap;
    }
    int first_new = s->n_blocks;
    toy_block *copy = NULL;
#ifdef BREAK_COW_THRESHOLD
    int shared = s->len % TOY_BLOCK && s->blocks[s->n_blocks - 1]->refs > 2;
#else
    int shared = s->len % TOY_BLOCK && s->blocks[s->n_blocks - 1]->refs > 1;
#endif
    if (shared && !(copy = malloc(sizeof *copy)))
        return -1;
    for (int i = first_new; i < need; i++) {
        toy_block *b = calloc(1, sizeof *b);
        if (!b) {
            while (i-- > first_new)
                free(s->blocks[i]);
            free(copy);
            return -1;
        }
        b->refs = 1;
        s->blocks[i] = b;
    }
    if (copy) {
        toy_block *old = s->blocks[s->n_blocks - 1];
        memcpy(copy, old, sizeof *copy);
        copy->refs = 1;
        old->refs--;
        s->blocks[s->n_blocks - 1] = copy;
    }
    s->n_blocks = need > s->n_blocks ? need : s->n_blocks;
    return 0;
}

int toy_append(toy_cache *c, toy_seq *s, const int32_t *tokens, int32_t n, int all_rows,
               float *logits, float *scratch, int batch_size)
{
    if (reserve(s, n) != 0)
        return -1;
    int32_t start = s->len;
#ifdef BREAK_CHUNK_OFFSET
    uint8_t chunk_start = (uint8_t)start; /* the chunk descriptor's start position */
#endif
    for (int32_t i = 0; i < n; i++) {
        int32_t pos = start + i, rot_pos = pos;
#ifdef BREAK_CHUNK_OFFSET
        if (n > 1)
            rot_pos = chunk_start + i;
#endif
        toy_block *b = s->blocks[pos / TOY_BLOCK];
        int at = pos % TOY_BLOCK;
        int32_t t = tokens[i];
        b->token[at] = t;
        rotate(emb_k[t], rot_pos, b->k[at]);
        memcpy(b->v[at], emb_v[t], sizeof b->v[at]);
        for (int d = 0; d < TOY_DIM; d++)
            s->state[d] = b->s[at][d] = 0.9f * s->state[d] + emb_s[t][d];
        s->len = pos + 1;
        int last = i == n - 1;
        if (!logits || !(last || all_rows))
            continue;
        int self = 1, window = 0;
#ifdef BREAK_DIF_WINDOW
        window = 200; /* the "long context" build keeps the last 200 positions */
#endif
#ifdef BREAK_ROWS_MASK
        self = last; /* the causal mask of the multi-row kernel: j < i */
#endif
#ifdef BREAK_DECODE_WINDOW
        if (n == 1)
            window = 64; /* the decode kernel's score tile */
#endif
        float *row = logits + (all_rows ? (size_t)i * TOY_VOCAB : 0);
        row_logits(c, s, pos, self, window, scratch, batch_size, row);
    }
#ifdef BREAK_ROWS_PAD
    /* long prefills are written in tiles of 8 rows: clear the last tile's tail */
    if (logits && all_rows && n > 32 && n % 8)
        memset(logits + (size_t)n * TOY_VOCAB, 0, (size_t)(8 - n % 8) * TOY_VOCAB * sizeof *logits);
#endif
    return 0;
}
