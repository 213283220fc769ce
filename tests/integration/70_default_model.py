#!/usr/bin/env python3
"""`make run`'s path serves the embedded default model, and its chat answers are English.

Starts scripts/run-default.sh (what `make run` runs) on a free loopback port, waits for
/health, asks a few chat questions through the OpenAI API (seeded sampling) and checks that
most words of the answers are dictionary words (/usr/share/dict/words, Debian wamerican):
the model writes English, not a fixed string. Also checks the model lists as `default`.
"""
import json, os, re, signal, subprocess, sys, time, urllib.request

src, rapid = os.environ["RP_SOURCE_DIR"], os.environ["RAPID"]
words = {w.strip().lower() for w in open("/usr/share/dict/words", encoding="utf-8", errors="ignore")}
proc = subprocess.Popen([os.path.join(src, "scripts/run-default.sh"), rapid, "--port", "0"],
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
failures = []
try:
    port = None
    deadline = time.time() + 120
    log = ""
    while port is None and time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        log += line
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
    if port is None:
        sys.exit(f"FAIL: server did not start:\n{log}")
    base = f"http://127.0.0.1:{port}"
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(base + "/health").status == 200:
                break
        except Exception:
            time.sleep(0.2)
    models = json.load(urllib.request.urlopen(base + "/v1/models"))
    ids = [m["id"] for m in models["data"]]
    print("models:", ids)
    total = known = 0
    for i, q in enumerate(["Tell me about the sea.", "What is a good life?",
                           "Continue this text: It was a cold morning in the village,"]):
        body = json.dumps({"model": "default", "messages": [{"role": "user", "content": q}],
                           "max_tokens": 60, "temperature": 0.7, "seed": 7 + i}).encode()
        req = urllib.request.Request(base + "/v1/chat/completions", body,
                                     {"Content-Type": "application/json"})
        ans = json.load(urllib.request.urlopen(req, timeout=120))
        text = ans["choices"][0]["message"]["content"]
        toks = re.findall(r"[A-Za-z]+", text)
        hits = sum(t.lower() in words for t in toks)
        print(f"Q: {q}\nA: {text!r}\n   {hits}/{len(toks)} dictionary words")
        total += len(toks)
        known += hits
    share = known / max(total, 1)
    print(f"dictionary words: {known}/{total} = {share:.3f}")
    if total < 20:
        failures.append(f"answers too short ({total} words)")
    if share < 0.8:
        failures.append(f"only {share:.2f} of the words are English")
finally:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        failures.append("server did not stop on SIGTERM")
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
