/* Random cache programs: generation, text form, shrinking support
 * (cache_program.h). The generator simulates sequence lengths so that it can
 * aim evals at the edges that matter — exactly max_context, one past it,
 * block-sized chunks — but the runner decides outcomes from its own model,
 * so edited programs stay meaningful. */
#include "cache_program.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int32_t below(uint64_t *s, int32_t n)
{
    return n <= 0 ? 0 : (int32_t)(next(s) % (uint64_t)n);
}

/* The generator's picture of the sequences. */
typedef struct sim {
    const cprog_shape *shape;
    bool live[16];
    int32_t len[16];
    int last_alone;      /* the slot of the last one-item eval, -1: none */
    int last_batched;    /* a slot of the last eval of several items, -1: none */
    uint64_t rng;
} sim;

/* A chunk size: mostly small, sometimes block-sized, sometimes exactly to
 * the end of the context or just past it. */
static int32_t chunk_size(sim *m, int slot, bool decode_heavy, bool overflow_heavy)
{
    int32_t room = m->shape->max_context - m->len[slot];
    int32_t roll = below(&m->rng, 100);
    if (overflow_heavy && roll < 35)
        return room + 1 + below(&m->rng, 3);          /* passes max_context by 1..3 */
    if (roll < (overflow_heavy ? 45 : 6) && room > 0)
        return room;                                 /* exactly fills it */
    if (decode_heavy && roll < 70)
        return 1;
    if (roll < 40)
        return 1 + below(&m->rng, 4);
    if (roll < 75)
        return 5 + below(&m->rng, 28);
    static const int32_t blocks[] = {15, 16, 17, 31, 32, 33, 63, 64, 65};
    int32_t n = blocks[below(&m->rng, 9)];
    return room > 0 && n > room && !overflow_heavy ? room : n;
}

static int pick_slot(sim *m, bool live)
{
    int candidates[16], n = 0;
    for (int s = 0; s < m->shape->slots; s++)
        if (m->live[s] == live)
            candidates[n++] = s;
    return n ? candidates[below(&m->rng, n)] : -1;
}

static void add_eval(sim *m, cprog_op *op, int max_items, bool all_often, bool decode_heavy,
                     bool overflow_heavy, bool switch_often)
{
    op->kind = CPROG_EVAL;
    op->tseed = (uint32_t)next(&m->rng);
    op->n_items = 0;
    int want = 1 + below(&m->rng, max_items);
    /* Switch a sequence between evals alone and evals in a batch: a plugin's
     * per-sequence state (a decode fast path's memo, say) must follow the
     * sequence through both. Half the batched mix's evals either take the
     * last batch's sequence alone or batch the last lone one. */
    int follow = -1;
    if (switch_often && max_items >= 2 && below(&m->rng, 2) == 0) {
        int pick = below(&m->rng, 2);
        follow = pick ? m->last_alone : m->last_batched;
        want = pick ? 2 + below(&m->rng, max_items - 1) : 1;
        if (follow >= 0 && !m->live[follow])
            follow = -1;
    }
    bool used[16] = {false};
    for (int tries = 0; tries < 4 * want && op->n_items < want; tries++) {
        int s = op->n_items == 0 && follow >= 0 ? follow : pick_slot(m, true);
        if (s < 0 || used[s])
            continue;
        used[s] = true;
        cprog_item *it = &op->items[op->n_items++];
        it->slot = (uint8_t)s;
        it->n = chunk_size(m, s, decode_heavy, overflow_heavy);
        if (it->n < 1)
            it->n = 1;
        it->all_logits = below(&m->rng, 100) < (all_often ? 50 : 15);
    }
    if (op->n_items == 1)
        m->last_alone = op->items[0].slot;
    else if (op->n_items > 1)
        m->last_batched = op->items[below(&m->rng, op->n_items)].slot;
    bool overflow = false;
    for (int i = 0; i < op->n_items; i++)
        overflow |= m->len[op->items[i].slot] + op->items[i].n > m->shape->max_context;
    if (!overflow)
        for (int i = 0; i < op->n_items; i++)
            m->len[op->items[i].slot] += op->items[i].n;
}

/* Operation weights per mix: create, free, fork, truncate, eval. */
static void weights(cprog_mix mix, int w[5])
{
    static const int table[][5] = {
        [CPROG_MIX_DECODE] = {2, 1, 0, 0, 20},
        [CPROG_MIX_CHUNKS] = {2, 1, 0, 0, 12},
        [CPROG_MIX_FORK] = {2, 2, 6, 1, 10},
        [CPROG_MIX_TRUNCATE] = {2, 1, 2, 6, 10},
        [CPROG_MIX_OVERFLOW] = {2, 1, 1, 2, 10},
        [CPROG_MIX_LIFECYCLE] = {6, 6, 2, 1, 6},
        [CPROG_MIX_BATCHED] = {3, 1, 1, 1, 12},
    };
    memcpy(w, table[mix], sizeof table[0]);
}

void cprog_generate(const cprog_shape *shape, uint64_t seed, cprog *out)
{
    sim m;
    memset(&m, 0, sizeof m);
    m.shape = shape;
    m.rng = seed;
    m.last_alone = m.last_batched = -1;
    memset(out, 0, sizeof *out);
    int w[5];
    weights(shape->mix, w);
    int total = w[0] + w[1] + w[2] + w[3] + w[4];
    int n_ops = 12 + below(&m.rng, 28);
    int max_items = shape->mix == CPROG_MIX_BATCHED ? shape->max_batch
                    : shape->max_batch < 3 ? shape->max_batch : 3;
    while (out->n < n_ops) {
        cprog_op *op = &out->ops[out->n];
        memset(op, 0, sizeof *op);
        int roll = below(&m.rng, total), s;
        if (out->n == 0 || roll < w[0] || pick_slot(&m, true) < 0) {
            if ((s = pick_slot(&m, false)) < 0)
                continue;
            op->kind = CPROG_CREATE;
            op->slot = (uint8_t)s;
            m.live[s] = true;
            m.len[s] = 0;
        } else if ((roll -= w[0]) < w[1]) {
            s = pick_slot(&m, true);
            op->kind = CPROG_FREE;
            op->slot = (uint8_t)s;
            m.live[s] = false;
        } else if ((roll -= w[1]) < w[2]) {
            int d = pick_slot(&m, false);
            if (d < 0)
                continue;
            s = pick_slot(&m, true);
            op->kind = CPROG_FORK;
            op->slot = (uint8_t)s;
            op->slot2 = (uint8_t)d;
            m.live[d] = true;
            m.len[d] = m.len[s];
        } else if ((roll -= w[2]) < w[3]) {
            s = pick_slot(&m, true);
            op->kind = CPROG_TRUNCATE;
            op->slot = (uint8_t)s;
            /* to 0, to the middle of a block, or anywhere */
            int32_t keep = below(&m.rng, 4) == 0 ? 0 : below(&m.rng, m.len[s] + 1);
            op->n = keep;
            m.len[s] = keep;
        } else {
            add_eval(&m, op, max_items, shape->mix == CPROG_MIX_CHUNKS,
                     shape->mix == CPROG_MIX_DECODE, shape->mix == CPROG_MIX_OVERFLOW,
                     shape->mix == CPROG_MIX_BATCHED || shape->mix == CPROG_MIX_DECODE);
            if (op->n_items == 0)
                continue;
        }
        out->n++;
    }
}

void cprog_remove(const cprog *p, int at, int count, cprog *out)
{
    out->n = 0;
    for (int i = 0; i < p->n; i++)
        if (i < at || i >= at + count)
            out->ops[out->n++] = p->ops[i];
}

void cprog_format(const cprog *p, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < p->n && used + 1 < cap; i++) {
        const cprog_op *op = &p->ops[i];
        const char *sep = i ? " " : "";
        int w = 0;
        switch (op->kind) {
        case CPROG_CREATE: w = snprintf(buf + used, cap - used, "%sc%d", sep, op->slot); break;
        case CPROG_FREE: w = snprintf(buf + used, cap - used, "%sx%d", sep, op->slot); break;
        case CPROG_FORK: w = snprintf(buf + used, cap - used, "%sf%d>%d", sep, op->slot, op->slot2); break;
        case CPROG_TRUNCATE:
            w = snprintf(buf + used, cap - used, "%st%d:%" PRId32, sep, op->slot, op->n);
            break;
        case CPROG_EVAL:
            w = snprintf(buf + used, cap - used, "%se@%" PRIu32, sep, op->tseed);
            for (int k = 0; k < op->n_items && w >= 0 && used + (size_t)w < cap; k++) {
                int x = snprintf(buf + used + w, cap - used - (size_t)w, "%c%d=%" PRId32 "%s",
                                 k ? ',' : ':', op->items[k].slot, op->items[k].n,
                                 op->items[k].all_logits ? "a" : "");
                w = x < 0 ? -1 : w + x;
            }
            break;
        }
        if (w < 0)
            return;
        used += (size_t)w;
        if (used >= cap)
            used = cap - 1;
    }
}

static bool parse_slot(const char **s, uint8_t *out)
{
    char *end;
    long v = strtol(*s, &end, 10);
    if (end == *s || v < 0 || v > 15)
        return false;
    *out = (uint8_t)v;
    *s = end;
    return true;
}

static bool parse_int(const char **s, long min, long max, long *out)
{
    char *end;
    long v = strtol(*s, &end, 10);
    if (end == *s || v < min || v > max)
        return false;
    *out = v;
    *s = end;
    return true;
}

static bool parse_eval(const char **s, cprog_op *op)
{
    long v;
    if (*(*s)++ != '@' || !parse_int(s, 0, UINT32_MAX, &v))
        return false;
    op->kind = CPROG_EVAL;
    op->tseed = (uint32_t)v;
    op->n_items = 0;
    while (**s == ':' || **s == ',') {
        (*s)++;
        if (op->n_items == CPROG_MAX_ITEMS)
            return false;
        cprog_item *it = &op->items[op->n_items++];
        if (!parse_slot(s, &it->slot) || *(*s)++ != '=' || !parse_int(s, 1, 1 << 24, &v))
            return false;
        it->n = (int32_t)v;
        it->all_logits = **s == 'a';
        if (it->all_logits)
            (*s)++;
    }
    return op->n_items > 0;
}

bool cprog_parse(const char *text, cprog *out, char *err, size_t err_cap)
{
    memset(out, 0, sizeof *out);
    const char *s = text;
    while (*s) {
        while (*s == ' ')
            s++;
        if (!*s)
            break;
        if (out->n == CPROG_MAX_OPS) {
            snprintf(err, err_cap, "more than %d operations", CPROG_MAX_OPS);
            return false;
        }
        const char *start = s;
        cprog_op *op = &out->ops[out->n];
        long v = 0;
        bool ok;
        switch (*s++) {
        case 'c': op->kind = CPROG_CREATE; ok = parse_slot(&s, &op->slot); break;
        case 'x': op->kind = CPROG_FREE; ok = parse_slot(&s, &op->slot); break;
        case 'f':
            op->kind = CPROG_FORK;
            ok = parse_slot(&s, &op->slot) && *s++ == '>' && parse_slot(&s, &op->slot2);
            break;
        case 't':
            op->kind = CPROG_TRUNCATE;
            ok = parse_slot(&s, &op->slot) && *s++ == ':' && parse_int(&s, 0, 1 << 24, &v);
            op->n = (int32_t)v;
            break;
        case 'e': ok = parse_eval(&s, op); break;
        default: ok = false;
        }
        if (!ok || (*s && *s != ' ')) {
            const char *end = strchr(start, ' ');
            int len = end ? (int)(end - start) : (int)strlen(start);
            snprintf(err, err_cap, "operation %d '%.*s' is not c<slot>, x<slot>, f<slot>><slot>, "
                     "t<slot>:<n> or e@<seed>:<slot>=<n>[a],...", out->n + 1, len, start);
            return false;
        }
        out->n++;
    }
    if (out->n == 0) {
        snprintf(err, err_cap, "no operations");
        return false;
    }
    return true;
}
