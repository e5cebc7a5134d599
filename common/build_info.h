/* What `inferlab --version` and `inferlab-conformance --version` print: the
 * product version, the SDK ABI version, and the build (compiler, build type,
 * sanitizers, the OpenBLAS the plugins will get), as a problem report needs. */
#ifndef ILAB_COMMON_BUILD_INFO_H
#define ILAB_COMMON_BUILD_INFO_H

#include <stdio.h>

/* Writes a few "key: value" lines, the first "<program> <version>". */
void ilab_print_version(FILE *out, const char *program);

#endif
