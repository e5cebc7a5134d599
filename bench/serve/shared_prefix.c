/* The shared-prefix scenario of serve_load: chat-like traffic where every
 * request repeats one long system prompt (about 200 tokens of the default
 * model's tokenizer) and adds a short user turn of its own. Two servers of
 * the same backend take the same requests, one with the prefix cache on and
 * one without (scheduler.prefix_cache_positions=0), in alternating rounds
 * so that noise from a shared machine falls on both alike. A prefix-cache
 * hit prefills only the user turn, so the time to first token should drop
 * by about the share of the prompt that is shared. */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve_load.h"

/* JSON-safe (no quote, no backslash); 201 tokens (BOS included) with the
 * default model's 1024-entry tokenizer, and 26..35 more for a user turn, so
 * prompt + 16 tokens stay within its 256 positions (the usage chunk reports
 * the real count). */
static const char system_prompt[] =
    "You are a patient assistant at a country house library in the year 1811. "
    "You answer questions about the novels of the period, the manners of society, "
    "the management of an estate, the customs of visiting and of correspondence, "
    "and the walks and gardens around the house. You speak plainly and kindly, you "
    "never invent a fact you do not know, and when a question is uncertain you say "
    "so and suggest where in the library the answer may be found. You keep every "
    "answer short: a sentence or two, unless the visitor asks for more. Be civil. ";

static const char *const user_turns[] = {
    "Who lives at the great house?", "When is the next assembly ball?",
    "Is the road to town safe in winter?", "What should I read first?",
    "How does one return a morning call?", "Where is the rose garden?",
    "Who wrote this letter?", "May I borrow a book on farming?",
};
#define N_TURNS (sizeof user_turns / sizeof user_turns[0])

typedef struct bodies {
    char **text; /* one per request */
    int n;
    int offset;  /* the first request of the current round */
} bodies;

/* Request i of a round is request offset + i of the level: no prompt repeats. */
static const char *body_at(void *ctx, int i)
{
    bodies *b = ctx;
    return b->text[(b->offset + i) % b->n];
}

static int make_bodies(bodies *b, int n, int max_tokens)
{
    b->text = calloc((size_t)n, sizeof *b->text);
    b->n = n;
    if (!b->text)
        return -1;
    for (int i = 0; i < n; i++) {
        size_t cap = sizeof system_prompt + 512;
        b->text[i] = malloc(cap);
        if (!b->text[i])
            return -1;
        /* The turn number makes every prompt distinct past the shared part. */
        char prompt[sizeof system_prompt + 128];
        snprintf(prompt, sizeof prompt, "%s\\n\\nVisitor %d: %s\\nAssistant:", system_prompt, i + 1,
                 user_turns[(size_t)i % N_TURNS]);
        serve_stream_body(b->text[i], cap, prompt, max_tokens);
    }
    return 0;
}

static void free_bodies(bodies *b)
{
    for (int i = 0; b->text && i < b->n; i++)
        free(b->text[i]);
    free(b->text);
}

static size_t grow_text(char *data, size_t size, size_t nmemb, void *user)
{
    char **buf = user;
    size_t old = *buf ? strlen(*buf) : 0, n = size * nmemb;
    char *grown = realloc(*buf, old + n + 1);
    if (!grown)
        return 0;
    memcpy(grown + old, data, n);
    grown[old + n] = '\0';
    *buf = grown;
    return n;
}

/* inferlab:prefix_cache_hits_total of a server (-1 when unreadable). */
static long long prefix_hits(const char *base)
{
    char url[512];
    snprintf(url, sizeof url, "%s/metrics", base);
    char *text = NULL;
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, grow_text);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &text);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
    CURLcode rc = curl_easy_perform(c);
    curl_easy_cleanup(c);
    long long v = -1;
    const char *at = rc == CURLE_OK && text ? strstr(text, "\ninferlab:prefix_cache_hits_total ")
                                            : NULL;
    if (at)
        v = strtoll(at + strlen("\ninferlab:prefix_cache_hits_total "), NULL, 10);
    free(text);
    return v;
}

typedef struct server_pair {
    const char *url_on, *url_off;
    bodies *b;
} server_pair;

/* Both servers at one concurrency: ROUNDS rounds of requests/ROUNDS each,
 * on then off. Prints one row per server and the p50 ratio. */
static int run_pair(void *ctx, int concurrency, int requests)
{
    enum { ROUNDS = 4 };
    const server_pair *sp = ctx;
    bodies *b = sp->b;
    double *ttft[2];
    size_t n[2] = {0, 0};
    long tokens[2] = {0, 0}, prompt[2] = {0, 0}, errors[2] = {0, 0};
    double elapsed[2] = {0, 0};
    ttft[0] = calloc((size_t)requests, sizeof(double));
    ttft[1] = calloc((size_t)requests, sizeof(double));
    int per_round = requests / ROUNDS > concurrency ? requests / ROUNDS : concurrency;
    int done = 0;
    while (done < requests) {
        int k = requests - done < per_round ? requests - done : per_round;
        for (int s = 0; s < 2; s++) {
            level_result r;
            b->offset = done;
            serve_run_streams(s ? sp->url_off : sp->url_on, body_at, b, concurrency, k, &r);
            for (size_t i = 0; i < r.n_ttft && n[s] < (size_t)requests; i++)
                ttft[s][n[s]++] = r.ttft[i];
            tokens[s] += r.tokens;
            prompt[s] += r.prompt_tokens;
            errors[s] += r.errors;
            elapsed[s] += r.elapsed;
            free(r.ttft);
        }
        done += k;
    }
    double p50[2], p99[2];
    for (int s = 0; s < 2; s++) {
        p50[s] = serve_percentile(ttft[s], n[s], 0.5) * 1e3;
        p99[s] = serve_percentile(ttft[s], n[s], 0.99) * 1e3;
        printf("%-12s %11d  %8d  %13.1f  %10.1f  %12.2f  %12.2f  %6ld\n", s ? "off" : "on",
               concurrency, requests, requests ? (double)prompt[s] / requests : 0.0,
               elapsed[s] > 0 ? (double)tokens[s] / elapsed[s] : 0.0, p50[s], p99[s], errors[s]);
        free(ttft[s]);
    }
    printf("%-12s %11d  TTFT p50 off/on = %.2fx, p99 off/on = %.2fx\n", "ratio", concurrency,
           p50[0] > 0 ? p50[1] / p50[0] : 0.0, p99[0] > 0 ? p99[1] / p99[0] : 0.0);
    fflush(stdout);
    return errors[0] || errors[1] ? 1 : 0;
}

int serve_shared_prefix(const char *base_on, const char *base_off, const char *levels,
                        int requests, int max_tokens)
{
    char url_on[512], url_off[512];
    snprintf(url_on, sizeof url_on, "%s/v1/completions", base_on);
    snprintf(url_off, sizeof url_off, "%s/v1/completions", base_off);
    bodies b = {0};
    if (make_bodies(&b, requests, max_tokens) != 0) {
        free_bodies(&b);
        fprintf(stderr, "serve_load: out of memory\n");
        return 2;
    }
    long long hits_on = prefix_hits(base_on), hits_off = prefix_hits(base_off);
    printf("# shared prefix: one system prompt + a short user turn per request, %d tokens "
           "each; prefix cache on (%s) and off (%s), alternating rounds\n",
           max_tokens, base_on, base_off);
    printf("prefix cache  concurrency  requests  prompt tokens  tokens/s   TTFT p50 ms   "
           "TTFT p99 ms   errors\n");
    server_pair sp = {url_on, url_off, &b};
    int rc = serve_for_each_level(levels, requests, run_pair, &sp);
    long long after_on = prefix_hits(base_on), after_off = prefix_hits(base_off);
    printf("# prefix-cache hit tokens during the run (GET /metrics): on %lld, off %lld\n",
           hits_on >= 0 && after_on >= 0 ? after_on - hits_on : -1,
           hits_off >= 0 && after_off >= 0 ? after_off - hits_off : -1);
    if (hits_off >= 0 && after_off > hits_off) {
        fprintf(stderr, "serve_load: the --url-off server hit its prefix cache: start it with "
                        "--set scheduler.prefix_cache_positions=0\n");
        rc |= 1;
    }
    free_bodies(&b);
    return rc;
}
