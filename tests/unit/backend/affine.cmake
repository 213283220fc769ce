rp_add_unit_test(quant_affine_test tests/unit/backend/quant_affine_test.c)
