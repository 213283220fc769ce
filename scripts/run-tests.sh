#!/usr/bin/env bash
# Runs every test: all ctest tests of the release build, then the unit tests again in the
# ASan/UBSan build. Exits non-zero when anything fails. Usage:
#   scripts/run-tests.sh [--unit-only] RELEASE_BUILD ASAN_BUILD
set -uo pipefail
unit_only=0
if [ "${1:-}" = "--unit-only" ]; then unit_only=1; shift; fi
rel=${1:-build}
asan=${2:-build-asan}
jobs=${RAPID_TEST_JOBS:-2}
export RAPID_TEST_CACHE=${RAPID_TEST_CACHE:-$HOME/.cache/rapid-test}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

status=0
if [ $unit_only -eq 1 ]; then
  ctest --test-dir "$rel" -L unit --output-on-failure -j "$jobs" || status=1
else
  ctest --test-dir "$rel" --output-on-failure -j "$jobs" || status=1
fi
echo "== unit tests under AddressSanitizer + UndefinedBehaviorSanitizer =="
ctest --test-dir "$asan" -L unit --output-on-failure -j "$jobs" || status=1
if [ $status -ne 0 ]; then
  echo "run-tests: FAILED"
else
  echo "run-tests: all passed"
fi
exit $status
