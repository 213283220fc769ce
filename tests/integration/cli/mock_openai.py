#!/usr/bin/python3
"""A small OpenAI-compatible streaming server for rapid chat and bench tests.

GET  /v1/models             one model, "mock-model"
POST /v1/chat/completions   stream=true: SSE chunks like the OpenAI API (role, reasoning_content,
                            content, finish_reason, a usage chunk, [DONE]). The answer depends
                            on the last user message: containing "long" -> 400 words, one per
                            20 ms (to interrupt); "fail" -> HTTP 500 with an error JSON;
                            "split" -> the stream written one byte at a time (CRLF lines);
                            otherwise reasoning "Let me think." then "Hello there!".
Every request body is appended to the log, one JSON object per line.
"""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Api(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    log_path = None
    lock = threading.Lock()

    def log_message(self, fmt, *args):
        pass

    def send_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/v1/models":
            return self.send_json(200, {"object": "list", "data": [{"id": "mock-model", "object": "model"}]})
        self.send_json(404, {"error": {"message": "no route"}})

    def chunk(self, delta=None, finish=None, usage=None):
        obj = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "mock-model",
               "choices": [] if usage else [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}
        if usage:
            obj["usage"] = usage
        data = ("data: " + json.dumps(obj) + "\r\n\r\n").encode()
        pieces = [data[i:i + 1] for i in range(len(data))] if self.split else [data]
        for p in pieces:  # "split": one byte per write, events cut anywhere
            self.wfile.write(b"%x\r\n%s\r\n" % (len(p), p))
            self.wfile.flush()

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        req = json.loads(self.rfile.read(n) or b"{}")
        with self.lock, open(self.log_path, "a") as f:
            f.write(json.dumps(req) + "\n")
        if self.path != "/v1/chat/completions":
            return self.send_json(404, {"error": {"message": "no route"}})
        last = req["messages"][-1]["content"] if req.get("messages") else ""
        self.split = "split" in last
        if "fail" in last:
            return self.send_json(500, {"error": {"message": "mock failure", "type": "server_error"}})
        prompt_tokens = sum(len(m["content"].split()) for m in req["messages"])
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            self.chunk({"role": "assistant", "content": ""})
            if "long" in last:
                words = ["word%d " % i for i in range(400)]
                delay = 0.02
            else:
                for w in ["Let ", "me ", "think."]:
                    self.chunk({"reasoning_content": w})
                words = ["Hello", " there", "!"]
                delay = 0.005
            max_tokens = req.get("max_tokens")
            if max_tokens:
                words = (words * (max_tokens // len(words) + 1))[:max_tokens]
            for w in words:
                time.sleep(delay)
                self.chunk({"content": w})
            self.chunk({}, "stop")
            if (req.get("stream_options") or {}).get("include_usage"):
                self.chunk(usage={"prompt_tokens": prompt_tokens, "completion_tokens": len(words),
                                  "total_tokens": prompt_tokens + len(words)})
            data = b"data: [DONE]\n\n"
            self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            with self.lock, open(self.log_path, "a") as f:
                f.write(json.dumps({"disconnected": True}) + "\n")


def start(log_path):
    handler = type("ApiHandler", (Api,), {"log_path": log_path})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, "http://127.0.0.1:%d" % srv.server_address[1]


if __name__ == "__main__":
    import sys
    srv, url = start(sys.argv[1])
    print(url, flush=True)
    threading.Event().wait()
