/* placeholder until this command lands */
#include <stdio.h>
#include "commands.h"
int ilab_cmd_list(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "inferlab list: not built yet\n"); return 1; }
int ilab_cmd_info(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "inferlab info: not built yet\n"); return 1; }
