#!/usr/bin/env bash
# Builds one libFuzzer target per output-parser family with clang (ASan + UBSan) into
# build-fuzz/parser_fuzz_<family> and runs each for SECONDS, at most JOBS at a time, niced.
#   scripts/fuzz-parsers.sh [SECONDS] [FAMILY...]
#   SECONDS  per family (default 300: the acceptance's 5 minutes; env FUZZ_SECONDS too)
#   FAMILY   json xml pythonic harmony reasoning (default: all; see tests/fuzz/parser_fuzz.c)
#   env FUZZ_JOBS (default 2) targets run at once.
# Seeded from the golden vectors (tests/golden/parsers). Meant to be run by hand (`make fuzz`);
# not part of `make test`. Prints one line per family (executed units, peak RSS, result) and
# writes it to build-fuzz/parser-summary.txt. Exits non-zero when a target finds a crash.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-${FUZZ_SECONDS:-300}}
shift || true
all="json xml pythonic harmony reasoning"
families=${*:-$all}
jobs=${FUZZ_JOBS:-2}
out=build-fuzz
mkdir -p "$out"
CC=${CC:-clang}
flags="-std=c17 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Isrc"
num() { case $1 in json) echo 0 ;; xml) echo 1 ;; pythonic) echo 2 ;; harmony) echo 3 ;;
  reasoning) echo 4 ;; *) echo "unknown family $1" >&2; exit 2 ;; esac; }
for f in $families; do
  # shellcheck disable=SC2086
  nice $CC $flags -DRP_FUZZ_FAMILY="$(num "$f")" tests/fuzz/parser_fuzz.c src/chat/output_parser.c \
    src/chat/parse_*.c src/base/*.c $(pkg-config --cflags --libs jansson) -lpthread -lm \
    -o "$out/parser_fuzz_$f"
done

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
        open("%s/seed%04d" % (out, i), "wb").write(bytes([i & 0xFF, 0x40 | (i % 7), 7]) + c["text"].encode())
PY

run_one() {
  local f=$1 rc=0
  mkdir -p "$out/work-$f"
  ASAN_OPTIONS=detect_leaks=1 nice -n 10 "$out/parser_fuzz_$f" -max_total_time="$secs" \
    -max_len=4096 -timeout=10 -print_final_stats=1 -artifact_prefix="$out/crash-$f-" \
    "$out/work-$f" "$corpus" >"$out/log-$f.txt" 2>&1 || rc=$?
  local units rss
  units=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/log-$f.txt" | tail -1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$out/log-$f.txt" | tail -1)
  if [ "$rc" = 0 ]; then r=clean; else r="FAILED rc=$rc (see $out/log-$f.txt)"; fi
  echo "parser_fuzz_$f: ${secs}s runs=${units:-?} peak_rss_mb=${rss:-?} $r" >"$out/result-$f.txt"
  return "$rc"
}

for f in $families; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  echo "== parser_fuzz_$f: ${secs}s"
  rm -f "$out/result-$f.txt"
  run_one "$f" &
done
wait || true
status=0
: >"$out/parser-summary.txt"
for f in $families; do
  [ -s "$out/result-$f.txt" ] || echo "parser_fuzz_$f: no result" >"$out/result-$f.txt"
  tee -a "$out/parser-summary.txt" <"$out/result-$f.txt"
  grep -q ' clean$' "$out/result-$f.txt" || status=1
done
exit $status
