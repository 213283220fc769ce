#!/usr/bin/env bash
# `make fuzz`: builds every libFuzzer target (tests/fuzz/*_fuzz.c, registered by the
# tests/fuzz/*.cmake fragments under RP_FUZZ) with clang + ASan/UBSan in build-fuzz/, then
# runs each for SECONDS (default 60) on a copy of its corpus tests/fuzz/corpus/<name>/
# (target name without _fuzz). Exits non-zero on the first crash, leak or timeout.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=Debug -DRP_SANITIZE=ON -DRP_FUZZ=ON -DRP_CUDA=OFF >/dev/null
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/*_fuzz.c tests/fuzz/*_fuzz.cc; do
    [ -e "$f" ] && targets+=("$(basename "${f%.*}")")
  done
fi
cmake --build build-fuzz -j "${JOBS:-2}" --target "${targets[@]}"
for t in "${targets[@]}"; do
  corpus=tests/fuzz/corpus/${t%_fuzz}
  work=build-fuzz/corpus/${t%_fuzz}
  mkdir -p "$work"
  [ -d "$corpus" ] && cp -n "$corpus"/* "$work"/ 2>/dev/null || true
  echo "fuzz: $t for ${secs}s"
  ASAN_OPTIONS=detect_leaks=1 build-fuzz/"$t" -max_total_time="$secs" -timeout=10 \
    -max_len=65536 -print_final_stats=1 "$work"
done
echo "fuzz: all targets clean"
