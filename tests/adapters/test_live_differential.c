/* Differential: torchlike called directly (a host engine in this process)
 * and torchlike through an adapter (vllm_stub: vLLM's /v1/completions;
 * sglang_stub: SGLang's /generate) -> HTTP -> `inferlab serve` give the same
 * tokens, id for id: greedy and seeded sampling, 10 prompts of 64 tokens.
 * The server samples with the host's sampler from the request's parameters,
 * so equal output proves every sampling field and the seed survive the
 * adapter's encoding, the server's parsing and the stream's decoding.
 *
 *   test_live_differential URL ADAPTER.so   (URL: an `inferlab serve --backend torchlike`) */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "live_pair.h"

#define N_TOKENS 64

static const char *const prompts[10] = {
    "It is a truth universally acknowledged",
    "Elizabeth said",
    "Once upon a time",
    "Mr. Darcy walked into the room and",
    "The weather at Netherfield",
    "\"My dear Mr. Bennet,\" said his lady to him one day,",
    "She had never",
    "Emma Woodhouse, handsome, clever, and rich,",
    "In the morning",
    "A letter arrived",
};

/* The first index where a and b differ (their shorter length if none). */
static size_t first_diff(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i])
        i++;
    return i;
}

static int compare(live_side *direct, live_side *adapter, const char *what, size_t p,
                   const int32_t *prompt, size_t n_prompt, const ilab_sampling_t *smp)
{
    int32_t want[N_TOKENS], got[N_TOKENS];
    size_t n_want = 0, n_got = 0;
    char err[1024] = "";
    if (live_generate(direct, prompt, n_prompt, smp, N_TOKENS, want, &n_want, NULL, err, sizeof err) ||
        live_generate(adapter, prompt, n_prompt, smp, N_TOKENS, got, &n_got, NULL, err, sizeof err)) {
        fprintf(stderr, "%s, prompt %zu: generation failed: %s\n", what, p, err);
        return 1;
    }
    size_t at = first_diff(want, n_want, got, n_got);
    if (n_want != N_TOKENS || n_got != N_TOKENS || at < N_TOKENS) {
        fprintf(stderr, "%s, prompt %zu (\"%s\", seed %" PRIu64 "): direct gave %zu tokens, the adapter "
                "%zu; they differ at %zu (direct %d, adapter %d)\n", what, p, prompts[p], smp->seed,
                n_want, n_got, at, at < n_want ? want[at] : -1, at < n_got ? got[at] : -1);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s URL ADAPTER.so (URL: of inferlab serve --backend torchlike)\n",
                argv[0]);
        return 2;
    }
    const char *adapter_path = argv[2];
    char err[2048], url[600], eos[32];
    live_side direct, adapter;
    if (live_open(&direct, TORCHLIKE_PLUGIN, NULL, 0, err, sizeof err)) {
        fprintf(stderr, "torchlike: %s\n", err);
        return 1;
    }
    /* the server publishes the vocabulary size, not EOS: tell the adapter */
    snprintf(url, sizeof url, "base_url=%s", argv[1]);
    snprintf(eos, sizeof eos, "eos_id=%d", direct.info.eos_id);
    const char *sets[2] = {url, eos};
    if (live_open(&adapter, adapter_path, sets, 2, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        live_close(&direct);
        return 1;
    }
    int failed = 0;
    /* SGLang keeps one position free (prompt + max_new_tokens < context), so
     * sglang_stub reports one less: the longest sequence a request reaches */
    int32_t reserve = strstr(adapter_path, "sglang") ? 1 : 0;
    if (adapter.info.vocab_size != direct.info.vocab_size ||
        adapter.info.max_context != direct.info.max_context - reserve ||
        adapter.info.bos_id != direct.info.bos_id) {
        fprintf(stderr, "model_info through the adapter (vocab %d, context %d, BOS %d) is not torchlike's "
                "(%d, %d, %d)\n", adapter.info.vocab_size, adapter.info.max_context, adapter.info.bos_id,
                direct.info.vocab_size, direct.info.max_context, direct.info.bos_id);
        failed++;
    }
    for (size_t p = 0; p < 10; p++) {
        int32_t prompt[128], through[128];
        size_t n = 0, n_through = 0;
        const char *t = prompts[p];
        if (direct.api->tokenize(direct.backend, t, strlen(t), ILAB_TOKENIZE_ADD_BOS, prompt, 128, &n) ||
            adapter.api->tokenize(adapter.backend, t, strlen(t), ILAB_TOKENIZE_ADD_BOS, through, 128,
                                  &n_through)) {
            fprintf(stderr, "prompt %zu: tokenize failed\n", p);
            failed++;
            continue;
        }
        if (first_diff(prompt, n, through, n_through) != n || n != n_through) {
            fprintf(stderr, "prompt %zu: the adapter's /tokenize gives other ids than torchlike's\n", p);
            failed++;
        }
        ilab_sampling_t greedy = {.struct_size = sizeof greedy, .temperature = 0, .top_p = 1,
                                  .repetition_penalty = 1};
        /* every processor the host sampler has, on, with a seed per prompt */
        ilab_sampling_t seeded = {.struct_size = sizeof seeded, .temperature = 0.9f, .top_k = 40,
                                  .top_p = 0.95f, .min_p = 0.02f, .repetition_penalty = 1.1f,
                                  .presence_penalty = 0.2f, .frequency_penalty = 0.1f,
                                  .seed = 1000 + p};
        failed += compare(&direct, &adapter, "greedy", p, prompt, n, &greedy);
        failed += compare(&direct, &adapter, "seeded", p, prompt, n, &seeded);
    }
    if (!failed)
        printf("10 prompts x %d tokens, greedy and seeded: torchlike direct == %s -> HTTP -> "
               "inferlab serve -> torchlike, token for token\n", N_TOKENS, adapter_path);
    live_close(&adapter);
    live_close(&direct);
    return failed ? 1 : 0;
}
