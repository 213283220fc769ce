/* cli/cmd_recipe.c - stub. */
#include "cli/commands.h"
int rp_cmd_recipe(int argc, char **argv) { return 1; }
