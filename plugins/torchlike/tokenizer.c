#include "tokenizer.h"

#include "bpe.h"

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
    if (t->bpe)
        tl_bpe_free(t->bpe);
    free(t->bpe);
    if (t->raw) {
        for (int i = 0; i < t->vocab_size; i++)
            free(t->raw[i]);
    }
    free(t->raw);
    free(t->raw_len);
    free(t->types);
    free(t->rstrip);
    free(t->special);
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

static const char SPACE_MARK[] = "\xe2\x96\x81"; /* U+2581, SentencePiece's space */

/* `p` with each space spelled "▁", NUL-terminated; NULL when out of memory. */
static char *spell_spaces(const char *p, int n, int *out_len)
{
    int spaces = 0;
    for (int i = 0; i < n; i++)
        spaces += p[i] == ' ';
    char *s = malloc((size_t)n + 2 * (size_t)spaces + 1);
    if (!s)
        return NULL;
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] == ' ') {
            memcpy(s + k, SPACE_MARK, 3);
            k += 3;
        } else {
            s[k++] = p[i];
        }
    }
    s[k] = '\0';
    *out_len = k;
    return s;
}

ilab_status tl_tokenizer_spm_spelling(tl_tokenizer *t, char **raw, int *raw_len)
{
    if (!raw) {
        raw = calloc((size_t)t->vocab_size + 1, sizeof *raw);
        raw_len = calloc((size_t)t->vocab_size + 1, sizeof *raw_len);
        for (int i = 0; raw && raw_len && i < t->vocab_size; i++) {
            raw[i] = spell_spaces(t->pieces[i], t->piece_len[i], &raw_len[i]);
            if (!raw[i]) {
                for (int k = 0; k < i; k++)
                    free(raw[k]);
                free(raw);
                raw = NULL;
            }
        }
        if (!raw || !raw_len) {
            free(raw);
            free(raw_len);
            return ILAB_OUT_OF_MEMORY;
        }
    }
    if (t->raw) {
        for (int i = 0; i < t->vocab_size; i++)
            free(t->raw[i]);
    }
    free(t->raw);
    free(t->raw_len);
    t->raw = raw;
    t->raw_len = raw_len;
    t->max_raw_len = 0;
    for (int i = 0; i < t->vocab_size; i++) {
        t->sorted[i] = (tl_piece_index){raw[i], raw_len[i], i};
        if (raw_len[i] > t->max_raw_len)
            t->max_raw_len = raw_len[i];
    }
    qsort(t->sorted, (size_t)t->vocab_size, sizeof *t->sorted, cmp_piece);
    return ILAB_OK;
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
    t.add_bos = 1; /* SentencePiece's defaults; GGUF metadata may change them */
    t.add_space_prefix = 1;
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
    if (tl_tokenizer_spm_spelling(out, NULL, NULL) != ILAB_OK) {
        tl_tokenizer_free(out);
        snprintf(err, cap, "tokenizer %s: out of memory", label);
        return ILAB_OUT_OF_MEMORY;
    }
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

/* Bytes of the UTF-8 sequence that starts with `c`, from its high bits
 * alone (continuation bytes are not checked, as in llama.cpp). */
static int lead_len(unsigned char c)
{
    static const int len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len[c >> 4];
}

/* One working symbol of the merge loop: a run of text bytes with its id. */
typedef struct symbol {
    int start, len; /* into the prefixed text; len only grows */
    int id;         /* -1: not a piece (byte fallback at the end) */
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
    if (len > t->max_raw_len)
        return;
    int id = lookup(t, s + sym[i].start, len);
    if (id >= 0)
        heap_push(heap, n_heap, (candidate){t->scores[id], i, j, sym[i].len, sym[j].len, id});
}

/* SentencePiece BPE of one run of text (no special tokens in it), with the
 * dummy-prefix space when `prefix`. As llama.cpp does, every space is
 * spelled "▁" before the text is split into characters, so a literal "▁"
 * in the text is a space, and an invalid UTF-8 lead byte before a space
 * takes bytes of its "▁" into its character. */
static ilab_status spm_encode(const tl_tokenizer *t, const char *text, size_t len, int prefix,
                              tl_ids *out)
{
    if (len == 0)
        return ILAB_OK;
    if (len > (size_t)1 << 28)
        return ILAB_OUT_OF_MEMORY;
    size_t n_bytes = prefix ? 3 : 0;
    for (size_t i = 0; i < len; i++)
        n_bytes += text[i] == ' ' ? 3 : 1;
    char *s = malloc(n_bytes);
    symbol *sym = malloc(n_bytes * sizeof *sym);
    /* Each merge pushes at most two candidates, on top of the initial ones. */
    candidate *heap = malloc(3 * n_bytes * sizeof *heap);
    if (!s || !sym || !heap) {
        free(s); free(sym); free(heap);
        return ILAB_OUT_OF_MEMORY;
    }
    size_t k = 0;
    if (prefix) {
        memcpy(s, SPACE_MARK, 3);
        k = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(s + k, SPACE_MARK, 3);
            k += 3;
        } else {
            s[k++] = text[i];
        }
    }

    /* Initial symbols: one per character, its length read from the lead
     * byte; one that is not a piece stays whole (it may still merge) and
     * falls back to its bytes at the end. */
    int n_sym = 0;
    for (size_t i = 0; i < n_bytes;) {
        size_t cl = (size_t)lead_len((unsigned char)s[i]);
        if (cl > n_bytes - i)
            cl = n_bytes - i;
        sym[n_sym] = (symbol){(int)i, (int)cl, lookup(t, s + i, (int)cl), n_sym - 1, n_sym + 1};
        n_sym++;
        i += cl;
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
    ilab_status st = ILAB_OK;
    for (int i = 0; i >= 0 && st == ILAB_OK; i = sym[i].next) {
        if (sym[i].id >= 0) {
            if (tl_ids_push(out, sym[i].id))
                st = ILAB_OUT_OF_MEMORY;
            continue;
        }
        for (int j = 0; j < sym[i].len; j++) {
            int b = t->byte_id[(unsigned char)s[sym[i].start + j]];
            if (tl_ids_push(out, b >= 0 ? b : t->unk_id))
                st = ILAB_OUT_OF_MEMORY;
        }
    }
    free(s); free(sym); free(heap);
    return st;
}

static int cmp_special(const void *a, const void *b, void *ctx);

ilab_status tl_tokenizer_index_special(tl_tokenizer *t)
{
    free(t->special);
    t->special = NULL;
    t->n_special = 0;
    if (!t->types)
        return ILAB_OK;
    int n = 0;
    for (int i = 0; i < t->vocab_size; i++)
        n += t->types[i] == TL_TOKEN_CONTROL || t->types[i] == TL_TOKEN_USER_DEFINED ||
             t->types[i] == TL_TOKEN_UNKNOWN;
    if (n == 0)
        return ILAB_OK;
    t->special = malloc((size_t)n * sizeof *t->special);
    if (!t->special)
        return ILAB_OUT_OF_MEMORY;
    for (int i = 0; i < t->vocab_size; i++)
        if (t->types[i] == TL_TOKEN_CONTROL || t->types[i] == TL_TOKEN_USER_DEFINED ||
            t->types[i] == TL_TOKEN_UNKNOWN)
            t->special[t->n_special++] = i;
    /* Longest first, then by id (insertion sort: a stable order, no qsort_r). */
    for (int i = 1; i < n; i++) {
        int32_t v = t->special[i];
        int j = i;
        while (j > 0 && cmp_special(&v, &t->special[j - 1], t) < 0) {
            t->special[j] = t->special[j - 1];
            j--;
        }
        t->special[j] = v;
    }
    return ILAB_OK;
}

/* The text a special token is matched by: its stored form. */
static const char *special_text(const tl_tokenizer *t, int id, int *len)
{
    if (t->raw) {
        *len = t->raw_len[id];
        return t->raw[id];
    }
    *len = t->piece_len[id];
    return t->pieces[id];
}

static int cmp_special(const void *a, const void *b, void *ctx)
{
    const tl_tokenizer *t = ctx;
    int x = *(const int32_t *)a, y = *(const int32_t *)b, lx, ly;
    special_text(t, x, &lx);
    special_text(t, y, &ly);
    if (lx != ly)
        return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* A run of the text: raw bytes [start, start + len) or one token. */
typedef struct fragment {
    size_t start, len;
    int32_t token; /* -1 for raw text */
} fragment;

typedef struct fragments {
    fragment *v;
    size_t n, cap;
} fragments;

static int frag_insert(fragments *f, size_t at, fragment x)
{
    if (f->n == f->cap) {
        size_t nc = f->cap ? 2 * f->cap : 16;
        fragment *nv = realloc(f->v, nc * sizeof *nv);
        if (!nv)
            return -1;
        f->v = nv;
        f->cap = nc;
    }
    memmove(&f->v[at + 1], &f->v[at], (f->n - at) * sizeof *f->v);
    f->v[at] = x;
    f->n++;
    return 0;
}

static const char *find_bytes(const char *hay, size_t n, const char *needle, size_t m)
{
    if (m == 0 || m > n)
        return NULL;
    for (const char *p = hay; (p = memchr(p, needle[0], n - (size_t)(p - hay) - m + 1)); p++)
        if (memcmp(p, needle, m) == 0)
            return p;
    return NULL;
}

/* C's isspace() in the C locale, which llama.cpp's RSTRIP uses. */
static int is_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* llama.cpp's special-token partition: for each special token, longest
 * first, every raw fragment is split around each of its occurrences. */
static int partition(const tl_tokenizer *t, const char *text, size_t len, int parse_special,
                     fragments *f)
{
    if (frag_insert(f, 0, (fragment){0, len, -1}) != 0)
        return -1;
    for (int k = 0; k < t->n_special; k++) {
        int id = t->special[k], m;
        if (!parse_special && t->types[id] != TL_TOKEN_USER_DEFINED)
            continue;
        const char *st = special_text(t, id, &m);
        for (size_t i = 0; i < f->n; i++) {
            fragment fr = f->v[i];
            if (fr.token >= 0)
                continue;
            const char *hit = find_bytes(text + fr.start, fr.len, st, (size_t)m);
            if (!hit)
                continue;
            size_t at = (size_t)(hit - text), end = fr.start + fr.len;
            /* Replace fr by [left] token [right]; the right part is looked
             * at again on the next iteration. */
            f->v[i] = (fragment){fr.start, at - fr.start, -1};
            size_t pos = i + 1;
            if (f->v[i].len == 0) {
                f->v[i] = (fragment){at, (size_t)m, id};
            } else if (frag_insert(f, pos++, (fragment){at, (size_t)m, id}) != 0) {
                return -1;
            } else {
                i++;
            }
            size_t right = at + (size_t)m;
            if (t->rstrip && t->rstrip[id])
                while (right < end && is_space(text[right]))
                    right++;
            if (right < end && frag_insert(f, pos, (fragment){right, end - right, -1}) != 0)
                return -1;
        }
    }
    return 0;
}

ilab_status tl_tokenizer_encode_ex(const tl_tokenizer *t, const char *text, size_t len,
                                   int add_bos, int add_eos, int parse_special, int32_t *ids,
                                   size_t cap, size_t *n)
{
    tl_ids out = {0};
    fragments f = {0};
    ilab_status st = ILAB_OK;
    if (add_bos && tl_ids_push(&out, t->bos_id))
        st = ILAB_OUT_OF_MEMORY;
    if (st == ILAB_OK && len > 0 && partition(t, text, len, parse_special, &f) != 0)
        st = ILAB_OUT_OF_MEMORY;
    int prev_special = 1; /* SentencePiece: a dummy prefix at the start and after a special */
    for (size_t i = 0; st == ILAB_OK && i < f.n; i++) {
        const fragment *fr = &f.v[i];
        if (fr->token >= 0) {
            if (tl_ids_push(&out, fr->token))
                st = ILAB_OUT_OF_MEMORY;
            prev_special = 1;
        } else if (t->kind == TL_TOKENIZER_BPE) {
            st = tl_bpe_encode(t->bpe, text + fr->start, fr->len, &out);
        } else {
            st = spm_encode(t, text + fr->start, fr->len, prev_special && t->add_space_prefix,
                            &out);
            prev_special = 0;
        }
    }
    if (st == ILAB_OK && add_eos && tl_ids_push(&out, t->eos_id))
        st = ILAB_OUT_OF_MEMORY;
    free(f.v);
    if (st == ILAB_OK) {
        for (size_t i = 0; i < out.n && i < cap; i++)
            ids[i] = out.v[i];
        *n = out.n;
    }
    free(out.v);
    return st;
}

ilab_status tl_tokenizer_encode(const tl_tokenizer *t, const char *text, size_t len,
                                int add_bos, int add_eos, int32_t *ids, size_t cap,
                                size_t *n)
{
    return tl_tokenizer_encode_ex(t, text, len, add_bos, add_eos, 0, ids, cap, n);
}

const char *tl_tokenizer_kind_name(const tl_tokenizer *t)
{
    return t->kind == TL_TOKENIZER_BPE ? "byte-level BPE" : "sentencepiece";
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
    /* As llama.cpp's token_to_piece without `special`: control and
     * unknown-type tokens are no text; in a SentencePiece vocabulary unused
     * ones neither, and user-defined ones are their spelling as it is. The
     * type alone decides: BOS and EOS ids may be defaults naming ordinary
     * tokens (a byte-level BPE file without bos_token_id has BOS 11, Qwen's
     * ","). Only pieces without types (tokenizer.bin) drop BOS and EOS by id. */
    int type = t->types ? t->types[token] : TL_TOKEN_NORMAL;
    int bos_eos = !t->types && (token == t->bos_id || token == t->eos_id);
    if (bos_eos || type == TL_TOKEN_CONTROL || type == TL_TOKEN_UNKNOWN ||
        (t->kind == TL_TOKENIZER_SPM && type == TL_TOKEN_UNUSED)) {
        *bytes = "";
        *len = 0;
        return;
    }
    if (t->kind == TL_TOKENIZER_BPE) { /* pieces hold the decoded bytes */
        *bytes = t->pieces[token];
        *len = (size_t)t->piece_len[token];
        return;
    }
    if (type == TL_TOKEN_USER_DEFINED && t->raw) {
        *bytes = t->raw[token];
        *len = (size_t)t->raw_len[token];
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
    if (t->add_space_prefix && (prev < 0 || prev == t->bos_id) && n > 0 && p[0] == ' ') {
        p++;
        n--;
    }
    *bytes = p;
    *len = n;
}
