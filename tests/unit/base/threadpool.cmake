rp_add_unit_test(threadpool_test tests/unit/base/threadpool_test.c)
