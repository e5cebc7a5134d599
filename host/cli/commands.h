/* The `inferlab` subcommands. Each takes argc/argv after the subcommand name
 * (argv[0] is the subcommand) and returns the process exit code:
 * 0 success, 1 failure, 2 usage error, 3 backend unavailable. */
#ifndef ILAB_HOST_COMMANDS_H
#define ILAB_HOST_COMMANDS_H

#include "inferlab/inferlab.h"

int ilab_cmd_list(int argc, char **argv);       /* cmd_list.c */
int ilab_cmd_info(int argc, char **argv);       /* cmd_list.c */
int ilab_cmd_run(int argc, char **argv);        /* cmd_run.c */
int ilab_cmd_tokenize(int argc, char **argv);   /* cmd_tokenize.c */
int ilab_cmd_detokenize(int argc, char **argv); /* cmd_tokenize.c */
int ilab_cmd_serve(int argc, char **argv);      /* cmd_serve.c */

/* The exit code for a failed ilab_session_open: 2 for a usage error (a wrong
 * plugin name, folder or configuration: ILAB_INVALID_ARGUMENT), 3 for an
 * unavailable backend, 1 otherwise. (main.c) */
int ilab_cli_open_exit_code(ilab_status st);

/* `inferlab --version`: product, SDK ABI, build. (main.c) */

#endif
