#!/usr/bin/python3
"""Round trip through the real chat templates: each template (rendered with Python Jinja2, set
up as transformers' apply_chat_template does) writes an assistant turn with tool calls in its
model's own markup; `rapid parse` with the matching parser must give back exactly those calls
(names and arguments), no markup in the content, and the reasoning where the template wrote
some. The templates come from $RAPID_TEST_CACHE/llama.cpp/models/templates.

Env: RAPID (the binary), RAPID_TEST_CACHE. Exits non-zero on any mismatch."""
import datetime, json, os, subprocess, sys, tempfile

import jinja2
import jinja2.ext
import jinja2.sandbox

rapid = os.environ["RAPID"]
cache = os.environ.get("RAPID_TEST_CACHE", os.path.expanduser("~/.cache/rapid-test"))
tdir = os.path.join(cache, "llama.cpp/models/templates")
if not os.path.isdir(tdir):
    sys.exit("templates missing at %s: run scripts/test-setup.sh" % tdir)

def tojson(v, indent=None, ensure_ascii=False, separators=None, sort_keys=False):
    return json.dumps(v, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

def raise_exception(msg):
    raise jinja2.exceptions.TemplateError(msg)

class Generation(jinja2.ext.Extension):
    """transformers' {% generation %} ... {% endgeneration %} (marks assistant text): no-op."""
    tags = {"generation"}

    def parse(self, parser):
        next(parser.stream)
        return parser.parse_statements(["name:endgeneration"], drop_needle=True)

env = jinja2.sandbox.SandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                          extensions=["jinja2.ext.loopcontrols", Generation])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda fmt: datetime.datetime(2026, 1, 2).strftime(fmt)

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                                     "opts": {"type": "object"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "description": "Time in a zone",
     "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}},
]
CALLS = [("get_weather", {"city": "Zürich 東京", "days": 3, "opts": {"a": [1, {"b": None}], "s": "x \"q\" </tool_call>"}}),
         ("get_time", {"tz": "UTC"})]
# end-of-turn tokens: the generation stops at them (the text is cut at the first one)
TURN_ENDS = ["<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<｜end▁of▁sentence｜>", "</s>", "<|END_OF_TURN_TOKEN|>",
             "<turn|>", "<|tool_response>", "[e~[", "<|endoftext|>", "<|user|>", "<|observation|>",
             "<|end_of_text|>", "<seed:eos>"]
END_MARKERS = ["<|return|>", "<|end|>"]

# template, tool parser, reasoning parser, calls it can write (1: single-call templates)
CASES = [
    ("Qwen-Qwen3-0.6B", "hermes", "qwen3", 2),
    ("Qwen-Qwen2.5-7B-Instruct", "hermes", None, 2),
    ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "hermes", None, 2),
    ("ibm-granite-granite-4.0", "granite4", None, 2),
    ("Qwen3-Coder", "qwen3_coder", None, 2),
    ("Qwen3.5-4B", "qwen3_coder", "qwen3", 2),
    ("ByteDance-Seed-OSS", "seed_oss", "seed_oss", 2),
    ("GLM-4.6", "glm45", "glm45", 2),
    ("GLM-4.7-Flash", "glm47", "glm45", 2),
    ("MiniMax-M2", "minimax_m2", "minimax_m2", 2),
    ("moonshotai-Kimi-K2", "kimi_k2", None, 2),
    ("Kimi-K2-Thinking", "kimi_k2", "kimi_k2", 2),
    ("deepseek-ai-DeepSeek-V3.1", "deepseek_v31", "deepseek_r1", 2),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "deepseek_v3", "deepseek_r1", 2),
    ("Mistral-Small-3.2-24B-Instruct-2506", "mistral", None, 2),
    ("mistralai-Mistral-Nemo-Instruct-2407", "mistral", None, 2),
    ("mistralai-Ministral-3-14B-Reasoning-2512", "mistral", "mistral", 2),
    ("unsloth-mistral-Devstral-Small-2507", "mistral", None, 2),
    ("google-gemma-4-31B-it", "gemma4", "gemma4", 2),
    ("openai-gpt-oss-120b", "openai", "openai_gptoss", 1),
    ("meta-llama-Llama-3.1-8B-Instruct", "llama3_json", None, 1),
    ("meta-llama-Llama-3.3-70B-Instruct", "llama3_json", None, 1),
    ("CohereForAI-c4ai-command-r7b-12-2024-tool_use", "cohere_command3", "cohere_command3", 2),
    ("LFM2.5-8B-A1B", "lfm2", "qwen3", 2),
]

def render(src, messages, gen, args_as_string, thinking):
    msgs = json.loads(json.dumps(messages))
    if args_as_string:
        for m in msgs:
            for tc in m.get("tool_calls", []):
                tc["function"]["arguments"] = json.dumps(tc["function"]["arguments"], ensure_ascii=False)
    return env.from_string(src).render(messages=msgs, tools=TOOLS, add_generation_prompt=gen,
                                       bos_token="<s>", eos_token="</s>", date_string="2 Jan 2026",
                                       enable_thinking=thinking)

REASONING = "The user wants two things: weather, then time."
CONTENT = "Let me check both."

def assistant_text(src, n_calls, args_as_string, with_text):
    user = [{"role": "user", "content": "Weather in Zürich and the time?"}]
    calls = [{"id": "abcDEF12%d" % i, "type": "function", "function": {"name": n, "arguments": a}}
             for i, (n, a) in enumerate(CALLS[:n_calls])]
    turn = user + [{"role": "assistant", "content": CONTENT if with_text else "", "tool_calls": calls}]
    if with_text:
        turn[-1]["reasoning_content"] = REASONING
    gen = render(src, user, True, args_as_string, with_text)
    full = render(src, turn, False, args_as_string, with_text)
    k = 0
    while k < min(len(gen), len(full)) and gen[k] == full[k]:
        k += 1
    if k < len(gen):  # the turns part inside a marker: back up to the marker's start
        while k > 0 and full[k - 1] not in ">\n]":
            k -= 1
    text = full[k:]
    for m in TURN_ENDS:
        if m in text:
            text = text[: text.index(m)]
    for _ in range(3):
        text = text.rstrip()
        for m in END_MARKERS:
            if text.endswith(m):
                text = text[: -len(m)]
    return gen, text

fails = 0
with tempfile.TemporaryDirectory() as tmp:
    tools_path = os.path.join(tmp, "tools.json")
    json.dump(TOOLS, open(tools_path, "w"))
    for (name, tool, reasoning, n_calls), with_text in [(c, w) for c in CASES for w in (False, True)]:
        src = open(os.path.join(tdir, name + ".jinja"), encoding="utf-8").read()
        try:
            gen, text = assistant_text(src, n_calls, False, with_text)
        except Exception:
            try:  # templates wanting the arguments as JSON strings
                gen, text = assistant_text(src, n_calls, True, with_text)
            except Exception as e:
                fails += 1
                print("FAIL %s: the template does not render: %s" % (name, e))
                continue
        # what the parse must give back: the text and reasoning the template wrote, if any
        want_content = CONTENT if with_text and CONTENT in text else ""
        want_reasoning = REASONING if with_text and reasoning and REASONING in text else ""
        if "<|channel|>analysis<|message|>" + CONTENT in text:  # gpt-oss: text beside calls is analysis
            want_content, want_reasoning = "", CONTENT
        tf = os.path.join(tmp, "text")
        open(tf, "w", encoding="utf-8").write(text)
        args = [rapid, "parse", "--tool-call-parser", tool, "--tools", tools_path, "--text-file", tf]
        if reasoning:
            args += ["--reasoning-parser", reasoning]
            pairs = {"<think>": "</think>", "<seed:think>": "</seed:think>", "[THINK]": "[/THINK]",
                     "<|START_THINKING|>": "<|END_THINKING|>"}
            if any(gen.rstrip().endswith(a) and b in text for a, b in pairs.items()):
                args += ["--think-opened"]
        for chunk in ([], ["--chunk", "1"], ["--chunk", "4"]):
            r = subprocess.run(args + chunk, capture_output=True)
            why = None
            if r.returncode:
                why = r.stderr.decode()
            else:
                m = json.loads(r.stdout)
                got = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in m.get("tool_calls", [])]
                if got != CALLS[:n_calls]:
                    why = "calls %r" % (got,)
                elif (m["content"] or "").strip() != want_content:
                    why = "content %r" % m["content"]
                elif (m["reasoning_content"] or "").strip() != want_reasoning:
                    why = "reasoning %r" % m["reasoning_content"]
            if why:
                fails += 1
                print("FAIL %s (%s) chunk=%s: %s\n  text: %r" % (name, tool, chunk, why, text))
                break
        else:
            print("ok   %-48s %-16s %d call(s)%s" % (name, tool, n_calls,
                  (" + content" if want_content else "") + (" + reasoning" if want_reasoning else "")))
print("template round trip: %d templates x 2 turns, %d failures" % (len(CASES), fails))
sys.exit(1 if fails else 0)
