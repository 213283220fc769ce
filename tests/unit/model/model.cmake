rp_add_unit_test(model_test tests/unit/model/model_test.c tests/unit/model/fixture_util.c)
rp_add_unit_test(safetensors_test tests/unit/model/safetensors_test.c tests/unit/model/fixture_util.c)
rp_add_unit_test(quant_model_test tests/unit/model/quant_model_test.c tests/unit/model/fixture_util.c tests/unit/model/gguf_writer.c)
