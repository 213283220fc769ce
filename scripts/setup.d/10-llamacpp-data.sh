#!/usr/bin/env bash
# Test data from llama.cpp's source tree (only its data files are used: GGUF vocab files
# with .inp/.out vectors, models/templates/*.jinja). It ships inside the npm package
# node-llama-cpp@3.21.1 as a git bundle. Result: $RAPID_TEST_CACHE/llama.cpp
set -euo pipefail
cache=${RAPID_TEST_CACHE:-$HOME/.cache/rapid-test}
dest=$cache/llama.cpp
[ -d "$dest/models/templates" ] && exit 0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent node-llama-cpp@3.21.1 >/dev/null &&
  tar xzf node-llama-cpp-3.21.1.tgz package/llama/gitRelease.bundle)
rm -rf "$dest.tmp"
git -c advice.detachedHead=false clone -q "$work/package/llama/gitRelease.bundle" "$dest.tmp"
mv "$dest.tmp" "$dest"
