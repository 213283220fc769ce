#!/usr/bin/env bash
# `rapid logits` and `rapid generate` (the stable test interface) against transformers'
# outputs for every dense fixture: logits within 1e-3, greedy ids identical.
set -euo pipefail
root=${RP_SOURCE_DIR:?}
rapid=${RAPID:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
n=0
for m in llama_gqa llama_tied_mha llama_headdim llama3_rope llama_linear_rope llama_yarn_rope \
         llama_sharded mistral qwen2 qwen2_untied qwen3 qwen3_untied; do
  dir=$root/tests/golden/models/$m
  ids=$(/usr/bin/python3 -c "import json;print(','.join(map(str,json.load(open('$dir/ids.json'))['ids'])))")
  want=$(/usr/bin/python3 -c "import json;print(','.join(map(str,json.load(open('$dir/ids.json'))['greedy'])))")
  n_new=$(echo "$want" | tr ',' '\n' | wc -l)
  "$rapid" logits --model "$dir" --ids "$ids" --out "$tmp/$m.bin" 2>/dev/null
  diff=$(/usr/bin/python3 -c "
import numpy as np
a = np.fromfile('$tmp/$m.bin', '<f4'); b = np.fromfile('$dir/logits.bin', '<f4')
print(float(np.abs(a - b).max()) if a.shape == b.shape else 'shape')")
  got=$("$rapid" generate --model "$dir" --ids "$ids" --max-tokens "$n_new" --ignore-eos 2>/dev/null)
  if [ "$diff" = shape ] || ! /usr/bin/python3 -c "import sys; sys.exit(0 if float('$diff') <= 1e-3 else 1)"; then
    echo "FAIL $m: logits max diff $diff"; fail=1
  elif [ "$got" != "$want" ]; then
    echo "FAIL $m: generate gave $got, transformers $want"; fail=1
  else
    echo "ok   $m: logits max diff $diff, greedy identical"
  fi
  n=$((n + 1))
done
# errors are clear and non-zero
if "$rapid" logits --model /nonexistent --ids 1 --out "$tmp/x" 2>"$tmp/err"; then fail=1; fi
grep -q "config.json" "$tmp/err" || { echo "FAIL: missing-model error: $(cat "$tmp/err")"; fail=1; }
if "$rapid" generate --model "$root/tests/golden/models/llama_gqa" --ids 1,x --max-tokens 2 2>/dev/null; then
  echo "FAIL: bad --ids accepted"; fail=1
fi
echo "$n fixtures checked"
exit $fail
