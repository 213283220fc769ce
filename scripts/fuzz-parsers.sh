#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) into build-fuzz/ and runs them.
#   scripts/fuzz.sh [SECONDS]   seconds per run (default 300: the acceptance's 5 minutes)
# parser_fuzz runs once per tool-call format family, pinned with RP_FUZZ_TOOL, seeded from the
# golden vectors (tests/golden/parsers). Meant to be run by hand (`make fuzz`); the 5-minute
# runs are not part of `make test`. Exits non-zero when a target finds a crash.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-${FUZZ_SECONDS:-300}}
out=build-fuzz
mkdir -p "$out"
CC=${CC:-clang}
flags="-std=c17 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Isrc"
# shellcheck disable=SC2086
$CC $flags tests/fuzz/parser_fuzz.c src/chat/output_parser.c src/chat/parse_*.c src/base/*.c \
  $(pkg-config --cflags --libs jansson) -lpthread -lm -o "$out/parser_fuzz"

# seed corpus: every golden vector's text, prefixed with the three control bytes
corpus="$out/corpus-parser"
rm -rf "$corpus" && mkdir -p "$corpus"
/usr/bin/python3 - "$corpus" <<'PY'
import glob, json, sys
out = sys.argv[1]
i = 0
for path in sorted(glob.glob("tests/golden/parsers/*.json")):
    for c in json.load(open(path, encoding="utf-8")):
        i += 1
        open("%s/seed%04d" % (out, i), "wb").write(bytes([0, 0x40, 7]) + c["text"].encode())
PY

families="hermes granite4 qwen3_coder qwen3_xml seed_oss llama3_json pythonic llama4_pythonic lfm2
mistral deepseek_v3 deepseek_v31 kimi_k2 glm45 glm47 openai granite phi4_mini_json minimax_m2
xlam jamba internlm hunyuan_a13b cohere_command3 gemma4"
status=0
for f in $families; do
  mkdir -p "$out/work-$f"
  echo "== parser_fuzz $f: ${secs}s"
  if ! RP_FUZZ_TOOL=$f ASAN_OPTIONS=detect_leaks=1 "$out/parser_fuzz" -max_total_time="$secs" \
      -max_len=4096 -timeout=10 -print_final_stats=1 -artifact_prefix="$out/crash-$f-" \
      "$out/work-$f" "$corpus" 2>"$out/log-$f.txt"; then
    echo "   FAILED: see $out/log-$f.txt"; status=1
  fi
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$out/log-$f.txt" | tr '\n' ' '; echo
done
exit $status
