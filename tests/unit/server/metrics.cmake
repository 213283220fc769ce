rp_add_unit_test(server_metrics_test tests/unit/server/metrics_test.c)
