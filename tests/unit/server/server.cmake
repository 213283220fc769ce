rp_add_unit_test(server_sse_test tests/unit/server/sse_test.c)
