rp_add_unit_test(api_error_test tests/unit/api/error_test.c)
rp_add_unit_test(api_openai_test tests/unit/api/openai_test.c)
rp_add_unit_test(api_anthropic_test tests/unit/api/anthropic_test.c)
rp_add_unit_test(api_stopper_test tests/unit/api/stopper_test.c)
