rp_add_unit_test(scripted_test tests/unit/model/scripted_test.c)
