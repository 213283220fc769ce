# Server integration tests: each file starts `rapid serve` on a tiny generated model on a free
# loopback port and drives it with the official openai@6 and @anthropic-ai/sdk clients
# (scripts/setup.d/30-sdk-clients.sh installs them) and curl.
find_program(RP_NODE node REQUIRED)
foreach(t 10-openai 20-anthropic 30-errors 40-auth-cors 50-concurrency 60-readme 80-metrics 80-tools)
  rp_add_script_test(server_${t} integration ${RP_NODE} --test --test-reporter=spec
    ${CMAKE_SOURCE_DIR}/tests/integration/${t}.test.mjs)
  set_tests_properties(server_${t} PROPERTIES TIMEOUT 300)
endforeach()

# The embedded default model through `make run`'s script: answers are English.
rp_add_script_test(default_model_serve integration /usr/bin/python3
  ${CMAKE_SOURCE_DIR}/tests/integration/70_default_model.py)
set_tests_properties(default_model_serve PROPERTIES TIMEOUT 300)
