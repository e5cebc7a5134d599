/* placeholder until this command lands */
#include <stdio.h>
#include "commands.h"
int ilab_cmd_run(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "inferlab run: not built yet\n"); return 1; }
