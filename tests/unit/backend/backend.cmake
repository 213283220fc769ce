rp_add_unit_test(ops_test tests/unit/backend/ops_test.c)
rp_add_unit_test(quant_test tests/unit/backend/quant_test.c)
