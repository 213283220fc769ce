# The user-facing commands of issue #9 (catalog, hub, chat, doctor, launch, bench).
list(APPEND RP_CLI_SOURCES
  src/cli/catalog.c
  src/cli/hub.c
  src/cli/cmd_models.c
  src/cli/cmd_info.c
  src/cli/cmd_recipe.c
  src/cli/cmd_pull.c
  src/cli/cmd_rm.c
  src/cli/cmd_alias.c
  src/cli/cmd_doctor.c
  src/cli/cmd_launch.c
  src/cli/cmd_chat.c
  src/cli/local_server.c
  src/cli/cmd_bench.c
)
