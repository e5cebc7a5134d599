/* The fake engine's model and sampler (fake_model.h). */
#include "fake_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Word tokens after the 256 bytes and BOS/EOS. Two are whole non-ASCII
 * code points, so streamed text carries multi-byte UTF-8. */
static const char *const words[] = {
    " the", " and", " of", " to", " a", "ing", "ed", "er", " in", " was",
    " Elizabeth", " Darcy", " said", ".", ",", "\n", " caf\xc3\xa9", " \xe6\x97\xa5\xe6\x9c\xac",
};
#define N_WORDS (sizeof words / sizeof words[0])
#define FIRST_WORD 258

int32_t fm_vocab_size(void)
{
    return FIRST_WORD + (int32_t)N_WORDS;
}

size_t fm_tokenize(const char *text, size_t len, bool add_bos, int32_t *out)
{
    size_t n = 0, i = 0;
    if (add_bos)
        out[n++] = FM_BOS;
    while (i < len) {
        int32_t best = -1;
        size_t best_len = 1;
        for (size_t w = 0; w < N_WORDS; w++) {
            size_t wl = strlen(words[w]);
            if (wl > best_len && wl <= len - i && !memcmp(text + i, words[w], wl)) {
                best = FIRST_WORD + (int32_t)w;
                best_len = wl;
            }
        }
        out[n++] = best >= 0 ? best : (unsigned char)text[i];
        i += best_len;
    }
    return n;
}

const char *fm_piece(int32_t id, size_t *len)
{
    static char bytes[256][1];
    static int ready;
    if (!ready) {
        for (int b = 0; b < 256; b++)
            bytes[b][0] = (char)b;
        ready = 1;
    }
    if (id >= 0 && id < 256) {
        *len = 1;
        return bytes[id];
    }
    if (id >= FIRST_WORD && id < fm_vocab_size()) {
        *len = strlen(words[id - FIRST_WORD]);
        return words[id - FIRST_WORD];
    }
    *len = 0;
    return "";
}

/* Bytes of a well-formed UTF-8 sequence starting at s (0 = invalid). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80)
        return 1;
    size_t need = s[0] >= 0xF0 && s[0] <= 0xF4 ? 4
                  : s[0] >= 0xE0 && s[0] <= 0xEF ? 3
                  : s[0] >= 0xC2 && s[0] < 0xE0  ? 2
                                                 : 0; /* 0xF5..0xFF begin nothing */
    if (!need || need > n)
        return 0;
    for (size_t k = 1; k < need; k++)
        if ((s[k] & 0xC0) != 0x80)
            return 0;
    if (need == 3 && s[0] == 0xE0 && s[1] < 0xA0)
        return 0;
    if (need == 3 && s[0] == 0xED && s[1] >= 0xA0)
        return 0;
    if (need == 4 && ((s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] >= 0x90)))
        return 0;
    return need;
}

char *fm_decode(const int32_t *ids, size_t n, size_t *out_len)
{
    size_t raw_len = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l;
        fm_piece(ids[i], &l);
        raw_len += l;
    }
    unsigned char *raw = malloc(raw_len + 1);
    char *out = malloc(raw_len * 3 + 1);
    size_t at = 0, o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l;
        const char *p = fm_piece(ids[i], &l);
        memcpy(raw + at, p, l);
        at += l;
    }
    for (size_t i = 0; i < raw_len;) {
        size_t k = utf8_len(raw + i, raw_len - i);
        if (k) {
            memcpy(out + o, raw + i, k);
            o += k;
            i += k;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    out[o] = '\0';
    free(raw);
    *out_len = o;
    return out;
}

size_t fm_complete_utf8(const char *s, size_t len)
{
    size_t lead = len;
    while (lead > 0 && len - lead < 4 && ((unsigned char)s[lead - 1] & 0xC0) == 0x80)
        lead--;
    if (lead == 0)
        return len;
    unsigned char c = (unsigned char)s[lead - 1];
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return c >= 0xC0 && len - (lead - 1) < need ? lead - 1 : len;
}

/* --- the model ------------------------------------------------------------- */

struct fm_sampler {
    fm_params p;
    int32_t *ctx;
    size_t n, cap, n_prompt;
    uint64_t rng;
};

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Generation stays in printable ASCII, newline and the word tokens. */
static bool allowed(int32_t t)
{
    if (t == FM_EOS)
        return true;
    if (t < 256)
        return t >= 32 && t < 127;
    return t >= FIRST_WORD;
}

/* Raw logits: a hash of the last two tokens and the candidate. */
static void logits(const fm_sampler *s, float *l)
{
    int32_t a = s->n >= 2 ? s->ctx[s->n - 2] : -1, b = s->n >= 1 ? s->ctx[s->n - 1] : -1;
    for (int32_t t = 0; t < fm_vocab_size(); t++) {
        if (!allowed(t)) {
            l[t] = -INFINITY;
            continue;
        }
        uint64_t h = mix(((uint64_t)(uint32_t)a << 40) ^ ((uint64_t)(uint32_t)b << 20) ^ (uint64_t)t);
        float u = (float)(h >> 40) / (float)(1ull << 24);
        l[t] = 6.0f * u - 3.0f + (t >= FIRST_WORD ? 1.0f : 0.0f) - (t == FM_EOS ? 1.0f : 0.0f);
    }
}

fm_sampler *fm_sampler_create(const fm_params *p, const int32_t *prompt, size_t n)
{
    fm_sampler *s = calloc(1, sizeof *s);
    s->p = *p;
    s->cap = n + 64;
    s->ctx = malloc(s->cap * sizeof *s->ctx);
    memcpy(s->ctx, prompt, n * sizeof *prompt);
    s->n = s->n_prompt = n;
    s->rng = mix(p->seed);
    return s;
}

void fm_sampler_destroy(fm_sampler *s)
{
    if (!s)
        return;
    free(s->ctx);
    free(s);
}

typedef struct cand {
    int32_t id;
    float v;
} cand;

static int by_v_desc(const void *x, const void *y)
{
    const cand *a = x, *b = y;
    if (a->v != b->v)
        return a->v < b->v ? 1 : -1;
    return a->id - b->id;
}

/* Penalties (repetition over the context, presence/frequency over the output). */
static void penalise(const fm_sampler *s, float *l)
{
    int32_t v = fm_vocab_size();
    int *count = calloc((size_t)v, sizeof *count);
    bool *seen = calloc((size_t)v, 1);
    for (size_t i = 0; i < s->n; i++) {
        seen[s->ctx[i]] = true;
        if (i >= s->n_prompt)
            count[s->ctx[i]]++;
    }
    for (int32_t t = 0; t < v; t++) {
        if (!isfinite(l[t]))
            continue;
        if (seen[t] && s->p.repetition_penalty != 1.0f)
            l[t] = l[t] > 0 ? l[t] / s->p.repetition_penalty : l[t] * s->p.repetition_penalty;
        l[t] -= (count[t] > 0 ? s->p.presence_penalty : 0.0f) + s->p.frequency_penalty * (float)count[t];
    }
    free(count);
    free(seen);
}

static int32_t draw(fm_sampler *s, cand *c, int32_t n)
{
    const fm_params *p = &s->p;
    if (p->temperature <= 0)
        return c[0].id; /* sorted: the argmax, lower id on ties */
    if (p->top_k > 0 && p->top_k < n)
        n = p->top_k;
    double mx = c[0].v / p->temperature, sum = 0;
    double *pr = malloc((size_t)n * sizeof *pr);
    for (int32_t i = 0; i < n; i++)
        sum += pr[i] = exp(c[i].v / p->temperature - mx);
    int32_t keep = n;
    double cum = 0;
    for (int32_t i = 0; i < n; i++) {
        cum += pr[i] / sum;
        if (cum >= p->top_p) {
            keep = i + 1;
            break;
        }
    }
    double total = 0;
    for (int32_t i = 0; i < keep; i++) {
        if (pr[i] < p->min_p * pr[0])
            pr[i] = 0;
        total += pr[i];
    }
    s->rng = mix(s->rng);
    double u = (double)(s->rng >> 11) / (double)(1ull << 53) * total, acc = 0;
    int32_t pick = c[0].id;
    for (int32_t i = 0; i < keep; i++) {
        acc += pr[i];
        if (pr[i] > 0 && u < acc) {
            pick = c[i].id;
            break;
        }
    }
    free(pr);
    return pick;
}

void fm_sample(fm_sampler *s, int k, fm_step *out)
{
    int32_t v = fm_vocab_size();
    float *raw = malloc((size_t)v * sizeof *raw), *l = malloc((size_t)v * sizeof *l);
    cand *c = malloc((size_t)v * sizeof *c);
    logits(s, raw);
    memcpy(l, raw, (size_t)v * sizeof *l);
    penalise(s, l);
    int32_t n = 0;
    for (int32_t t = 0; t < v; t++)
        if (isfinite(l[t]))
            c[n++] = (cand){t, l[t]};
    qsort(c, (size_t)n, sizeof *c, by_v_desc);
    int32_t tok = draw(s, c, n);
    /* logprobs of the raw logits, as vLLM returns by default */
    double mx = -INFINITY, sum = 0;
    for (int32_t t = 0; t < v; t++)
        if (raw[t] > mx)
            mx = raw[t];
    for (int32_t t = 0; t < v; t++)
        if (isfinite(raw[t]))
            sum += exp(raw[t] - mx);
    double lse = mx + log(sum);
    n = 0;
    for (int32_t t = 0; t < v; t++)
        if (isfinite(raw[t]))
            c[n++] = (cand){t, raw[t]};
    qsort(c, (size_t)n, sizeof *c, by_v_desc);
    memset(out, 0, sizeof *out);
    out->token = tok;
    out->logprob = (float)(raw[tok] - lse);
    for (int i = 0; i < k && i < FM_TOPK_MAX && i < n; i++) {
        out->top_id[i] = c[i].id;
        out->top_lp[i] = (float)(c[i].v - lse);
    }
    if (s->n == s->cap) {
        s->cap *= 2;
        s->ctx = realloc(s->ctx, s->cap * sizeof *s->ctx);
    }
    s->ctx[s->n++] = tok;
    free(raw);
    free(l);
    free(c);
}
