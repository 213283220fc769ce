rp_add_unit_test(bf16_test tests/unit/backend/bf16_test.c)
