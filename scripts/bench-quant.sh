#!/usr/bin/env bash
# scripts/bench-quant.sh - decode/prefill benchmark of bf16 vs MLX 4-bit and 8-bit on the
# random Llama-3.2-1B-shaped checkpoint (made by scripts/bench/make_model.py when missing).
#
#   scripts/bench-quant.sh [RAPID_BINARY]      (default build/rapid)
#   env: BENCH_DIR (~/.cache/rapid-bench), THREADS (2), PROMPT (128), GEN (32)
# The quantized checkpoints are written once by `rapid quantize` from the bf16 one; every
# model is then benchmarked in the same run so the figures share the machine's load.
set -euo pipefail
RAPID=${1:-build/rapid}
DIR=${BENCH_DIR:-$HOME/.cache/rapid-bench}
THREADS=${THREADS:-2}
PROMPT=${PROMPT:-128}
GEN=${GEN:-32}
BF16=$DIR/llama-3.2-1b-bf16
if [ ! -f "$BF16/model.safetensors" ]; then
    /usr/bin/python3 "$(dirname "$0")/bench/make_model.py" "$BF16" --dtype bf16
fi
for b in 4 8; do
    out=$DIR/llama-3.2-1b-mlx$b
    if [ ! -f "$out/model.safetensors" ]; then
        "$RAPID" quantize --model "$BF16" --bits "$b" --group-size 64 --out "$out"
    fi
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for m in bf16 mlx4 mlx8; do
    echo "== $m"
    "$RAPID" bench --model "$DIR/llama-3.2-1b-$m" --threads "$THREADS" --prompt "$PROMPT" --gen "$GEN"
    echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
done
