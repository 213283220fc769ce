/* cli/cmd_bench.c - stub. */
#include "cli/commands.h"
int rp_cmd_bench(int argc, char **argv) { return 1; }
