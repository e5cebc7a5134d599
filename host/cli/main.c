/* inferlab — the host CLI: dispatch to a subcommand. */
#include <stdio.h>
#include <string.h>

#include "build_info.h"
#include "commands.h"
#include "isolation/worker.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"list", ilab_cmd_list, "list plugins: available, unavailable or rejected, with reasons"},
    {"info", ilab_cmd_info, "show one plugin's manifest, probe result and file"},
    {"run", ilab_cmd_run, "generate from a prompt, streaming tokens to the terminal"},
    {"tokenize", ilab_cmd_tokenize, "print the token ids of a text"},
    {"detokenize", ilab_cmd_detokenize, "print the text of token ids"},
    {"serve", ilab_cmd_serve, "serve the OpenAI-compatible HTTP API"},
};

int ilab_cli_open_exit_code(ilab_status st)
{
    return st == ILAB_INVALID_ARGUMENT ? 2 : st == ILAB_UNAVAILABLE ? 3 : 1;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: inferlab <command> [options]\n       inferlab --version\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-11s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n`inferlab <command> --help` describes a command's options.\n");
}

int main(int argc, char **argv)
{
    /* serve runs each backend in a worker process: this program again. */
    if (ilab_worker_requested(argc, argv))
        return ilab_worker_main(argc, argv);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        ilab_print_version(stdout, "inferlab");
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "inferlab: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
