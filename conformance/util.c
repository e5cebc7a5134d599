/* Helpers shared by the test bodies: status messages, tokens, sequences,
 * float comparison with docs/contract.md's tolerance (TOL), memory and time. */
#include <dirent.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "suite.h"

const char *conf_result_name(conf_result r)
{
    static const char *const n[CONF_RESULT_COUNT] = {"PASS", "SKIP", "FAIL", "TIMEOUT", "CRASH", "ERROR"};
    return (unsigned)r < CONF_RESULT_COUNT ? n[r] : "ERROR";
}

const char *conf_result_lower(conf_result r)
{
    static const char *const n[CONF_RESULT_COUNT] = {"pass", "skip", "fail", "timeout", "crash", "error"};
    return (unsigned)r < CONF_RESULT_COUNT ? n[r] : "error";
}

bool conf_result_parse(const char *s, conf_result *out)
{
    for (int i = 0; i < CONF_RESULT_COUNT; i++)
        if (strcmp(s, conf_result_name((conf_result)i)) == 0) {
            *out = (conf_result)i;
            return true;
        }
    return false;
}

const char *conf_last_error(conf_env *env, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (env->be)
        env->api->last_error(env->be, buf, cap);
    buf[cap - 1] = '\0';
    return buf;
}

void conf_fail_status(conf_env *env, ilab_status st, const char *what, char *msg, size_t cap)
{
    char e[512];
    snprintf(msg, cap, "%s returned %s: %s", what, ilab_status_name(st),
             conf_last_error(env, e, sizeof e));
}

int32_t *conf_tokenize(conf_env *env, const char *s, size_t *n, char *msg, size_t cap)
{
    size_t len = strlen(s), want = len + 16;
    int32_t *t = malloc(want * sizeof *t);
    ilab_status st = env->api->tokenize(env->be, s, len, 0, t, want, n);
    if (st == ILAB_BUFFER_TOO_SMALL && *n > want) {
        want = *n;
        free(t);
        t = malloc((want ? want : 1) * sizeof *t);
        st = env->api->tokenize(env->be, s, len, 0, t, want, n);
    }
    if (st != ILAB_OK) {
        conf_fail_status(env, st, "tokenize()", msg, cap);
        free(t);
        return NULL;
    }
    return t;
}

char *conf_detokenize(conf_env *env, const int32_t *t, size_t n, size_t *len,
                      char *msg, size_t cap)
{
    size_t want = 64 + n * 16;
    char *s = malloc(want);
    ilab_status st = env->api->detokenize(env->be, t, n, s, want, len);
    if (st == ILAB_BUFFER_TOO_SMALL && *len + 1 > want) {
        want = *len + 1;
        free(s);
        s = malloc(want);
        st = env->api->detokenize(env->be, t, n, s, want, len);
    }
    if (st != ILAB_OK) {
        conf_fail_status(env, st, "detokenize()", msg, cap);
        free(s);
        return NULL;
    }
    if (*len >= want) {
        snprintf(msg, cap, "detokenize() reported %zu bytes into a %zu-byte buffer", *len, want);
        free(s);
        return NULL;
    }
    s[*len] = '\0';
    return s;
}

char *conf_output_text(conf_env *env, int32_t prev, const int32_t *t, size_t n, size_t *len,
                       char *msg, size_t cap)
{
    size_t used = 0, room = 64 + n * 16;
    char *s = malloc(room);
    for (size_t i = 0; s && i < n; i++) {
        int32_t before = i ? t[i - 1] : prev;
        size_t plen = 0;
        ilab_status st = env->api->token_piece(env->be, before, t[i], s + used, room - used, &plen);
        if (st == ILAB_BUFFER_TOO_SMALL && plen + 1 > room - used) {
            room = (used + plen + 1) * 2;
            char *grown = realloc(s, room);
            if (!grown) {
                free(s);
                s = NULL;
                break;
            }
            s = grown;
            st = env->api->token_piece(env->be, before, t[i], s + used, room - used, &plen);
        }
        if (st != ILAB_OK || plen >= room - used) {
            snprintf(msg, cap, "token_piece(%d, %d) gave %s (%zu bytes into %zu)", (int)before, (int)t[i],
                     ilab_status_name(st), plen, room - used);
            free(s);
            return NULL;
        }
        used += plen;
    }
    if (!s) {
        snprintf(msg, cap, "out of memory");
        return NULL;
    }
    s[used] = '\0';
    *len = used;
    return s;
}

ilab_status conf_eval1(conf_env *env, ilab_seq_t seq, const int32_t *tokens, int32_t n,
                       uint32_t flags, float *logits)
{
    ilab_batch_item_t item = {
        .struct_size = sizeof item, .seq = seq, .tokens = tokens, .n_tokens = n,
        .flags = flags, .logits = logits,
    };
    const ilab_batch_item_t *items[1] = {&item};
    return env->api->eval(env->be, items, 1);
}

ilab_status conf_fresh_logits(conf_env *env, const int32_t *tokens, int32_t n, float *logits)
{
    ilab_seq_t s = ILAB_SEQ_NONE;
    ilab_status st = env->api->seq_create(env->be, &s);
    if (st != ILAB_OK)
        return st;
    st = conf_eval1(env, s, tokens, n, 0, logits);
    ilab_status st2 = env->api->seq_free(env->be, s);
    return st != ILAB_OK ? st : st2;
}

int32_t conf_argmax(const float *v, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

bool conf_logits_close(const float *a, const float *b, int32_t n, const char *what,
                       char *msg, size_t cap)
{
    for (int32_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= 1e-4 + 1e-4 * fabs((double)b[i]))) {
            snprintf(msg, cap, "%s: logit %d is %.7g, expected %.7g (|diff| %.3g > 1e-4 + 1e-4|b|)",
                     what, i, (double)a[i], (double)b[i], d);
            return false;
        }
    }
    int32_t aa = conf_argmax(a, n), ab = conf_argmax(b, n);
    if (aa != ab) {
        snprintf(msg, cap, "%s: argmax %d, expected %d", what, aa, ab);
        return false;
    }
    return true;
}

uint64_t conf_splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void conf_prompt_tokens(const conf_env *env, uint64_t seed, int32_t *out, int32_t n)
{
    int32_t v = env->info.vocab_size;
    uint64_t s = seed;
    for (int32_t i = 0; i < n; i++) {
        int32_t t;
        do {
            t = (int32_t)(conf_splitmix64(&s) % (uint64_t)v);
        } while (v > 3 && (t == env->info.bos_id || t == env->info.eos_id));
        out[i] = t;
    }
}

void conf_log_softmax(const float *row, int32_t v, double *lp)
{
    double mx = row[conf_argmax(row, v)], sum = 0;
    for (int32_t t = 0; t < v; t++)
        sum += exp((double)row[t] - mx);
    double lse = mx + log(sum);
    for (int32_t t = 0; t < v; t++)
        lp[t] = (double)row[t] - lse;
}

int32_t conf_max_context(const conf_env *env)
{
    if (env->m && env->m->max_context > 0)
        return env->m->max_context;
    return env->info.max_context;
}

size_t conf_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return 0;
    unsigned long size = 0, resident = 0;
    if (fscanf(f, "%lu %lu", &size, &resident) != 2)
        resident = 0;
    fclose(f);
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* Under AddressSanitizer the allocator is the sanitizer's and glibc's
 * statistics stay empty; its own counter is used instead when linked in. */
extern size_t __sanitizer_get_current_allocated_bytes(void) __attribute__((weak));

size_t conf_heap_bytes(void)
{
    size_t exact;
    if (conf_heap_counter_exact(&exact))
        return exact;
    if (__sanitizer_get_current_allocated_bytes)
        return __sanitizer_get_current_allocated_bytes();
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

bool conf_leak_slope(conf_env *env, const char *what, int warmup, int cycles,
                     bool (*cycle)(conf_env *env, int i, void *ctx, char *msg, size_t cap),
                     void *ctx, conf_result *result, char *msg, size_t cap)
{
    int half = cycles / 2;
    size_t mark[3] = {0, 0, 0};
    for (int i = 0; i < warmup + 2 * half; i++) {
        if (i == warmup || i == warmup + half)
            mark[i == warmup ? 0 : 1] = conf_heap_bytes();
        if (!cycle(env, i, ctx, msg, cap)) {
            *result = CONF_FAIL;
            return false;
        }
    }
    mark[2] = conf_heap_bytes();
    double first = ((double)mark[1] - (double)mark[0]) / half;
    double second = ((double)mark[2] - (double)mark[1]) / half;
    /* A leak grows the live heap in both halves; a cache that fills once
     * grows it in the first half only. */
    double per_cycle = first < second ? first : second;
    if (per_cycle >= CONF_LEAK_BYTES_PER_CYCLE) {
        snprintf(msg, cap,
                 "live heap grew %.0f bytes per %s (%.0f then %.0f bytes/cycle over two halves of %d "
                 "cycles after %d warm-up cycles): a leak",
                 per_cycle, what, first, second, half, warmup);
        *result = CONF_FAIL;
        return false;
    }
    snprintf(msg, cap, "live heap %+.1f then %+.1f bytes per %s over 2 x %d cycles", first, second,
             what, half);
    *result = CONF_PASS;
    return true;
}

static double clock_seconds(clockid_t clock)
{
    struct timespec ts;
    if (clock_gettime(clock, &ts) != 0)
        return 0.0;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU seconds of the live children of every thread of this process. */
static double live_children_cpu_seconds(void)
{
    double total = 0.0;
    DIR *tasks = opendir("/proc/self/task");
    if (!tasks)
        return 0.0;
    for (struct dirent *t; (t = readdir(tasks));) {
        if (t->d_name[0] == '.')
            continue;
        char path[64];
        snprintf(path, sizeof path, "/proc/self/task/%.16s/children", t->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        for (int pid; fscanf(f, "%d", &pid) == 1;) {
            clockid_t clock;
            if (clock_getcpuclockid((pid_t)pid, &clock) == 0)
                total += clock_seconds(clock);
        }
        fclose(f);
    }
    closedir(tasks);
    return total;
}

/* A time budget in CPU seconds counts the plugin's work wherever it runs:
 * with --isolated that is a backend worker process, this process's child,
 * whose CPU time CLOCK_PROCESS_CPUTIME_ID leaves out (the random programs
 * then ran 5x the work they do in-process). Children already waited for are
 * in RUSAGE_CHILDREN, live ones are read from their own CPU clocks. */
double conf_cpu_seconds(void)
{
    double s = clock_seconds(CLOCK_PROCESS_CPUTIME_ID) + live_children_cpu_seconds();
    struct rusage ru;
    if (getrusage(RUSAGE_CHILDREN, &ru) == 0)
        s += (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
             (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
    return s;
}

double conf_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* TOK-2..4 run over these: plain ASCII, the whitespace the contract names,
 * and UTF-8 of every length (Latin-1, CJK, emoji incl. ZWJ sequences,
 * combining marks). */
const char *const conf_corpus[] = {
    "Once upon a time",
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.",
    " leading space",
    "trailing space ",
    "  two leading and two trailing  ",
    "tab\tseparated\tvalues",
    "line one\nline two\n",
    "windows line\r\nending\r\n",
    "\n\nblank lines above",
    "a",
    " ",
    "digits 0123456789 and punctuation !?.,;:'\"()[]{}<>/\\|@#$%^&*-_=+~`",
    "caf\xc3\xa9 na\xc3\xafve \xc3\xa9l\xc3\xa8ve",
    "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe6\x96\x87\xe7\xab\xa0\xe3\x80\x82 \xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97\xe7\xac\xa6",
    "emoji \xf0\x9f\x98\x80\xf0\x9f\x8e\x89 and a family \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7",
    "combining e\xcc\x81 a\xcc\x8a n\xcc\x83 and Z\xcd\x91\xcd\x97\xcc\x8b",
    "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xce\xba\xcf\x8c\xcf\x83\xce\xbc\xce\xb5 \xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d",
    "mixed\t \n\r\n  whitespace \t",
};
const size_t conf_corpus_count = sizeof conf_corpus / sizeof conf_corpus[0];

ilab_config_entry_t *conf_config_with(const conf_env *env, const char *key, const char *value, size_t *n)
{
    ilab_config_entry_t *cfg = calloc(env->n_config + 1, sizeof *cfg);
    *n = 0;
    if (!cfg)
        return NULL;
    for (size_t i = 0; i < env->n_config; i++)
        if (strcmp(env->config[i].key, key) != 0)
            cfg[(*n)++] = env->config[i];
    cfg[(*n)++] = (ilab_config_entry_t){key, value};
    return cfg;
}
