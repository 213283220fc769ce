#!/usr/bin/env bash
# Builds the chat-template libFuzzer target (clang, ASan + UBSan) into build-fuzz/ and runs it.
#   scripts/fuzz-jinja.sh [SECONDS]   (default 600: the acceptance's 10 minutes)
# Seeds: every real template the golden test uses ($RAPID_TEST_CACHE) plus the feature snippets.
# Exits non-zero when the fuzzer finds a crash, a leak or a timeout.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-${FUZZ_SECONDS:-600}}
out=build-fuzz
cache=${RAPID_TEST_CACHE:-$HOME/.cache/rapid-test}
mkdir -p "$out"
CC=${CC:-clang}
flags="-std=c17 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Isrc"
# shellcheck disable=SC2086
$CC $flags tests/fuzz/jinja_fuzz.c src/chat/jinja_*.c src/chat/template.c src/base/*.c \
  $(pkg-config --cflags --libs jansson libutf8proc) -lpthread -lm -o "$out/jinja_fuzz"

corpus="$out/corpus-jinja"
rm -rf "$corpus" && mkdir -p "$corpus"
i=0
for f in "$cache"/llama.cpp/models/templates/*.jinja; do
  [ -e "$f" ] || continue
  i=$((i + 1)); cp "$f" "$corpus/tpl$i"
done
/usr/bin/python3 - "$corpus" <<'PY'
import re, sys
text = open("tests/golden/templates/snippets.txt", encoding="utf-8").read()
for i, block in enumerate(re.split(r"(?m)^=====\n", text)):
    open(f"{sys.argv[1]}/snippet{i}", "w", encoding="utf-8").write(block)
PY
mkdir -p "$out/work-jinja"
echo "== jinja_fuzz: ${secs}s, seeds: $(ls "$corpus" | wc -l)"
status=0
if ! ASAN_OPTIONS=detect_leaks=1 "$out/jinja_fuzz" -max_total_time="$secs" -max_len=16384 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$out/crash-jinja-" \
    "$out/work-jinja" "$corpus" 2>"$out/log-jinja.txt"; then
  echo "   FAILED: see $out/log-jinja.txt"; status=1
fi
grep -E "stat::number_of_executed_units|stat::peak_rss_mb|Done [0-9]+ runs" "$out/log-jinja.txt" | tr '\n' ' '; echo
exit $status
