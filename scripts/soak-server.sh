#!/usr/bin/env bash
# Soak benchmark for `rapid serve` (not a test): SECONDS (default 600) of mixed concurrent
# requests over both APIs (plain, streamed, completions, count_tokens, bad requests, and
# clients that disconnect mid-stream) against the ASan build, sampling the server's RSS.
# Passes when no request got an unexpected answer, the server exits 0 on SIGTERM (ASan
# found no error and no leak) and RSS stayed flat after warm-up.
#   scripts/soak-server.sh [SECONDS] [RAPID_BINARY] [CONCURRENCY]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export RAPID=${2:-$root/build-asan/rapid}
export RP_SOURCE_DIR=$root
export RAPID_TEST_CACHE=${RAPID_TEST_CACHE:-$HOME/.cache/rapid-test}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:quarantine_size_mb=16:malloc_context_size=10}
[ -x "$RAPID" ] || { echo "soak: no binary at $RAPID (make build-asan)" >&2; exit 1; }
exec node "$root/scripts/soak-server.mjs" "${1:-600}" "${3:-8}"
