#!/usr/bin/env bash
# `rapid chat` with no server at the default address starts its own (`rapid serve` child on a
# free port, the embedded default model), answers, and leaves no server behind on /exit.
set -euo pipefail
rapid=${RAPID:?}
if (exec 3<>/dev/tcp/127.0.0.1/8000) 2>/dev/null; then
  echo "FAIL: something listens on 127.0.0.1:8000, so chat would use it (free the port)"; exit 1
fi
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
out=$(printf 'Tell me about the sea.\n/exit\n' | env -u RAPID_URL HOME="$home" timeout 300 "$rapid" chat 2>&1)
echo "$out"
fail=0
grep -q "starting one for the default model" <<<"$out" || { echo "FAIL: no start message"; fail=1; }
grep -q "rapid chat with default at http://127.0.0.1:" <<<"$out" || { echo "FAIL: no greeting"; fail=1; }
grep -qE '^\[[0-9]+ tokens' <<<"$out" || { echo "FAIL: no answer statistics line"; fail=1; }
sleep 1
if pgrep -f "rapid serve --port 0 --host 127.0.0.1" >/dev/null; then
  echo "FAIL: the chat's server is still running"; fail=1
fi
[ $fail -eq 0 ] && echo "ok: chat started a server, answered, stopped it"
exit $fail
