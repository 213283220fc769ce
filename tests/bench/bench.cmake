# Kernel microbenchmarks (not tests): build/kbench.
add_executable(kbench tests/bench/kbench.c)
target_link_libraries(kbench PRIVATE rapid_core)
