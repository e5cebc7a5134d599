/* abi_layout: the public layout of the SDK, as this compiler lays it out,
 * and the check that it only ever grows by appending (docs/adr/0008).
 *
 *   abi_layout print               the layout, one line per struct, member
 *                                  and constant (the format of sdk/abi/<arch>.layout)
 *   abi_layout names               the same lines without numbers (for
 *                                  check_layout.sh's cross-compiled table)
 *   abi_layout compare OLD NEW     exit 0 when NEW only appends to OLD;
 *                                  else print every change and exit 1
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

int main(int argc, char **argv)
{
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
    fprintf(stderr, "usage: abi_layout print | names | compare OLD NEW\n");
    return 2;
}
