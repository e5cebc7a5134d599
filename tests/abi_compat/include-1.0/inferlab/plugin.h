/* inferlab SDK — the bootstrap export.
 *
 * A plugin exports exactly one dynamic symbol, ILAB_PLUGIN_ENTRY_SYMBOL, a
 * const ilab_plugin_entry_t. Its first three fields never move in any ABI
 * version: the host reads them before trusting anything else. The linker
 * version script shipped with the SDK (plugin.map; the CMake function
 * inferlab_add_plugin applies it) hides every other symbol.
 *
 *     ILAB_PLUGIN_EXPORT const ilab_plugin_entry_t ilab_plugin_entry = {
 *         .struct_size = sizeof(ilab_plugin_entry_t),
 *         .abi_major = ILAB_ABI_MAJOR, .abi_minor = ILAB_ABI_MINOR,
 *         .name = "mybackend", .version = "0.1.0",
 *         .manifest_yaml = MANIFEST, .backend = &my_api,
 *     };
 *
 * Versioning (negotiated by the host, not the plugin): the host refuses a
 * different major, and a minor newer than its own. Minors only append members
 * to size-prefixed structs; the host treats members past a struct's
 * struct_size as absent. */
#ifndef INFERLAB_PLUGIN_H
#define INFERLAB_PLUGIN_H

#include <stdint.h>

#include "inferlab/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ILAB_ABI_MAJOR 1
#define ILAB_ABI_MINOR 0

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
    uint32_t abi_minor;   /* the oldest host minor the plugin needs */

    /* Static strings owned by the plugin, valid while it is loaded. */
    const char *name;          /* [a-z0-9_]+, equals the manifest's name */
    const char *version;       /* semver, equals the manifest's version */
    const char *manifest_yaml; /* the capability manifest (docs/manifest.md) */

    /* Static table owned by the plugin, valid while it is loaded. */
    const ilab_backend_api_t *backend;
} ilab_plugin_entry_t;

#ifdef __cplusplus
}
#endif
#endif
