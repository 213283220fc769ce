/* cli/cmd_chat.c - stub. */
#include "cli/commands.h"
int rp_cmd_chat(int argc, char **argv) { return 1; }
