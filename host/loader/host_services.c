/* The services table the host hands to every plugin (sdk host.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "plugin_loader.h"

static const char *level_name(ilab_log_level level)
{
    switch (level) {
    case ILAB_LOG_DEBUG: return "debug";
    case ILAB_LOG_INFO: return "info";
    case ILAB_LOG_WARN: return "warn";
    default: return "error";
    }
}

/* INFERLAB_LOG=debug|info|warn|error; warnings and errors by default so a
 * plugin cannot clutter the token stream of `inferlab run`. */
static ilab_log_level threshold(void)
{
    const char *env = getenv("INFERLAB_LOG");
    if (!env)
        return ILAB_LOG_WARN;
    if (!strcmp(env, "debug"))
        return ILAB_LOG_DEBUG;
    if (!strcmp(env, "info"))
        return ILAB_LOG_INFO;
    if (!strcmp(env, "error"))
        return ILAB_LOG_ERROR;
    return ILAB_LOG_WARN;
}

static void log_to_stderr(const ilab_host_t *host, ilab_log_level level, const char *plugin,
                          const char *message)
{
    if (level < threshold())
        return;
    /* One fprintf per line: stdio locks the stream, so lines from several
     * threads do not interleave. */
    fprintf(stderr, "inferlab [%s] %s: %s\n", level_name(level), plugin ? plugin : "?",
            message ? message : "");
}

static uint64_t monotonic_ns(const ilab_host_t *host)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static const ilab_host_t services = {
    .struct_size = sizeof(ilab_host_t),
    .abi_major = ILAB_ABI_MAJOR,
    .abi_minor = ILAB_ABI_MINOR,
    .host_data = NULL,
    .log = log_to_stderr,
    .now_ns = monotonic_ns,
};

const ilab_host_t *ilab_host_services(void)
{
    return &services;
}
