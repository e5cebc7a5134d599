/* inferlab SDK — services the host passes in.
 *
 * A plugin never links against host symbols (ABI principle 8): whatever it
 * needs from the host arrives through this table, given to probe() and
 * create(). The table is owned by the host and stays valid until the last
 * instance created with it is destroyed. */
#ifndef INFERLAB_HOST_H
#define INFERLAB_HOST_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ilab_log_level {
    ILAB_LOG_DEBUG = 0,
    ILAB_LOG_INFO = 1,
    ILAB_LOG_WARN = 2,
    ILAB_LOG_ERROR = 3,
} ilab_log_level;

typedef struct ilab_host {
    uint32_t struct_size; /* sizeof(ilab_host_t) as the host was built; read no member past it;
                             a plugin that needs a missing member gives ILAB_ABI_MISMATCH [ABI-3] */
    uint32_t abi_major;   /* the host's ABI version */
    uint32_t abi_minor;

    /* Host-private; the plugin passes the table back unchanged. */
    void *host_data;

    /* Log one line. `plugin` and `message` are borrowed for the call; no
     * trailing newline. Any thread, any time, including inside callbacks. */
    void (*log)(const struct ilab_host *host, ilab_log_level level,
                const char *plugin, const char *message);

    /* Monotonic clock in nanoseconds (CLOCK_MONOTONIC). Any thread. */
    uint64_t (*now_ns)(const struct ilab_host *host);
} ilab_host_t;

#ifdef __cplusplus
}
#endif
#endif
