#!/usr/bin/env bash
# GPU benchmark: a random Llama-3-8B-shaped bf16 checkpoint (dim 4096, 32 layers, 32/8 heads,
# ffn 14336, vocab 128256) made on the machine itself (torch draws it on the GPU), then
# prefill pp512, decode tg128 single stream, and aggregate decode at 16 and 64 streams.
# Compare with llama.cpp's figures in ../shared/TESTING.md (F16: pp512 19.3k, tg128 209,
# 16 streams 2.2k, 64 streams 6.5k tok/s).
# usage: scripts/bench-gpu.sh [RAPID_BINARY]
#   RAPID_BENCH_DTYPE  bf16 (default) or mlx4 / mlx8: the same shape MLX-quantized, group 64
#                      (make_model.py quantizes on the GPU as `rapid quantize` does); compare
#                      with llama.cpp Q4_0: pp512 10.8k, tg128 331, 16 streams 2.1k, 64: 5.0k
#   RAPID_BENCH_MODEL  where the checkpoint goes (default /dev/shm/rapid-llama3-8b-DTYPE,
#                      kept between runs on the same machine)
#   RAPID_BENCH_KV     the KV cache's storage (--kv-cache-dtype: f32, bf16 or f16; default
#                      the engine's). llama.cpp's figures are with its default f16 cache.
set -uo pipefail
cd "$(dirname "$0")/.."
rapid=${1:-build/rapid}
dtype=${RAPID_BENCH_DTYPE:-bf16}
dir=${RAPID_BENCH_MODEL:-/dev/shm/rapid-llama3-8b-$dtype}
if [ -n "${RAPID_LIBS:-}" ]; then export LD_LIBRARY_PATH="$RAPID_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
if [ ! -f "$dir/config.json" ]; then
  t0=$(date +%s)
  python3 scripts/bench/make_model.py "$dir" --shape llama-3-8b --dtype "$dtype" || exit 1
  echo "checkpoint made in $(( $(date +%s) - t0 )) s"
fi
set -x
"$rapid" bench --model "$dir" --device cuda --prompt 512 --gen 128 --streams 1,16,64 \
  ${RAPID_BENCH_KV:+--kv-cache-dtype $RAPID_BENCH_KV}
