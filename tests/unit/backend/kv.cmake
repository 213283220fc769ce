rp_add_unit_test(kv_test tests/unit/backend/kv_test.c)
