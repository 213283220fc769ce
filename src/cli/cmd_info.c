/* cli/cmd_info.c - stub. */
#include "cli/commands.h"
int rp_cmd_info(int argc, char **argv) { return 1; }
