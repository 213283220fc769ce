/* cli/cmd_launch.c - stub. */
#include "cli/commands.h"
int rp_cmd_launch(int argc, char **argv) { return 1; }
