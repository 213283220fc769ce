#!/usr/bin/env bash
# Chat templates for the golden template test: npm @huggingface/ollama-utils@0.0.18 ships
# src/chat-template-automap.ts (about 97 real Hugging Face chat templates).
# Result: $RAPID_TEST_CACHE/ollama-utils/node_modules/@huggingface/ollama-utils
set -euo pipefail
cache=${RAPID_TEST_CACHE:-$HOME/.cache/rapid-test}
dest=$cache/ollama-utils
[ -f "$dest/node_modules/@huggingface/ollama-utils/src/chat-template-automap.ts" ] && exit 0
mkdir -p "$dest"
npm install --silent --no-audit --no-fund --prefix "$dest" @huggingface/ollama-utils@0.0.18 >/dev/null
test -f "$dest/node_modules/@huggingface/ollama-utils/src/chat-template-automap.ts"
