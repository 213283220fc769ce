# Unit tests of the catalog and the hub cache code (the CLI sources are compiled in, since
# they are part of the binary, not of rapid_core).
rp_add_unit_test(cli_catalog_test tests/unit/cli/catalog_test.c src/cli/catalog.c
  src/cli/hub.c src/cli/paths.c)
