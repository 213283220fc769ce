rp_add_unit_test(ops_test tests/unit/backend/ops_test.c)
