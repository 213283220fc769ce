/* cli/cmd_doctor.c - stub. */
#include "cli/commands.h"
int rp_cmd_doctor(int argc, char **argv) { return 1; }
