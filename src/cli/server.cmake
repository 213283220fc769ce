# `rapid serve` (the server helper's command).
list(APPEND RP_CLI_SOURCES src/cli/cmd_serve.c)
