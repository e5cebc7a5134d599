/* bench_adapter_overhead: what does the HTTP adapter cost per token?
 *
 * The same model two ways, alternately in one run (tests/adapters/live_pair.h):
 *   direct   torchlike in this process, through the host engine;
 *   adapter  vllm_stub (or sglang_stub) -> HTTP over loopback -> `inferlab
 *            serve` -> torchlike, also through a host engine (the one in
 *            front of the adapter).
 * Same prompt, same number of greedy tokens (ignore_eos). For each it
 * reports the median decode tokens/s (tokens after the first over the time
 * after the first: the per-token rate, without the prompt) and end-to-end
 * tokens/s, the per-token overhead (1/adapter - 1/direct, in microseconds),
 * the median time to the first token, and the load average before and
 * after (the machine is shared). Token ids must agree every round.
 *
 * On a loaded machine wall time mostly says how much of a CPU each process
 * was given (and the adapter's two processes get two shares), so the
 * figure to trust there is CPU time per token: this process's (exact) on
 * either side, plus, with --server-pid, the server's (from /proc, in clock
 * ticks, so summed over all rounds).
 *
 *   bench_adapter_overhead --url URL [--server-pid PID] [--adapter PLUGIN.so] [--threads N]
 *                          [--tokens N] [--rounds R]
 *   (--threads: torchlike's threads in this process; give the server the same
 *   with --set torchlike.threads=N, so that neither side's idle BLAS threads
 *   spin on the cores the other one needs)
 *   (URL: an `inferlab serve --backend torchlike`; README.md says how) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "live_pair.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void print_load(const char *when)
{
    double l[3];
    if (getloadavg(l, 3) == 3)
        printf("load average %s: %.2f %.2f %.2f (%ld CPUs online)\n", when, l[0], l[1], l[2],
               sysconf(_SC_NPROCESSORS_ONLN));
}

typedef struct side_stats {
    double decode[101], e2e[101], ttft[101];
    double cpu_self, cpu_server; /* seconds, summed over the kept rounds */
} side_stats;

static double cpu_self_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* utime + stime of process `pid` in seconds (/proc/PID/stat, fields 14 and
 * 15, after the parenthesised name); 0 when unknown. */
static double cpu_of_pid(long pid)
{
    if (pid <= 0)
        return 0;
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static long server_pid;

/* One timed generation into `st` at `r` (r < 0: warm-up, not kept). */
static int timed(live_side *s, const int32_t *prompt, size_t n_prompt, int32_t n, int32_t *out,
                 side_stats *st, int r)
{
    ilab_sampling_t greedy = {.struct_size = sizeof greedy, .top_p = 1, .repetition_penalty = 1};
    ilab_request_metrics m;
    size_t got = 0;
    char err[1024];
    double c0 = cpu_self_now(), s0 = cpu_of_pid(server_pid);
    int rc = live_generate(s, prompt, n_prompt, &greedy, n, out, &got, &m, err, sizeof err);
    double c1 = cpu_self_now(), s1 = cpu_of_pid(server_pid);
    if (rc || got != (size_t)n) {
        fprintf(stderr, "generate: %s (%zu of %d tokens)\n", err, got, n);
        return -1;
    }
    if (r >= 0) {
        st->decode[r] = (n - 1) / (m.e2e_seconds - m.ttft_seconds);
        st->e2e[r] = n / m.e2e_seconds;
        st->ttft[r] = m.ttft_seconds * 1e3;
        st->cpu_self += c1 - c0;
        st->cpu_server += s1 - s0;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *url = NULL, *adapter_path = VLLM_STUB_PLUGIN;
    int n_tokens = 200, rounds = 7;
    const char *threads = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--url") && i + 1 < argc)
            url = argv[++i];
        else if (!strcmp(argv[i], "--adapter") && i + 1 < argc)
            adapter_path = argv[++i];
        else if (!strcmp(argv[i], "--server-pid") && i + 1 < argc)
            server_pid = atol(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = argv[++i];
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
            n_tokens = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s --url URL [--server-pid PID] [--adapter PLUGIN.so] "
                    "[--threads N] [--tokens N] [--rounds R]\n", argv[0]);
            return 2;
        }
    }
    if (!url || n_tokens < 2 || rounds < 1 || rounds > 101) {
        fprintf(stderr, "--url is required, --tokens must be >= 2, --rounds in [1, 101]\n");
        return 2;
    }
    char err[2048], base[600], nthreads[32];
    live_side direct, adapter;
    snprintf(base, sizeof base, "base_url=%s", url);
    const char *sets[1] = {base};
    snprintf(nthreads, sizeof nthreads, "threads=%s", threads ? threads : "");
    const char *direct_sets[1] = {nthreads};
    if (live_open(&direct, TORCHLIKE_PLUGIN, direct_sets, threads ? 1 : 0, err, sizeof err) ||
        live_open(&adapter, adapter_path, sets, 1, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const char *text = "It is a truth universally acknowledged, that a single man";
    int32_t prompt[256];
    size_t n_prompt = 0;
    if (direct.api->tokenize(direct.backend, text, strlen(text), ILAB_TOKENIZE_ADD_BOS, prompt, 256,
                             &n_prompt) != ILAB_OK)
        return 1;
    /* SGLang's rule (the stricter): prompt + new tokens below the context */
    if ((int)n_prompt + n_tokens >= direct.info.max_context)
        n_tokens = direct.info.max_context - (int)n_prompt - 1;
    int32_t *a = malloc((size_t)n_tokens * sizeof *a), *b = malloc((size_t)n_tokens * sizeof *b);
    static side_stats ds, as;
    int mismatches = 0;
    print_load("before");
    /* one warm-up of each, then alternate so drift hits both alike */
    for (int r = -1; r < rounds; r++) {
        if (timed(&direct, prompt, n_prompt, n_tokens, a, &ds, r) ||
            timed(&adapter, prompt, n_prompt, n_tokens, b, &as, r))
            return 1;
        mismatches += memcmp(a, b, (size_t)n_tokens * sizeof *a) != 0;
    }
    print_load("after ");
    double dd = median(ds.decode, rounds), ad = median(as.decode, rounds);
    double de = median(ds.e2e, rounds), ae = median(as.e2e, rounds);
    printf("model %s (vocab %d), prompt %zu tokens, %d greedy tokens, %d rounds (median), adapter %s\n",
           direct.info.name, direct.info.vocab_size, n_prompt, n_tokens, rounds, adapter_path);
    printf("                      direct   adapter   adapter/direct\n");
    printf("decode tokens/s   %10.1f %9.1f   %6.3f\n", dd, ad, ad / dd);
    printf("end-to-end tok/s  %10.1f %9.1f   %6.3f\n", de, ae, ae / de);
    printf("first token, ms   %10.2f %9.2f\n", median(ds.ttft, rounds), median(as.ttft, rounds));
    printf("per-token overhead of the adapter (decode, wall): %.1f us (%.1f us direct per token)\n",
           1e6 * (1.0 / ad - 1.0 / dd), 1e6 / dd);
    double total = (double)rounds * n_tokens;
    double d_cpu = (ds.cpu_self + ds.cpu_server) / total, a_cpu = (as.cpu_self + as.cpu_server) / total;
    printf("CPU per token, all rounds: direct %.1f us (server %.1f), adapter %.1f us (client %.1f + "
           "server %.1f)%s\n", 1e6 * d_cpu, 1e6 * ds.cpu_server / total, 1e6 * a_cpu,
           1e6 * as.cpu_self / total, 1e6 * as.cpu_server / total,
           server_pid ? "" : " -- no --server-pid: the server's CPU is not counted");
    printf("per-token overhead of the adapter (CPU): %.1f us; tokens per CPU second: direct %.0f, "
           "adapter %.0f (%.3f)\n", 1e6 * (a_cpu - d_cpu), 1 / d_cpu, 1 / a_cpu, d_cpu / a_cpu);
    if (mismatches)
        printf("WARNING: %d rounds where the adapter's tokens differed from torchlike's\n", mismatches);
    live_close(&adapter);
    live_close(&direct);
    free(a);
    free(b);
    return mismatches ? 1 : 0;
}
