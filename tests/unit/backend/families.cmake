rp_add_unit_test(families_ops_test tests/unit/backend/families_ops_test.c)
