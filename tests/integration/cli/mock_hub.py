#!/usr/bin/python3
"""A small stand-in for the Hugging Face hub, for rapid's pull tests.

It serves the hub's URL layout with the headers huggingface_hub relies on:
  GET /api/models/{org}/{name}/revision/{rev}?blobs=true   file list with sizes, blob ids, LFS sha256
  GET|HEAD /{org}/{name}/resolve/{rev}/{path}              small files directly (ETag = git blob id);
                                                           LFS files: 302 to /cdn/{sha256} with
                                                           X-Linked-Etag / X-Linked-Size
  every resolve answer carries X-Repo-Commit; /cdn/ honours Range (206)
Repos (all generated, deterministic):
  test-org/tiny-model   config.json, tokenizer.json, model.safetensors (LFS), nested/dir/notes.txt
  test-org/gated        401 unless "Authorization: Bearer good-token"
  test-org/cut          one LFS file; a request without Range is cut after CUT_BYTES
  test-org/corrupt      an LFS file whose bytes do not match its sha256
  test-org/tiny-GGUF    two GGUF quantizations and a README (for catalog file globs)
  anything else         404 with X-Error-Code: RepoNotFound
Requests are appended to the log (method, path, Range header), one JSON object per line.
Run standalone: mock_hub.py PORT_FILE LOG_FILE (port 0 = any free port, written to PORT_FILE).
"""
import hashlib
import json
import random
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

CUT_BYTES = 1 << 20


def blob(seed, n):
    r = random.Random(seed)
    return bytes(r.getrandbits(8) for _ in range(n)) if n < 4096 else r.randbytes(n)


def git_blob_id(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def make_repos():
    repos = {}

    def repo(name, files, lfs_names, commit_seed, corrupt=None, gated=False, cut=False):
        commit = hashlib.sha1(commit_seed.encode()).hexdigest()
        entries = {}
        for path, data in files.items():
            e = {"data": data, "lfs": path in lfs_names}
            e["sha256"] = hashlib.sha256(data).hexdigest()
            e["blob_id"] = git_blob_id(data)
            if corrupt == path:  # served bytes differ from the declared hash
                e["served"] = bytes(b ^ 0x5A for b in data[:64]) + data[64:]
            entries[path] = e
        repos[name] = {"commit": commit, "files": entries, "gated": gated, "cut": cut}

    repo("test-org/tiny-model", {
        "config.json": json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                   "hidden_size": 64, "num_hidden_layers": 2,
                                   "num_attention_heads": 4, "num_key_value_heads": 2,
                                   "intermediate_size": 128, "vocab_size": 256,
                                   "max_position_embeddings": 512,
                                   "torch_dtype": "bfloat16"}).encode(),
        "tokenizer.json": b'{"version": "1.0", "model": {"type": "BPE"}}',
        "model.safetensors": blob(1, 300000),
        "nested/dir/notes.txt": b"nested file\n",
    }, {"model.safetensors"}, "tiny")
    repo("test-org/gated", {"config.json": b"{}", "weights.bin": blob(2, 5000)}, {"weights.bin"},
         "gated", gated=True)
    repo("test-org/cut", {"big.safetensors": blob(3, 3 * CUT_BYTES)}, {"big.safetensors"}, "cut",
         cut=True)
    repo("test-org/corrupt", {"model.safetensors": blob(4, 200000)}, {"model.safetensors"},
         "corrupt", corrupt="model.safetensors")
    repo("test-org/tiny-GGUF", {
        "README.md": b"# tiny gguf\n",
        "tiny-Q4_K_M.gguf": b"GGUF" + blob(5, 70000),
        "tiny-Q8_0.gguf": b"GGUF" + blob(6, 90000),
    }, {"tiny-Q4_K_M.gguf", "tiny-Q8_0.gguf"}, "gguf")
    return repos


class Hub(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    repos = None
    log_path = None
    log_lock = threading.Lock()

    def log_message(self, fmt, *args):
        pass

    def note(self):
        with self.log_lock, open(self.log_path, "a") as f:
            f.write(json.dumps({"method": self.command, "path": self.path,
                                "range": self.headers.get("Range"),
                                "auth": self.headers.get("Authorization")}) + "\n")

    def send(self, code, body=b"", headers=None, ctype="application/json"):
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def error(self, code, error_code, message):
        self.send(code, json.dumps({"error": message}).encode(), {"X-Error-Code": error_code})

    def find_repo(self, parts):
        if len(parts) < 2:
            return None, None
        name = parts[0] + "/" + parts[1]
        r = self.repos.get(name)
        if r and r["gated"] and self.headers.get("Authorization") != "Bearer good-token":
            self.error(401, "GatedRepo", "Access to model %s is restricted." % name)
            return name, "answered"
        if not r:
            self.error(404, "RepoNotFound", "Repository not found")
            return name, "answered"
        return name, r

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        self.note()
        url = urlparse(self.path)
        parts = [unquote(p) for p in url.path.split("/") if p]
        if parts[:2] == ["api", "models"]:
            return self.api(parts[2:])
        if parts and parts[0] == "cdn":
            return self.cdn(parts[1:])
        if len(parts) >= 5 and parts[2] == "resolve":
            return self.resolve(parts)
        self.error(404, "EntryNotFound", "no route")

    def api(self, parts):
        name, r = self.find_repo(parts)
        if r is None or r == "answered":
            if r is None:
                self.error(404, "RepoNotFound", "Repository not found")
            return
        if len(parts) >= 4 and parts[3] not in ("main", r["commit"]):
            return self.error(404, "RevisionNotFound", "Invalid rev id")
        sib = []
        for path, e in r["files"].items():
            s = {"rfilename": path, "size": len(e["data"]), "blobId": e["blob_id"]}
            if e["lfs"]:
                s["lfs"] = {"sha256": e["sha256"], "size": len(e["data"]), "pointerSize": 134}
            sib.append(s)
        body = {"id": name, "modelId": name, "sha": r["commit"], "siblings": sib}
        self.send(200, json.dumps(body).encode())

    def resolve(self, parts):
        name, r = self.find_repo(parts)
        if r == "answered":
            return
        rev, path = parts[3], "/".join(parts[4:])
        if rev not in ("main", r["commit"]):
            return self.error(404, "RevisionNotFound", "Invalid rev id")
        e = r["files"].get(path)
        if not e:
            return self.error(404, "EntryNotFound", "Entry not found")
        h = {"X-Repo-Commit": r["commit"]}
        if e["lfs"]:
            h.update({"X-Linked-Etag": '"%s"' % e["sha256"], "X-Linked-Size": str(len(e["data"])),
                      "ETag": '"%s"' % e["blob_id"],
                      "Location": "/cdn/%s/%s?repo=%s" % (name, path, name)})
            return self.send(302, b"", h)
        h["ETag"] = '"%s"' % e["blob_id"]
        self.send(200, e["data"], h, "application/octet-stream")

    def cdn(self, parts):
        name = "/".join(parts[:2])
        r = self.repos.get(name)
        e = r and r["files"].get("/".join(parts[2:]))
        if not e:
            return self.error(404, "EntryNotFound", "no such blob")
        data = e.get("served", e["data"])
        rng = self.headers.get("Range")
        start = 0
        if rng and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[6:-1])
            if start >= len(data):
                return self.send(416, b"", {"Content-Range": "bytes */%d" % len(data)})
        h = {"ETag": '"%s"' % e["sha256"], "Accept-Ranges": "bytes"}
        if rng:
            h["Content-Range"] = "bytes %d-%d/%d" % (start, len(data) - 1, len(data))
        body = data[start:]
        if r["cut"] and not rng:  # the connection drops part way through
            self.send_response(200)
            for k, v in h.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[:CUT_BYTES])
            self.wfile.flush()
            self.close_connection = True
            return
        self.send(206 if rng else 200, body, h, "application/octet-stream")


def start(log_path):
    """Starts the hub on a free loopback port in a thread; returns (server, base_url)."""
    handler = type("HubHandler", (Hub,), {"repos": make_repos(), "log_path": log_path})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, "http://127.0.0.1:%d" % srv.server_address[1]


if __name__ == "__main__":
    srv, url = start(sys.argv[2])
    with open(sys.argv[1], "w") as f:
        f.write(url + "\n")
    threading.Event().wait()
