#!/usr/bin/env bash
# scripts/bench-quant.sh - decode/prefill benchmark of bf16 vs MLX 4-bit and 8-bit and GGUF
# Q4_0 and Q8_0 on the random Llama-3.2-1B-shaped checkpoint (made by
# scripts/bench/make_model.py when missing).
#
#   scripts/bench-quant.sh [RAPID_BINARY]      (default build/rapid)
#   env: BENCH_DIR (~/.cache/rapid-bench), THREADS (2), PROMPT (128), GEN (32),
#        MODELS ("bf16 mlx4 mlx8 q4_0 q8_0"), REPS (1: runs of each model, interleaved)
# The MLX checkpoints are written once by `rapid quantize` from the bf16 one, the GGUF files
# (llama.cpp's layout: Q/K rows permuted, Q4_0 / Q8_0 blocks) once by build/gguf_make
# (tests/bench/gguf_make.c, next to the binary); every model is then benchmarked in the same
# run so the figures share the machine's load. The `decode / bandwidth bound` line is the
# figure to compare (llama.cpp on this machine: Q4_0 0.55, Q8_0 0.68, BF16 0.84).
set -euo pipefail
RAPID=${1:-build/rapid}
DIR=${BENCH_DIR:-$HOME/.cache/rapid-bench}
THREADS=${THREADS:-2}
PROMPT=${PROMPT:-128}
GEN=${GEN:-32}
MODELS=${MODELS:-bf16 mlx4 mlx8 q4_0 q8_0}
REPS=${REPS:-1}
BF16=$DIR/llama-3.2-1b-bf16
if [ ! -f "$BF16/model.safetensors" ]; then
    /usr/bin/python3 "$(dirname "$0")/bench/make_model.py" "$BF16" --dtype bf16
fi
path_of() { # model name -> checkpoint path, made when missing
    case $1 in
    bf16) echo "$BF16" ;;
    mlx4 | mlx8)
        local out=$DIR/llama-3.2-1b-$1
        if [ ! -f "$out/model.safetensors" ]; then
            "$RAPID" quantize --model "$BF16" --bits "${1#mlx}" --group-size 64 --out "$out" >&2
        fi
        echo "$out" ;;
    q4_0 | q8_0)
        local out=$DIR/llama-3.2-1b-$1.gguf
        if [ ! -f "$out" ]; then
            "$(dirname "$RAPID")/gguf_make" "$BF16" "$1" "$out.tmp" >&2
            mv "$out.tmp" "$out"
        fi
        echo "$out" ;;
    *) echo "bench-quant.sh: unknown model '$1'" >&2; exit 2 ;;
    esac
}
for m in $MODELS; do path_of "$m" > /dev/null; done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$REPS"); do
    for m in $MODELS; do
        echo "== $m (run $r)"
        "$RAPID" bench --model "$(path_of "$m")" --threads "$THREADS" --prompt "$PROMPT" --gen "$GEN"
        echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    done
done
