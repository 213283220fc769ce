#!/usr/bin/env bash
# Golden test: every GGUF vocab file with .inp/.out vectors in llama.cpp's tree.
set -euo pipefail
check=$1
cache=${RAPID_TEST_CACHE:-$HOME/.cache/rapid-test}
models=$cache/llama.cpp/models
[ -d "$models" ] || { echo "FAIL: $models missing: run scripts/setup.d/10-llamacpp-data.sh"; exit 1; }
status=0
n=0
for inp in "$models"/ggml-vocab-*.gguf.inp; do
  g=${inp%.inp}
  n=$((n + 1))
  "$check" gguf "$g" "$inp" "$g.out" || status=1
done
echo "gguf vocab files checked: $n"
[ $n -ge 15 ] || { echo "FAIL: expected at least 15 vocab files, found $n"; exit 1; }
exit $status
