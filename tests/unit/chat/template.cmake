rp_add_unit_test(template_test tests/unit/chat/template_test.c)
