#!/usr/bin/env bash
# Golden test: our ids vs @lenml/tokenizers for six real tokenizers over texts.json.
set -euo pipefail
check=$1
here=$(cd "$(dirname "$0")" && pwd)
cache=${RAPID_TEST_CACHE:-$HOME/.cache/rapid-test}
mods=$cache/npm-tok/node_modules/@lenml
[ -d "$mods/tokenizers" ] || { echo "FAIL: $mods missing: run scripts/setup.d/20-tokenizers.sh"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
for name in qwen3 llama3 gemma3 deepseek_v3 gptoss llama2; do
  dir=$mods/tokenizer-$name/models
  [ -f "$dir/tokenizer.json" ] || { echo "FAIL: $dir/tokenizer.json missing"; exit 1; }
  node "$here/oracle.js" "@lenml/tokenizer-$name" "$here/texts.json" "$work/$name.json"
  extra=""
  [ $name = qwen3 ] && extra=--nfc
  [ $name = gemma3 ] || [ $name = llama2 ] && extra=--spm
  "$check" json "$dir/tokenizer.json" "$here/texts.json" "$work/$name.json" $extra || status=1
done
exit $status
