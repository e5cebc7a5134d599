/* placeholder until this command lands */
#include <stdio.h>
#include "commands.h"
int ilab_cmd_tokenize(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "inferlab tokenize: not built yet\n"); return 1; }
int ilab_cmd_detokenize(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "inferlab detokenize: not built yet\n"); return 1; }
