#!/usr/bin/env bash
# The server's libFuzzer targets (tests/fuzz/{openai,anthropic}_request_fuzz.c, registered by
# tests/fuzz/fuzz.cmake under RP_FUZZ), built with clang + ASan/UBSan in build-fuzz-server/, then
# runs each for SECONDS (default 60) on a copy of its corpus tests/fuzz/corpus/<name>/
# (target name without _fuzz). Exits non-zero on the first crash, leak or timeout.
#   scripts/fuzz-server.sh [SECONDS] [TARGET...]   (the acceptance: 600 seconds each)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
cmake -S . -B build-fuzz-server -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=Debug -DRP_SANITIZE=ON -DRP_FUZZ=ON -DRP_CUDA=OFF >/dev/null
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(openai_request_fuzz anthropic_request_fuzz)
cmake --build build-fuzz-server -j "${JOBS:-2}" --target "${targets[@]}"
for t in "${targets[@]}"; do
  corpus=tests/fuzz/corpus/${t%_fuzz}
  work=build-fuzz-server/corpus/${t%_fuzz}
  mkdir -p "$work"
  [ -d "$corpus" ] && cp -n "$corpus"/* "$work"/ 2>/dev/null || true
  echo "fuzz: $t for ${secs}s"
  ASAN_OPTIONS=detect_leaks=1 build-fuzz-server/"$t" -max_total_time="$secs" -timeout=10 \
    -max_len=65536 -print_final_stats=1 "$work"
done
echo "fuzz: all targets clean"
