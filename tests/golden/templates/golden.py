"""Golden test for chat templates: rapid's Jinja engine against Python Jinja2 (reference.py).

Every template in $RAPID_TEST_CACHE/llama.cpp/models/templates/*.jinja and every "gguf"
template of @huggingface/ollama-utils' src/chat-template-automap.ts is rendered over every
context in contexts.json, by `$RAPID template` and by the reference. A case passes when both
produce the same bytes, or both raise. Any other outcome fails the test. Reference outputs are
cached in $RAPID_TEST_CACHE/template-golden/ (keyed by a hash of everything they depend on).

usage: /usr/bin/python3 golden.py [--rapid PATH] [--jobs N] [--verbose] [--only SUBSTRING]
"""
import argparse
import concurrent.futures
import copy
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import random_templates  # noqa: E402
import reference  # noqa: E402

RANDOM_SEED, RANDOM_COUNT, RANDOM2_COUNT = 4, 400, 400  # differential cases (random_templates.py)
NOW = 1767225600 + 12 * 3600 + 34 * 60  # 2026-01-01 12:34 UTC: strftime_now's fixed clock


def js_string(src, i):
    """Decodes the JavaScript string literal starting at src[i]; returns (text, end)."""
    q = src[i]
    i += 1
    out = []
    simple = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "v": "\v", "0": "\0"}
    while src[i] != q:
        c = src[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        e = src[i + 1]
        i += 2
        if e in simple:
            out.append(simple[e])
        elif e == "x":
            out.append(chr(int(src[i:i + 2], 16)))
            i += 2
        elif e == "u":
            if src[i] == "{":
                j = src.index("}", i)
                out.append(chr(int(src[i + 1:j], 16)))
                i = j + 1
            else:
                out.append(chr(int(src[i:i + 4], 16)))
                i += 4
        elif e == "\n":
            pass
        else:
            out.append(e)
    return "".join(out), i + 1


def ollama_templates(path):
    src = open(path, encoding="utf-8").read()
    found = []
    for m in re.finditer(r'model:\s*"([^"]+)"', src):
        g = src.find("gguf:", m.end())
        nxt = src.find("model:", m.end())
        if g < 0 or (nxt >= 0 and g > nxt):
            continue
        j = g + 5
        while src[j] in " \t\n":
            j += 1
        text, _ = js_string(src, j)
        found.append((m.group(1), text))
    return found


def collect_templates(cache):
    tdir = os.path.join(cache, "llama.cpp", "models", "templates")
    auto = os.path.join(cache, "ollama-utils", "node_modules", "@huggingface", "ollama-utils", "src",
                        "chat-template-automap.ts")
    for p in (tdir, auto):
        if not os.path.exists(p):
            sys.exit(f"golden: missing test material {p} (run scripts/test-setup.sh)")
    out = []
    for name in sorted(os.listdir(tdir)):
        if name.endswith(".jinja"):
            out.append(("llama.cpp/" + name, open(os.path.join(tdir, name), encoding="utf-8").read()))
    seen, names = set(), set()
    for model, text in ollama_templates(auto):
        h = hashlib.sha256(text.encode()).hexdigest()
        if h in seen:
            continue
        seen.add(h)
        name, k = "ollama/" + model, 2
        while name in names:  # one model name may carry several templates
            name, k = f"ollama/{model}#{k}", k + 1
        names.add(name)
        out.append((name, text))
    return out


def load_contexts():
    """Returns (matrix contexts, snippet context name)."""
    raw = json.load(open(os.path.join(HERE, "contexts.json"), encoding="utf-8"))
    defaults = raw["_defaults"]
    ctxs = []
    for name, c in raw.items():
        if name.startswith("_"):
            continue
        merged = dict(defaults)
        merged.update(c)
        for key in merged.pop("_omit", []):  # e.g. no date_string: strftime_now runs
            merged.pop(key, None)
        ctxs.append((name, merged))
    return ctxs, raw["_snippet_context"]


def load_snippets():
    text = open(os.path.join(HERE, "snippets.txt"), encoding="utf-8").read()
    blocks = re.split(r"(?m)^=====\n", text)
    return [(f"snippet#{i + 1}", b[:-1] if b.endswith("\n") else b) for i, b in enumerate(blocks)]


def reference_outputs(cache, cases, contexts):
    import jinja2
    ref_src = open(os.path.join(HERE, "reference.py"), "rb").read()
    salt = hashlib.sha256(ref_src + jinja2.__version__.encode() + str(NOW).encode()).hexdigest()
    cdir = os.path.join(cache, "template-golden")
    os.makedirs(cdir, exist_ok=True)
    cpath = os.path.join(cdir, "reference-cache.json")
    try:
        stored = json.load(open(cpath, encoding="utf-8"))
    except (OSError, ValueError):
        stored = {}
    env = reference.make_env(NOW)
    results, fresh = {}, {}
    for tname, src, cnames in cases:
        compiled = None
        for cname in cnames:
            ctx = contexts[cname]
            key = hashlib.sha256((salt + src + json.dumps(ctx, sort_keys=True)).encode()).hexdigest()
            if key in stored:
                results[(tname, cname)] = tuple(stored[key])
                fresh[key] = stored[key]
                continue
            if compiled is None:
                compiled = reference.compile(env, src)
            # a fresh copy each time: Python filters can mutate their input (indent does
            # "s += newline", which extends a list in place)
            r = reference.render(env, compiled, copy.deepcopy(ctx))
            results[(tname, cname)] = r
            fresh[key] = list(r)
    tmp = cpath + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(fresh, f, ensure_ascii=False)
    os.replace(tmp, cpath)
    return results


def run_rapid(rapid, tpath, cpath):
    p = subprocess.run([rapid, "template", "--template", tpath, "--context", cpath, "--now", str(NOW)],
                       capture_output=True, timeout=60, env=dict(os.environ, TZ="UTC"))
    if p.returncode == 0:
        return "ok", p.stdout.decode("utf-8", "surrogateescape")
    if p.returncode == 1:
        return "error", p.stderr.decode("utf-8", "replace").strip()
    # a crash or a sanitizer report is never "raising like Python"
    return "crash", f"exit status {p.returncode}: " + p.stderr.decode("utf-8", "replace").strip()[-300:]


def first_diff(a, b):
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    return i


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rapid", default=os.environ.get("RAPID"))
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("RAPID_TEST_JOBS", "2")))
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    if not args.rapid:
        sys.exit("golden: set RAPID or pass --rapid")
    os.environ["TZ"] = "UTC"
    cache = os.environ.get("RAPID_TEST_CACHE", os.path.expanduser("~/.cache/rapid-test"))
    matrix, snippet_ctx = load_contexts()
    contexts = dict(matrix)
    templates = [t for t in collect_templates(cache) if args.only in t[0]]
    snippets = [s for s in load_snippets() if args.only in s[0]]
    contexts["random"] = random_templates.CONTEXT
    contexts["random2"] = random_templates.CONTEXT2
    randoms = [(f"random#{i + 1}", src, "random") for i, src in
               enumerate(random_templates.templates(RANDOM_SEED, RANDOM_COUNT))]
    randoms += [(f"random2#{i + 1}", src, "random2") for i, src in
                enumerate(random_templates.templates2(RANDOM_SEED, RANDOM2_COUNT))]
    randoms = [r for r in randoms if args.only in r[0]]
    cases = [(t, s, [c for c, _ in matrix]) for t, s in templates]
    cases += [(t, s, [snippet_ctx]) for t, s in snippets]
    cases += [(t, s, [c]) for t, s, c in randoms]
    ref = reference_outputs(cache, cases, contexts)
    work = tempfile.mkdtemp(prefix="rapid-golden-")
    cpaths = {}
    for cname, ctx in contexts.items():
        cpaths[cname] = os.path.join(work, cname + ".json")
        with open(cpaths[cname], "w", encoding="utf-8") as f:
            json.dump(ctx, f, ensure_ascii=False)
    jobs = []
    for i, (tname, src, cnames) in enumerate(cases):
        tpath = os.path.join(work, f"t{i}.jinja")
        with open(tpath, "w", encoding="utf-8") as f:
            f.write(src)
        for cname in cnames:
            jobs.append((tname, cname, tpath))
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        got = list(ex.map(lambda j: run_rapid(args.rapid, j[2], cpaths[j[1]]), jobs))
    passed = both_raise = n_raise = same_msg = 0
    failures = []
    per_template = {}
    skipped = 0
    for (tname, cname, _), mine in zip(jobs, got):
        want = ref[(tname, cname)]
        if tname.startswith("random") and want[0] == "ok" and re.search(r" at 0x[0-9a-f]+>", want[1]):
            skipped += 1  # Python printed a generator's memory address: no engine can match that
            continue
        ok = (want[0] == "error" and mine[0] == "error") or want == mine
        per_template.setdefault(tname, []).append(ok)
        if ok:
            passed += 1
            if want[0] == "error":
                both_raise += 1
                if want[1].startswith("TemplateError: "):  # raise_exception(msg): same text?
                    n_raise += 1
                    same_msg += mine[1] == "rapid template: " + want[1][len("TemplateError: "):]
            continue
        if want[0] == "ok" and mine[0] == "ok":
            d = first_diff(want[1], mine[1])
            why = (f"output differs at char {d}: python {want[1][max(0, d - 30):d + 50]!r} "
                   f"vs rapid {mine[1][max(0, d - 30):d + 50]!r}")
        elif want[0] == "error":
            why = f"python raised ({want[1][:200]}) but rapid rendered"
        elif mine[0] == "crash":
            why = f"rapid crashed ({mine[1]})"
        else:
            why = f"rapid raised ({mine[1][:300]}) but python rendered"
        failures.append((tname, cname, why))
    for tname, cname, why in failures:
        print(f"FAIL {tname} [{cname}]: {why}")
    if args.verbose:
        for tname, oks in per_template.items():
            print(f"{'ok  ' if all(oks) else 'FAIL'} {tname}: {sum(oks)}/{len(oks)}")
    n_t = len(templates)
    n_tok = sum(1 for t, _ in templates if all(per_template.get(t, [False])))
    n_sok = sum(1 for t, _ in snippets if all(per_template.get(t, [False])))
    n_rok = sum(1 for t, _, _ in randoms if all(per_template.get(t, [True])))
    print(f"template golden: {passed}/{len(jobs) - skipped} cases passed, {both_raise} of them where both raise; "
          f"real templates: {n_tok}/{n_t} pass all {len(matrix)} contexts; "
          f"feature snippets: {n_sok}/{len(snippets)}; random templates: {n_rok}/{len(randoms)} "
          f"({skipped} print an object address and are not compared); raise_exception messages identical: "
          f"{same_msg}/{n_raise}")
    return 0 if not failures and passed else 1


if __name__ == "__main__":
    sys.exit(main())
