#include "tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_piece(const void *a, const void *b)
{
    const tl_piece_index *x = a, *y = b;
    int n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->str, y->str, (size_t)n);
    if (c != 0)
        return c;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->id - y->id; /* duplicates: the lowest id wins lookups */
}

/* Id of the piece with exactly these bytes, or -1. */
static int lookup(const tl_tokenizer *t, const char *s, int len)
{
    int lo = 0, hi = t->vocab_size - 1, found = -1;
    tl_piece_index key = {s, len, -1};
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = cmp_piece(&key, &t->sorted[mid]);
        /* key.id = -1 sorts before any equal piece, so c != 0 always; an equal
         * string shows up as the first element greater than the key. */
        if (c < 0) {
            hi = mid - 1;
            found = mid;
        } else {
            lo = mid + 1;
        }
    }
    if (found >= 0 && t->sorted[found].len == len &&
        memcmp(t->sorted[found].str, s, (size_t)len) == 0)
        return t->sorted[found].id;
    return -1;
}

static int parse_byte_piece(const char *s, int len)
{
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

void tl_tokenizer_free(tl_tokenizer *t)
{
    if (t->pieces) {
        for (int i = 0; i < t->vocab_size; i++)
            free(t->pieces[i]);
    }
    free(t->pieces);
    free(t->piece_len);
    free(t->scores);
    free(t->sorted);
    memset(t, 0, sizeof *t);
}

static ilab_status set_piece(tl_tokenizer *t, int i, const char *bytes, int len)
{
    t->pieces[i] = malloc((size_t)len + 1);
    if (!t->pieces[i])
        return ILAB_OUT_OF_MEMORY;
    memcpy(t->pieces[i], bytes, (size_t)len);
    t->pieces[i][len] = '\0';
    t->piece_len[i] = len;
    if (len > t->max_token_length)
        t->max_token_length = len;
    return ILAB_OK;
}

/* The lookup tables, once every piece is in place. */
static void finish(tl_tokenizer *t)
{
    for (int i = 0; i < 256; i++)
        t->byte_id[i] = -1;
    for (int i = 0; i < t->vocab_size; i++) {
        t->sorted[i] = (tl_piece_index){t->pieces[i], t->piece_len[i], i};
        int b = parse_byte_piece(t->pieces[i], t->piece_len[i]);
        if (b >= 0 && t->byte_id[b] < 0)
            t->byte_id[b] = i;
    }
    qsort(t->sorted, (size_t)t->vocab_size, sizeof *t->sorted, cmp_piece);
}

ilab_status tl_tokenizer_from_vocab(int n, const char *const *pieces, const int *lens,
                                    const float *scores, int bos_id, int eos_id, int unk_id,
                                    const char *label, tl_tokenizer *out, char *err, size_t cap)
{
    tl_tokenizer t;
    memset(&t, 0, sizeof t);
    const int ids[3] = {bos_id, eos_id, unk_id};
    static const char *const id_names[3] = {"BOS", "EOS", "unknown-token"};
    for (int k = 0; k < 3; k++) {
        if (ids[k] < 0 || ids[k] >= n) {
            snprintf(err, cap, "tokenizer %s: %s id %d is outside the %d-token vocabulary", label,
                     id_names[k], ids[k], n);
            return ILAB_INVALID_ARGUMENT;
        }
    }
    t.vocab_size = n;
    t.bos_id = bos_id;
    t.eos_id = eos_id;
    t.unk_id = unk_id;
    t.pieces = calloc((size_t)n, sizeof *t.pieces);
    t.piece_len = calloc((size_t)n, sizeof *t.piece_len);
    t.scores = calloc((size_t)n, sizeof *t.scores);
    t.sorted = calloc((size_t)n, sizeof *t.sorted);
    if (!t.pieces || !t.piece_len || !t.scores || !t.sorted)
        goto oom;
    if (pieces) {
        for (int i = 0; i < n; i++) {
            if (set_piece(&t, i, pieces[i], lens[i]) != ILAB_OK)
                goto oom;
            t.scores[i] = scores[i];
        }
        finish(&t);
    }
    *out = t;
    return ILAB_OK;
oom:
    tl_tokenizer_free(&t);
    snprintf(err, cap, "tokenizer %s: out of memory", label);
    return ILAB_OUT_OF_MEMORY;
}

ilab_status tl_tokenizer_load(const void *bytes, size_t size, const char *label,
                              int expected_vocab, const char *model_label,
                              tl_tokenizer *out, char *err, size_t cap)
{
    const unsigned char *p = bytes, *end = p + size;
    if (size < 4) {
        snprintf(err, cap, "tokenizer %s: file is %zu bytes, too short for the max_token_length field",
                 label, size);
        return ILAB_INVALID_ARGUMENT;
    }
    int32_t max_len;
    memcpy(&max_len, p, 4);
    p += 4;
    if (max_len <= 0 || max_len > 1 << 16) {
        snprintf(err, cap, "tokenizer %s: field max_token_length is %d; expected 1..65536",
                 label, (int)max_len);
        return ILAB_INVALID_ARGUMENT;
    }
    /* First pass: count and check the entries, so a short file is an error
     * naming the entry rather than a read past the end. */
    int count = 0;
    for (const unsigned char *q = p; q < end; count++) {
        if (end - q < 8) {
            snprintf(err, cap, "tokenizer %s: entry %d is truncated (%zu bytes left, a score and "
                     "a length need 8)", label, count, (size_t)(end - q));
            return ILAB_INVALID_ARGUMENT;
        }
        int32_t len;
        memcpy(&len, q + 4, 4);
        if (len < 0 || len > max_len) {
            snprintf(err, cap, "tokenizer %s: entry %d has length %d, outside 0..max_token_length (%d)",
                     label, count, (int)len, (int)max_len);
            return ILAB_INVALID_ARGUMENT;
        }
        if (end - (q + 8) < len) {
            snprintf(err, cap, "tokenizer %s: entry %d is truncated (length field says %d bytes, "
                     "%zu left)", label, count, (int)len, (size_t)(end - q - 8));
            return ILAB_INVALID_ARGUMENT;
        }
        q += 8 + len;
    }
    if (count != expected_vocab) {
        snprintf(err, cap, "tokenizer %s has %d entries but model %s header field vocab_size is %d",
                 label, count, model_label, expected_vocab);
        return ILAB_INVALID_ARGUMENT;
    }
    if (count < 3) {
        snprintf(err, cap, "tokenizer %s: %d entries; at least <unk>, BOS and EOS are needed",
                 label, count);
        return ILAB_INVALID_ARGUMENT;
    }
    ilab_status st = tl_tokenizer_from_vocab(count, NULL, NULL, NULL, 1, 2, 0, label, out, err, cap);
    if (st != ILAB_OK)
        return st;
    out->max_token_length = max_len;
    for (int i = 0; i < count; i++) {
        int32_t len;
        memcpy(&out->scores[i], p, 4);
        memcpy(&len, p + 4, 4);
        st = set_piece(out, i, (const char *)p + 8, len);
        if (st != ILAB_OK) {
            tl_tokenizer_free(out);
            snprintf(err, cap, "tokenizer %s: out of memory", label);
            return st;
        }
        p += 8 + len;
    }
    finish(out);
    return ILAB_OK;
}

ilab_status tl_tokenizer_load_file(const char *path, int expected_vocab,
                                   const char *model_label, tl_tokenizer *out,
                                   char *err, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, cap, "tokenizer %s: cannot open: %s", path, strerror(errno));
        return ILAB_IO;
    }
    size_t size = 0, alloc = 1 << 16;
    unsigned char *buf = malloc(alloc);
    for (;;) {
        if (!buf) {
            fclose(f);
            snprintf(err, cap, "tokenizer %s: out of memory", path);
            return ILAB_OUT_OF_MEMORY;
        }
        size += fread(buf + size, 1, alloc - size, f);
        if (size < alloc)
            break;
        alloc *= 2;
        unsigned char *nb = realloc(buf, alloc);
        if (!nb)
            free(buf);
        buf = nb;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        snprintf(err, cap, "tokenizer %s: read error", path);
        return ILAB_IO;
    }
    ilab_status st = tl_tokenizer_load(buf, size, path, expected_vocab, model_label, out, err, cap);
    free(buf);
    return st;
}

/* Bytes in the UTF-8 sequence that starts with `c`, or 1 for a stray byte. */
static int utf8_len(unsigned char c)
{
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) return 2;
    if ((c & 0xF0) == 0xE0) return 3;
    if ((c & 0xF8) == 0xF0) return 4;
    return 1;
}

/* One working symbol of the merge loop: a run of text bytes with its id. */
typedef struct symbol {
    int start, len; /* into the prefixed text; len only grows */
    int id;
    int prev, next; /* linked list over live symbols; -1 at the ends */
} symbol;

/* A candidate merge of two adjacent symbols, as it was when pushed. */
typedef struct candidate {
    float score;
    int left, right;
    int left_len, right_len; /* stale when either symbol has grown since */
    int id;
} candidate;

/* Max-heap order: higher score first, then the leftmost pair, as in
 * SentencePiece's BPE (and llama2.c's linear scan). */
static int before(const candidate *a, const candidate *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(candidate *h, int *n, candidate c)
{
    int i = (*n)++;
    while (i > 0 && before(&c, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = c;
}

static candidate heap_pop(candidate *h, int *n)
{
    candidate top = h[0], last = h[--(*n)];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && before(&h[c + 1], &h[c]))
            c++;
        if (!before(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0)
        h[i] = last;
    return top;
}

/* Push the merge of symbol i with its successor, when that is a piece. */
static void push_pair(const tl_tokenizer *t, const char *s, const symbol *sym, int i,
                      candidate *heap, int *n_heap)
{
    if (i < 0 || sym[i].next < 0)
        return;
    int j = sym[i].next;
    int len = sym[i].len + sym[j].len;
    if (len > t->max_token_length)
        return;
    int id = lookup(t, s + sym[i].start, len);
    if (id >= 0)
        heap_push(heap, n_heap, (candidate){t->scores[id], i, j, sym[i].len, sym[j].len, id});
}

ilab_status tl_tokenizer_encode(const tl_tokenizer *t, const char *text, size_t len,
                                int add_bos, int add_eos, int32_t *ids, size_t cap,
                                size_t *n)
{
    size_t count = 0;
#define EMIT(v) do { if (count < cap) ids[count] = (v); count++; } while (0)
    if (add_bos)
        EMIT(t->bos_id);
    if (len > 0) {
        if (len > (size_t)1 << 30)
            return ILAB_OUT_OF_MEMORY;
        /* The dummy prefix: SentencePiece sees "▁" + text, stored here as " ". */
        size_t n_bytes = len + 1;
        char *s = malloc(n_bytes);
        symbol *sym = malloc(n_bytes * sizeof *sym);
        /* Each merge pushes at most two candidates, on top of the initial ones. */
        candidate *heap = malloc(3 * n_bytes * sizeof *heap);
        if (!s || !sym || !heap) {
            free(s); free(sym); free(heap);
            return ILAB_OUT_OF_MEMORY;
        }
        s[0] = ' ';
        memcpy(s + 1, text, len);

        /* Initial symbols: whole code points when the vocabulary has them, else
         * one symbol per byte (byte fallback happens at the end). */
        int n_sym = 0;
        for (size_t i = 0; i < n_bytes;) {
            int cl = utf8_len((unsigned char)s[i]);
            if ((size_t)cl > n_bytes - i)
                cl = 1;
            for (int k = 1; k < cl; k++)
                if (((unsigned char)s[i + (size_t)k] & 0xC0) != 0x80)
                    cl = 1;
            int id = lookup(t, s + i, cl);
            if (id >= 0) {
                sym[n_sym] = (symbol){(int)i, cl, id, n_sym - 1, n_sym + 1};
                n_sym++;
            } else {
                for (int k = 0; k < cl; k++) {
                    sym[n_sym] = (symbol){(int)i + k, 1, -1, n_sym - 1, n_sym + 1};
                    n_sym++;
                }
            }
            i += (size_t)cl;
        }
        sym[n_sym - 1].next = -1;
        int n_heap = 0;
        for (int i = 0; i < n_sym; i++)
            push_pair(t, s, sym, i, heap, &n_heap);

        /* Merge the best-scoring adjacent pair until none is in the vocabulary. */
        while (n_heap > 0) {
            candidate c = heap_pop(heap, &n_heap);
            symbol *l = &sym[c.left], *r = &sym[c.right];
            if (l->len != c.left_len || l->next != c.right || r->len != c.right_len)
                continue; /* one side changed since this was pushed */
            l->len += r->len;
            l->id = c.id;
            l->next = r->next;
            if (r->next >= 0)
                sym[r->next].prev = c.left;
            r->len = -1; /* dead */
            push_pair(t, s, sym, l->prev, heap, &n_heap);
            push_pair(t, s, sym, c.left, heap, &n_heap);
        }
        for (int i = 0; i >= 0; i = sym[i].next) {
            if (sym[i].id >= 0) {
                EMIT(sym[i].id);
                continue;
            }
            for (int k = 0; k < sym[i].len; k++) {
                int b = t->byte_id[(unsigned char)s[sym[i].start + k]];
                EMIT(b >= 0 ? b : t->unk_id);
            }
        }
        free(s); free(sym); free(heap);
    }
    if (add_eos)
        EMIT(t->eos_id);
#undef EMIT
    *n = count;
    return ILAB_OK;
}

static const char byte_chars[256] = {
#define B4(n) (char)(n), (char)(n + 1), (char)(n + 2), (char)(n + 3)
#define B16(n) B4(n), B4(n + 4), B4(n + 8), B4(n + 12)
    B16(0), B16(16), B16(32), B16(48), B16(64), B16(80), B16(96), B16(112),
    B16(128), B16(144), B16(160), B16(176), B16(192), B16(208), B16(224), B16(240),
#undef B16
#undef B4
};

void tl_tokenizer_piece(const tl_tokenizer *t, int32_t prev, int32_t token,
                        const char **bytes, size_t *len)
{
    if (token == t->bos_id || token == t->eos_id) {
        *bytes = "";
        *len = 0;
        return;
    }
    const char *p = t->pieces[token];
    size_t n = (size_t)t->piece_len[token];
    int b = parse_byte_piece(p, (int)n);
    if (b >= 0 && t->byte_id[b] == token) {
        *bytes = &byte_chars[b];
        *len = 1;
        return;
    }
    /* The dummy prefix the encoder added is not part of the text. */
    if ((prev < 0 || prev == t->bos_id) && n > 0 && p[0] == ' ') {
        p++;
        n--;
    }
    *bytes = p;
    *len = n;
}
