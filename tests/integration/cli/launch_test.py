#!/usr/bin/python3
"""rapid launch for every agent in a temporary HOME: the config written from scratch, an
existing config patched with its other settings kept and a backup made, --dry-run printing
a diff and writing nothing, the server check (a mock OpenAI server and a dead port), bad
JSON refused, and `launch list`."""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mock_openai  # noqa: E402

RAPID = os.environ["RAPID"]
FAILS = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILS.append(what)


def run(args, env):
    p = subprocess.run([RAPID] + args, env=env, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def read(p):
    with open(p) as f:
        return f.read()


# agent -> (config path relative to HOME, existing content, checker(text, url, model))
def chk_claude(t, url, model):
    j = json.loads(t)
    e = j["env"]
    return (e["ANTHROPIC_BASE_URL"] == url and e["ANTHROPIC_MODEL"] == model and
            e["ANTHROPIC_AUTH_TOKEN"] and j.get("theme", "dark") == "dark")


def chk_codex(t, url, model):
    return ('model = "%s"' % model in t and 'model_provider = "rapid"' in t and
            "[model_providers.rapid]" in t and 'base_url = "%s/v1"' % url in t and
            'model = "gpt-5"' not in t)


def chk_aider(t, url, model):
    lines = t.splitlines()
    return ("openai-api-base: %s/v1" % url in lines and "model: openai/%s" % model in lines and
            any(l.startswith("openai-api-key: ") for l in lines) and
            sum(l.startswith("model:") for l in lines) == 1)


def chk_opencode(t, url, model):
    j = json.loads(t)
    p = j["provider"]["rapid"]
    return (j["model"] == "rapid/" + model and p["options"]["baseURL"] == url + "/v1" and
            model in p["models"] and p["npm"] == "@ai-sdk/openai-compatible")


def chk_continue(t, url, model):
    return ("apiBase: %s/v1" % url in t and "model: %s" % model in t and "provider: openai" in t
            and t.count("# rapid:begin") == 1)


AGENTS = {
    "claude-code": (".claude/settings.json", '{\n  "theme": "dark"\n}\n', chk_claude, '"theme"'),
    "codex": (".codex/config.toml", 'approval_policy = "never"\nmodel = "gpt-5"\n\n[mcp_servers.docs]\ncommand = "docs-mcp"\n',
              chk_codex, "[mcp_servers.docs]"),
    "aider": (".aider.conf.yml", "dark-mode: true\nmodel: gpt-4o\n", chk_aider, "dark-mode: true"),
    "opencode": (".config/opencode/opencode.json", '{"theme": "opencode", "provider": {"other": {"name": "x"}}}',
                 chk_opencode, '"other"'),
    "continue": (".continue/config.yaml", "name: Mine\nversion: 0.0.1\nschema: v1\nmodels:\n  - name: other\n    provider: ollama\n    model: llama3\n",
                 chk_continue, "provider: ollama"),
}


def main():
    tmp = tempfile.mkdtemp(prefix="rapid-launch-")
    srv, url = mock_openai.start(os.path.join(tmp, "api.log"))
    for agent, (rel, existing, chk, kept) in AGENTS.items():
        home = os.path.join(tmp, agent)
        os.makedirs(home)
        env = dict(os.environ, HOME=home)
        for k in ("XDG_CONFIG_HOME", "CODEX_HOME", "RAPID_URL"):
            env.pop(k, None)
        path = os.path.join(home, rel)

        # from scratch, the model named by the server
        rc, out, err = run(["launch", agent, "--url", url], env)
        check(rc == 0 and os.path.exists(path), "%s: config written (%s)" % (agent, err.strip()))
        check(os.path.exists(path) and chk(read(path), url, "mock-model"), "%s: contents right" % agent)
        check("answers" in out and "mock-model" in out, "%s: server check passes" % agent)
        check(not glob.glob(path + ".bak-*"), "%s: no backup for a new file" % agent)

        # an existing config: dry run first
        shutil.rmtree(home)
        os.makedirs(os.path.dirname(path))
        with open(path, "w") as f:
            f.write(existing)
        before = os.stat(path)
        rc, out, err = run(["launch", agent, "--url", url, "--model", "m1", "--dry-run"], env)
        check(rc == 0 and "+" in out and url in out and "dry run" in out, "%s: dry run shows a diff" % agent)
        check(read(path) == existing and os.stat(path).st_mtime_ns == before.st_mtime_ns and
              sorted(os.listdir(os.path.dirname(path))) == [os.path.basename(path)],
              "%s: dry run writes nothing" % agent)

        # patch it
        rc, out, err = run(["launch", agent, "--url", url, "--model", "m1"], env)
        text = read(path)
        check(rc == 0 and chk(text, url, "m1"), "%s: patched contents right" % agent)
        check(kept in text, "%s: other settings kept" % agent)
        baks = glob.glob(path + ".bak-*")
        check(len(baks) == 1 and read(baks[0]) == existing, "%s: backup holds the old file" % agent)

        # again: idempotent
        rc, out, err = run(["launch", agent, "--url", url, "--model", "m1"], env)
        check(rc == 0 and read(path) == text and "unchanged" in out, "%s: second launch changes nothing" % agent)

        # no server
        rc, out, err = run(["launch", agent, "--url", "http://127.0.0.1:9", "--model", "m1"], env)
        check(rc == 0 and "nothing answers" in out and "rapid serve" in out, "%s: says when no server answers" % agent)

    # broken JSON is refused, the file untouched
    home = os.path.join(tmp, "bad")
    os.makedirs(os.path.join(home, ".claude"))
    bad = os.path.join(home, ".claude", "settings.json")
    with open(bad, "w") as f:
        f.write("{ not json")
    rc, out, err = run(["launch", "claude-code", "--no-check", "--model", "x"], dict(os.environ, HOME=home))
    check(rc == 1 and "cannot patch" in err and read(bad) == "{ not json", "bad JSON refused, file untouched")

    # continue with an old config.json
    home = os.path.join(tmp, "cont-json")
    os.makedirs(os.path.join(home, ".continue"))
    cj = os.path.join(home, ".continue", "config.json")
    with open(cj, "w") as f:
        json.dump({"models": [{"title": "other", "provider": "ollama", "model": "x"}]}, f)
    rc, out, err = run(["launch", "continue", "--no-check", "--model", "m2", "--url", url], dict(os.environ, HOME=home))
    j = json.load(open(cj))
    check(rc == 0 and j["models"][0]["title"] == "rapid" and j["models"][0]["apiBase"] == url + "/v1"
          and j["models"][1]["title"] == "other", "continue config.json patched")

    # CODEX_HOME, list, unknown agent
    home = os.path.join(tmp, "list")
    os.makedirs(home)
    env = dict(os.environ, HOME=home, CODEX_HOME=os.path.join(home, "cx"))
    rc, out, err = run(["launch", "codex", "--no-check", "--model", "m"], env)
    check(rc == 0 and os.path.exists(os.path.join(home, "cx", "config.toml")), "CODEX_HOME honoured")
    rc, out, err = run(["launch", "list"], env)
    check(rc == 0 and all(a in out for a in AGENTS), "launch list names every agent")
    check([l.split()[2] for l in out.splitlines() if l.startswith("codex")] == ["yes"], "list shows codex configured")
    rc, out, err = run(["launch", "vim"], env)
    check(rc == 2 and "launch list" in err, "unknown agent: usage error with the next step")
    srv.shutdown()
    print("%d checks failed" % len(FAILS) if FAILS else "all launch checks passed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
