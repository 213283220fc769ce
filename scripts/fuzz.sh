#!/usr/bin/env bash
# Runs every libFuzzer target for SECONDS each (`make fuzz`). Each target has its own script
# scripts/fuzz-<target>.sh that builds it with clang into build-fuzz/ and runs it.
#   scripts/fuzz.sh [SECONDS]
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
for s in scripts/fuzz-*.sh; do
  [ -e "$s" ] || continue
  bash "$s" "$@" || status=1
done
exit $status
