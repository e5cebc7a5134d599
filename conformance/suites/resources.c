/* Live heap, descriptors and threads (resources.h). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resources.h"
#include "suites.h"

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

static int count_threads(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    int n = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "Threads:", 8) == 0)
            n = atoi(line + 8);
    fclose(f);
    return n;
}

conf_resources conf_resources_now(void)
{
    conf_resources r = {conf_heap_bytes(), count_fds(), count_threads()};
    return r;
}

bool conf_resources_same(conf_resources a, conf_resources b, const char *what, char *msg, size_t cap)
{
    CONF_CHECK_BOOL(a.heap == b.heap && a.fds == b.fds && a.threads == b.threads,
                    "%s: live heap %zu -> %zu bytes, file descriptors %d -> %d, threads %d -> %d", what,
                    a.heap, b.heap, a.fds, b.fds, a.threads, b.threads);
    return true;
}
