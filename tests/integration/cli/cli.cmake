# Integration tests of the user-facing commands (issue #9); each drives build/rapid.
rp_add_script_test(cli_pull integration /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/integration/cli/pull_test.py)
rp_add_script_test(cli_chat integration /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/integration/cli/chat_test.py)
rp_add_script_test(cli_launch integration /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/integration/cli/launch_test.py)
rp_add_script_test(cli_commands integration /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/integration/cli/commands_test.py)
rp_add_script_test(cli_chat_autostart integration ${CMAKE_SOURCE_DIR}/tests/integration/cli/chat_autostart_test.sh)
