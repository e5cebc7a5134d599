/* Child-process server + libcurl helpers for the HTTP API tests. */
#include "http_client.h"
#include "response_check.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef INFERLAB_EXE
#error "INFERLAB_EXE must name the inferlab executable"
#endif

bool test_server_start(test_server *s, const char *const *args)
{
    return test_server_start_logged(s, args, NULL);
}

bool test_server_start_logged(test_server *s, const char *const *args, const char *stderr_path)
{
    memset(s, 0, sizeof *s);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    s->started_at = (double)t0.tv_sec + (double)t0.tv_nsec / 1e9; /* before the server exists */
    int fds[2];
    if (pipe(fds))
        return false;
    const char *argv[64] = {INFERLAB_EXE, "serve", "--port", "0"};
    size_t n = 4;
    for (size_t i = 0; args && args[i] && n < 63; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        return false;
    if (pid == 0) {
        /* A test that fails midway must not leave its server running. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fds[1], STDOUT_FILENO);
        if (stderr_path) {
            int e = open(stderr_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
            if (e >= 0)
                dup2(e, STDERR_FILENO);
        }
        close(fds[0]);
        close(fds[1]);
        execv(INFERLAB_EXE, (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    s->pid = pid;
    char line[512];
    size_t len = 0;
    /* Read the first line, 20 s at most. */
    for (int waited = 0; waited < 200 && len < sizeof line - 1; waited++) {
        struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        ssize_t r = read(fds[0], line + len, sizeof line - 1 - len);
        if (r <= 0)
            break;
        len += (size_t)r;
        line[len] = '\0';
        if (strchr(line, '\n'))
            break;
    }
    close(fds[0]);
    line[len] = '\0';
    const char *p = strstr(line, "127.0.0.1:");
    if (!p || sscanf(p, "127.0.0.1:%d", &s->port) != 1) {
        fprintf(stderr, "server did not report its port; stdout was: '%s'\n", line);
        test_server_stop(s);
        return false;
    }
    snprintf(s->base, sizeof s->base, "http://127.0.0.1:%d", s->port);
    return true;
}

int test_server_stop(test_server *s)
{
    if (s->pid <= 0)
        return -1;
    kill(s->pid, SIGTERM);
    int status = 0;
    for (int i = 0; i < 200; i++) {
        pid_t r = waitpid(s->pid, &status, WNOHANG);
        if (r == s->pid) {
            s->pid = 0;
            return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        }
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
    kill(s->pid, SIGKILL);
    waitpid(s->pid, &status, 0);
    s->pid = 0;
    return -1;
}

bool http_buf_append(char **data, size_t *len, const char *p, size_t n)
{
    char *grown = realloc(*data, *len + n + 1);
    if (!grown)
        return false;
    memcpy(grown + *len, p, n);
    *data = grown;
    *len += n;
    grown[*len] = '\0';
    return true;
}

static size_t collect(char *data, size_t size, size_t nmemb, void *user)
{
    http_reply *r = user;
    return http_buf_append(&r->body, &r->len, data, size * nmemb) ? size * nmemb : 0;
}

static size_t header(char *data, size_t size, size_t nmemb, void *user)
{
    http_reply *r = user;
    size_t n = size * nmemb;
    if (n > 13 && !strncasecmp(data, "Retry-After:", 12))
        sscanf(data + 12, " %15s", r->retry_after);
    if (n > 14 && !strncasecmp(data, "Content-Type:", 13))
        sscanf(data + 13, " %63[^\r\n]", r->content_type);
    return n;
}

bool http_call(const test_server *s, const char *path, const char *body, http_reply *out)
{
    return http_call_ex(s, NULL, path, body, NULL, out);
}

bool http_call_ex(const test_server *s, const char *method, const char *path, const char *body,
                  const char *const *headers, http_reply *out)
{
    memset(out, 0, sizeof *out);
    out->body = calloc(1, 1);
    CURL *c = curl_easy_init();
    if (!c)
        return false;
    char url[256];
    snprintf(url, sizeof url, "%s%s", s->base, path);
    struct curl_slist *hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    for (size_t i = 0; headers && headers[i]; i++)
        hdrs = curl_slist_append(hdrs, headers[i]);
    if (method && !strcmp(method, "HEAD"))
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else if (method)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, out);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CURLcode rc = curl_easy_perform(c);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double wall_s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
    if (rc != CURLE_OK) {
        fprintf(stderr, "curl %s: %s\n", url, curl_easy_strerror(rc));
        return false;
    }
    /* Every completion and chat response, in every server test, is held to
     * the invariants of response_check.h; a violation fails the call. */
    if (body && rc_covers(path) && !(method && !strcmp(method, "HEAD"))) {
        char why[1024];
        bool checked;
        if (!rc_check_reply(path, body, out, why, sizeof why)) {
            rc_note_failure("response", path, body, why);
            return false;
        }
        if (!rc_check_metrics(s, headers, (double)t0.tv_sec + (double)t0.tv_nsec / 1e9, wall_s,
                              &checked, why, sizeof why)) {
            rc_note_failure("metrics", path, body, why);
            return false;
        }
    }
    return true;
}

void http_reply_free(http_reply *r)
{
    free(r->body);
    memset(r, 0, sizeof *r);
}

double metric_value(const test_server *s, const char *series)
{
    http_reply r;
    double v = -1;
    if (http_call(s, "/metrics", NULL, &r) && r.status == 200) {
        size_t n = strlen(series);
        for (char *line = r.body; line && *line;) {
            char *next = strchr(line, '\n');
            if (!strncmp(line, series, n) && line[n] == ' ') {
                v = strtod(line + n + 1, NULL);
                break;
            }
            line = next ? next + 1 : NULL;
        }
    }
    http_reply_free(&r);
    return v;
}
