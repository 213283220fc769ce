# A .gguf model served end to end: weights, tokenizer and chat template from its metadata.
rp_add_script_test(gguf_serve_chat integration /usr/bin/python3
  ${CMAKE_SOURCE_DIR}/tests/golden/gguf/gguf_serve_test.py)
set_tests_properties(gguf_serve_chat PROPERTIES TIMEOUT 300)
