rp_add_unit_test(sha256_test tests/unit/base/sha256_test.c)
