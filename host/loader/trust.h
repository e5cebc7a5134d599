/* Whether a plugin file may be loaded, by the rule OpenSSH's StrictModes
 * applies to authorized_keys: nobody but root and the user running inferlab
 * can have written it, or can swap it.
 *
 *   - the .so (after symlinks) and the folder it was found in must be owned
 *     by root or the effective user and not writable by group or others;
 *   - every folder above them (up to /) must be owned by root or the user,
 *     and may be writable by group or others only with the sticky bit set
 *     (as /tmp is): there nobody else can rename or replace our entries;
 *   - the path as named is checked too: the folder holding the named entry,
 *     and every folder holding a symlink on the way (to the file or to a
 *     folder), are held to the first rule, since they can swap the link.
 *
 * Only stat() is used: nothing here opens, maps or runs the file. */
#ifndef ILAB_HOST_TRUST_H
#define ILAB_HOST_TRUST_H

#include <stdbool.h>
#include <stddef.h>

/* true when trusted. Otherwise `why` (may be NULL) reads
 * "insecure: /dir is world-writable (mode 0777)", "... is group-writable ...",
 * "... is owned by uid 65534, not root or uid 0 (the user running inferlab)",
 * or names the stat() error. Any thread. */
bool ilab_trust_plugin_file(const char *path, char *why, size_t why_cap);

/* The same rule for a plugin folder alone (its ancestors included). */
bool ilab_trust_plugin_dir(const char *dir, char *why, size_t why_cap);

#endif
