#!/usr/bin/env bash
# Decode benchmark of the model families on this CPU (a script, not a test).
#
# Writes random-weight checkpoints shaped like Qwen3.5-4B (hybrid: Gated DeltaNet + gated
# attention) and Qwen3-30B-A3B (128 experts, top 8) with scripts/bench/make_family_model.py,
# by default full size as MLX 4-bit checkpoints (the layout mlx_lm.convert -q writes, experts
# stacked in switch_mlp; about 2.6 and 17 GB, written once into BENCH_DIR), runs
# `rapid bench --json` on each and prints prefill and decode tok/s and the bandwidth-
# normalised figure
#     tok/s x bytes read per decode token / read bandwidth (probe of the same run)
# where the bytes count only the active experts (top-k of n) for the MoE (rapid bench counts
# them the same way; the generator's own count is printed beside it).
#
# usage: scripts/bench-families.sh [RAPID_BINARY]   (default build/rapid)
# env:   BENCH_DIR (default $HOME/.cache/rapid-bench), DTYPE (mlx4; mlx8, bf16, f32),
#        LAYERS_Q35, LAYERS_MOE (default: the full 32 / 48; fewer keeps the per-layer shapes),
#        THREADS (2), PROMPT (32), GEN (16)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
rapid=${1:-$here/build/rapid}
dir=${BENCH_DIR:-$HOME/.cache/rapid-bench}
py=/usr/bin/python3
threads=${THREADS:-2}
prompt=${PROMPT:-32}
gen=${GEN:-16}
dtype=${DTYPE:-mlx4}
[ -x "$rapid" ] || { echo "bench-families: no binary at $rapid (make build)" >&2; exit 1; }
mkdir -p "$dir"

run() { # shape [layers]
    local shape=$1 layers=${2:-} out
    if [ -n "$layers" ]; then out="$dir/$shape-L$layers-$dtype"; else out="$dir/$shape-$dtype"; fi
    if [ ! -f "$out/meta.json" ]; then
        "$py" "$here/scripts/bench/make_family_model.py" "$out" --shape "$shape" \
            ${layers:+--layers "$layers"} --dtype "$dtype" > "$out.meta.tmp"
        mv "$out.meta.tmp" "$out/meta.json"
    fi
    "$rapid" bench --model "$out" --prompt "$prompt" --gen "$gen" --threads "$threads" --json \
        2>/dev/null > "$out/bench.json"
    "$py" - "$out/meta.json" "$out/bench.json" <<'PY'
import json, sys
meta = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
bytes_tok = b["bytes_per_token"]
ratio = b["decode_tok_s"] * bytes_tok / (b["read_bw_gb_s"] * 1e9)
print(f'{meta["shape"]:14s} {meta["layers"]:2d} layers {b["dtype"]}: prefill {b["prefill_tok_s"]:.2f} tok/s, '
      f'decode {b["decode_tok_s"]:.2f} tok/s, {bytes_tok / 1e9:.3f} GB/token read '
      f'(generator: {meta["decode_bytes"] / 1e9:.3f}; active experts only: '
      f'{meta["expert_bytes_active"] / 1e9:.3f} of {meta["expert_bytes_total"] / 1e9:.3f} GB), '
      f'read bw {b["read_bw_gb_s"]:.2f} GB/s, decode/bandwidth bound {ratio:.3f}')
PY
}

run qwen3.5-4b "${LAYERS_Q35:-}"
run qwen3-30b-a3b "${LAYERS_MOE:-}"
