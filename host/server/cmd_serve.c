/* placeholder until serve lands */
#include <stdio.h>
#include "../cli/commands.h"
int ilab_cmd_serve(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "inferlab serve: not built yet\n"); return 1; }
