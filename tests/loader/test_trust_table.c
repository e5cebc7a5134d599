/* The trust rule (docs/operations.md, "Which plugins run") as one table:
 * each row builds a fresh tree, gives one or two of its nodes an owner and
 * a mode, asks ilab_trust_plugin_file about the plugin, and compares the
 * verdict (and, when insecure, the path blamed) with the row's.
 *
 *   R/a2/a1/dir/p.so        the plugin (FILE) in its folder (DIR), with
 *                           folders above it at depth 1, 2, 3 (ANC1..3; R is 3)
 *   R/l2/l1/ldir/link.so    LINK: a symlink to R/a2/a1/dir/p.so in LDIR
 *   R/l2/l1/ldir/dlink/p.so DIRLINK: dlink is a symlink to R/a2/a1/dir
 *
 * The rule: the file and the folder it is in (after symlinks), and the
 * folder holding a symlink (it can swap the link), are owned by root or the
 * user and writable by nobody else, sticky bit or not; every folder above
 * them is owned by root or the user and writable by others only with the
 * sticky bit. Rows that need another owner need root (CI runs as root);
 * without it they are not arranged and the test reports a skip. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include "ilab_skip.h"

#include "loader/trust.h"

enum layout { PLAIN, LINK, DIRLINK };
enum role { NONE, FILE_, DIR_, ANC1, ANC2, ANC3, LDIR, LANC1, LANC2, N_ROLES };
enum state {
    OK,
    GROUP_W,            /* file 0664, folder 0775 */
    WORLD_W,            /* file 0646, folder 0757 */
    STICKY_GROUP_W,     /* folder 01775 */
    STICKY_WORLD_W,     /* folder 01777 (as /tmp) */
    OTHER_OWNER,        /* owned by uid 65534, mode safe */
    OTHER_OWNER_STICKY, /* folder 01777 owned by uid 65534 */
};
enum verdict { TRUSTED, INSECURE };
#define FILE FILE_
#define DIR DIR_

typedef struct row {
    enum layout layout;
    enum role role1;
    enum state state1;
    enum role role2;
    enum state state2;
    enum verdict want;
} row;

static const row table[] = {
    {PLAIN,   FILE,  OK,                 NONE,  OK,             TRUSTED},
    {PLAIN,   FILE,  GROUP_W,            NONE,  OK,             INSECURE},
    {PLAIN,   FILE,  WORLD_W,            NONE,  OK,             INSECURE},
    {PLAIN,   FILE,  OTHER_OWNER,        NONE,  OK,             INSECURE},
    {PLAIN,   DIR,   GROUP_W,            NONE,  OK,             INSECURE},
    {PLAIN,   DIR,   WORLD_W,            NONE,  OK,             INSECURE},
    {PLAIN,   DIR,   STICKY_GROUP_W,     NONE,  OK,             INSECURE},
    {PLAIN,   DIR,   STICKY_WORLD_W,     NONE,  OK,             INSECURE},
    {PLAIN,   DIR,   OTHER_OWNER,        NONE,  OK,             INSECURE},
    {PLAIN,   DIR,   OTHER_OWNER_STICKY, NONE,  OK,             INSECURE},
    {PLAIN,   ANC1,  GROUP_W,            NONE,  OK,             INSECURE},
    {PLAIN,   ANC1,  WORLD_W,            NONE,  OK,             INSECURE},
    {PLAIN,   ANC1,  STICKY_GROUP_W,     NONE,  OK,             TRUSTED},
    {PLAIN,   ANC1,  STICKY_WORLD_W,     NONE,  OK,             TRUSTED},
    {PLAIN,   ANC1,  OTHER_OWNER,        NONE,  OK,             INSECURE},
    {PLAIN,   ANC1,  OTHER_OWNER_STICKY, NONE,  OK,             INSECURE},
    {PLAIN,   ANC2,  GROUP_W,            NONE,  OK,             INSECURE},
    {PLAIN,   ANC2,  WORLD_W,            NONE,  OK,             INSECURE},
    {PLAIN,   ANC2,  STICKY_GROUP_W,     NONE,  OK,             TRUSTED},
    {PLAIN,   ANC2,  STICKY_WORLD_W,     NONE,  OK,             TRUSTED},
    {PLAIN,   ANC2,  OTHER_OWNER,        NONE,  OK,             INSECURE},
    {PLAIN,   ANC2,  OTHER_OWNER_STICKY, NONE,  OK,             INSECURE},
    {PLAIN,   ANC3,  GROUP_W,            NONE,  OK,             INSECURE},
    {PLAIN,   ANC3,  WORLD_W,            NONE,  OK,             INSECURE},
    {PLAIN,   ANC3,  STICKY_GROUP_W,     NONE,  OK,             TRUSTED},
    {PLAIN,   ANC3,  STICKY_WORLD_W,     NONE,  OK,             TRUSTED},
    {PLAIN,   ANC3,  OTHER_OWNER,        NONE,  OK,             INSECURE},
    {PLAIN,   ANC3,  OTHER_OWNER_STICKY, NONE,  OK,             INSECURE},
    {LINK,    FILE,  OK,                 NONE,  OK,             TRUSTED},
    {LINK,    FILE,  GROUP_W,            NONE,  OK,             INSECURE},
    {LINK,    FILE,  WORLD_W,            NONE,  OK,             INSECURE},
    {LINK,    FILE,  OTHER_OWNER,        NONE,  OK,             INSECURE},
    {LINK,    DIR,   GROUP_W,            NONE,  OK,             INSECURE},
    {LINK,    DIR,   WORLD_W,            NONE,  OK,             INSECURE},
    {LINK,    DIR,   STICKY_GROUP_W,     NONE,  OK,             INSECURE},
    {LINK,    DIR,   STICKY_WORLD_W,     NONE,  OK,             INSECURE},
    {LINK,    DIR,   OTHER_OWNER,        NONE,  OK,             INSECURE},
    {LINK,    DIR,   OTHER_OWNER_STICKY, NONE,  OK,             INSECURE},
    {LINK,    ANC1,  GROUP_W,            NONE,  OK,             INSECURE},
    {LINK,    ANC1,  WORLD_W,            NONE,  OK,             INSECURE},
    {LINK,    ANC1,  STICKY_GROUP_W,     NONE,  OK,             TRUSTED},
    {LINK,    ANC1,  STICKY_WORLD_W,     NONE,  OK,             TRUSTED},
    {LINK,    ANC1,  OTHER_OWNER,        NONE,  OK,             INSECURE},
    {LINK,    ANC1,  OTHER_OWNER_STICKY, NONE,  OK,             INSECURE},
    {LINK,    ANC2,  GROUP_W,            NONE,  OK,             INSECURE},
    {LINK,    ANC2,  WORLD_W,            NONE,  OK,             INSECURE},
    {LINK,    ANC2,  STICKY_GROUP_W,     NONE,  OK,             TRUSTED},
    {LINK,    ANC2,  STICKY_WORLD_W,     NONE,  OK,             TRUSTED},
    {LINK,    ANC2,  OTHER_OWNER,        NONE,  OK,             INSECURE},
    {LINK,    ANC2,  OTHER_OWNER_STICKY, NONE,  OK,             INSECURE},
    {LINK,    ANC3,  GROUP_W,            NONE,  OK,             INSECURE},
    {LINK,    ANC3,  WORLD_W,            NONE,  OK,             INSECURE},
    {LINK,    ANC3,  STICKY_GROUP_W,     NONE,  OK,             TRUSTED},
    {LINK,    ANC3,  STICKY_WORLD_W,     NONE,  OK,             TRUSTED},
    {LINK,    ANC3,  OTHER_OWNER,        NONE,  OK,             INSECURE},
    {LINK,    ANC3,  OTHER_OWNER_STICKY, NONE,  OK,             INSECURE},
    {LINK,    LDIR,  GROUP_W,            NONE,  OK,             INSECURE},
    {LINK,    LDIR,  WORLD_W,            NONE,  OK,             INSECURE},
    {LINK,    LDIR,  STICKY_GROUP_W,     NONE,  OK,             INSECURE},
    {LINK,    LDIR,  STICKY_WORLD_W,     NONE,  OK,             INSECURE},
    {LINK,    LDIR,  OTHER_OWNER,        NONE,  OK,             INSECURE},
    {LINK,    LDIR,  OTHER_OWNER_STICKY, NONE,  OK,             INSECURE},
    {LINK,    LANC1, GROUP_W,            NONE,  OK,             INSECURE},
    {LINK,    LANC1, WORLD_W,            NONE,  OK,             INSECURE},
    {LINK,    LANC1, STICKY_GROUP_W,     NONE,  OK,             TRUSTED},
    {LINK,    LANC1, STICKY_WORLD_W,     NONE,  OK,             TRUSTED},
    {LINK,    LANC1, OTHER_OWNER,        NONE,  OK,             INSECURE},
    {LINK,    LANC1, OTHER_OWNER_STICKY, NONE,  OK,             INSECURE},
    {LINK,    LANC2, GROUP_W,            NONE,  OK,             INSECURE},
    {LINK,    LANC2, WORLD_W,            NONE,  OK,             INSECURE},
    {LINK,    LANC2, STICKY_GROUP_W,     NONE,  OK,             TRUSTED},
    {LINK,    LANC2, STICKY_WORLD_W,     NONE,  OK,             TRUSTED},
    {LINK,    LANC2, OTHER_OWNER,        NONE,  OK,             INSECURE},
    {LINK,    LANC2, OTHER_OWNER_STICKY, NONE,  OK,             INSECURE},
    {DIRLINK, FILE,  OK,                 NONE,  OK,             TRUSTED},
    {DIRLINK, FILE,  GROUP_W,            NONE,  OK,             INSECURE},
    {DIRLINK, FILE,  WORLD_W,            NONE,  OK,             INSECURE},
    {DIRLINK, FILE,  OTHER_OWNER,        NONE,  OK,             INSECURE},
    {DIRLINK, DIR,   GROUP_W,            NONE,  OK,             INSECURE},
    {DIRLINK, DIR,   WORLD_W,            NONE,  OK,             INSECURE},
    {DIRLINK, DIR,   STICKY_GROUP_W,     NONE,  OK,             INSECURE},
    {DIRLINK, DIR,   STICKY_WORLD_W,     NONE,  OK,             INSECURE},
    {DIRLINK, DIR,   OTHER_OWNER,        NONE,  OK,             INSECURE},
    {DIRLINK, DIR,   OTHER_OWNER_STICKY, NONE,  OK,             INSECURE},
    {DIRLINK, ANC1,  GROUP_W,            NONE,  OK,             INSECURE},
    {DIRLINK, ANC1,  WORLD_W,            NONE,  OK,             INSECURE},
    {DIRLINK, ANC1,  STICKY_GROUP_W,     NONE,  OK,             TRUSTED},
    {DIRLINK, ANC1,  STICKY_WORLD_W,     NONE,  OK,             TRUSTED},
    {DIRLINK, ANC1,  OTHER_OWNER,        NONE,  OK,             INSECURE},
    {DIRLINK, ANC1,  OTHER_OWNER_STICKY, NONE,  OK,             INSECURE},
    {DIRLINK, ANC2,  GROUP_W,            NONE,  OK,             INSECURE},
    {DIRLINK, ANC2,  WORLD_W,            NONE,  OK,             INSECURE},
    {DIRLINK, ANC2,  STICKY_GROUP_W,     NONE,  OK,             TRUSTED},
    {DIRLINK, ANC2,  STICKY_WORLD_W,     NONE,  OK,             TRUSTED},
    {DIRLINK, ANC2,  OTHER_OWNER,        NONE,  OK,             INSECURE},
    {DIRLINK, ANC2,  OTHER_OWNER_STICKY, NONE,  OK,             INSECURE},
    {DIRLINK, ANC3,  GROUP_W,            NONE,  OK,             INSECURE},
    {DIRLINK, ANC3,  WORLD_W,            NONE,  OK,             INSECURE},
    {DIRLINK, ANC3,  STICKY_GROUP_W,     NONE,  OK,             TRUSTED},
    {DIRLINK, ANC3,  STICKY_WORLD_W,     NONE,  OK,             TRUSTED},
    {DIRLINK, ANC3,  OTHER_OWNER,        NONE,  OK,             INSECURE},
    {DIRLINK, ANC3,  OTHER_OWNER_STICKY, NONE,  OK,             INSECURE},
    {DIRLINK, LDIR,  GROUP_W,            NONE,  OK,             INSECURE},
    {DIRLINK, LDIR,  WORLD_W,            NONE,  OK,             INSECURE},
    {DIRLINK, LDIR,  STICKY_GROUP_W,     NONE,  OK,             INSECURE},
    {DIRLINK, LDIR,  STICKY_WORLD_W,     NONE,  OK,             INSECURE},
    {DIRLINK, LDIR,  OTHER_OWNER,        NONE,  OK,             INSECURE},
    {DIRLINK, LDIR,  OTHER_OWNER_STICKY, NONE,  OK,             INSECURE},
    {DIRLINK, LANC1, GROUP_W,            NONE,  OK,             INSECURE},
    {DIRLINK, LANC1, WORLD_W,            NONE,  OK,             INSECURE},
    {DIRLINK, LANC1, STICKY_GROUP_W,     NONE,  OK,             TRUSTED},
    {DIRLINK, LANC1, STICKY_WORLD_W,     NONE,  OK,             TRUSTED},
    {DIRLINK, LANC1, OTHER_OWNER,        NONE,  OK,             INSECURE},
    {DIRLINK, LANC1, OTHER_OWNER_STICKY, NONE,  OK,             INSECURE},
    {DIRLINK, LANC2, GROUP_W,            NONE,  OK,             INSECURE},
    {DIRLINK, LANC2, WORLD_W,            NONE,  OK,             INSECURE},
    {DIRLINK, LANC2, STICKY_GROUP_W,     NONE,  OK,             TRUSTED},
    {DIRLINK, LANC2, STICKY_WORLD_W,     NONE,  OK,             TRUSTED},
    {DIRLINK, LANC2, OTHER_OWNER,        NONE,  OK,             INSECURE},
    {DIRLINK, LANC2, OTHER_OWNER_STICKY, NONE,  OK,             INSECURE},
    {LINK,    LDIR,  OK,                 FILE,  OK,             TRUSTED},
    {LINK,    LDIR,  OK,                 FILE,  WORLD_W,        INSECURE},
    {LINK,    LDIR,  OK,                 DIR,   WORLD_W,        INSECURE},
    {LINK,    LDIR,  OK,                 ANC1,  WORLD_W,        INSECURE},
    {LINK,    LDIR,  OK,                 ANC1,  STICKY_WORLD_W, TRUSTED},
    {LINK,    LDIR,  OK,                 FILE,  OTHER_OWNER,    INSECURE},
    {LINK,    LDIR,  WORLD_W,            FILE,  OK,             INSECURE},
    {LINK,    LDIR,  WORLD_W,            FILE,  WORLD_W,        INSECURE},
    {LINK,    LDIR,  WORLD_W,            DIR,   WORLD_W,        INSECURE},
    {LINK,    LDIR,  WORLD_W,            ANC1,  WORLD_W,        INSECURE},
    {LINK,    LDIR,  WORLD_W,            ANC1,  STICKY_WORLD_W, INSECURE},
    {LINK,    LDIR,  WORLD_W,            FILE,  OTHER_OWNER,    INSECURE},
    {LINK,    LDIR,  STICKY_WORLD_W,     FILE,  OK,             INSECURE},
    {LINK,    LDIR,  STICKY_WORLD_W,     FILE,  WORLD_W,        INSECURE},
    {LINK,    LDIR,  STICKY_WORLD_W,     DIR,   WORLD_W,        INSECURE},
    {LINK,    LDIR,  STICKY_WORLD_W,     ANC1,  WORLD_W,        INSECURE},
    {LINK,    LDIR,  STICKY_WORLD_W,     ANC1,  STICKY_WORLD_W, INSECURE},
    {LINK,    LDIR,  STICKY_WORLD_W,     FILE,  OTHER_OWNER,    INSECURE},
    {LINK,    LDIR,  OTHER_OWNER,        FILE,  OK,             INSECURE},
    {LINK,    LDIR,  OTHER_OWNER,        FILE,  WORLD_W,        INSECURE},
    {LINK,    LDIR,  OTHER_OWNER,        DIR,   WORLD_W,        INSECURE},
    {LINK,    LDIR,  OTHER_OWNER,        ANC1,  WORLD_W,        INSECURE},
    {LINK,    LDIR,  OTHER_OWNER,        ANC1,  STICKY_WORLD_W, INSECURE},
    {LINK,    LDIR,  OTHER_OWNER,        FILE,  OTHER_OWNER,    INSECURE},
    {DIRLINK, LDIR,  OK,                 FILE,  OK,             TRUSTED},
    {DIRLINK, LDIR,  OK,                 FILE,  WORLD_W,        INSECURE},
    {DIRLINK, LDIR,  OK,                 DIR,   WORLD_W,        INSECURE},
    {DIRLINK, LDIR,  OK,                 ANC1,  WORLD_W,        INSECURE},
    {DIRLINK, LDIR,  OK,                 ANC1,  STICKY_WORLD_W, TRUSTED},
    {DIRLINK, LDIR,  OK,                 FILE,  OTHER_OWNER,    INSECURE},
    {DIRLINK, LDIR,  WORLD_W,            FILE,  OK,             INSECURE},
    {DIRLINK, LDIR,  WORLD_W,            FILE,  WORLD_W,        INSECURE},
    {DIRLINK, LDIR,  WORLD_W,            DIR,   WORLD_W,        INSECURE},
    {DIRLINK, LDIR,  WORLD_W,            ANC1,  WORLD_W,        INSECURE},
    {DIRLINK, LDIR,  WORLD_W,            ANC1,  STICKY_WORLD_W, INSECURE},
    {DIRLINK, LDIR,  WORLD_W,            FILE,  OTHER_OWNER,    INSECURE},
    {DIRLINK, LDIR,  STICKY_WORLD_W,     FILE,  OK,             INSECURE},
    {DIRLINK, LDIR,  STICKY_WORLD_W,     FILE,  WORLD_W,        INSECURE},
    {DIRLINK, LDIR,  STICKY_WORLD_W,     DIR,   WORLD_W,        INSECURE},
    {DIRLINK, LDIR,  STICKY_WORLD_W,     ANC1,  WORLD_W,        INSECURE},
    {DIRLINK, LDIR,  STICKY_WORLD_W,     ANC1,  STICKY_WORLD_W, INSECURE},
    {DIRLINK, LDIR,  STICKY_WORLD_W,     FILE,  OTHER_OWNER,    INSECURE},
    {DIRLINK, LDIR,  OTHER_OWNER,        FILE,  OK,             INSECURE},
    {DIRLINK, LDIR,  OTHER_OWNER,        FILE,  WORLD_W,        INSECURE},
    {DIRLINK, LDIR,  OTHER_OWNER,        DIR,   WORLD_W,        INSECURE},
    {DIRLINK, LDIR,  OTHER_OWNER,        ANC1,  WORLD_W,        INSECURE},
    {DIRLINK, LDIR,  OTHER_OWNER,        ANC1,  STICKY_WORLD_W, INSECURE},
    {DIRLINK, LDIR,  OTHER_OWNER,        FILE,  OTHER_OWNER,    INSECURE},
};

#undef FILE
#undef DIR

static const char *const role_names[N_ROLES] = {"-", "file", "its folder", "folder above (depth 1)",
                                                "folder above (depth 2)", "folder above (depth 3)",
                                                "link's folder", "link's folder's parent",
                                                "link's folder's grandparent"};
static const char *const state_names[] = {"ok", "group-writable", "world-writable",
                                          "group-writable+sticky", "world-writable+sticky",
                                          "other owner", "other owner, world-writable+sticky"};
static const char *const layout_names[] = {"file", "symlink", "symlinked folder"};

typedef struct tree {
    char path[N_ROLES][512];
    char plugin[600];
} tree;

static void make_tree(const char *base, int n, enum layout layout, tree *t)
{
    static const char *const rel[N_ROLES] = {"", "/a2/a1/dir/p.so", "/a2/a1/dir", "/a2/a1",
                                             "/a2", "", "/l2/l1/ldir", "/l2/l1", "/l2"};
    char root[400];
    snprintf(root, sizeof root, "%s/row%d", base, n);
    for (int r = 0; r < N_ROLES; r++)
        snprintf(t->path[r], sizeof t->path[r], "%s%s", root, rel[r]);
    static const enum role dirs[] = {ANC3, ANC2, ANC1, DIR_, LANC2, LANC1, LDIR};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++)
        assert_int_equal(mkdir(t->path[dirs[i]], 0755), 0);
    FILE *f = fopen(t->path[FILE_], "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(chmod(t->path[FILE_], 0644), 0);
    switch (layout) {
    case PLAIN:
        snprintf(t->plugin, sizeof t->plugin, "%s", t->path[FILE_]);
        break;
    case LINK:
        snprintf(t->plugin, sizeof t->plugin, "%s/link.so", t->path[LDIR]);
        assert_int_equal(symlink(t->path[FILE_], t->plugin), 0);
        break;
    case DIRLINK: {
        char link[560];
        snprintf(link, sizeof link, "%s/dlink", t->path[LDIR]);
        assert_int_equal(symlink(t->path[DIR_], link), 0);
        snprintf(t->plugin, sizeof t->plugin, "%s/p.so", link);
        break;
    }
    }
}

/* false when the state needs root and this is not root. */
static bool apply(const tree *t, enum role role, enum state st)
{
    if (role == NONE)
        return true;
    const char *p = t->path[role];
    bool is_file = role == FILE_;
    mode_t mode = is_file ? 0644 : 0755;
    switch (st) {
    case OK: break;
    case GROUP_W: mode = is_file ? 0664 : 0775; break;
    case WORLD_W: mode = is_file ? 0646 : 0757; break;
    case STICKY_GROUP_W: mode = 01775; break;
    case STICKY_WORLD_W: mode = 01777; break;
    case OTHER_OWNER: break;
    case OTHER_OWNER_STICKY: mode = 01777; break;
    }
    if (st == OTHER_OWNER || st == OTHER_OWNER_STICKY) {
        if (geteuid() != 0)
            return false;
        assert_int_equal(chown(p, 65534, 65534), 0);
    }
    assert_int_equal(chmod(p, mode), 0);
    return true;
}

/* The words `why` must hold for a node in state `st`. */
static const char *reason_word(enum state st)
{
    switch (st) {
    case GROUP_W: case STICKY_GROUP_W: return "is group-writable";
    case WORLD_W: case STICKY_WORLD_W: return "is world-writable";
    default: return "is owned by uid 65534";
    }
}

static bool blames(const char *why, const tree *t, enum role role, enum state st)
{
    if (role == NONE || st == OK)
        return false;
    char want[700];
    snprintf(want, sizeof want, "insecure: %s %s", t->path[role], reason_word(st));
    return strstr(why, want) != NULL;
}

static void trust_rule_table(void **state)
{
    (void)state;
    char base[] = "/tmp/ilab_trust_XXXXXX";
    assert_non_null(mkdtemp(base));
    assert_int_equal(chmod(base, 0755), 0);
    size_t n_rows = sizeof table / sizeof table[0], not_arranged = 0, wrong = 0;
    size_t n_trusted = 0, n_insecure = 0;
    for (size_t i = 0; i < n_rows; i++) {
        const row *r = &table[i];
        tree t;
        make_tree(base, (int)i, r->layout, &t);
        if (!apply(&t, r->role1, r->state1) || !apply(&t, r->role2, r->state2)) {
            not_arranged++;
            continue;
        }
        char why[1024] = "";
        bool trusted = ilab_trust_plugin_file(t.plugin, why, sizeof why);
        bool ok = trusted == (r->want == TRUSTED);
        if (ok && !trusted)
            ok = blames(why, &t, r->role1, r->state1) || blames(why, &t, r->role2, r->state2);
        if (!ok) {
            wrong++;
            print_error("row %zu: %s; %s %s%s%s%s: %s, expected %s\n", i,
                        layout_names[r->layout], role_names[r->role1], state_names[r->state1],
                        r->role2 != NONE ? ", " : "", r->role2 != NONE ? role_names[r->role2] : "",
                        r->role2 != NONE ? state_names[r->state2] : "",
                        trusted ? "trusted" : why,
                        r->want == TRUSTED ? "trusted" : "insecure, naming the node above");
        }
        n_trusted += r->want == TRUSTED;
        n_insecure += r->want == INSECURE;
    }
    char cmd[200];
    snprintf(cmd, sizeof cmd, "chown -R %lu '%s' && chmod -R u+rwx '%s' && rm -rf '%s'",
             (unsigned long)geteuid(), base, base, base);
    assert_int_equal(system(cmd), 0);
    print_message("%zu rows (%zu trusted, %zu insecure), %zu not arranged, %zu wrong\n", n_rows,
                  n_trusted, n_insecure, not_arranged, wrong);
    assert_int_equal(wrong, 0);
    if (not_arranged) {
        print_message("not root: %zu rows with another owner were not arranged\n", not_arranged);
        skip();
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(trust_rule_table),
    };
    return ilab_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
