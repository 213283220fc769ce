#!/usr/bin/env bash
# `make run`: serve the embedded default model with the freshly built binary.
set -euo pipefail
rapid=${1:-build/rapid}
[ $# -gt 0 ] && shift
root=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -f "$root/models/default/config.json" ]; then
  echo "make run: the embedded default model (models/default) is not in this tree yet." >&2
  echo "          Serve a model of your own: $rapid serve /path/to/model-dir" >&2
  exit 1
fi
if ! "$rapid" help serve >/dev/null 2>&1; then
  echo "make run: this build has no 'serve' command yet; try '$rapid help'." >&2
  exit 1
fi
exec "$rapid" serve "$root/models/default" "$@"
