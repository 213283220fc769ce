rp_add_unit_test(parse_golden_test tests/unit/chat/parse_golden_test.c)
