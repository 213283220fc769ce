list(APPEND RP_CLI_SOURCES
  src/cli/main.c
  src/cli/args.c
  src/cli/paths.c
)
