list(APPEND RP_CLI_SOURCES src/cli/cmd_quantize.c)
