/* Rate-limited error lines and the access log. */
#include "server_log.h"

#include <errno.h>
#include <string.h>
#include <time.h>

bool ilab_server_log_open(ilab_server_log *l, const char *access_path, char *err,
                          size_t err_cap)
{
    memset(l, 0, sizeof *l);
    pthread_mutex_init(&l->mu, NULL);
    l->window = -1;
    if (access_path && access_path[0]) {
        l->access = fopen(access_path, "a");
        if (!l->access) {
            snprintf(err, err_cap, "cannot open the access log '%s': %s", access_path,
                     strerror(errno));
            pthread_mutex_destroy(&l->mu);
            return false;
        }
        setvbuf(l->access, NULL, _IOLBF, 0);
    }
    return true;
}

static void report_suppressed(ilab_server_log *l)
{
    if (l->suppressed)
        fprintf(stderr, "inferlab serve: (suppressed %llu more log lines)\n", l->suppressed);
    l->suppressed = 0;
}

void ilab_server_log_close(ilab_server_log *l)
{
    pthread_mutex_lock(&l->mu);
    report_suppressed(l);
    if (l->access)
        fclose(l->access);
    l->access = NULL;
    pthread_mutex_unlock(&l->mu);
    pthread_mutex_destroy(&l->mu);
}

void ilab_server_log_error(ilab_server_log *l, const char *prefix, const char *fmt, va_list ap)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    pthread_mutex_lock(&l->mu);
    if (ts.tv_sec != l->window) {
        report_suppressed(l);
        l->window = ts.tv_sec;
        l->lines = 0;
    }
    if (l->lines >= ILAB_SERVER_LOG_LINES_PER_SECOND) {
        l->suppressed++;
    } else {
        l->lines++;
        char line[512];
        vsnprintf(line, sizeof line, fmt, ap);
        size_t n = strlen(line);
        fprintf(stderr, "inferlab serve: %s%s%s", prefix, line,
                n && line[n - 1] == '\n' ? "" : "\n");
    }
    pthread_mutex_unlock(&l->mu);
}

/* A client-chosen string, safe on one log line: printable ASCII but '"'
 * and '\\' as is, the rest as \xNN; cut at 256 bytes. */
static void clean(char *out, size_t cap, const char *in)
{
    size_t o = 0;
    for (size_t i = 0; in && in[i] && i < 256 && o + 5 < cap; i++) {
        unsigned char ch = (unsigned char)in[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\')
            out[o++] = (char)ch;
        else
            o += (size_t)snprintf(out + o, cap - o, "\\x%02X", ch);
    }
    out[o] = '\0';
}

void ilab_server_log_access(ilab_server_log *l, const char *client, const char *method,
                            const char *path, unsigned status, double seconds)
{
    if (!l->access)
        return;
    char m[64], p[1100];
    clean(m, sizeof m, method);
    clean(p, sizeof p, path);
    method = m;
    path = p;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    pthread_mutex_lock(&l->mu);
    fprintf(l->access, "%s %s \"%s %s\" %u %.1fms\n", when, client, method, path, status,
            seconds * 1e3);
    pthread_mutex_unlock(&l->mu);
}
