list(APPEND RP_CLI_SOURCES
  src/cli/main.c
  src/cli/args.c
  src/cli/paths.c
  src/cli/cmd_logits.c
  src/cli/cmd_generate.c
  src/cli/model_bench.c
  src/cli/model_opts.c
)
