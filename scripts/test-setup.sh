#!/usr/bin/env bash
# Installs what the tests need beyond the build: each scripts/setup.d/*.sh installs one kind of
# test material (Debian packages, npm oracles and SDKs, reference data) into a cache outside
# the repository (RAPID_TEST_CACHE, default ~/.cache/rapid-test). Each step is idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export RAPID_TEST_CACHE=${RAPID_TEST_CACHE:-$HOME/.cache/rapid-test}
mkdir -p "$RAPID_TEST_CACHE"
for step in "$here"/setup.d/*.sh; do
  [ -e "$step" ] || continue
  echo "test-setup: $(basename "$step")"
  bash "$step"
done
