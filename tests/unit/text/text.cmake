rp_add_unit_test(tokenizer_test tests/unit/text/tokenizer_test.c)
rp_add_unit_test(gguf_test tests/unit/text/gguf_test.c)
rp_add_unit_test(pretok_fast_test tests/unit/text/pretok_fast_test.c)
