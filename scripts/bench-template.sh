#!/usr/bin/env bash
# Chat-template render time (issue 4 target: < 1 ms): the Qwen3 template (llama.cpp's
# models/templates/Qwen-Qwen3-0.6B.jinja) with 20 messages (system, user/assistant turns with
# reasoning, tool calls and tool results) and 5 tools, rendered N times after one parse.
#   scripts/bench-template.sh [RAPID] [N]     (defaults: build/rapid, 2000)
set -euo pipefail
cd "$(dirname "$0")/.."
rapid=${1:-build/rapid}
n=${2:-2000}
cache=${RAPID_TEST_CACHE:-$HOME/.cache/rapid-test}
tpl=$cache/llama.cpp/models/templates/Qwen-Qwen3-0.6B.jinja
[ -f "$tpl" ] || { echo "bench-template: missing $tpl (run scripts/test-setup.sh)" >&2; exit 1; }
ctx=$(mktemp --suffix=.json)
trap 'rm -f "$ctx"' EXIT
/usr/bin/python3 - "$ctx" <<'PY'
import json, sys
tools = []
for i in range(5):
    tools.append({"type": "function", "function": {
        "name": f"tool_{i}", "description": f"Tool number {i}: does something useful with its inputs.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "description": "What to look up"},
            "limit": {"type": "integer", "description": "Maximum results", "minimum": 1},
            "mode": {"type": "string", "enum": ["fast", "precise"]},
            "filters": {"type": "object", "properties": {"site": {"type": "string"}}}},
            "required": ["query"]}}})
msgs = [{"role": "system", "content": "You are a helpful assistant with tools."}]
i = 0
while len(msgs) < 20:
    msgs.append({"role": "user", "content": f"Question {i}: what about item {i}? " * 3})
    if i % 3 == 1:
        msgs.append({"role": "assistant", "content": "", "tool_calls": [{"id": f"c{i}", "type": "function",
            "function": {"name": f"tool_{i % 5}", "arguments": {"query": f"item {i}", "limit": 3}}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": json.dumps({"result": [1, 2, 3], "ok": True})})
    else:
        msgs.append({"role": "assistant", "content": f"Answer {i}: it is fine. " * 4,
                     "reasoning_content": f"Thinking about item {i}. " * 3})
    i += 1
msgs = msgs[:20]
if msgs[-1]["role"] != "user":
    msgs[-1] = {"role": "user", "content": "And finally?"}
json.dump({"messages": msgs, "tools": tools, "add_generation_prompt": True, "bos_token": "",
           "eos_token": "<|im_end|>"}, open(sys.argv[1], "w"))
PY
echo "bench-template: $(basename "$tpl"), 20 messages, 5 tools, $n renders"
"$rapid" template --template "$tpl" --context "$ctx" --bench "$n" >/dev/null
