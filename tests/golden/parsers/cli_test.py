#!/usr/bin/python3
"""`rapid parse` against every golden vector: fed whole, --chunk 1 and --chunk 5.

Env: RAPID (the binary), RP_SOURCE_DIR. Exits non-zero on any mismatch."""
import glob, json, os, subprocess, sys, tempfile

rapid = os.environ["RAPID"]
src = os.environ.get("RP_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "../../.."))
files = sorted(glob.glob(os.path.join(src, "tests/golden/parsers/*.json")))
assert len(files) > 15, "golden vectors missing"
fails = runs = vectors = 0
with tempfile.TemporaryDirectory() as tmp:
    for path in files:
        for case in json.load(open(path, encoding="utf-8")):
            vectors += 1
            tf = os.path.join(tmp, "text")
            with open(tf, "w", encoding="utf-8") as f:
                f.write(case["text"])
            args = [rapid, "parse", "--stable-ids", "--text-file", tf]
            if case.get("tool_parser"):
                args += ["--tool-call-parser", case["tool_parser"]]
            if case.get("reasoning_parser"):
                args += ["--reasoning-parser", case["reasoning_parser"]]
            if case.get("think_opened"):
                args += ["--think-opened"]
            if "tools" in case:
                tools = os.path.join(tmp, "tools.json")
                json.dump(case["tools"], open(tools, "w"))
                args += ["--tools", tools]
            want = case["expect"]
            for chunk in (None, "1", "5"):
                runs += 1
                r = subprocess.run(args + (["--chunk", chunk] if chunk else []), capture_output=True)
                why = None
                if r.returncode != 0:
                    why = "exit %d: %s" % (r.returncode, r.stderr.decode())
                else:
                    m = json.loads(r.stdout)
                    calls = [{"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
                             for c in m.get("tool_calls", [])]
                    if m["content"] != want["content"]:
                        why = "content %r != %r" % (m["content"], want["content"])
                    elif m["reasoning_content"] != want["reasoning_content"]:
                        why = "reasoning %r != %r" % (m["reasoning_content"], want["reasoning_content"])
                    elif calls != want["tool_calls"]:
                        why = "calls %r != %r" % (calls, want["tool_calls"])
                    elif any(not isinstance(json.loads(c["function"]["arguments"]), dict) for c in m.get("tool_calls", [])):
                        why = "arguments not a JSON object string"
                if why:
                    fails += 1
                    print("FAIL [%s] chunk=%s: %s" % (case["name"], chunk, why))
print("rapid parse: %d vectors, %d runs, %d failures" % (vectors, runs, fails))
sys.exit(1 if fails else 0)
