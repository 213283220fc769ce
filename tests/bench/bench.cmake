# Kernel microbenchmarks (not tests): build/kbench.
add_executable(kbench tests/bench/kbench.c)
target_link_libraries(kbench PRIVATE rapid_core)
# rapid's read-bandwidth probe alone (not a test): build/bwprobe, for scripts/bench-llamacpp.sh.
add_executable(bwprobe tests/bench/bwprobe.c)
target_link_libraries(bwprobe PRIVATE rapid_core)
