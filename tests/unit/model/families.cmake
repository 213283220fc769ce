rp_add_unit_test(families_test tests/unit/model/families_test.c tests/unit/model/fixture_util.c)
rp_add_unit_test(quant_families_test tests/unit/model/quant_families_test.c tests/unit/model/fixture_util.c)
rp_add_unit_test(gguf_families_test tests/unit/model/gguf_families_test.c tests/unit/model/fixture_util.c tests/unit/model/gguf_writer.c)
