/* bench_host_overhead: is the host free?
 *
 * Same plugin instance, same prompt, same number of greedy tokens, run
 * alternately:
 *   direct  seq_create + eval(prompt) + N x (argmax, eval(1 token)), no host;
 *   host    ilab_engine_generate(temperature 0, ignore_eos, max_tokens N):
 *           scheduler thread, batch building, sampler (with raw logprobs),
 *           token_piece + text streaming, one event per token.
 * Reports the median tokens/s of each and host/direct (target >= 0.98).
 *
 *   bench_host_overhead [--plugin PATH] [--set KEY=VALUE]... [--tokens N] [--rounds R]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loader/plugin_loader.h"
#include "runtime/engine.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU seconds of the whole process (all threads): on a shared, loaded
 * machine this moves far less than wall time. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

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

typedef struct sink {
    int32_t *tokens;
    int n;
} sink;

static int on_event(void *ud, const ilab_event_t *ev)
{
    sink *s = ud;
    if (ev->type == ILAB_EVENT_TOKEN)
        s->tokens[s->n++] = ev->token;
    return 0;
}

int main(int argc, char **argv)
{
    const char *plugin_path = DEFAULT_PLUGIN;
    ilab_config_entry_t user[16];
    size_t n_user = 0;
    int n_tokens = 200, rounds = 7;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--plugin") && i + 1 < argc)
            plugin_path = argv[++i];
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
            n_tokens = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--set") && i + 1 < argc && n_user < 16) {
            char *kv = argv[++i], *eq = strchr(kv, '=');
            if (!eq) {
                fprintf(stderr, "--set %s: expected key=value\n", kv);
                return 2;
            }
            *eq = '\0';
            user[n_user].key = kv;
            user[n_user].value = eq + 1;
            n_user++;
        } else {
            fprintf(stderr, "usage: %s [--plugin PATH] [--set KEY=VALUE]... [--tokens N] [--rounds R]\n", argv[0]);
            return 2;
        }
    }
    if (n_tokens < 1 || rounds < 1 || rounds > 101) {
        fprintf(stderr, "--tokens must be >= 1 and --rounds in [1, 101]\n");
        return 2;
    }

    char err[2048];
    ilab_plugin *plugin = NULL;
    if (ilab_plugin_load(plugin_path, err, sizeof err, &plugin) != ILAB_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const ilab_manifest *m = ilab_plugin_manifest(plugin);
    const ilab_backend_api_t *api = ilab_plugin_api(plugin);
    ilab_config_entry_t *cfg = NULL;
    size_t n_cfg = 0;
    ilab_backend_t *b = NULL;
    if (ilab_config_validate(m, user, n_user, err, sizeof err) != ILAB_OK ||
        ilab_config_with_defaults(m, user, n_user, &cfg, &n_cfg) != ILAB_OK ||
        api->create(ilab_host_services(), cfg, n_cfg, err, sizeof err, &b) != ILAB_OK) {
        fprintf(stderr, "%s: %s\n", plugin_path, err);
        return 1;
    }
    ilab_config_entries_free(cfg, n_cfg);
    ilab_model_info_t info = {.struct_size = sizeof info};
    api->model_info(b, &info);

    const char *text = "It is a truth universally acknowledged, that a single man";
    int32_t prompt[256];
    size_t n_prompt = 0;
    if (api->tokenize(b, text, strlen(text), ILAB_TOKENIZE_ADD_BOS, prompt, 256, &n_prompt) != ILAB_OK)
        return 1;
    if ((int)n_prompt + n_tokens > info.max_context)
        n_tokens = info.max_context - (int)n_prompt;

    ilab_engine_config ecfg;
    ilab_engine_config_default(&ecfg);
    ilab_engine *engine = NULL;
    if (ilab_engine_create(plugin, b, &ecfg, err, sizeof err, &engine) != ILAB_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    ilab_request req;
    memset(&req, 0, sizeof req);
    req.prompt_tokens = prompt;
    req.n_prompt_tokens = n_prompt;
    req.sampling.struct_size = sizeof req.sampling;
    req.sampling.top_p = 1.0f;
    req.sampling.repetition_penalty = 1.0f;
    req.max_tokens = n_tokens;
    req.ignore_eos = true;

    float *logits = malloc((size_t)info.vocab_size * sizeof *logits);
    int32_t *direct_tokens = malloc((size_t)n_tokens * sizeof *direct_tokens);
    sink s = {malloc((size_t)n_tokens * sizeof(int32_t)), 0};
    double direct_tps[101], host_tps[101], direct_cpu[101], host_cpu[101];
    int mismatches = 0;

    /* One warm-up of each, then alternate so drift hits both alike. */
    for (int r = -1; r < rounds; r++) {
        double c0 = cpu_now(), t0 = now();
        ilab_seq_t seq;
        api->seq_create(b, &seq);
        ilab_batch_item_t item = {sizeof item, seq, prompt, (int32_t)n_prompt, 0, logits};
        const ilab_batch_item_t *items[1] = {&item};
        for (int i = 0; i < n_tokens; i++) {
            if (api->eval(b, items, 1) != ILAB_OK) {
                api->last_error(b, err, sizeof err);
                fprintf(stderr, "eval: %s\n", err);
                return 1;
            }
            int32_t best = 0;
            for (int32_t v = 1; v < info.vocab_size; v++)
                if (logits[v] > logits[best])
                    best = v;
            direct_tokens[i] = best;
            item.tokens = &direct_tokens[i];
            item.n_tokens = 1;
        }
        double t1 = now(), c1 = cpu_now();
        api->seq_free(b, seq);

        s.n = 0;
        double c2 = cpu_now(), t2 = now();
        if (ilab_engine_generate(engine, &req, on_event, &s, err, sizeof err, NULL) != ILAB_OK) {
            fprintf(stderr, "generate: %s\n", err);
            return 1;
        }
        double t3 = now(), c3 = cpu_now();
        if (s.n != n_tokens || memcmp(s.tokens, direct_tokens, (size_t)n_tokens * sizeof(int32_t)))
            mismatches++;
        if (r >= 0) {
            direct_tps[r] = n_tokens / (t1 - t0);
            host_tps[r] = n_tokens / (t3 - t2);
            direct_cpu[r] = n_tokens / (c1 - c0);
            host_cpu[r] = n_tokens / (c3 - c2);
        }
    }
    double d = median(direct_tps, rounds), h = median(host_tps, rounds);
    double dc = median(direct_cpu, rounds), hc = median(host_cpu, rounds);
    printf("model %s (vocab %d), prompt %zu tokens, %d greedy tokens, %d rounds (median)\n", info.name,
           info.vocab_size, n_prompt, n_tokens, rounds);
    printf("direct eval loop : %10.1f tokens/s\n", d);
    printf("through the host : %10.1f tokens/s\n", h);
    printf("host/direct ratio: %10.3f (target >= 0.98)\n", h / d);
    printf("per CPU second   : direct %.1f, host %.1f tokens, ratio %.3f\n", dc, hc, hc / dc);
    if (mismatches)
        printf("WARNING: %d rounds where host tokens differed from the direct argmax loop\n", mismatches);

    ilab_engine_destroy(engine);
    api->destroy(b);
    ilab_plugin_unload(plugin);
    free(logits);
    free(direct_tokens);
    free(s.tokens);
    return mismatches ? 1 : 0;
}
