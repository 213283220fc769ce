#!/usr/bin/env bash
# scripts/bench-quant.sh - decode/prefill benchmark of bf16 vs MLX 4-bit and 8-bit and GGUF
# Q4_0 and Q8_0 on the random Llama-3.2-1B-shaped checkpoint (made by
# scripts/bench/make_model.py when missing).
#
#   scripts/bench-quant.sh [RAPID_BINARY [BASELINE_BINARY]]      (default build/rapid)
#   env: BENCH_DIR (~/.cache/rapid-bench), THREADS (2), PROMPT (128), GEN (32),
#        MODELS ("bf16 mlx4 mlx8 q4_0 q8_0"), REPS (1: runs of each model, interleaved)
# The MLX checkpoints are written once by `rapid quantize` from the bf16 one, the GGUF files
# (llama.cpp's layout: Q/K rows permuted, Q4_0 / Q8_0 blocks) once by build/gguf_make
# (tests/bench/gguf_make.c, next to the binary); every model is then benchmarked in the same
# run so the figures share the machine's load. The `decode / bandwidth bound` line is the
# figure to compare (llama.cpp on this machine: Q4_0 0.55, Q8_0 0.68, BF16 0.84).
# With a BASELINE_BINARY (say an older build), each run of a model runs the baseline right
# after the binary, so old and new share the machine's load; the end prints the median of
# the reps per model and binary (decode / bandwidth bound, prefill tok/s, CPU shares).
set -euo pipefail
RAPID=${1:-build/rapid}
BASE=${2:-}
SUMMARY=$(mktemp)
trap 'rm -f "$SUMMARY"' EXIT
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
        for bin in "$RAPID" $BASE; do
            echo "== $m (run $r, $bin)"
            out=$("$bin" bench --model "$(path_of "$m")" --threads "$THREADS" \
                --prompt "$PROMPT" --gen "$GEN" --json)
            echo "$out"
            echo "$out" | grep '^{' | sed "s|^{|{\"bin\":\"$bin\",\"name\":\"$m\",|" >> "$SUMMARY"
            echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
        done
    done
done
echo "== medians over $REPS run(s): decode / bandwidth bound, decode tok/s, prefill tok/s (CPU shares)"
/usr/bin/python3 - "$SUMMARY" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
keys = []
for r in rows:
    if (r["name"], r["bin"]) not in keys:
        keys.append((r["name"], r["bin"]))
med = lambda v: statistics.median(v)
for name, b in keys:
    rs = [r for r in rows if r["name"] == name and r["bin"] == b]
    print("%-5s %-28s ratio %.3f (%s)  decode %.2f tok/s  pp%d %.1f tok/s (%s)  cpu %.0f%%/%.0f%%"
          % (name, b, med([r["bw_ratio"] for r in rs]),
             ", ".join("%.3f" % r["bw_ratio"] for r in rs), med([r["decode_tok_s"] for r in rs]),
             rs[0]["prompt"], med([r["prefill_tok_s"] for r in rs]),
             ", ".join("%.0f" % r["prefill_tok_s"] for r in rs),
             100 * med([r["prefill_cpu_share"] for r in rs]),
             100 * med([r["decode_cpu_share"] for r in rs])))
PY
