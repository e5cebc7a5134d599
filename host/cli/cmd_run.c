/* `inferlab run`: generate from a prompt, streaming text to the terminal,
 * then one stats line (or, with --json, one JSON object per event). */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "config/settings.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "runtime/session.h"

/* Sampling defaults are the runtime's (ilab_sampling_default, shared with
 * the HTTP API); the seed is printed so a run can be repeated exactly. */
#define RUN_DEFAULT_MAX_TOKENS 128

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

static void run_usage(FILE *out)
{
    fprintf(out,
            "usage: inferlab run [options]\n"
            "  --backend NAME        plugin to use (default: settings' default_backend, torchlike)\n"
            "  --config FILE         YAML settings file (docs/configuration.md)\n"
            "  --set PLUGIN.KEY=VAL  override one configuration key (repeatable)\n"
            "  --model FILE          the backend's model file (= --set BACKEND.model=FILE)\n"
            "  --plugin FILE         a plugin file, looked at before every folder; relative to the\n"
            "                        current folder (with or without a slash); with one and no\n"
            "                        --backend, the backend is its plugin\n"
            "  --plugin-dir DIR      search DIR for plugins first (repeatable)\n"
            "  --allow-insecure-plugins  load plugins the trust rule refuses (dangerous)\n"
            "  --prompt TEXT         the prompt; else --prompt-file FILE; else stdin\n"
            "  --prompt-file FILE\n"
            "  --max-tokens N        default %d\n"
            "  --temperature T       default %.1f (0 = greedy)\n"
            "  --top-k K             default 0 (off)\n"
            "  --top-p P             default %.1f (1 = off)\n"
            "  --min-p P             default 0 (off)\n"
            "  --repeat-penalty R    default 1 (off); prompt + output\n"
            "  --presence-penalty P  default 0 (off), in [-2, 2]; output tokens\n"
            "  --frequency-penalty P default 0 (off), in [-2, 2]; output tokens\n"
            "  --seed S              default %u\n"
            "  --stop TEXT           stop string (repeatable); trimmed from the output\n"
            "  --ignore-eos          keep generating past end-of-sequence\n"
            "  --logprobs K          top-K logprobs per token (shown with --json)\n"
            "  --no-bos              do not prepend the BOS token\n"
            "  --json                one JSON object per event per line\n",
            RUN_DEFAULT_MAX_TOKENS, (double)ILAB_SAMPLING_DEFAULT_TEMPERATURE,
            (double)ILAB_SAMPLING_DEFAULT_TOP_P, ILAB_SAMPLING_DEFAULT_SEED);
}

/* --- small helpers -------------------------------------------------------- */

static bool parse_long_arg(const char *opt, const char *text, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < min || v > max) {
        fprintf(stderr, "inferlab run: %s '%s': expected an integer in [%ld, %ld]\n", opt, text, min, max);
        return false;
    }
    *out = v;
    return true;
}

static bool parse_float_arg(const char *opt, const char *text, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(text, &end);
    if (errno || end == text || *end || !isfinite(v)) {
        fprintf(stderr, "inferlab run: %s '%s': expected a number\n", opt, text);
        return false;
    }
    *out = v;
    return true;
}

static char *read_stream(FILE *f, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    for (;;) {
        if (n + 4096 > cap) {
            char *p = realloc(buf, cap *= 2);
            if (!p) {
                free(buf);
                return NULL;
            }
            buf = p;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* A JSON string of possibly invalid UTF-8 (a final flush may end inside a
 * code point): invalid bytes become U+FFFD. */
static json_t *json_text(const char *s, size_t len)
{
    json_t *j = json_stringn(s, len);
    if (j)
        return j;
    char *fixed = malloc(len * 3 + 1);
    if (!fixed)
        return json_string("");
    size_t w = 0;
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)s[i];
        size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        json_t *probe = n && i + n <= len ? json_stringn(s + i, n) : NULL;
        if (probe) {
            memcpy(fixed + w, s + i, n);
            w += n;
            i += n;
            json_decref(probe);
        } else {
            memcpy(fixed + w, "\xEF\xBF\xBD", 3);
            w += 3;
            i++;
        }
    }
    j = json_stringn(fixed, w);
    free(fixed);
    return j ? j : json_string("");
}

static void print_json(json_t *obj)
{
    char *line = json_dumps(obj, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (line) {
        fputs(line, stdout);
        fputc('\n', stdout);
        free(line);
    }
    fflush(stdout);
    json_decref(obj);
}

/* --- streaming ------------------------------------------------------------ */

typedef struct run_ctx {
    bool json;
    uint64_t seed;
    ilab_request_metrics metrics; /* filled by the engine before the terminal event */
    int finish_reason;
    bool failed;
} run_ctx;

static double tokens_per_second(const ilab_request_metrics *m)
{
    /* Generation rate after the first token (the first one pays for the
     * prompt); a single token falls back to the whole request. */
    double t = m->e2e_seconds - m->ttft_seconds;
    if (m->completion_tokens > 1 && t > 0)
        return (double)(m->completion_tokens - 1) / t;
    return m->e2e_seconds > 0 ? (double)m->completion_tokens / m->e2e_seconds : 0.0;
}

static int on_event(void *user_data, const ilab_event_t *ev)
{
    run_ctx *c = user_data;
    if (c->json) {
        json_t *o = json_object();
        if (ev->type == ILAB_EVENT_TOKEN) {
            json_object_set_new(o, "type", json_string("token"));
            json_object_set_new(o, "id", json_integer(ev->token));
            json_object_set_new(o, "text", json_text(ev->text, ev->text_len));
            json_object_set_new(o, "logprob", json_real(ev->logprob));
            if (ev->n_top_logprobs > 0) {
                json_t *arr = json_array();
                for (uint32_t i = 0; i < ev->n_top_logprobs; i++)
                    json_array_append_new(arr, json_pack("{s:i,s:f}", "id", (json_int_t)ev->top_logprobs[i].token,
                                                         "logprob", (double)ev->top_logprobs[i].logprob));
                json_object_set_new(o, "top_logprobs", arr);
            }
        } else if (ev->type == ILAB_EVENT_FINISH) {
            const ilab_request_metrics *m = &c->metrics;
            json_object_set_new(o, "type", json_string("finish"));
            json_object_set_new(o, "reason", json_string(ilab_finish_reason_name(ev->finish_reason)));
            if (ev->text_len > 0)
                json_object_set_new(o, "text", json_text(ev->text, ev->text_len));
            json_object_set_new(o, "usage", json_pack("{s:i,s:i}", "prompt_tokens", (json_int_t)ev->prompt_tokens,
                                                      "completion_tokens", (json_int_t)ev->completion_tokens));
            json_object_set_new(o, "ttft_seconds", json_real(m->ttft_seconds));
            json_object_set_new(o, "tokens_per_second", json_real(tokens_per_second(m)));
            json_object_set_new(o, "seed", json_integer((json_int_t)c->seed));
        } else {
            json_object_set_new(o, "type", json_string("error"));
            json_object_set_new(o, "status", json_string(ilab_status_name(ev->status)));
            json_object_set_new(o, "message", json_string(ev->message ? ev->message : ""));
        }
        print_json(o);
    } else if (ev->type == ILAB_EVENT_TOKEN || ev->type == ILAB_EVENT_FINISH) {
        if (ev->text_len > 0) {
            fwrite(ev->text, 1, ev->text_len, stdout);
            fflush(stdout);
        }
    }
    if (ev->type == ILAB_EVENT_FINISH)
        c->finish_reason = ev->finish_reason;
    else if (ev->type == ILAB_EVENT_ERROR)
        c->failed = true;
    return ev->type == ILAB_EVENT_TOKEN && interrupted;
}

/* --- the command ------------------------------------------------------------ */

enum {
    OPT_BACKEND = 256, OPT_MODEL, OPT_CONFIG, OPT_SET, OPT_PLUGIN_DIR, OPT_PLUGIN, OPT_INSECURE, OPT_PROMPT,
    OPT_PROMPT_FILE,
    OPT_MAX_TOKENS, OPT_TEMPERATURE, OPT_TOP_K, OPT_TOP_P, OPT_MIN_P, OPT_REPEAT, OPT_PRESENCE,
    OPT_FREQUENCY, OPT_SEED,
    OPT_STOP, OPT_IGNORE_EOS, OPT_LOGPROBS, OPT_JSON, OPT_NO_BOS, OPT_HELP,
};

static const struct option run_long_options[] = {
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"config", required_argument, NULL, OPT_CONFIG},
    {"set", required_argument, NULL, OPT_SET},
    {"model", required_argument, NULL, OPT_MODEL},
    {"plugin-dir", required_argument, NULL, OPT_PLUGIN_DIR},
    {"plugin", required_argument, NULL, OPT_PLUGIN},
    {"allow-insecure-plugins", no_argument, NULL, OPT_INSECURE},
    {"prompt", required_argument, NULL, OPT_PROMPT},
    {"prompt-file", required_argument, NULL, OPT_PROMPT_FILE},
    {"max-tokens", required_argument, NULL, OPT_MAX_TOKENS},
    {"temperature", required_argument, NULL, OPT_TEMPERATURE},
    {"top-k", required_argument, NULL, OPT_TOP_K},
    {"top-p", required_argument, NULL, OPT_TOP_P},
    {"min-p", required_argument, NULL, OPT_MIN_P},
    {"repeat-penalty", required_argument, NULL, OPT_REPEAT},
    {"presence-penalty", required_argument, NULL, OPT_PRESENCE},
    {"frequency-penalty", required_argument, NULL, OPT_FREQUENCY},
    {"seed", required_argument, NULL, OPT_SEED},
    {"stop", required_argument, NULL, OPT_STOP},
    {"ignore-eos", no_argument, NULL, OPT_IGNORE_EOS},
    {"logprobs", required_argument, NULL, OPT_LOGPROBS},
    {"json", no_argument, NULL, OPT_JSON},
    {"no-bos", no_argument, NULL, OPT_NO_BOS},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

/* What the command line asked for. The strings point into argv. */
typedef struct run_options {
    const char *backend, *config, *prompt, *prompt_file, *model;
    const char **sets, **dirs, **files, **stops; /* owned arrays */
    size_t n_sets, n_dirs, n_files, n_stops;
    bool json, allow_insecure;
    ilab_request req; /* sampling, limits, flags; the prompt is read later */
} run_options;

static void run_options_free(run_options *o)
{
    free(o->sets);
    free(o->dirs);
    free(o->files);
    free(o->stops);
}

static bool parse_seed(const char *text, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long s = strtoull(text, &end, 10);
    if (errno || end == text || *end || text[0] == '-') {
        fprintf(stderr, "inferlab run: --seed '%s': expected a non-negative integer\n", text);
        return false;
    }
    *out = (uint64_t)s;
    return true;
}

/* One option that carries a sampling or limit value; false on a bad value
 * (message printed). */
static bool parse_value_option(int c, const char *arg, ilab_request *req)
{
    long v;
    switch (c) {
    case OPT_MAX_TOKENS:
        if (!parse_long_arg("--max-tokens", arg, 1, INT32_MAX, &v))
            return false;
        req->max_tokens = (int32_t)v;
        return true;
    case OPT_TEMPERATURE: return parse_float_arg("--temperature", arg, &req->sampling.temperature);
    case OPT_TOP_K:
        if (!parse_long_arg("--top-k", arg, 0, INT32_MAX, &v))
            return false;
        req->sampling.top_k = (int32_t)v;
        return true;
    case OPT_TOP_P: return parse_float_arg("--top-p", arg, &req->sampling.top_p);
    case OPT_MIN_P: return parse_float_arg("--min-p", arg, &req->sampling.min_p);
    case OPT_REPEAT: return parse_float_arg("--repeat-penalty", arg, &req->sampling.repetition_penalty);
    case OPT_PRESENCE: return parse_float_arg("--presence-penalty", arg, &req->sampling.presence_penalty);
    case OPT_FREQUENCY:
        return parse_float_arg("--frequency-penalty", arg, &req->sampling.frequency_penalty);
    case OPT_SEED: return parse_seed(arg, &req->sampling.seed);
    case OPT_LOGPROBS:
        if (!parse_long_arg("--logprobs", arg, 0, 1000, &v))
            return false;
        req->top_logprobs = (int32_t)v;
        return true;
    }
    return false;
}

/* Returns -1 to go on, else the exit code (messages printed). */
static int parse_run_options(int argc, char **argv, run_options *o)
{
    memset(o, 0, sizeof *o);
    ilab_sampling_default(&o->req.sampling);
    o->req.max_tokens = RUN_DEFAULT_MAX_TOKENS;
    o->req.add_bos = true;
    o->sets = calloc((size_t)argc, sizeof *o->sets);
    o->dirs = calloc((size_t)argc, sizeof *o->dirs);
    o->files = calloc((size_t)argc, sizeof *o->files);
    o->stops = calloc((size_t)argc, sizeof *o->stops);
    if (!o->sets || !o->dirs || !o->files || !o->stops) {
        fprintf(stderr, "inferlab run: out of memory\n");
        return 1;
    }
    optind = 1;
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, "", run_long_options, NULL)) != -1;) {
        switch (c) {
        case OPT_BACKEND: o->backend = optarg; break;
        case OPT_CONFIG: o->config = optarg; break;
        case OPT_SET: o->sets[o->n_sets++] = optarg; break;
        case OPT_MODEL: o->model = optarg; break;
        case OPT_PLUGIN_DIR: o->dirs[o->n_dirs++] = optarg; break;
        case OPT_PLUGIN: o->files[o->n_files++] = optarg; break;
        case OPT_INSECURE: o->allow_insecure = true; break;
        case OPT_PROMPT: o->prompt = optarg; break;
        case OPT_PROMPT_FILE: o->prompt_file = optarg; break;
        case OPT_STOP: o->stops[o->n_stops++] = optarg; break;
        case OPT_IGNORE_EOS: o->req.ignore_eos = true; break;
        case OPT_JSON: o->json = true; break;
        case OPT_NO_BOS: o->req.add_bos = false; break;
        case OPT_HELP: run_usage(stdout); return 0;
        case OPT_MAX_TOKENS: case OPT_TEMPERATURE: case OPT_TOP_K: case OPT_TOP_P: case OPT_MIN_P:
        case OPT_REPEAT: case OPT_PRESENCE: case OPT_FREQUENCY: case OPT_SEED: case OPT_LOGPROBS:
            if (!parse_value_option(c, optarg, &o->req))
                return 2;
            break;
        default:
            fprintf(stderr, "inferlab run: unknown or incomplete option '%s'\n", argv[optind - 1]);
            run_usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "inferlab run: unexpected argument '%s' (use --prompt TEXT)\n", argv[optind]);
        return 2;
    }
    if (o->prompt && o->prompt_file) {
        fprintf(stderr, "inferlab run: give --prompt or --prompt-file, not both\n");
        return 2;
    }
    o->req.stop = o->stops;
    o->req.n_stop = o->n_stops;
    return -1;
}

/* --prompt, else --prompt-file, else stdin; *buf is what to free. */
static bool read_prompt(const run_options *o, char **buf, const char **text, size_t *len)
{
    if (o->prompt) {
        *text = o->prompt;
        *len = strlen(o->prompt);
        return true;
    }
    if (!o->prompt_file && isatty(STDIN_FILENO))
        fprintf(stderr, "inferlab run: reading the prompt from stdin (end it with Ctrl-D; or use --prompt TEXT)\n");
    FILE *f = o->prompt_file ? fopen(o->prompt_file, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "inferlab run: --prompt-file '%s': %s\n", o->prompt_file, strerror(errno));
        return false;
    }
    *buf = read_stream(f, len);
    if (o->prompt_file)
        fclose(f);
    if (!*buf) {
        fprintf(stderr, "inferlab run: cannot read the prompt from %s\n",
                o->prompt_file ? o->prompt_file : "stdin");
        return false;
    }
    /* `echo text | inferlab run` adds a newline nobody meant as prompt. */
    if (*len > 0 && (*buf)[*len - 1] == '\n')
        (*buf)[--*len] = '\0';
    *text = *buf;
    return true;
}

/* Generates and prints; returns the exit code. */
static int generate(ilab_engine *engine, const run_options *o, const ilab_request *req)
{
    char err[2048] = "";
    run_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.json = o->json;
    ctx.seed = req->sampling.seed;
    struct sigaction sa, old_sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, &old_sa);
    if (!o->json) { /* the continuation reads on from the prompt, as in llama2.c's run */
        fwrite(req->prompt_text, 1, req->prompt_len, stdout);
        fflush(stdout);
    }
    ilab_status st = ilab_engine_generate(engine, req, on_event, &ctx, err, sizeof err, &ctx.metrics);
    sigaction(SIGINT, &old_sa, NULL);
    if (st != ILAB_OK) {
        if (!ctx.failed || !o->json)
            fprintf(stderr, "%sinferlab run: %s: %s\n", ctx.metrics.completion_tokens ? "\n" : "",
                    ilab_status_name(st), err);
        /* Refused before it started (no ERROR event) for a bad parameter:
         * that is a usage error. */
        return !ctx.failed && st == ILAB_INVALID_ARGUMENT ? 2 : 1;
    }
    if (!o->json) {
        const ilab_request_metrics *m = &ctx.metrics;
        fprintf(stdout, "\n");
        fflush(stdout);
        fprintf(stderr,
                "[prompt %u tokens | completion %u tokens | ttft %.1f ms | %.1f tokens/s | "
                "finish %s | seed %llu]\n",
                m->prompt_tokens, m->completion_tokens, m->ttft_seconds * 1e3, tokens_per_second(m),
                ilab_finish_reason_name(ctx.finish_reason), (unsigned long long)req->sampling.seed);
    }
    return 0;
}

int ilab_cmd_run(int argc, char **argv)
{
    run_options o;
    char *prompt_buf = NULL;
    ilab_settings settings;
    ilab_settings_init(&settings);
    ilab_session *session = NULL;
    ilab_engine *engine = NULL;
    char err[4096] = "";
    int rc = parse_run_options(argc, argv, &o);
    if (rc >= 0)
        goto out;
    if (ilab_settings_from_cli(&settings, o.config, o.sets, o.n_sets, o.dirs, o.n_dirs, err,
                               sizeof err) != ILAB_OK ||
        ilab_settings_add_plugin_files(&settings, o.files, o.n_files, err, sizeof err) != ILAB_OK ||
        (o.model && ilab_settings_set_model(&settings, o.backend, o.model) != ILAB_OK)) {
        fprintf(stderr, "inferlab run: %s\n", err[0] ? err : "--model: out of memory");
        rc = 2;
        goto out;
    }
    settings.allow_insecure_plugins = o.allow_insecure;
    rc = 1;
    if (!read_prompt(&o, &prompt_buf, &o.req.prompt_text, &o.req.prompt_len))
        goto out;
    ilab_status st = ilab_session_open(&settings, o.backend, err, sizeof err, &session);
    if (st != ILAB_OK) {
        fprintf(stderr, "inferlab run: %s\n", err);
        rc = ilab_cli_open_exit_code(st);
        goto out;
    }
    st = ilab_engine_create(ilab_session_plugin(session), ilab_session_backend(session),
                            &settings.scheduler, err, sizeof err, &engine);
    if (st != ILAB_OK) {
        fprintf(stderr, "inferlab run: %s\n", err);
        goto out;
    }
    if (!strcmp(ilab_engine_model_info(engine)->name, "random-default"))
        fprintf(stderr, "note: the embedded model has random weights; its text is not meaningful\n");
    rc = generate(engine, &o, &o.req);

out:
    ilab_engine_destroy(engine);
    ilab_session_close(session);
    ilab_settings_free(&settings);
    free(prompt_buf);
    run_options_free(&o);
    return rc;
}
