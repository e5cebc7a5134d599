/* --version text (build_info.h). */
#include "build_info.h"

#include <dlfcn.h>

#include "inferlab/plugin.h"

#ifndef ILAB_VERSION
#error "ILAB_VERSION must be defined by the build (PROJECT_VERSION)"
#endif
#ifndef ILAB_BUILD_TYPE
#error "ILAB_BUILD_TYPE must be defined by the build (CMAKE_BUILD_TYPE)"
#endif

#if defined(__clang__)
#define ILAB_COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define ILAB_COMPILER "gcc " __VERSION__
#else
#define ILAB_COMPILER "unknown compiler"
#endif

#if defined(__SANITIZE_ADDRESS__)
#define ILAB_SANITIZERS " +ASan+UBSan"
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ILAB_SANITIZERS " +ASan+UBSan"
#endif
#endif
#ifndef ILAB_SANITIZERS
#define ILAB_SANITIZERS ""
#endif

/* The host does not link OpenBLAS (torchlike does): ask the shared library
 * itself, only here, so the core it picks on this machine is what we print. */
static void print_openblas(FILE *out)
{
    void *h = dlopen("libopenblas.so.0", RTLD_LAZY | RTLD_LOCAL);
    if (!h) {
        fprintf(out, "openblas: not found (libopenblas.so.0: %s)\n", dlerror());
        return;
    }
    char *(*config)(void) = (char *(*)(void))dlsym(h, "openblas_get_config");
    char *(*core)(void) = (char *(*)(void))dlsym(h, "openblas_get_corename");
    fprintf(out, "openblas: %s, core %s\n", config ? config() : "?", core ? core() : "?");
    dlclose(h);
}

void ilab_print_version(FILE *out, const char *program)
{
    fprintf(out, "%s %s\n", program, ILAB_VERSION);
    fprintf(out, "sdk abi: %d.%d\n", ILAB_ABI_MAJOR, ILAB_ABI_MINOR);
    fprintf(out, "build: %s%s, %s\n", ILAB_BUILD_TYPE, ILAB_SANITIZERS, ILAB_COMPILER);
    print_openblas(out);
}
