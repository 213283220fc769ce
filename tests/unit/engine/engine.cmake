rp_add_unit_test(sampler_test tests/unit/engine/sampler_test.c)
rp_add_unit_test(engine_test tests/unit/engine/engine_test.c tests/unit/engine/collector.c tests/unit/model/fixture_util.c)
rp_add_unit_test(spec_test tests/unit/engine/spec_test.c tests/unit/engine/collector.c tests/unit/model/fixture_util.c)
