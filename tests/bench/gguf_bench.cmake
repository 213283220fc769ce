# GGUF files of the benchmark checkpoints (not tests): build/gguf_make, for scripts/bench-quant.sh.
add_executable(gguf_make tests/bench/gguf_make.c tests/unit/model/gguf_writer.c)
target_link_libraries(gguf_make PRIVATE rapid_core)
target_include_directories(gguf_make PRIVATE ${CMAKE_SOURCE_DIR}/tests)
