/* `inferlab tokenize` / `inferlab detokenize`: a backend's tokenizer from the
 * command line, for chasing tokenizer differences between backends. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "config/settings.h"
#include "chat_info.h"
#include "runtime/session.h"

enum { OPT_BACKEND = 256, OPT_CONFIG, OPT_SET, OPT_PLUGIN_DIR, OPT_INSECURE, OPT_ADD_SPECIAL, OPT_JSON,
       OPT_PARSE_SPECIAL, OPT_HELP };

static const struct option tok_options[] = {
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"config", required_argument, NULL, OPT_CONFIG},
    {"set", required_argument, NULL, OPT_SET},
    {"plugin-dir", required_argument, NULL, OPT_PLUGIN_DIR},
    {"allow-insecure-plugins", no_argument, NULL, OPT_INSECURE},
    {"add-special", no_argument, NULL, OPT_ADD_SPECIAL},
    {"parse-special", no_argument, NULL, OPT_PARSE_SPECIAL},
    {"json", no_argument, NULL, OPT_JSON},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

typedef struct tok_args {
    const char *cmd;
    const char *backend, *config;
    const char **sets, **dirs;
    size_t n_sets, n_dirs;
    bool add_special, parse_special, json, help, allow_insecure;
    int first_positional;
} tok_args;

static void tok_usage(FILE *out, const char *cmd)
{
    if (!strcmp(cmd, "tokenize"))
        fprintf(out, "usage: inferlab tokenize [--backend NAME] [--config FILE] [--set PLUGIN.KEY=VAL]...\n"
                     "                         [--plugin-dir DIR]... [--allow-insecure-plugins] [--add-special]\n"
                     "                         [--parse-special] [--json] TEXT\n"
                     "Prints the tokens of TEXT, one a line: the id and its piece (the bytes it\n"
                     "adds, escaped where not printable). No BOS unless --add-special; the text of\n"
                     "a control token such as <|im_end|> is that token only with --parse-special\n"
                     "(a backend declaring chat, ABI 1.2). --json: [{\"id\": N, \"piece\": TEXT}, ...].\n");
    else
        fprintf(out, "usage: inferlab detokenize [--backend NAME] [--config FILE] [--set PLUGIN.KEY=VAL]...\n"
                     "                           [--plugin-dir DIR]... [--allow-insecure-plugins] [--json] [--] ID...\n"
                     "Prints the text of the token ids.\n");
}

/* Returns -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, tok_args *a)
{
    a->cmd = argv[0];
    a->sets = calloc((size_t)argc, sizeof *a->sets);
    a->dirs = calloc((size_t)argc, sizeof *a->dirs);
    if (!a->sets || !a->dirs)
        return 1;
    optind = 1;
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, "", tok_options, NULL)) != -1;) {
        switch (c) {
        case OPT_BACKEND: a->backend = optarg; break;
        case OPT_CONFIG: a->config = optarg; break;
        case OPT_SET: a->sets[a->n_sets++] = optarg; break;
        case OPT_PLUGIN_DIR: a->dirs[a->n_dirs++] = optarg; break;
        case OPT_INSECURE: a->allow_insecure = true; break;
        case OPT_ADD_SPECIAL: a->add_special = true; break;
        case OPT_JSON: a->json = true; break;
        case OPT_PARSE_SPECIAL: a->parse_special = true; break;
        case OPT_HELP: tok_usage(stdout, a->cmd); return 0;
        default:
            fprintf(stderr, "inferlab %s: unknown or incomplete option '%s'\n", a->cmd, argv[optind - 1]);
            tok_usage(stderr, a->cmd);
            return 2;
        }
    }
    a->first_positional = optind;
    return -1;
}

/* Settings + session; prints the error. Returns -1 on success, else the exit code. */
static int open_backend(const tok_args *a, ilab_settings *settings, ilab_session **session)
{
    char err[2048] = "";
    if (ilab_settings_from_cli(settings, a->config, a->sets, a->n_sets, a->dirs, a->n_dirs, err,
                               sizeof err) != ILAB_OK) {
        fprintf(stderr, "inferlab %s: %s\n", a->cmd, err);
        return 2;
    }
    settings->allow_insecure_plugins = a->allow_insecure;
    ilab_status st = ilab_session_open(settings, a->backend, err, sizeof err, session);
    if (st != ILAB_OK) {
        fprintf(stderr, "inferlab %s: %s\n", a->cmd, err);
        return ilab_cli_open_exit_code(st);
    }
    if (!ilab_plugin_manifest(ilab_session_plugin(*session))->tokenizer) {
        fprintf(stderr, "inferlab %s: backend '%s' declares no tokenizer\n", a->cmd,
                ilab_plugin_manifest(ilab_session_plugin(*session))->name);
        return 1;
    }
    return -1;
}

static void backend_message(ilab_session *s, char *buf, size_t cap)
{
    buf[0] = '\0';
    ilab_session_api(s)->last_error(ilab_session_backend(s), buf, cap);
}

int ilab_cmd_tokenize(int argc, char **argv)
{
    tok_args a;
    memset(&a, 0, sizeof a);
    ilab_settings settings;
    ilab_settings_init(&settings);
    ilab_session *session = NULL;
    int32_t *ids = NULL;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0)
        goto out;
    rc = 2;
    if (a.first_positional != argc - 1) {
        fprintf(stderr, "inferlab tokenize: expected exactly one TEXT argument (quote it)\n");
        tok_usage(stderr, "tokenize");
        goto out;
    }
    const char *text = argv[a.first_positional];
    if ((rc = open_backend(&a, &settings, &session)) >= 0)
        goto out;
    rc = 1;
    const ilab_backend_api_t *api = ilab_session_api(session);
    ilab_backend_t *b = ilab_session_backend(session);
    size_t len = strlen(text), cap = len + 8, n = 0;
    uint32_t flags = a.add_special ? ILAB_TOKENIZE_ADD_BOS : 0;
    if (a.parse_special) {
        if (!ilab_plugin_manifest(ilab_session_plugin(session))->chat) {
            fprintf(stderr, "inferlab tokenize: --parse-special needs a backend that declares chat "
                            "(ABI 1.2); '%s' does not\n",
                    ilab_plugin_manifest(ilab_session_plugin(session))->name);
            rc = 2;
            goto out;
        }
        flags |= ILAB_TOKENIZE_PARSE_SPECIAL;
    }
    ilab_status st = ILAB_BUFFER_TOO_SMALL;
    for (int attempt = 0; attempt < 2 && st == ILAB_BUFFER_TOO_SMALL; attempt++) {
        free(ids);
        ids = malloc(cap * sizeof *ids);
        if (!ids)
            goto out;
        st = api->tokenize(b, text, len, flags, ids, cap, &n);
        cap = n;
    }
    if (st != ILAB_OK) {
        char msg[1024];
        backend_message(session, msg, sizeof msg);
        fprintf(stderr, "inferlab tokenize: %s: %s\n", ilab_status_name(st), msg);
        goto out;
    }
    json_t *arr = a.json ? json_array() : NULL;
    for (size_t i = 0; i < n; i++) {
        char piece[512];
        ilab_cli_piece_text(session, i ? ids[i - 1] : -1, ids[i], piece, sizeof piece);
        if (arr)
            json_array_append_new(arr, json_pack("{s:i, s:s}", "id", (int)ids[i], "piece", piece));
        else
            printf("%d\t%s\n", ids[i], piece);
    }
    if (arr) {
        char *s = json_dumps(arr, JSON_COMPACT);
        printf("%s\n", s ? s : "[]");
        free(s);
        json_decref(arr);
    }
    rc = 0;
out:
    free(ids);
    ilab_session_close(session);
    ilab_settings_free(&settings);
    free(a.sets);
    free(a.dirs);
    return rc;
}

int ilab_cmd_detokenize(int argc, char **argv)
{
    tok_args a;
    memset(&a, 0, sizeof a);
    ilab_settings settings;
    ilab_settings_init(&settings);
    ilab_session *session = NULL;
    int32_t *ids = NULL;
    char *text = NULL;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0)
        goto out;
    rc = 2;
    size_t n = (size_t)(argc - a.first_positional);
    ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids)
        goto out;
    for (size_t i = 0; i < n; i++) {
        const char *arg = argv[a.first_positional + (int)i];
        char *end;
        errno = 0;
        long v = strtol(arg, &end, 10);
        if (errno || end == arg || *end || v < INT32_MIN || v > INT32_MAX) {
            fprintf(stderr, "inferlab detokenize: '%s' is not a token id\n", arg);
            goto out;
        }
        ids[i] = (int32_t)v;
    }
    if ((rc = open_backend(&a, &settings, &session)) >= 0)
        goto out;
    rc = 1;
    const ilab_backend_api_t *api = ilab_session_api(session);
    ilab_backend_t *b = ilab_session_backend(session);
    size_t cap = 16 * n + 16, len = 0;
    ilab_status st = ILAB_BUFFER_TOO_SMALL;
    for (int attempt = 0; attempt < 2 && st == ILAB_BUFFER_TOO_SMALL; attempt++) {
        free(text);
        text = malloc(cap);
        if (!text)
            goto out;
        st = api->detokenize(b, ids, n, text, cap, &len);
        cap = len + 1;
    }
    if (st != ILAB_OK) {
        char msg[1024];
        backend_message(session, msg, sizeof msg);
        fprintf(stderr, "inferlab detokenize: %s: %s\n", ilab_status_name(st), msg);
        goto out;
    }
    if (a.json) {
        json_t *j = json_stringn(text, len);
        char *s = j ? json_dumps(j, JSON_ENCODE_ANY | JSON_ENSURE_ASCII) : NULL;
        if (!s) {
            fprintf(stderr, "inferlab detokenize: the text is not valid UTF-8; run without --json\n");
            json_decref(j);
            goto out;
        }
        printf("%s\n", s);
        free(s);
        json_decref(j);
    } else {
        fwrite(text, 1, len, stdout);
        printf("\n");
    }
    rc = 0;
out:
    free(ids);
    free(text);
    ilab_session_close(session);
    ilab_settings_free(&settings);
    free(a.sets);
    free(a.dirs);
    return rc;
}
