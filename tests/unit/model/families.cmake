rp_add_unit_test(families_test tests/unit/model/families_test.c tests/unit/model/fixture_util.c)
