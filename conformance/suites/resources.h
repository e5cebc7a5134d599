/* What an instance may not leave behind (ABI-7): live heap bytes, open file
 * descriptors and threads of this process, measured and compared. */
#ifndef CONF_SUITES_RESOURCES_H
#define CONF_SUITES_RESOURCES_H

#include <stdbool.h>
#include <stddef.h>

typedef struct conf_resources {
    size_t heap;
    int fds, threads;
} conf_resources;

conf_resources conf_resources_now(void);
/* false with a message naming `what` and each figure when a and b differ */
bool conf_resources_same(conf_resources a, conf_resources b, const char *what, char *msg, size_t cap);

#endif
