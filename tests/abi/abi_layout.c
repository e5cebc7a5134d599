/* abi_layout: the public layout of the SDK, as this compiler lays it out,
 * and the check that it only ever grows by appending (docs/adr/0008).
 *
 *   abi_layout print               the layout, one line per struct, member
 *                                  and constant (the format of sdk/abi/<arch>.layout)
 *   abi_layout names               the same lines without numbers (for
 *                                  check_layout.sh's cross-compiled table)
 *   abi_layout compare OLD NEW     exit 0 when NEW only appends to OLD;
 *                                  else print every change and exit 1
 *   abi_layout frozen RECORD       exit 0 when every frozen size of
 *                                  inferlab/struct_size.h (ILAB_*_SIZE_1_0...)
 *                                  is where RECORD says that minor's last
 *                                  member ends; else print each wrong one
 *   abi_layout frozen-1.0          print the 1.0 sizes ("type size" lines),
 *                                  for tests/abi_compat to compare with the
 *                                  ABI 1.0 headers
 *
 * Line format:
 *   struct <type> size <bytes> align <bytes>
 *   member <type>.<name> offset <bytes> size <bytes>
 *   value <NAME> <number>                                                  */
#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inferlab/backend.h"
#include "inferlab/generate.h"
#include "inferlab/host.h"
#include "inferlab/plugin.h"

/* `names_only` drops the numbers: the cross-compiled table supplies them. */
#define ILAB_LAYOUT_STRUCT(type)                                                \
    if (names_only)                                                                  \
        printf("struct %s\n", #type);                                           \
    else                                                                        \
        printf("struct %s size %zu align %zu\n", #type, sizeof(type), alignof(type));
#define ILAB_LAYOUT_MEMBER(type, name)                                          \
    if (names_only)                                                                  \
        printf("member %s.%s\n", #type, #name);                                 \
    else                                                                        \
        printf("member %s.%s offset %zu size %zu\n", #type, #name,              \
               offsetof(type, name), sizeof(((type *)0)->name));
#define ILAB_LAYOUT_VALUE(name)                                                 \
    if (names_only)                                                                  \
        printf("value %s\n", #name);                                            \
    else                                                                        \
        printf("value %s %llu\n", #name, (unsigned long long)(name));

static void print_layout(int names_only)
{
#include "layout_table.h"
}

/* One parsed line: kind 's', 'm' or 'v'; the name ("type" or "type.member"
 * or "NAME"); up to two numbers. */
typedef struct entry {
    char kind;
    char name[128];
    unsigned long long a, b;
} entry;

typedef struct layout {
    entry *e;
    size_t n;
} layout;

static int read_layout(const char *path, layout *out)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "abi_layout: cannot open %s\n", path);
        return -1;
    }
    char line[512];
    size_t cap = 0, lineno = 0;
    out->e = NULL;
    out->n = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (line[0] == '#' || line[0] == '\n')
            continue;
        entry x = {0};
        char kind[16];
        int ok = sscanf(line, "%15s %127s", kind, x.name) == 2;
        if (ok && strcmp(kind, "struct") == 0)
            ok = sscanf(line, "%*s %*s size %llu align %llu", &x.a, &x.b) == 2, x.kind = 's';
        else if (ok && strcmp(kind, "member") == 0)
            ok = sscanf(line, "%*s %*s offset %llu size %llu", &x.a, &x.b) == 2, x.kind = 'm';
        else if (ok && strcmp(kind, "value") == 0)
            ok = sscanf(line, "%*s %*s %llu", &x.a) == 1, x.kind = 'v';
        else
            ok = 0;
        if (!ok) {
            fprintf(stderr, "abi_layout: %s:%zu: not a layout line: %s", path, lineno, line);
            fclose(f);
            return -1;
        }
        if (out->n == cap) {
            cap = cap ? 2 * cap : 64;
            out->e = realloc(out->e, cap * sizeof *out->e);
            if (!out->e) {
                fclose(f);
                return -1;
            }
        }
        out->e[out->n++] = x;
    }
    fclose(f);
    return 0;
}

static const entry *find(const layout *l, char kind, const char *name)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->e[i].kind == kind && strcmp(l->e[i].name, name) == 0)
            return &l->e[i];
    return NULL;
}

/* A struct without a struct_size member (ilab_config_entry_t,
 * ilab_logprob_t) is used in arrays: its size is frozen. */
static int is_frozen(const layout *l, const char *type)
{
    char member[160];
    snprintf(member, sizeof member, "%s.struct_size", type);
    return find(l, 'm', member) == NULL;
}

/* Does `l` list a member of `type` at or past `offset`? */
static int has_member_past(const layout *l, const char *type, unsigned long long offset)
{
    size_t n = strlen(type);
    for (size_t i = 0; i < l->n; i++)
        if (l->e[i].kind == 'm' && strncmp(l->e[i].name, type, n) == 0 && l->e[i].name[n] == '.' &&
            l->e[i].a >= offset)
            return 1;
    return 0;
}

static int compare_struct(const layout *old, const layout *cur, const entry *o)
{
    const entry *c = find(cur, 's', o->name);
    if (!c) {
        printf("REMOVED  struct %s\n", o->name);
        return 1;
    }
    int bad = 0;
    if (c->a < o->a || (c->a != o->a && is_frozen(old, o->name))) {
        printf("CHANGED  struct %s size %llu -> %llu%s\n", o->name, o->a, c->a,
               is_frozen(old, o->name) ? " (no struct_size: used in arrays, its size is frozen)" : "");
        bad = 1;
    } else if (c->a != o->a) {
        printf("grown    struct %s size %llu -> %llu\n", o->name, o->a, c->a);
        if (!has_member_past(cur, o->name, o->a)) {
            printf("UNLISTED struct %s grew but sdk/abi/layout_table.h lists no member past offset "
                   "%llu: add the new member to the table\n", o->name, o->a);
            bad = 1;
        }
    }
    if (c->b != o->b) {
        printf("CHANGED  struct %s align %llu -> %llu\n", o->name, o->b, c->b);
        bad = 1;
    }
    return bad;
}

static int compare_member(const layout *old, const layout *cur, const entry *o)
{
    const entry *c = find(cur, 'm', o->name);
    if (!c) {
        printf("REMOVED  member %s (offset %llu size %llu)\n", o->name, o->a, o->b);
        return 1;
    }
    if (c->a != o->a || c->b != o->b) {
        printf("MOVED    member %s offset %llu size %llu -> offset %llu size %llu\n", o->name, o->a,
               o->b, c->a, c->b);
        return 1;
    }
    (void)old;
    return 0;
}

static int compare_value(const layout *cur, const entry *o)
{
    const entry *c = find(cur, 'v', o->name);
    if (!c) {
        printf("REMOVED  value %s (%llu)\n", o->name, o->a);
        return 1;
    }
    if (strcmp(o->name, "ILAB_ABI_MINOR") == 0 ? c->a < o->a : c->a != o->a) {
        printf("CHANGED  value %s %llu -> %llu\n", o->name, o->a, c->a);
        return 1;
    }
    return 0;
}

/* A member NEW has that OLD lacks must start at or past the old end of its
 * struct: appended, not inserted. */
static int check_added(const layout *old, const entry *c)
{
    if (c->kind == 's' && !find(old, 's', c->name)) {
        printf("new      struct %s size %llu\n", c->name, c->a);
        return 0;
    }
    if (c->kind == 'v' && !find(old, 'v', c->name)) {
        printf("new      value %s %llu\n", c->name, c->a);
        return 0;
    }
    if (c->kind != 'm' || find(old, 'm', c->name))
        return 0;
    char type[128];
    snprintf(type, sizeof type, "%s", c->name);
    char *dot = strchr(type, '.');
    if (dot)
        *dot = '\0';
    const entry *os = find(old, 's', type);
    if (os && c->a < os->a) {
        printf("INSERTED member %s at offset %llu, inside the old struct (size %llu): append instead\n",
               c->name, c->a, os->a);
        return 1;
    }
    printf("appended member %s offset %llu size %llu\n", c->name, c->a, c->b);
    return 0;
}

static int compare(const char *old_path, const char *new_path)
{
    layout old, cur;
    if (read_layout(old_path, &old) != 0 || read_layout(new_path, &cur) != 0)
        return 2;
    int bad = 0;
    for (size_t i = 0; i < old.n; i++) {
        const entry *o = &old.e[i];
        bad |= o->kind == 's' ? compare_struct(&old, &cur, o)
             : o->kind == 'm' ? compare_member(&old, &cur, o)
                              : compare_value(&cur, o);
    }
    for (size_t i = 0; i < cur.n; i++)
        bad |= check_added(&old, &cur.e[i]);
    if (bad)
        printf("abi_layout: %s breaks the recorded ABI layout %s: members may only be appended "
               "(docs/adr/0008-abi-layout.md)\n", new_path, old_path);
    else
        printf("abi_layout: %s keeps every member of %s in place (%zu entries)\n", new_path, old_path,
               old.n);
    free(old.e);
    free(cur.e);
    return bad;
}

/* --- frozen sizes ------------------------------------------------------------ */

/* One frozen size: `type` at ABI 1.`minor` is `size` bytes and its last
 * member then was `last`. Every size-prefixed struct has a line for every
 * minor it exists in. */
typedef struct frozen {
    const char *type;
    unsigned minor;
    unsigned long long size;
    const char *last;
} frozen;

static const frozen frozen_sizes[] = {
    {"ilab_plugin_entry_t", 0, ILAB_PLUGIN_ENTRY_SIZE_1_0, "backend"},
    {"ilab_plugin_entry_t", 1, ILAB_PLUGIN_ENTRY_SIZE_1_1, "backend"},
    {"ilab_plugin_entry_t", 2, ILAB_PLUGIN_ENTRY_SIZE_1_2, "backend"},
    {"ilab_host_t", 0, ILAB_HOST_SIZE_1_0, "now_ns"},
    {"ilab_host_t", 1, ILAB_HOST_SIZE_1_1, "now_ns"},
    {"ilab_host_t", 2, ILAB_HOST_SIZE_1_2, "now_ns"},
    {"ilab_model_info_t", 0, ILAB_MODEL_INFO_SIZE_1_0, "digest"},
    {"ilab_model_info_t", 1, ILAB_MODEL_INFO_SIZE_1_1, "digest"},
    {"ilab_model_info_t", 2, ILAB_MODEL_INFO_SIZE_1_2, "digest"},
    {"ilab_batch_item_t", 0, ILAB_BATCH_ITEM_SIZE_1_0, "logits"},
    {"ilab_batch_item_t", 1, ILAB_BATCH_ITEM_SIZE_1_1, "logits"},
    {"ilab_batch_item_t", 2, ILAB_BATCH_ITEM_SIZE_1_2, "logits"},
    {"ilab_backend_api_t", 0, ILAB_BACKEND_API_SIZE_1_0, "cancel"},
    {"ilab_backend_api_t", 1, ILAB_BACKEND_API_SIZE_1_1, "cache_stats"},
    {"ilab_backend_api_t", 2, ILAB_BACKEND_API_SIZE_1_2, "chat_template"},
    {"ilab_cache_stats_t", 1, ILAB_CACHE_STATS_SIZE_1_1, "free_positions"},
    {"ilab_cache_stats_t", 2, ILAB_CACHE_STATS_SIZE_1_2, "free_positions"},
    {"ilab_sampling_t", 0, ILAB_SAMPLING_SIZE_1_0, "frequency_penalty"},
    {"ilab_sampling_t", 1, ILAB_SAMPLING_SIZE_1_1, "frequency_penalty"},
    {"ilab_sampling_t", 2, ILAB_SAMPLING_SIZE_1_2, "frequency_penalty"},
    {"ilab_generate_request_t", 0, ILAB_GENERATE_REQUEST_SIZE_1_0, "top_logprobs"},
    {"ilab_generate_request_t", 1, ILAB_GENERATE_REQUEST_SIZE_1_1, "top_logprobs"},
    {"ilab_generate_request_t", 2, ILAB_GENERATE_REQUEST_SIZE_1_2, "top_logprobs"},
    {"ilab_event_t", 0, ILAB_EVENT_SIZE_1_0, "message"},
    {"ilab_event_t", 1, ILAB_EVENT_SIZE_1_1, "message"},
    {"ilab_event_t", 2, ILAB_EVENT_SIZE_1_2, "message"},
};
#define N_FROZEN (sizeof frozen_sizes / sizeof frozen_sizes[0])

/* `f` against the record: its last member ends, rounded up to the
 * struct's alignment, exactly at f->size, and no member of the record
 * straddles that boundary. The current minor's size is the record's. */
static int check_frozen(const layout *l, const frozen *f)
{
    char name[160];
    const entry *s = find(l, 's', f->type);
    snprintf(name, sizeof name, "%s.%s", f->type, f->last);
    const entry *last = find(l, 'm', name);
    if (!s || !last) {
        printf("WRONG    %s at 1.%u: the record has no %s\n", f->type, f->minor, s ? name : f->type);
        return 1;
    }
    unsigned long long end = last->a + last->b, align = s->b ? s->b : 1;
    unsigned long long want = (end + align - 1) / align * align;
    if (f->minor == ILAB_ABI_MINOR && f->size != s->a) {
        printf("WRONG    %s at 1.%u (the current minor): frozen size %llu, the record's size %llu\n",
               f->type, f->minor, f->size, s->a);
        return 1;
    }
    if (f->size != want) {
        printf("WRONG    %s at 1.%u: frozen size %llu, but %s ends at %llu (align %llu: %llu)\n",
               f->type, f->minor, f->size, f->last, end, align, want);
        return 1;
    }
    size_t n = strlen(f->type);
    for (size_t i = 0; i < l->n; i++) {
        const entry *m = &l->e[i];
        if (m->kind == 'm' && !strncmp(m->name, f->type, n) && m->name[n] == '.' &&
            m->a < f->size && m->a + m->b > f->size) {
            printf("WRONG    %s at 1.%u: member %s straddles the frozen size %llu\n", f->type,
                   f->minor, m->name, f->size);
            return 1;
        }
    }
    printf("frozen   %s at 1.%u: %llu bytes, through %s\n", f->type, f->minor, f->size, f->last);
    return 0;
}

/* Every size-prefixed struct of the record has a frozen size for the
 * current minor: a new struct cannot arrive without one. */
static int check_frozen_complete(const layout *l)
{
    int bad = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (l->e[i].kind != 's' || is_frozen(l, l->e[i].name))
            continue;
        int found = 0;
        for (size_t k = 0; k < N_FROZEN; k++)
            found |= !strcmp(frozen_sizes[k].type, l->e[i].name) && frozen_sizes[k].minor == ILAB_ABI_MINOR;
        if (!found) {
            printf("MISSING  %s has no frozen size for ABI 1.%d in inferlab/struct_size.h\n",
                   l->e[i].name, ILAB_ABI_MINOR);
            bad = 1;
        }
    }
    return bad;
}

static int check_frozen_record(const char *path)
{
    layout l;
    if (read_layout(path, &l) != 0)
        return 2;
    int bad = check_frozen_complete(&l);
    for (size_t k = 0; k < N_FROZEN; k++)
        bad |= check_frozen(&l, &frozen_sizes[k]);
    printf("abi_layout: the frozen sizes %s %s\n", bad ? "disagree with" : "agree with", path);
    free(l.e);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "frozen") == 0)
        return check_frozen_record(argv[2]);
    if (argc == 2 && strcmp(argv[1], "frozen-1.0") == 0) {
        for (size_t k = 0; k < N_FROZEN; k++)
            if (frozen_sizes[k].minor == 0)
                printf("%s %llu\n", frozen_sizes[k].type, frozen_sizes[k].size);
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "print") == 0) {
        print_layout(0);
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "names") == 0) {
        print_layout(1);
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "compare") == 0)
        return compare(argv[2], argv[3]);
    fprintf(stderr, "usage: abi_layout print | names | compare OLD NEW | frozen RECORD | frozen-1.0\n");
    return 2;
}
