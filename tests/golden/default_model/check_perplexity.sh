#!/usr/bin/env bash
# tests/golden/default_model/check_perplexity.sh - rapid's held-out perplexity of the default
# model (models/default) against the PyTorch value that scripts/default-model/train.py wrote
# to training.json, computed the same way (float32 over the saved bf16 weights). Passes when
# they agree within 1%; also checks that the sample is the one training measured (sha256)
# and that both counted the same number of tokens.
set -euo pipefail
src=${RP_SOURCE_DIR:?RP_SOURCE_DIR not set}
rapid=${RAPID:?RAPID not set}
model=$src/models/default
sample=$src/tests/golden/default_model/heldout-sample.txt
py=/usr/bin/python3

for f in "$model/training.json" "$model/config.json" "$model/tokenizer.json" "$sample"; do
    [ -f "$f" ] || { echo "FAIL: missing $f"; exit 1; }
done

want_sha=$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["corpus"]["heldout_sample_sha256"])' "$model/training.json")
have_sha=$(sha256sum "$sample" | cut -d' ' -f1)
if [ "$want_sha" != "$have_sha" ]; then
    echo "FAIL: $sample is not the text training measured (sha256 $have_sha, training.json says $want_sha)"
    exit 1
fi

ctx=$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["ctx"])' "$model/training.json")
got=$("$rapid" perplexity --model "$model" --text-file "$sample" --ctx "$ctx" --json)
echo "rapid:   $got"
$py - "$model/training.json" "$got" <<'PY'
import json, sys
ref = json.load(open(sys.argv[1]))["perplexity"]["heldout_sample"]
got = json.loads(sys.argv[2])
print("pytorch: perplexity %.6f over %d tokens" % (ref["perplexity"], ref["tokens"]))
rel = abs(got["perplexity"] - ref["perplexity"]) / ref["perplexity"]
print("relative difference %.3g (limit 0.01)" % rel)
ok = rel <= 0.01 and got["tokens"] == ref["tokens"]
if got["tokens"] != ref["tokens"]:
    print("FAIL: rapid scored %d tokens, PyTorch %d" % (got["tokens"], ref["tokens"]))
print("1 passed, 0 failed" if ok else "0 passed, 1 failed")
sys.exit(0 if ok else 1)
PY
