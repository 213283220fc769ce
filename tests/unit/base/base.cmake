rp_add_unit_test(base_test tests/unit/base/base_test.c)
