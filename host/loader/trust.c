/* The StrictModes-like trust rule for plugin files (see trust.h). */
#include "trust.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* One path component. `strict`: no group/other write even with the sticky
 * bit (the file itself and the folder holding it). */
static bool trusted_node(const char *path, bool strict, char *why, size_t cap)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        if (why && cap)
            snprintf(why, cap, "insecure: cannot check %s: %s", path, strerror(errno));
        return false;
    }
    uid_t me = geteuid();
    if (st.st_uid != 0 && st.st_uid != me) {
        if (why && cap)
            snprintf(why, cap, "insecure: %s is owned by uid %lu, not root or uid %lu (the user "
                     "running inferlab)", path, (unsigned long)st.st_uid, (unsigned long)me);
        return false;
    }
    bool sticky_dir = S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX);
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && (strict || !sticky_dir)) {
        if (why && cap)
            snprintf(why, cap, "insecure: %s is %s-writable (mode %04lo)", path,
                     (st.st_mode & S_IWOTH) ? "world" : "group",
                     (unsigned long)(st.st_mode & 07777));
        return false;
    }
    return true;
}

/* `real` (an absolute, resolved path) and each folder above it. */
static bool trusted_chain(const char *real, bool strict_first_dir, char *why, size_t cap)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", real);
    bool first = true;
    for (;;) {
        char *slash = strrchr(buf, '/');
        if (!slash)
            return true;
        if (slash == buf)
            slash[1] = '\0'; /* "/" itself */
        else
            *slash = '\0';
        if (!trusted_node(buf, first && strict_first_dir, why, cap))
            return false;
        if (!strcmp(buf, "/"))
            return true;
        first = false;
    }
}

static bool resolve(const char *path, char *real, char *why, size_t cap)
{
    if (realpath(path, real))
        return true;
    if (why && cap)
        snprintf(why, cap, "insecure: cannot resolve %s: %s", path, strerror(errno));
    return false;
}

bool ilab_trust_plugin_dir(const char *dir, char *why, size_t why_cap)
{
    char real[PATH_MAX];
    if (!resolve(dir, real, why, why_cap))
        return false;
    /* The folder is held to the strict rule; then its ancestors. */
    return trusted_node(real, true, why, why_cap) && trusted_chain(real, false, why, why_cap);
}

/* The folders of `path` as it was named, before symlinks are followed: the
 * one holding the named entry, and any holding a symlink met on the way,
 * can swap what the path leads to, so they get the strict rule; the others
 * the folder rule. stat() follows links, so a symlinked folder is judged by
 * its target (whose own chain trusted_chain checks). */
static bool trusted_named_chain(const char *path, char *why, size_t cap)
{
    char buf[PATH_MAX];
    if (path[0] == '/') {
        if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
            goto too_long;
    } else {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd)) {
            if (why && cap)
                snprintf(why, cap, "insecure: cannot check %s: %s", path, strerror(errno));
            return false;
        }
        if (snprintf(buf, sizeof buf, "%s/%s", cwd, path) >= (int)sizeof buf)
            goto too_long;
    }
    bool child_is_link = true; /* the named entry's own folder is held strictly */
    for (;;) {
        struct stat lst;
        if (!child_is_link && lstat(buf, &lst) == 0 && S_ISLNK(lst.st_mode))
            child_is_link = true;
        char *slash = strrchr(buf, '/');
        if (!slash)
            return true;
        bool strict = child_is_link;
        child_is_link = false;
        if (slash == buf)
            slash[1] = '\0';
        else
            *slash = '\0';
        if (!trusted_node(buf, strict, why, cap))
            return false;
        if (!strcmp(buf, "/"))
            return true;
    }
too_long:
    if (why && cap)
        snprintf(why, cap, "insecure: cannot check %s: path too long", path);
    return false;
}

bool ilab_trust_plugin_file(const char *path, char *why, size_t why_cap)
{
    char real[PATH_MAX];
    if (!resolve(path, real, why, why_cap))
        return false;
    if (!trusted_node(real, true, why, why_cap) || !trusted_chain(real, true, why, why_cap))
        return false;
    /* Reached through a symlink (the file or a folder on the way): the
     * folders it was found through count too. */
    return trusted_named_chain(path, why, why_cap);
}
