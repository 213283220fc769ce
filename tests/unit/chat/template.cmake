rp_add_unit_test(template_test tests/unit/chat/template_test.c)
rp_add_unit_test(jinja_value_test tests/unit/chat/jinja_value_test.c)
