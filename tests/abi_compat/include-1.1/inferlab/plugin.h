/* inferlab SDK — the bootstrap export.
 *
 * A plugin exports exactly one dynamic symbol, ILAB_PLUGIN_ENTRY_SYMBOL, a
 * const ilab_plugin_entry_t [ABI-1, ABI-8]. Its first three fields never move in any ABI
 * version: the host reads them before trusting anything else. The linker
 * version script shipped with the SDK (plugin.map; the CMake function
 * inferlab_add_plugin applies it) hides every other symbol.
 *
 *     ILAB_PLUGIN_EXPORT const ilab_plugin_entry_t ilab_plugin_entry = {
 *         .struct_size = sizeof(ilab_plugin_entry_t),
 *         .abi_major = ILAB_ABI_MAJOR, .abi_minor = 0,  // implements ABI 1.0
 *         .name = "mybackend", .version = "0.1.0",
 *         .manifest_yaml = MANIFEST, .backend = &my_api,
 *     };
 *
 * Versioning (negotiated by the host, not the plugin): the host refuses a
 * different major, and a minor newer than its own. Minors only append members
 * to size-prefixed structs; the host treats members past a struct's
 * struct_size as absent [ABI-2, ABI-3]. The contract is docs/contract.md.
 *
 * abi_minor is the minor the plugin implements, which is the oldest host
 * minor it needs, not the SDK's: a plugin that uses nothing added after ABI
 * 1.0 declares 0 (and `abi: 1.0` in its manifest) and loads in 1.0 hosts
 * too; one that declares cache.stats needs 1.1. Write it as a number, never
 * as ILAB_ABI_MINOR: that is this header's minor and moves when the SDK is
 * upgraded, so a plugin that wrote it would claim, once rebuilt, a minor it
 * does not implement while its manifest still says the old one (refused:
 * the message says so). Members of minors newer than abi_minor may be left
 * NULL; the host shims them [ABI-3, ABI-6, docs/adr/0022]. Minors so far:
 *   1.0  the first table
 *   1.1  cache_stats() and ilab_cache_stats_t (capability cache.stats) */
#ifndef INFERLAB_PLUGIN_H
#define INFERLAB_PLUGIN_H

#include <stdint.h>

#include "inferlab/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ILAB_ABI_MAJOR 1
#define ILAB_ABI_MINOR 1

#define ILAB_PLUGIN_ENTRY_SYMBOL "ilab_plugin_entry"

#if defined(__GNUC__)
#define ILAB_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define ILAB_PLUGIN_EXPORT
#endif

typedef struct ilab_plugin_entry {
    /* Frozen prefix: identical in every ABI version. */
    uint32_t struct_size; /* sizeof(ilab_plugin_entry_t) as the plugin was built */
    uint32_t abi_major;   /* ILAB_ABI_MAJOR the plugin was built with */
    uint32_t abi_minor;   /* the minor the plugin implements = the oldest host minor it
                             needs; a number, not ILAB_ABI_MINOR (see above) */

    /* Static strings owned by the plugin, valid while it is loaded. */
    const char *name;          /* [a-z0-9_]+, equals the manifest's name */
    const char *version;       /* semver, equals the manifest's version */
    const char *manifest_yaml; /* the capability manifest (docs/manifest.md) [ABI-5, ABI-6, ABI-9] */

    /* Static table owned by the plugin, valid while it is loaded. */
    const ilab_backend_api_t *backend;
} ilab_plugin_entry_t;

#ifdef __cplusplus
}
#endif
#endif
