#!/usr/bin/env bash
# Builds the tokenizer and GGUF libFuzzer targets (FUZZ_TARGETS, default "tokenizer_fuzz
# gguf_fuzz"; any tests/fuzz/*.c name works) with clang (-fsanitize=fuzzer,address,undefined)
# against the library (rapid_core built in build-fuzz/ with the same sanitizers) and runs each
# for FUZZ_SECONDS (default 60; argument 1 overrides). A target is any .c file in tests/fuzz/
# defining LLVMFuzzerTestOneInput; its corpus lives in build-fuzz/corpus/<name> and its seeds,
# if any, in tests/fuzz/<name>.seeds/. Exits non-zero when a target finds a crash, leak or
# sanitizer report (the reproducer is left in build-fuzz/).
#   scripts/fuzz-tokenizer.sh [SECONDS]   (scripts/fuzz.sh runs every fuzz-*.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-${FUZZ_SECONDS:-60}}
FUZZ_TARGETS=${FUZZ_TARGETS:-tokenizer_fuzz gguf_fuzz}
out=$root/build-fuzz
export RAPID_TEST_CACHE=${RAPID_TEST_CACHE:-$HOME/.cache/rapid-test}
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
if [ ! -f "$out/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$out" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=Debug -DRP_CUDA=OFF \
    -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link $san -O1 -g" >/dev/null
fi
cmake --build "$out" --target rapid_core -j "${JOBS:-2}" >/dev/null
libs=$(pkg-config --libs jansson libmicrohttpd libpcre2-8 libutf8proc libcurl libxxhash libedit)
status=0
for src in "$root"/tests/fuzz/*.c; do
  [ -e "$src" ] || continue
  name=$(basename "$src" .c)
  if [ -n "${FUZZ_TARGETS:-}" ] && [[ " $FUZZ_TARGETS " != *" $name "* ]]; then continue; fi
  grep -q LLVMFuzzerTestOneInput "$src" || continue
  clang -fsanitize=fuzzer $san -O1 -g -D_GNU_SOURCE -I "$root/src" "$src" "$out/librapid_core.a" \
    $libs -lpthread -lm -o "$out/$name"
  corpus=$out/corpus/$name
  mkdir -p "$corpus"
  seeds=()
  [ -d "$root/tests/fuzz/$name.seeds" ] && seeds=("$root/tests/fuzz/$name.seeds")
  echo "fuzz: $name for ${secs}s"
  if ! (cd "$out" && ASAN_OPTIONS=detect_leaks=1 "./$name" -max_total_time="$secs" \
        -max_len=4096 -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
        "$corpus" "${seeds[@]}" 2>&1 | tail -25); then
    echo "fuzz: $name FAILED"
    status=1
  fi
done
exit $status
