rp_add_unit_test(parse_golden_test tests/unit/chat/parse_golden_test.c)
rp_add_unit_test(parse_api_test tests/unit/chat/parse_api_test.c)
rp_add_script_test(parse_cli golden /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/golden/parsers/cli_test.py)
rp_add_script_test(parse_template_roundtrip golden /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/golden/parsers/template_roundtrip.py)
