rp_add_unit_test(kv_model_test tests/unit/model/kv_model_test.c tests/unit/model/fixture_util.c)
