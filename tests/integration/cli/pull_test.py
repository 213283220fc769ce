#!/usr/bin/python3
"""rapid pull / ls / rm end to end against mock_hub.py: fresh download into the HF cache
layout, re-pull is a no-op, resume after a cut (Range), 404, 401 (and the token fixing it),
a corrupt LFS file detected and removed, a network failure, and rm."""
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mock_hub  # noqa: E402

RAPID = os.environ["RAPID"]
FAILS = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILS.append(what)


def run(args, env):
    p = subprocess.run([RAPID] + args, env=env, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def main():
    tmp = tempfile.mkdtemp(prefix="rapid-pull-")
    log = os.path.join(tmp, "hub.log")
    srv, url = mock_hub.start(log)
    env = dict(os.environ, HOME=tmp, HF_HOME=os.path.join(tmp, "hf"), HF_ENDPOINT=url)
    env.pop("HF_TOKEN", None)
    env.pop("HF_HUB_CACHE", None)
    env.pop("XDG_CONFIG_HOME", None)
    env.pop("RAPID_CONFIG_DIR", None)
    hub = os.path.join(tmp, "hf", "hub")
    repos = mock_hub.Hub.repos or srv.RequestHandlerClass.repos

    def log_lines():
        with open(log) as f:
            return [json.loads(line) for line in f]

    # fresh download through a user alias
    rc, out, err = run(["alias", "set", "tiny", "test-org/tiny-model"], env)
    check(rc == 0, "alias set")
    rc, out, err = run(["pull", "tiny"], env)
    check(rc == 0, "fresh pull exits 0 (%s)" % err.strip().splitlines()[-1:])
    rdir = os.path.join(hub, "models--test-org--tiny-model")
    r = repos["test-org/tiny-model"]
    commit = r["commit"]
    check(open(os.path.join(rdir, "refs", "main")).read().strip() == commit, "refs/main = commit")
    snap = os.path.join(rdir, "snapshots", commit)
    for path, e in r["files"].items():
        link = os.path.join(snap, path)
        check(os.path.islink(link), "snapshot %s is a symlink" % path)
        want_blob = e["sha256"] if e["lfs"] else e["blob_id"]
        target = os.readlink(link)
        depth = path.count("/")
        check(target == "../../" + "../" * depth + "blobs/" + want_blob,
              "%s links to blobs/<%s> (%s)" % (path, "sha256" if e["lfs"] else "blob id", target))
        check(open(link, "rb").read() == e["data"], "%s content matches" % path)
    check("%" in err and "sha256 verified" in err, "plain progress lines when not a TTY")
    check(not [f for f in os.listdir(os.path.join(rdir, "blobs")) if f.endswith(".incomplete")],
          "no .incomplete left")
    check(any(x["path"].startswith("/cdn/") for x in log_lines()), "LFS file fetched via redirect")

    # pulled again: nothing is fetched
    n_before = len(log_lines())
    rc, out, err = run(["pull", "test-org/tiny-model"], env)
    fetched = [x for x in log_lines()[n_before:] if "/resolve/" in x["path"] or "/cdn/" in x["path"]]
    check(rc == 0 and "already downloaded" in err and not fetched, "second pull fetches nothing")
    rc, out, err = run(["ls"], env)
    check(rc == 0 and "test-org/tiny-model" in out and "tiny" in out, "ls lists the download")
    rc, out, err = run(["models"], env)
    line = [l for l in out.splitlines() if l.startswith("tiny ")]
    check(rc == 0 and line and "yes" in line[0], "models marks the alias downloaded")

    # resume after a cut
    rc, out, err = run(["pull", "test-org/cut"], env)
    check(rc == 1 and "resume" in err, "cut download fails with a resume hint (%s)" % err.strip()[-120:])
    e = repos["test-org/cut"]["files"]["big.safetensors"]
    part = os.path.join(hub, "models--test-org--cut", "blobs", e["sha256"] + ".incomplete")
    check(os.path.exists(part) and os.path.getsize(part) == mock_hub.CUT_BYTES,
          "partial file kept (%d bytes)" % (os.path.getsize(part) if os.path.exists(part) else -1))
    n_before = len(log_lines())
    rc, out, err = run(["pull", "test-org/cut"], env)
    ranges = [x["range"] for x in log_lines()[n_before:] if x["path"].startswith("/cdn/")]
    check(rc == 0, "resumed pull exits 0 (%s)" % err.strip()[-200:])
    check(ranges == ["bytes=%d-" % mock_hub.CUT_BYTES], "resume sent Range %s" % ranges)
    got = os.path.join(hub, "models--test-org--cut", "snapshots", repos["test-org/cut"]["commit"],
                       "big.safetensors")
    check(os.path.exists(got) and hashlib.sha256(open(got, "rb").read()).hexdigest() == e["sha256"],
          "resumed file has the right sha256")
    check("resuming at" in err, "resume is reported")

    # 404
    rc, out, err = run(["pull", "test-org/missing"], env)
    check(rc == 1 and "not found" in err and "404" in err, "404: clear message (%s)" % err.strip())

    # 401, then the token
    rc, out, err = run(["pull", "test-org/gated"], env)
    check(rc == 1 and "HF_TOKEN" in err and "401" in err, "401: says to set HF_TOKEN (%s)" % err.strip())
    rc, out, err = run(["pull", "test-org/gated"], dict(env, HF_TOKEN="good-token"))
    check(rc == 0, "HF_TOKEN is sent and works")
    check(any(x["auth"] == "Bearer good-token" for x in log_lines()), "Authorization header sent")

    # corrupt LFS file
    rc, out, err = run(["pull", "test-org/corrupt"], env)
    check(rc == 1 and "corrupt" in err and "sha256" in err, "corrupt file detected (%s)" % err.strip())
    bdir = os.path.join(hub, "models--test-org--corrupt", "blobs")
    check(os.path.isdir(bdir) and not os.listdir(bdir), "corrupt file removed")

    # network failure: a closed port
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = "http://127.0.0.1:%d" % s.getsockname()[1]
    s.close()
    rc, out, err = run(["pull", "test-org/tiny-model"], dict(env, HF_ENDPOINT=dead))
    check(rc == 1 and "cannot reach the hub" in err and "HF_ENDPOINT" in err,
          "network failure: clear message (%s)" % err.strip())

    # HF_HUB_CACHE wins over HF_HOME
    alt = os.path.join(tmp, "alt-cache")
    rc, out, err = run(["pull", "test-org/gated"], dict(env, HF_HUB_CACHE=alt, HF_TOKEN="good-token"))
    check(rc == 0 and os.path.isdir(os.path.join(alt, "models--test-org--gated")), "HF_HUB_CACHE honoured")

    # on a terminal: a redrawn progress bar with size, rate and ETA
    import pty
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(RAPID, [RAPID, "pull", "test-org/cut"], dict(env, HF_HUB_CACHE=os.path.join(tmp, "tty-cache")))
    data = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    _, status = os.waitpid(pid, 0)
    text = data.decode(errors="replace")
    check(status != 0 and "\r" in text and "[===" in text and "ETA" in text and "B/s" in text and
          "1.0 MB / 3.1 MB" in text, "TTY progress bar with size, rate and ETA (first, cut attempt)")

    # a catalog entry with file globs pulls only the matching GGUF file; info lists it
    cat = os.path.join(tmp, "catalog.json")
    with open(cat, "w") as f:
        json.dump({"version": 1, "models": [
            {"alias": "tiny-q4", "repo": "test-org/tiny-GGUF", "family": "llama3", "params_b": 0.001,
             "quant": "Q4_K_M", "format": "gguf", "files": ["*Q4_K_M.gguf"], "download_gb": 0.0001,
             "memory_gb": 0.001, "context": 2048, "tool_parser": "none", "reasoning_parser": "none"}],
            "recipes": [{"tier": "any", "min_memory_gb": 0, "smart": "tiny-q4", "fast": "tiny-q4"}]}, f)
    genv = dict(env, RAPID_CATALOG=cat)
    rc, out, err = run(["pull", "tiny-q4"], genv)
    gsnap = os.path.join(hub, "models--test-org--tiny-GGUF", "snapshots", repos["test-org/tiny-GGUF"]["commit"])
    check(rc == 0 and os.listdir(gsnap) == ["tiny-Q4_K_M.gguf"], "catalog file globs: only the Q4_K_M file pulled")
    rc, out, err = run(["info", "tiny-q4"], genv)
    check(rc == 0 and "tiny-Q4_K_M.gguf" in out and "gguf" in out, "info on a GGUF download lists its file")
    rc, out, err = run(["models"], genv)
    check(rc == 0 and [l for l in out.splitlines() if l.startswith("tiny-q4") and "yes" in l],
          "models marks the GGUF alias downloaded")

    # rm
    rc, out, err = run(["rm", "tiny"], env)
    check(rc == 0 and "removed test-org/tiny-model" in out, "rm removes the model")
    check(not os.path.exists(rdir), "rm deleted the cache folder")
    rc, out, err = run(["rm", "tiny"], env)
    check(rc == 1 and "not downloaded" in err, "rm of a missing model fails clearly")
    srv.shutdown()
    print("%d checks failed" % len(FAILS) if FAILS else "all pull checks passed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
