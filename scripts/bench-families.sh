#!/usr/bin/env bash
# Decode benchmark of the model families on this CPU (a script, not a test).
#
# Writes random-weight checkpoints shaped like Qwen3.5-4B (hybrid: Gated DeltaNet + gated
# attention) and Qwen3-30B-A3B (128 experts, top 8) with scripts/bench/make_family_model.py,
# with the per-layer shapes of the real models but fewer layers (LAYERS_Q35, LAYERS_MOE:
# the full models do not fit this machine in bf16), runs `rapid bench --json` on each and
# prints decode tok/s and the bandwidth-normalised figure
#     tok/s x bytes read per decode token / read bandwidth (probe of the same run)
# where the bytes count only the active experts (top-k of n) for the MoE.
#
# usage: scripts/bench-families.sh [RAPID_BINARY]   (default build/rapid)
# env:   BENCH_DIR (default $HOME/.cache/rapid-bench), LAYERS_Q35 (8), LAYERS_MOE (4),
#        THREADS (2), PROMPT (16), GEN (16), DTYPE (bf16)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
rapid=${1:-$here/build/rapid}
dir=${BENCH_DIR:-$HOME/.cache/rapid-bench}
py=/usr/bin/python3
threads=${THREADS:-2}
prompt=${PROMPT:-16}
gen=${GEN:-16}
dtype=${DTYPE:-bf16}
[ -x "$rapid" ] || { echo "bench-families: no binary at $rapid (make build)" >&2; exit 1; }
mkdir -p "$dir"

run() { # shape layers
    local shape=$1 layers=$2 out="$dir/$1-L$2-$dtype"
    if [ ! -f "$out/meta.json" ]; then
        "$py" "$here/scripts/bench/make_family_model.py" "$out" --shape "$shape" \
            --layers "$layers" --dtype "$dtype" > "$out.meta.tmp"
        mv "$out.meta.tmp" "$out/meta.json"
    fi
    "$rapid" bench --model "$out" --prompt "$prompt" --gen "$gen" --threads "$threads" --json \
        2>/dev/null > "$out/bench.json"
    "$py" - "$out/meta.json" "$out/bench.json" <<'PY'
import json, sys
meta = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
bytes_tok = meta["decode_bytes"]
ratio = b["decode_tok_s"] * bytes_tok / (b["read_bw_gb_s"] * 1e9)
print(f'{meta["shape"]:14s} {meta["layers"]:2d} layers {b["dtype"]}: prefill {b["prefill_tok_s"]:.2f} tok/s, '
      f'decode {b["decode_tok_s"]:.2f} tok/s, {bytes_tok / 1e9:.3f} GB/token read '
      f'(active experts only: {meta["expert_bytes_active"] / 1e9:.3f} of {meta["expert_bytes_total"] / 1e9:.3f} GB), '
      f'read bw {b["read_bw_gb_s"]:.2f} GB/s, decode/bandwidth bound {ratio:.3f}')
PY
}

run qwen3.5-4b "${LAYERS_Q35:-8}"
run qwen3-30b-a3b "${LAYERS_MOE:-4}"
