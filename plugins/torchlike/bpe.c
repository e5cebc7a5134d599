#include "bpe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
 * the other 68 take the code points 256.. in byte order. */
static unsigned byte_cp(unsigned b)
{
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
        return b;
    unsigned n = 0;
    for (unsigned c = 0; c < b; c++)
        if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF)))
            n++;
    return 256 + n;
}

int tl_bpe_byte_char(unsigned b, char out[2])
{
    unsigned cp = byte_cp(b);
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* The byte a mapped code point stands for, or -1. */
static int cp_byte(unsigned cp)
{
    static int table[324];
    static int ready;
    if (!ready) { /* idempotent: racing threads write the same values */
        for (unsigned i = 0; i < 324; i++)
            table[i] = -1;
        for (unsigned b = 0; b < 256; b++)
            table[byte_cp(b)] = (int)b;
        ready = 1;
    }
    return cp < 324 ? table[cp] : -1;
}

size_t tl_bpe_decode(const char *s, size_t len, char *out)
{
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            int b = cp_byte(c);
            out[n++] = b >= 0 ? (char)b : (char)c;
            i++;
            continue;
        }
        if ((c & 0xE0) == 0xC0 && i + 1 < len) {
            unsigned cp = (unsigned)(c & 0x1F) << 6 | ((unsigned char)s[i + 1] & 0x3F);
            int b = cp_byte(cp);
            if (b >= 0) {
                out[n++] = (char)b;
                i += 2;
                continue;
            }
        }
        out[n++] = (char)c; /* not a mapped character: copied byte by byte */
        i++;
    }
    return n;
}

void tl_bpe_free(tl_bpe *b)
{
    tl_str_map_free(&b->ids);
    tl_pair_map_free(&b->merges);
    for (int i = 0; i < b->n_extra; i++)
        free(b->extra[i]);
    free(b->extra);
    tl_pretok_free(b->pre);
    memset(b, 0, sizeof *b);
}

/* The id of these bytes; merge parts that are not tokens get ids past the
 * vocabulary. -1 when out of memory. */
static int32_t intern(tl_bpe *b, const char *s, int len, int *cap_extra)
{
    int32_t id = tl_str_map_get(&b->ids, s, len);
    if (id >= 0)
        return id;
    if (b->n_extra == *cap_extra) {
        int nc = *cap_extra ? 2 * *cap_extra : 16;
        char **ne = realloc(b->extra, (size_t)nc * sizeof *ne);
        if (!ne)
            return -1;
        b->extra = ne;
        *cap_extra = nc;
    }
    char *copy = malloc((size_t)len + 1);
    if (!copy)
        return -1;
    memcpy(copy, s, (size_t)len);
    copy[len] = '\0';
    b->extra[b->n_extra] = copy;
    id = b->n_vocab + b->n_extra++;
    if (tl_str_map_put(&b->ids, copy, len, id) != 0)
        return -1;
    return id;
}

ilab_status tl_bpe_init(tl_bpe *b, int n_vocab, const char *const *text, const int *text_len,
                        const char *const *merges, const int *merge_len, int n_merges,
                        tl_pretok *pre, const char *label, char *err, size_t cap)
{
    memset(b, 0, sizeof *b);
    b->n_vocab = n_vocab;
    b->text = text;
    b->text_len = text_len;
    b->pre = pre;
    b->ignore_merges = tl_pretok_ignore_merges(pre);
    int cap_extra = 0;
    char *buf = NULL;
    if (tl_str_map_init(&b->ids, (size_t)n_vocab) != 0 ||
        tl_pair_map_init(&b->merges, (size_t)n_merges) != 0)
        goto oom;
    for (int i = 0; i < n_vocab; i++)
        if (tl_str_map_put(&b->ids, text[i], text_len[i], i) != 0)
            goto oom;
    for (int r = 0; r < n_merges; r++) {
        /* "left right", split at the first space after the first byte (a
         * part may be a mapped space itself, never a plain one). */
        const char *m = merges[r];
        int len = merge_len[r], sp = -1;
        for (int k = 1; k < len; k++)
            if (m[k] == ' ') {
                sp = k;
                break;
            }
        if (sp < 0) {
            snprintf(err, cap, "GGUF %s: tokenizer.ggml.merges[%d] \"%.*s\" has no space between "
                     "its two parts", label, r, len > 64 ? 64 : len, m);
            tl_bpe_free(b);
            return ILAB_INVALID_ARGUMENT;
        }
        int32_t l = intern(b, m, sp, &cap_extra);
        int32_t rt = intern(b, m + sp + 1, len - sp - 1, &cap_extra);
        char *nb = realloc(buf, (size_t)len);
        if (!nb || l < 0 || rt < 0)
            goto oom;
        buf = nb;
        memcpy(buf, m, (size_t)sp);
        memcpy(buf + sp, m + sp + 1, (size_t)(len - sp - 1));
        int32_t merged = intern(b, buf, len - 1, &cap_extra);
        if (merged < 0)
            goto oom;
        tl_pair_map_put(&b->merges, l, rt, r, merged);
    }
    free(buf);
    for (unsigned c = 0; c < 256; c++) {
        char ch[2];
        int n = tl_bpe_byte_char(c, ch);
        b->byte_sym[c] = tl_str_map_get(&b->ids, ch, n);
    }
    return ILAB_OK;
oom:
    free(buf);
    tl_bpe_free(b);
    snprintf(err, cap, "GGUF %s: out of memory for the BPE merges", label);
    return ILAB_OUT_OF_MEMORY;
}

int tl_ids_push(tl_ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        size_t nc = ids->cap ? 2 * ids->cap : 64;
        int32_t *nv = realloc(ids->v, nc * sizeof *nv);
        if (!nv)
            return -1;
        ids->v = nv;
        ids->cap = nc;
    }
    ids->v[ids->n++] = id;
    return 0;
}

typedef struct sym {
    int32_t id;     /* -1: a character with no id (never merges) */
    int start, len; /* bytes of the word; len 0 = merged away */
    int prev, next;
} sym;

typedef struct cand {
    int32_t rank;
    int left, right;
    int32_t left_id, right_id, merged;
} cand;

/* Min-heap: lowest rank first, then the leftmost pair (llama.cpp's order). */
static int before(const cand *a, const cand *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(cand *h, int *n, cand c)
{
    int i = (*n)++;
    while (i > 0 && before(&c, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = c;
}

static cand heap_pop(cand *h, int *n)
{
    cand top = h[0], last = h[--(*n)];
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

static void push_pair(const tl_bpe *b, const sym *s, int i, cand *heap, int *n_heap)
{
    if (i < 0 || s[i].next < 0 || s[i].id < 0 || s[s[i].next].id < 0)
        return;
    int j = s[i].next;
    int32_t merged;
    int32_t rank = tl_pair_map_get(&b->merges, s[i].id, s[j].id, &merged);
    if (rank >= 0)
        heap_push(heap, n_heap, (cand){rank, i, j, s[i].id, s[j].id, merged});
}

/* The mapped characters of word bytes [start, start + len) into out (2 per byte). */
static int map_bytes(const char *w, int start, int len, char *out)
{
    int n = 0;
    for (int k = 0; k < len; k++)
        n += tl_bpe_byte_char((unsigned char)w[start + k], out + n);
    return n;
}

static ilab_status encode_word(const tl_bpe *b, const char *w, int len, sym *s, cand *heap,
                               char *mapped, tl_ids *out)
{
    if (b->ignore_merges) {
        int n = map_bytes(w, 0, len, mapped);
        int32_t id = tl_str_map_get(&b->ids, mapped, n);
        if (id >= 0 && id < b->n_vocab)
            return tl_ids_push(out, id) ? ILAB_OUT_OF_MEMORY : ILAB_OK;
    }
    for (int i = 0; i < len; i++)
        s[i] = (sym){b->byte_sym[(unsigned char)w[i]], i, 1, i - 1, i + 1 < len ? i + 1 : -1};
    int n_heap = 0;
    for (int i = 0; i + 1 < len; i++)
        push_pair(b, s, i, heap, &n_heap);
    while (n_heap > 0) {
        cand c = heap_pop(heap, &n_heap);
        sym *l = &s[c.left], *r = &s[c.right];
        if (l->len == 0 || r->len == 0 || l->next != c.right || l->id != c.left_id ||
            r->id != c.right_id)
            continue; /* stale: a side has changed since it was pushed */
        l->id = c.merged;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            s[r->next].prev = c.left;
        push_pair(b, s, l->prev, heap, &n_heap);
        push_pair(b, s, c.left, heap, &n_heap);
    }
    for (int i = 0; i >= 0 && len > 0; i = s[i].next) {
        if (s[i].id >= 0 && s[i].id < b->n_vocab) {
            if (tl_ids_push(out, s[i].id))
                return ILAB_OUT_OF_MEMORY;
            continue;
        }
        /* Not a token: each byte of its mapped characters that is a token
         * on its own, the rest dropped (as llama.cpp does). */
        int n = map_bytes(w, s[i].start, s[i].len, mapped);
        for (int k = 0; k < n; k++) {
            int32_t id = tl_str_map_get(&b->ids, mapped + k, 1);
            if (id >= 0 && id < b->n_vocab && tl_ids_push(out, id))
                return ILAB_OUT_OF_MEMORY;
        }
    }
    return ILAB_OK;
}

/* Text as llama.cpp reads it before splitting: each code point decoded
 * leniently (a lead byte's length, continuation bytes checked, overlong forms
 * and surrogates accepted) and written back in shortest form; a byte that
 * starts no sequence becomes U+FFFD. `clean` gets the bytes to merge,
 * `match` the same with surrogates as U+E000 (same length, also neither
 * letter, number nor space) so that the regex engine sees valid UTF-8. Both
 * need 3 * len bytes. Returns the length. */
static size_t clean_utf8(const char *text, size_t len, char *clean, char *match)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        unsigned c = s[i], cp = 0;
        size_t need = c < 0x80 ? 1 : !(c & 0x40) ? 0 : !(c & 0x20) ? 2 : !(c & 0x10) ? 3
                    : !(c & 0x08) ? 4 : 0;
        int ok = need > 0 && need <= len - i;
        for (size_t k = 1; ok && k < need; k++)
            ok = (s[i + k] & 0xC0) == 0x80;
        if (ok) {
            cp = need == 1 ? c : need == 2 ? c & 0x1F : need == 3 ? c & 0x0F : c & 0x07;
            for (size_t k = 1; k < need; k++)
                cp = cp << 6 | (s[i + k] & 0x3F);
            i += need;
        } else {
            i++;
        }
        if (!ok || cp > 0x10FFFF)
            cp = 0xFFFD;
        unsigned char u[4];
        size_t m;
        if (cp < 0x80) {
            u[0] = (unsigned char)cp;
            m = 1;
        } else if (cp < 0x800) {
            u[0] = (unsigned char)(0xC0 | cp >> 6);
            u[1] = (unsigned char)(0x80 | (cp & 0x3F));
            m = 2;
        } else if (cp < 0x10000) {
            u[0] = (unsigned char)(0xE0 | cp >> 12);
            u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
            u[2] = (unsigned char)(0x80 | (cp & 0x3F));
            m = 3;
        } else {
            u[0] = (unsigned char)(0xF0 | cp >> 18);
            u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
            u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
            u[3] = (unsigned char)(0x80 | (cp & 0x3F));
            m = 4;
        }
        memcpy(clean + n, u, m);
        if (cp >= 0xD800 && cp <= 0xDFFF)
            memcpy(match + n, "\xEE\x80\x80", 3);
        else
            memcpy(match + n, u, m);
        n += m;
    }
    return n;
}

ilab_status tl_bpe_encode(const tl_bpe *b, const char *raw, size_t raw_len, tl_ids *out)
{
    if (raw_len == 0)
        return ILAB_OK;
    if (raw_len > (size_t)1 << 28)
        return ILAB_OUT_OF_MEMORY;
    char *text = malloc(3 * raw_len), *match = malloc(3 * raw_len);
    if (!text || !match) {
        free(text);
        free(match);
        return ILAB_OUT_OF_MEMORY;
    }
    size_t len = clean_utf8(raw, raw_len, text, match);
    size_t *ends = NULL, n_words = 0;
    char err[256];
    ilab_status st = tl_pretok_split(b->pre, match, len, &ends, &n_words, err, sizeof err);
    free(match);
    if (st != ILAB_OK) {
        free(text);
        return st;
    }
    size_t longest = 0, start = 0;
    for (size_t k = 0; k < n_words; k++) {
        if (ends[k] - start > longest)
            longest = ends[k] - start;
        start = ends[k];
    }
    sym *s = malloc((longest + 1) * sizeof *s);
    cand *heap = malloc((3 * longest + 1) * sizeof *heap);
    char *mapped = malloc(2 * longest + 1);
    if (!s || !heap || !mapped)
        st = ILAB_OUT_OF_MEMORY;
    start = 0;
    for (size_t k = 0; st == ILAB_OK && k < n_words; k++) {
        st = encode_word(b, text + start, (int)(ends[k] - start), s, heap, mapped, out);
        start = ends[k];
    }
    free(s);
    free(heap);
    free(mapped);
    free(ends);
    free(text);
    return st;
}
