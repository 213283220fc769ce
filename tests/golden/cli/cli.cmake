rp_add_script_test(cli_logits_generate golden ${CMAKE_SOURCE_DIR}/tests/golden/cli/logits_generate_test.sh)
