#!/usr/bin/python3
"""Writes the parser golden vectors (tests/golden/parsers/*.json) from the cases below.

Each case: raw model text -> the expected OpenAI-shaped message (content, reasoning_content,
tool_calls with names and arguments). The expectations are written by hand from each format's
definition (model card / chat template), not produced by rapid. Run:
/usr/bin/python3 tests/golden/parsers/gen_vectors.py
"""
import json, os

OUT = os.path.dirname(os.path.abspath(__file__))
files = {}

def case(family, name, tool, text, content=None, calls=(), reasoning=None, rparser=None,
         tools=None, think_opened=False):
    c = {"name": name, "tool_parser": tool, "reasoning_parser": rparser, "text": text,
         "expect": {"content": content, "reasoning_content": reasoning,
                    "tool_calls": [{"name": n, "arguments": a} for n, a in calls]}}
    if tools is not None:
        c["tools"] = tools
    if think_opened:
        c["think_opened"] = True
    files.setdefault(family, []).append(c)

W = ("get_weather", {"city": "Paris"})
T = ("get_time", {"tz": "UTC"})
UNI = {"city": "Zürich 東京", "emoji": "🌍✓"}
NESTED = {"filter": {"range": [1, 2.5, {"deep": [True, None]}], "tags": ["a", "b"]}, "n": -3}

# ---------------------------------------------------------------- hermes family (JSON in tags)
def hermes_like(family, tool, o, c):
    j = lambda n, a, k="arguments": json.dumps({"name": n, k: a}, ensure_ascii=False)
    case(family, tool + " single with text before", tool,
         "Let me check the weather.\n" + o + "\n" + j(*W) + "\n" + c, "Let me check the weather.", [W])
    case(family, tool + " parallel calls", tool,
         o + "\n" + j(*W) + "\n" + c + "\n" + o + "\n" + j(*T) + "\n" + c, None, [W, T])
    case(family, tool + " unicode arguments", tool, o + j("lookup", UNI) + c, None, [("lookup", UNI)])
    case(family, tool + " nested json", tool, o + j("search", NESTED) + c, None, [("search", NESTED)])
    case(family, tool + " strings containing the markers", tool,
         o + j("echo", {"text": "x " + c + " y " + o + " z"}) + c, None,
         [("echo", {"text": "x " + c + " y " + o + " z"})])
    case(family, tool + " malformed json kept as text", tool,
         "Sure. " + o + '{"name": "get_weather", "arguments": {"city": }' + c + " done",
         "Sure. " + o + '{"name": "get_weather", "arguments": {"city": }' + c + " done")
    case(family, tool + " truncated call kept as text", tool,
         "Calling " + o + '\n{"name": "get_weather", "argu', "Calling " + o + '\n{"name": "get_weather", "argu')
    case(family, tool + " complete call without close marker", tool,
         o + "\n" + j(*W), None, [W])
    case(family, tool + " text after call", tool,
         "Before. " + o + j(*W) + c + " After.", "Before. After." if False else "Before." + " After.", [W])
    case(family, tool + " arguments as a json string", tool,
         o + json.dumps({"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}) + c, None, [W])
    case(family, tool + " parameters key and no arguments", tool,
         o + j("ping", {}, "parameters") + c + o + '{"name": "noargs"}' + c, None, [("ping", {}), ("noargs", {})])
    case(family, tool + " plain answer", tool, "The answer is 42.\n", "The answer is 42.\n")

hermes_like("hermes", "hermes", "<tool_call>", "</tool_call>")
hermes_like("hermes", "granite4", "<tool_call>", "</tool_call>")
case("hermes", "hermes with qwen3 reasoning", "hermes",
     "<think>\nI should call the tool.\n</think>\n\n<tool_call>\n" + json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}}) + "\n</tool_call>",
     None, [W], "I should call the tool.", "qwen3")
case("hermes", "hermes reasoning opened by the prompt", "hermes",
     "The user wants weather.\n</think>\n\nChecking.<tool_call>" + json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}}) + "</tool_call>",
     "Checking.", [W], "The user wants weather.", "qwen3", think_opened=True)
case("hermes", "tool_call inside reasoning stays reasoning", "hermes",
     "<think>maybe <tool_call>{}</tool_call> no</think>Fine.", "Fine.", [], "maybe <tool_call>{}</tool_call> no", "qwen3")
case("hermes", "hermes array body", "hermes",
     "<tool_call>[" + json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}}) + ", " + json.dumps({"name": "get_time", "arguments": {"tz": "UTC"}}) + "]</tool_call>",
     None, [W, T])
case("hermes", "hermes marker-like text in content", "hermes",
     "Use <tool_ to start and <tool_calls> is different.", "Use <tool_ to start and <tool_calls> is different.")

hermes_like("jamba", "jamba", "<tool_calls>", "</tool_calls>")
case("jamba", "jamba array of calls", "jamba",
     "<tool_calls>[" + json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}}) + ", " + json.dumps({"name": "get_time", "arguments": {"tz": "UTC"}}) + "]</tool_calls>", None, [W, T])
hermes_like("hunyuan", "hunyuan_a13b", "<tool_calls>", "</tool_calls>")
case("hunyuan", "hunyuan reasoning and answer tags", "hunyuan_a13b",
     "<think>\nweather\n</think>\n<answer>\nIt is sunny.\n</answer>", "It is sunny.", [], "weather", "hunyuan_a13b")
hermes_like("internlm", "internlm", "<|action_start|><|plugin|>", "<|action_end|>")
hermes_like("xlam", "xlam", "<tool_call>", "</tool_call>")
case("xlam", "xlam bare json array", "xlam",
     json.dumps([{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {"tz": "UTC"}}]), None, [W, T])
case("xlam", "xlam fenced json", "xlam",
     "Here you go:\n```json\n" + json.dumps([{"name": "get_weather", "arguments": {"city": "Paris"}}]) + "\n```", "Here you go:", [W])
case("xlam", "xlam json that is not a call stays content", "xlam",
     '[1, 2, 3] are numbers', '[1, 2, 3] are numbers')
case("xlam", "xlam bracket later in text is content", "xlam",
     'See [1] for [{"name": "x"}]', 'See [1] for [{"name": "x"}]')

# cohere: array of {tool_call_id, tool_name, parameters}
co = lambda *cs: json.dumps([{"tool_call_id": str(i), "tool_name": n, "parameters": a} for i, (n, a) in enumerate(cs)], ensure_ascii=False)
case("cohere", "cohere action with thinking", "cohere_command3",
     "<|START_THINKING|>I will look up the weather.<|END_THINKING|><|START_ACTION|>" + co(W, T) + "<|END_ACTION|>",
     None, [W, T], "I will look up the weather.", "cohere_command3")
case("cohere", "cohere response markers stripped", "cohere_command3",
     "<|START_RESPONSE|>It is sunny in Paris.<|END_RESPONSE|>", "It is sunny in Paris.")
case("cohere", "cohere unicode nested", "cohere_command3",
     "<|START_ACTION|>" + co(("lookup", UNI), ("search", NESTED)) + "<|END_ACTION|>", None, [("lookup", UNI), ("search", NESTED)])
case("cohere", "cohere malformed", "cohere_command3",
     "<|START_ACTION|>[{\"tool_name\": 3}]<|END_ACTION|>", "<|START_ACTION|>[{\"tool_name\": 3}]<|END_ACTION|>")
case("cohere", "cohere truncated", "cohere_command3",
     "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_na", "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_na")

# ---------------------------------------------------------------- balanced JSON after a marker
def marker_json(family, tool, o):
    arr = lambda *cs: json.dumps([{"name": n, "arguments": a} for n, a in cs], ensure_ascii=False)
    case(family, tool + " one call", tool, o + arr(W), None, [W])
    case(family, tool + " parallel", tool, "I'll call two tools. " + o + arr(W, T), "I'll call two tools.", [W, T])
    case(family, tool + " unicode nested", tool, o + arr(("lookup", UNI), ("search", NESTED)), None, [("lookup", UNI), ("search", NESTED)])
    case(family, tool + " brackets inside strings", tool, o + arr(("echo", {"t": "] } [ { " + o})), None, [("echo", {"t": "] } [ { " + o})])
    case(family, tool + " text after the list", tool, o + arr(W) + "\nDone.", "Done.", [W])
    case(family, tool + " malformed", tool, o + '[{"name": "get_weather", "arguments": [1]}]', o + '[{"name": "get_weather", "arguments": [1]}]')
    case(family, tool + " truncated", tool, "Ok " + o + '[{"name": "get_weather", "arguments": {"city": "Par', "Ok " + o + '[{"name": "get_weather", "arguments": {"city": "Par')
    case(family, tool + " marker without a list", tool, "The " + o + " marker is documented here.", "The " + o + " marker is documented here.")

marker_json("granite", "granite", "<|tool_call|>")
case("granite", "granite reasoning phrases", "granite",
     "Here is my thought process: the user wants weather. Here is my response: It is sunny.", "It is sunny.", [], "the user wants weather.", "granite")
case("granite", "granite think and response tags", "granite",
     "<think>plan</think><response>Answer.</response>", "Answer.", [], "plan", "granite")
marker_json("phi4", "phi4_mini_json", "functools")
marker_json("mistral", "mistral", "[TOOL_CALLS]")
case("mistral", "mistral v11 name args", "mistral",
     "[TOOL_CALLS]get_weather[ARGS]" + json.dumps({"city": "Paris"}), None, [W])
case("mistral", "mistral v11 several", "mistral",
     "Checking both.[TOOL_CALLS]get_weather[ARGS]" + json.dumps({"city": "Paris"}) + "[TOOL_CALLS]get_time[ARGS]" + json.dumps({"tz": "UTC"}), "Checking both.", [W, T])
case("mistral", "mistral v11 call id", "mistral",
     "[TOOL_CALLS]get_weather[CALL_ID]a1B2c3D4e[ARGS]" + json.dumps({"city": "Paris"}), None, [W])
case("mistral", "mistral v11 unicode nested and marker in string", "mistral",
     "[TOOL_CALLS]search[ARGS]" + json.dumps(dict(NESTED, q="[ARGS] [TOOL_CALLS] }"), ensure_ascii=False), None, [("search", dict(NESTED, q="[ARGS] [TOOL_CALLS] }"))])
case("mistral", "mistral v11 truncated", "mistral",
     "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Pa", "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Pa")
case("mistral", "mistral think", "mistral",
     "[THINK]Need weather.[/THINK][TOOL_CALLS]get_weather[ARGS]" + json.dumps({"city": "Paris"}), None, [W], "Need weather.", "mistral")
case("mistral", "mistral think truncated stays reasoning", "mistral",
     "[THINK]Still thinking about", None, [], "Still thinking about", "mistral")

# llama3_json
lj = lambda n, a: json.dumps({"name": n, "parameters": a}, ensure_ascii=False)
case("llama3", "llama3 bare json", "llama3_json", lj(*W), None, [W])
case("llama3", "llama3 python_tag", "llama3_json", "<|python_tag|>" + lj(*W), None, [W])
case("llama3", "llama3 semicolon separated", "llama3_json", lj(*W) + "; " + lj(*T), None, [W, T])
case("llama3", "llama3 python_tag several", "llama3_json", "<|python_tag|>" + lj(*W) + ";" + lj(*T), None, [W, T])
case("llama3", "llama3 unicode nested", "llama3_json", lj("search", NESTED) + "; " + lj("lookup", UNI), None, [("search", NESTED), ("lookup", UNI)])
case("llama3", "llama3 plain text", "llama3_json", "Paris is sunny {today}.", "Paris is sunny {today}.")
case("llama3", "llama3 json that is not a call", "llama3_json", '{"answer": 42}', '{"answer": 42}')
case("llama3", "llama3 brace later in text", "llama3_json", 'Use ' + lj(*W) + ' to call it.', 'Use ' + lj(*W) + ' to call it.')
case("llama3", "llama3 truncated", "llama3_json", '{"name": "get_weather", "parameters": {"ci', '{"name": "get_weather", "parameters": {"ci')
case("llama3", "llama3 text after call", "llama3_json", lj(*W) + "\n\nThat is the call.", "That is the call.", [W])
case("llama3", "llama3 string with braces", "llama3_json", lj("echo", {"t": "}{;<|python_tag|>"}), None, [("echo", {"t": "}{;<|python_tag|>"})])

# ---------------------------------------------------------------- deepseek, kimi
DSB, DSE = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
DCB, DCE, DSP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
v3 = lambda n, a: DCB + "function" + DSP + n + "\n```json\n" + json.dumps(a, ensure_ascii=False) + "\n```" + DCE
v31 = lambda n, a: DCB + n + DSP + json.dumps(a, ensure_ascii=False) + DCE
for tool, one in (("deepseek_v3", v3), ("deepseek_v31", v31)):
    case("deepseek", tool + " one call", tool, "Let me look.\n\n" + DSB + one(*W) + DSE, "Let me look.", [W])
    case("deepseek", tool + " parallel", tool, DSB + one(*W) + "\n" + one(*T) + DSE, None, [W, T])
    case("deepseek", tool + " unicode nested", tool, DSB + one("lookup", UNI) + one("search", NESTED) + DSE, None, [("lookup", UNI), ("search", NESTED)])
    case("deepseek", tool + " marker in string", tool, DSB + one("echo", {"t": DSE + DCE}) + DSE, None, [("echo", {"t": DSE + DCE})])
    case("deepseek", tool + " malformed", tool, DSB + DCB + "function" + DSE, DSB + DCB + "function" + DSE)
    case("deepseek", tool + " truncated", tool, DSB + one(*W)[:-12], DSB + one(*W)[:-12])
    case("deepseek", tool + " with r1 reasoning", tool, "<think>\nplan\n</think>\n\n" + DSB + one(*W) + DSE, None, [W], "plan", "deepseek_r1")
    case("deepseek", tool + " missing calls end", tool, DSB + one(*W), None, [W])
case("deepseek", "r1 reasoning opened by the prompt", "deepseek_v3", "plan first\n</think>\n\nAnswer: 4", "Answer: 4", [], "plan first", "deepseek_r1", think_opened=True)

KB, KE = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
kc = lambda n, a, i: "<|tool_call_begin|>functions." + n + ":" + str(i) + "<|tool_call_argument_begin|>" + json.dumps(a, ensure_ascii=False) + "<|tool_call_end|>"
case("kimi", "kimi one call", "kimi_k2", "I'll check. " + KB + kc(*W, 0) + KE, "I'll check.", [W])
case("kimi", "kimi parallel", "kimi_k2", KB + kc(*W, 0) + kc(*T, 1) + KE, None, [W, T])
case("kimi", "kimi unicode nested", "kimi_k2", KB + kc("lookup", UNI, 0) + kc("search", NESTED, 1) + KE, None, [("lookup", UNI), ("search", NESTED)])
case("kimi", "kimi marker in string", "kimi_k2", KB + kc("echo", {"t": KE + "<|tool_call_end|>"}, 0) + KE, None, [("echo", {"t": KE + "<|tool_call_end|>"})])
case("kimi", "kimi thinking", "kimi_k2", "<think>need it</think>" + KB + kc(*W, 0) + KE, None, [W], "need it", "kimi_k2")
case("kimi", "kimi malformed", "kimi_k2", KB + "<|tool_call_begin|>functions.x:0{}" + KE, KB + "<|tool_call_begin|>functions.x:0{}" + KE)
case("kimi", "kimi truncated", "kimi_k2", KB + kc(*W, 0)[:30], KB + kc(*W, 0)[:30])
case("kimi", "kimi text after the section", "kimi_k2", KB + kc(*W, 0) + KE + "\nWaiting for the result.", "Waiting for the result.", [W])
case("kimi", "kimi singular section marker", "kimi_k2", "<|tool_call_section_begin|>" + kc(*W, 0) + "<|tool_call_section_end|>", None, [W])

# ---------------------------------------------------------------- XML families
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
        "threshold": {"type": "number"}, "opts": {"type": "object"}, "hours": {"type": "array"},
        "zip": {"type": "string"}, "note": {"type": ["string", "null"]}}}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}},
]
TYPED_RAW = [("city", "Paris"), ("days", "3"), ("metric", "true"), ("threshold", "2.5"),
             ("opts", '{"a": [1, {"b": null}]}'), ("hours", "[1, 2]"), ("zip", "02134")]
TYPED = {"city": "Paris", "days": 3, "metric": True, "threshold": 2.5, "opts": {"a": [1, {"b": None}]}, "hours": [1, 2], "zip": "02134"}

def q3(n, params, o="<tool_call>", c="</tool_call>"):
    return o + "\n<function=" + n + ">\n" + "".join("<parameter=%s>\n%s\n</parameter>\n" % kv for kv in params) + "</function>\n" + c
for tool, o, c, fam, rp, tk, te in (("qwen3_coder", "<tool_call>", "</tool_call>", "qwen3_coder", "qwen3", "<think>", "</think>"),
                            ("qwen3_xml", "<tool_call>", "</tool_call>", "qwen3_coder", "qwen3", "<think>", "</think>"),
                            ("seed_oss", "<seed:tool_call>", "</seed:tool_call>", "seed_oss", "seed_oss", "<seed:think>", "</seed:think>")):
    case(fam, tool + " typed by schema", tool, "Checking.\n" + q3("get_weather", TYPED_RAW, o, c), "Checking.", [("get_weather", TYPED)], tools=TOOLS)
    case(fam, tool + " parallel", tool, q3("get_weather", [("city", "Paris")], o, c) + "\n" + q3("get_time", [("tz", "UTC")], o, c), None, [W, T], tools=TOOLS)
    case(fam, tool + " without schema", tool, q3("f", [("n", "5"), ("s", "hello world"), ("o", '{"k": [1]}')], o, c), None, [("f", {"n": 5, "s": "hello world", "o": {"k": [1]}})])
    case(fam, tool + " multiline unicode value with markers", tool,
         q3("write", [("content", "line 1 " + c + "\nzweite Zeile ✓ </function>")], o, c), None,
         [("write", {"content": "line 1 " + c + "\nzweite Zeile ✓ </function>"})])
    case(fam, tool + " malformed", tool, o + "\n<function_get_weather>\n" + c, o + "\n<function_get_weather>\n" + c)
    case(fam, tool + " truncated", tool, "Hm. " + o + "\n<function=get_weather>\n<parameter=city>\nPar", "Hm. " + o + "\n<function=get_weather>\n<parameter=city>\nPar", tools=TOOLS)
    case(fam, tool + " with reasoning opened by the prompt", tool, "weather needed\n" + te + "\n\n" + q3("get_weather", [("city", "Paris")], o, c), None, [W], "weather needed", rp, tools=TOOLS, think_opened=True)
    case(fam, tool + " nullable string null", tool, q3("get_weather", [("city", "Paris"), ("note", "null")], o, c), None, [("get_weather", {"city": "Paris", "note": None})], tools=TOOLS)
case("qwen3_coder", "qwen3_coder two functions in one block", "qwen3_coder",
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n<function=get_time>\n<parameter=tz>\nUTC\n</parameter>\n</function>\n</tool_call>", None, [W, T], tools=TOOLS)
case("qwen3_coder", "qwen3_coder text after the call", "qwen3_coder",
     "<tool_call>\n<function=get_time>\n<parameter=tz>\nUTC\n</parameter>\n</function>\n</tool_call>\nI asked for the time.", "I asked for the time.", [T], tools=TOOLS)
case("qwen3_coder", "qwen3_coder tolerates missing close tags", "qwen3_coder",
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</tool_call>", None, [W], tools=TOOLS)

def glm(n, params, nl):
    sep = "\n" if nl else ""
    return "<tool_call>" + n + sep + "".join("<arg_key>%s</arg_key>%s<arg_value>%s</arg_value>%s" % (k, sep, v, sep) for k, v in params) + "</tool_call>"
for tool, nl in (("glm45", True), ("glm47", False)):
    case("glm", tool + " typed", tool, "Let me see." + ("\n" if nl else "") + glm("get_weather", TYPED_RAW, nl), "Let me see.", [("get_weather", TYPED)], tools=TOOLS)
    case("glm", tool + " parallel with thinking", tool, "<think>two calls</think>" + glm("get_weather", [("city", "Paris")], nl) + glm("get_time", [("tz", "UTC")], nl), None, [W, T], "two calls", "glm45", tools=TOOLS)
    case("glm", tool + " unicode and marker in value", tool, glm("echo", [("t", "东京 </tool_call> <arg_key>")], nl), None, [("echo", {"t": "东京 </tool_call> <arg_key>"})])
    case("glm", tool + " no arguments", tool, glm("ping", [], nl), None, [("ping", {})])
    case("glm", tool + " malformed", tool, "<tool_call>get_weather<arg_key>city</arg_key></tool_call>", "<tool_call>get_weather<arg_key>city</arg_key></tool_call>")
    case("glm", tool + " truncated", tool, glm("get_weather", [("city", "Paris")], nl)[:-20], glm("get_weather", [("city", "Paris")], nl)[:-20], tools=TOOLS)

def mm(*invokes):
    return "<minimax:tool_call>\n" + "".join('<invoke name="%s">\n' % n + "".join('<parameter name="%s">%s</parameter>\n' % kv for kv in ps) + "</invoke>\n" for n, ps in invokes) + "</minimax:tool_call>"
case("minimax", "minimax typed with thinking", "minimax_m2", "<think>\nweather\n</think>\n\n" + mm(("get_weather", TYPED_RAW)), None, [("get_weather", TYPED)], "weather", "minimax_m2", tools=TOOLS)
case("minimax", "minimax parallel in one block", "minimax_m2", "Both: " + mm(("get_weather", [("city", "Paris")]), ("get_time", [("tz", "UTC")])), "Both:", [W, T], tools=TOOLS)
case("minimax", "minimax reasoning opened by prompt", "minimax_m2", "think more\n</think>\nDone.", "Done.", [], "think more", "minimax_m2", think_opened=True)
case("minimax", "minimax unicode markers in value", "minimax_m2", mm(("echo", [("t", "ü </minimax:tool_call> </invoke>")])), None, [("echo", {"t": "ü </minimax:tool_call> </invoke>"})])
case("minimax", "minimax malformed", "minimax_m2", "<minimax:tool_call><invoke>x</invoke></minimax:tool_call>", "<minimax:tool_call><invoke>x</invoke></minimax:tool_call>")
case("minimax", "minimax truncated", "minimax_m2", mm(("get_weather", [("city", "Paris")]))[:40], mm(("get_weather", [("city", "Paris")]))[:40])

# ---------------------------------------------------------------- pythonic, lfm2, gemma4
case("pythonic", "pythonic two calls", "pythonic", '[get_weather(city="Paris"), get_time(tz=\'UTC\')]', None, [W, T])
case("pythonic", "pythonic literals", "pythonic", '[f(a=1, b=-2.5, c=True, d=None, e=[1, (2, 3)], g={"k": \'v\', 1: False}, s="line\\nnext \\u00fc")]', None,
     [("f", {"a": 1, "b": -2.5, "c": True, "d": None, "e": [1, [2, 3]], "g": {"k": "v", "1": False}, "s": "line\nnext ü"})])
case("pythonic", "pythonic no args and unicode", "pythonic", '[ping(), lookup(city="Zürich 東京", emoji="🌍✓")]', None, [("ping", {}), ("lookup", UNI)])
case("pythonic", "pythonic brackets in strings", "pythonic", '[echo(t="]) [( \'")]', None, [("echo", {"t": "]) [( '"})])
case("pythonic", "pythonic plain text", "pythonic", "Paris is sunny.", "Paris is sunny.")
case("pythonic", "pythonic link is not a call", "pythonic", "[docs](https://x.y) says hi", "[docs](https://x.y) says hi")
case("pythonic", "pythonic positional args malformed", "pythonic", '[get_weather("Paris")]', '[get_weather("Paris")]')
case("pythonic", "pythonic truncated", "pythonic", '[get_weather(city="Pa', '[get_weather(city="Pa')
case("pythonic", "pythonic text after", "pythonic", '[get_weather(city="Paris")]\nWaiting.', "Waiting.", [W])
case("pythonic", "llama4 python_start", "llama4_pythonic", 'Sure.<|python_start|>[get_weather(city="Paris")]<|python_end|>', "Sure.", [W])
case("pythonic", "llama4 bare list", "llama4_pythonic", '[get_weather(city="Paris"), get_time(tz="UTC")]', None, [W, T])
case("pythonic", "llama4 truncated", "llama4_pythonic", 'Ok.<|python_start|>[get_weather(city="Pa', 'Ok.<|python_start|>[get_weather(city="Pa')
case("pythonic", "llama4 malformed", "llama4_pythonic", '<|python_start|>get_weather city<|python_end|>', '<|python_start|>get_weather city<|python_end|>')
case("pythonic", "llama4 unicode nested and marker in string", "llama4_pythonic", '<|python_start|>[lookup(city="Zürich 東京", emoji="🌍✓"), echo(t="<|python_end|>")]<|python_end|>', None, [("lookup", UNI), ("echo", {"t": "<|python_end|>"})])
case("lfm2", "lfm2 one call", "lfm2", 'Checking.<|tool_call_start|>[get_weather(city="Paris")]<|tool_call_end|>', "Checking.", [W])
case("lfm2", "lfm2 parallel and marker in string", "lfm2", '<|tool_call_start|>[echo(t="<|tool_call_end|>"), get_time(tz="UTC")]<|tool_call_end|>Done.', "Done.", [("echo", {"t": "<|tool_call_end|>"}), T])
case("lfm2", "lfm2 thinking", "lfm2", '<think>hmm</think><|tool_call_start|>[get_weather(city="Paris")]<|tool_call_end|>', None, [W], "hmm", "qwen3")
case("lfm2", "lfm2 malformed", "lfm2", '<|tool_call_start|>[get_weather(city=Paris)]<|tool_call_end|>', '<|tool_call_start|>[get_weather(city=Paris)]<|tool_call_end|>')
case("lfm2", "lfm2 truncated", "lfm2", '<|tool_call_start|>[get_weather(ci', '<|tool_call_start|>[get_weather(ci')

G = '<|"|>'
case("gemma4", "gemma4 one call", "gemma4", "Let me check.<|tool_call>call:get_weather{city:" + G + "Paris" + G + "}<tool_call|>", "Let me check.", [W])
case("gemma4", "gemma4 typed values", "gemma4", "<|tool_call>call:f{a:1,b:-2.5,c:true,d:null,e:[1," + G + "x" + G + "],o:{k:" + G + "v" + G + "}}<tool_call|>", None,
     [("f", {"a": 1, "b": -2.5, "c": True, "d": None, "e": [1, "x"], "o": {"k": "v"}})])
case("gemma4", "gemma4 python None/True from the template", "gemma4", "<|tool_call>call:f{a:None,b:True,c:False}<tool_call|>", None, [("f", {"a": None, "b": True, "c": False})])
case("gemma4", "gemma4 parallel", "gemma4", "<|tool_call>call:get_weather{city:" + G + "Paris" + G + "}<tool_call|><|tool_call>call:get_time{tz:" + G + "UTC" + G + "}<tool_call|>", None, [W, T])
case("gemma4", "gemma4 unicode and markers in string", "gemma4", "<|tool_call>call:echo{t:" + G + "東京 <tool_call|> {x:1}" + G + "}<tool_call|>", None, [("echo", {"t": "東京 <tool_call|> {x:1}"})])
case("gemma4", "gemma4 thinking", "gemma4", "<|channel>thought\nweather\n<channel|>It is sunny.", "It is sunny.", [], "weather", "gemma4")
case("gemma4", "gemma4 malformed", "gemma4", "<|tool_call>get_weather(city)<tool_call|>", "<|tool_call>get_weather(city)<tool_call|>")
case("gemma4", "gemma4 truncated", "gemma4", "<|tool_call>call:get_weather{city:" + G + "Par", "<|tool_call>call:get_weather{city:" + G + "Par")

# ---------------------------------------------------------------- Harmony
case("harmony", "harmony analysis then call", "openai",
     "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>" + json.dumps({"city": "Paris"}) + "<|call|>",
     None, [W], "Need the weather.", "openai_gptoss")
case("harmony", "harmony final answer", "openai",
     "<|channel|>analysis<|message|>Simple.<|end|><|start|>assistant<|channel|>final<|message|>It is 4.<|return|>", "It is 4.", [], "Simple.", "openai_gptoss")
case("harmony", "harmony recipient before channel", "openai",
     "<|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>" + json.dumps({"tz": "UTC"}) + "<|call|>", None, [T], None, "openai_gptoss")
case("harmony", "harmony unicode nested", "openai",
     "<|channel|>commentary to=functions.search <|constrain|>json<|message|>" + json.dumps(NESTED) + "<|call|><|start|>assistant<|channel|>commentary to=functions.lookup <|constrain|>json<|message|>" + json.dumps(UNI, ensure_ascii=False) + "<|call|>",
     None, [("search", NESTED), ("lookup", UNI)], None, "openai_gptoss")
case("harmony", "harmony preamble then call", "openai",
     "<|channel|>commentary<|message|>Checking now.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>" + json.dumps({"city": "Paris"}) + "<|call|>",
     "Checking now.", [W], None, "openai_gptoss")
case("harmony", "harmony malformed call", "openai",
     "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{city: Paris}<|call|>",
     "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{city: Paris}<|call|>", [], None, "openai_gptoss")
case("harmony", "harmony truncated analysis", "openai", "<|channel|>analysis<|message|>Thinking about it", None, [], "Thinking about it", "openai_gptoss")
case("harmony", "harmony reasoning only parser", None,
     "<|channel|>analysis<|message|>hmm<|end|><|start|>assistant<|channel|>final<|message|>Yes.<|return|>", "Yes.", [], "hmm", "openai_gptoss")
case("harmony", "harmony recipient continuing the prompt's header", "openai",
     " to=functions.get_weather<|channel|>commentary json<|message|>" + json.dumps({"city": "Paris"}) + "<|call|>", None, [W], None, "openai_gptoss")
case("harmony", "harmony text starting with t is text", "openai", "today is fine", "today is fine", [], None, "openai_gptoss")
case("harmony", "harmony plain text", "openai", "Just text, no channels.", "Just text, no channels.", [], None, "openai_gptoss")

# ---------------------------------------------------------------- reasoning only
case("reasoning", "qwen3 think then answer", None, "<think>\nStep 1. Step 2.\n</think>\n\nThe answer is 4.", "The answer is 4.", [], "Step 1. Step 2.", "qwen3")
case("reasoning", "qwen3 empty think", None, "<think>\n\n</think>\n\nHello!", "Hello!", [], None, "qwen3")
case("reasoning", "qwen3 no think", None, "Hello there.", "Hello there.", [], None, "qwen3")
case("reasoning", "qwen3 truncated think", None, "<think>\nI am still", None, [], "I am still", "qwen3")
case("reasoning", "qwen3 unicode think", None, "<think>Überlegung 🤔</think>Antwort ✓", "Antwort ✓", [], "Überlegung 🤔", "qwen3")
case("reasoning", "deepseek_r1 opened by prompt", None, "Okay, 2+2.\n</think>\n\n4", "4", [], "Okay, 2+2.", "deepseek_r1", think_opened=True)
case("reasoning", "seed_oss think", None, "<seed:think>plan</seed:think>Result.", "Result.", [], "plan", "seed_oss")
case("reasoning", "mistral think", None, "[THINK]a[/THINK]b", "b", [], "a", "mistral")
case("reasoning", "glm45 think", None, "<think>x</think>y", "y", [], "x", "glm45")
case("reasoning", "kimi_k2 think", None, "<think>x</think>y", "y", [], "x", "kimi_k2")
case("reasoning", "no reasoning parser keeps think text", None, "<think>x</think>y", "<think>x</think>y")

for fam, cases in files.items():
    with open(os.path.join(OUT, fam + ".json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
        f.write("\n")
print(sum(len(c) for c in files.values()), "vectors in", len(files), "files")
