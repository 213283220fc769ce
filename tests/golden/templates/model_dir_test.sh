#!/usr/bin/env bash
# `rapid template --model DIR`: the template and special tokens come from the model directory
# (tokenizer_config.json's chat_template as a string or a named list, or chat_template.jinja).
set -euo pipefail
rapid=${RAPID:?set RAPID to the rapid binary}
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail() { echo "model_dir_test: $*" >&2; exit 1; }
ctx=$d/ctx.json
echo '{"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":true}' > "$ctx"

# 1. chat_template string, bos_token as an AddedToken object, eos_token as a string
mkdir "$d/m1"
cat > "$d/m1/tokenizer_config.json" <<'JSON'
{"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>",
 "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{{ eos_token }}{% endfor %}"}
JSON
out=$("$rapid" template --model "$d/m1" --context "$ctx")
[ "$out" = "<s>[user]hi</s>" ] || fail "string template: got '$out'"

# 2. a named list: "default" without tools, "tool_use" with tools
mkdir "$d/m2"
cat > "$d/m2/tokenizer_config.json" <<'JSON'
{"chat_template": [{"name": "default", "template": "D{{ messages | length }}"},
                   {"name": "tool_use", "template": "T{{ tools | length }}"}]}
JSON
out=$("$rapid" template --model "$d/m2" --context "$ctx")
[ "$out" = "D1" ] || fail "named default: got '$out'"
echo '{"messages":[],"tools":[{"type":"function","function":{"name":"f"}}]}' > "$d/ctx2.json"
out=$("$rapid" template --model "$d/m2" --context "$d/ctx2.json")
[ "$out" = "T1" ] || fail "named tool_use: got '$out'"

# 3. chat_template.jinja wins over tokenizer_config.json; no trailing newline is added
printf '{{ bos_token }}J\n' > "$d/m1/chat_template.jinja"
out=$("$rapid" template --model "$d/m1" --context "$ctx" | od -c | head -1)
case "$out" in *"<   s   >   J"*) ;; *) fail "chat_template.jinja: got '$out'" ;; esac
[ "$("$rapid" template --model "$d/m1" --context "$ctx" | wc -c)" = 4 ] || fail "output not exact"

# 4. template errors: message on stderr, exit status 1
printf '{{ raise_exception("no system role") }}' > "$d/bad.jinja"
if "$rapid" template --template "$d/bad.jinja" --context "$ctx" 2>"$d/err"; then fail "error not reported"; fi
grep -q "no system role" "$d/err" || fail "error message missing: $(cat "$d/err")"
mkdir "$d/m3"
if "$rapid" template --model "$d/m3" 2>/dev/null; then fail "model without a template accepted"; fi
echo "model_dir_test: ok"
