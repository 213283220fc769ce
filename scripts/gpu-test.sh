#!/usr/bin/env bash
# GPU tests of the CUDA backend, for a machine with an NVIDIA GPU (CI has none and never runs
# this). Builds BUILD_DIR with CUDA unless it already holds the binaries, then:
#   1. rapid_gpu_check: the skinny GEMM / matvec / argmax kernels at the Llama-3-8B shapes
#      against a host reference, then every fixture on the GPU against transformers' logits
#      (f32 weights: 1e-3; bf16: 0.25, and 0.2 against the CPU on the same bf16 weights),
#      a 3-sequence batched step, and greedy tokens equal to the CPU's and transformers';
#      the MLX 4/8-bit kernels at the 8B shapes and every fixture quantized by `rapid quantize`
#      (GPU vs the CPU's reference kernels: logits, greedy tokens equal); GGUF weights likewise
#      (random Q4/Q5/Q6/Q8 matrices against a host reference, the fixtures' GGUF twins)
#   2. the CLI: `rapid generate --device cuda` prints the same ids as `--device cpu` (with the
#      f32 KV cache and with the bf16 / f16 ones), and
#      `rapid logits --device cuda` writes logits within 1e-3 of the CPU's
# usage: scripts/gpu-test.sh [BUILD_DIR]     (RAPID_LIBS: extra shared-library folder)
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
if [ ! -x "$build/rapid_gpu_check" ] || [ ! -x "$build/rapid" ]; then
  make build BUILD="$build" CUDA=ON || exit 1
fi
if [ -n "${RAPID_LIBS:-}" ]; then export LD_LIBRARY_PATH="$RAPID_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
export RP_SOURCE_DIR=$PWD
status=0
echo "== rapid_gpu_check (kernels at the 8B shapes, fixtures on the GPU; decode graphs on) =="
"$build/rapid_gpu_check" || status=1
echo "== rapid_gpu_check fixtures with RAPID_CUDA_GRAPH=0 (every step eager) =="
for f in llama_gqa qwen3 mistral; do RAPID_CUDA_GRAPH=0 "$build/rapid_gpu_check" $f | tail -1 | grep -q " 0 failed" || { echo "FAIL  eager $f"; status=1; }; done

echo "== CLI with --device cuda =="
fx=tests/golden/models/llama_gqa
ids=$(/usr/bin/env python3 -c "import json;print(','.join(map(str,json.load(open('$fx/ids.json'))['ids'])))")
g=$("$build/rapid" generate --model $fx --ids "$ids" --max-tokens 16 --ignore-eos --device cuda 2>/dev/null)
c=$("$build/rapid" generate --model $fx --ids "$ids" --max-tokens 16 --ignore-eos --device cpu 2>/dev/null)
if [ -n "$g" ] && [ "$g" = "$c" ]; then echo "ok    generate --device cuda == cpu ($g)"; else echo "FAIL  generate cuda '$g' cpu '$c'"; status=1; fi
# the 16-bit KV caches: the same ids on both devices (each rounds K and V as the host codec)
for kt in bf16 f16; do
  g=$("$build/rapid" generate --model $fx --ids "$ids" --max-tokens 16 --ignore-eos --device cuda --kv-cache-dtype $kt 2>&1 | tail -1)
  c=$("$build/rapid" generate --model $fx --ids "$ids" --max-tokens 16 --ignore-eos --device cpu --kv-cache-dtype $kt 2>&1 | tail -1)
  if [ -n "$g" ] && [ "$g" = "$c" ]; then echo "ok    generate --kv-cache-dtype $kt --device cuda == cpu ($g)"; else echo "FAIL  generate --kv-cache-dtype $kt: cuda '$g' cpu '$c'"; status=1; fi
done
tmp=$(mktemp -d)
"$build/rapid" logits --model $fx --ids "$ids" --out $tmp/g.bin --device cuda 2>/dev/null &&
"$build/rapid" logits --model $fx --ids "$ids" --out $tmp/c.bin --device cpu 2>/dev/null &&
/usr/bin/env python3 - $tmp/g.bin $tmp/c.bin <<'PY' || status=1
import struct, sys
a, b = (open(p, "rb").read() for p in sys.argv[1:3])
n = len(a) // 4
x, y = struct.unpack(f"<{n}f", a), struct.unpack(f"<{n}f", b)
d = max(abs(p - q) for p, q in zip(x, y)) if len(a) == len(b) and n else float("inf")
print(("ok   " if d <= 1e-3 else "FAIL ") + f" logits --device cuda vs cpu: max diff {d:.3g} (tol 1e-3)")
sys.exit(0 if d <= 1e-3 else 1)
PY
rm -rf "$tmp"
echo "gpu-test: $([ $status -eq 0 ] && echo all passed || echo FAILED)"
exit $status
