#!/usr/bin/python3
"""rapid chat in a pseudo-terminal against mock_openai.py: a question and its streamed
answer (reasoning dimmed), history carried to the next turn, multi-line input, /system,
/think, /reset, Ctrl-C during an answer (the program stays), /save, an HTTP error, /exit."""
import json
import os
import pty
import re
import select
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mock_openai  # noqa: E402

RAPID = os.environ["RAPID"]
FAILS = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILS.append(what)


class Term:
    def __init__(self, argv, env):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execve(argv[0], argv, env)
        self.buf = b""

    def read_until(self, pattern, timeout=10):
        """Reads until pattern (bytes regex) appears after the current mark; returns the text."""
        end = time.time() + timeout
        while time.time() < end:
            m = re.search(pattern, self.buf[self.mark:])
            if m:
                text = self.buf[self.mark:self.mark + m.end()]
                self.mark += m.end()
                return text
            r, _, _ = select.select([self.fd], [], [], 0.1)
            if r:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:
                    break
                if not data:
                    break
                self.buf += data
        return None

    mark = 0

    def send(self, s):
        os.write(self.fd, s.encode() if isinstance(s, str) else s)


def requests(log):
    with open(log) as f:
        return [json.loads(l) for l in f if '"messages"' in l]


def main():
    tmp = tempfile.mkdtemp(prefix="rapid-chat-")
    log = os.path.join(tmp, "api.log")
    srv, url = mock_openai.start(log)
    env = dict(os.environ, HOME=tmp, XDG_STATE_HOME=os.path.join(tmp, "state"), TERM="xterm")
    t = Term([RAPID, "chat", "--url", url], env)
    PROMPT = rb">>> "
    check(t.read_until(PROMPT) is not None, "prompt shown")

    t.send("what is up?\r")
    out = t.read_until(PROMPT)
    check(out is not None and b"Hello there!" in out, "streamed answer printed")
    check(out is not None and b"\x1b[2mLet me think." in out, "reasoning shown dimmed")
    check(out is not None and b"3 tokens" in out, "usage line shown")
    r = requests(log)
    check(len(r) == 1 and r[0]["stream"] is True and r[0]["model"] == "mock-model",
          "request streams, model from /v1/models")

    t.send("and then?\r")
    t.read_until(PROMPT)
    r = requests(log)[-1]["messages"]
    check([m["role"] for m in r] == ["user", "assistant", "user"] and r[1]["content"] == "Hello there!",
          "history carried to the next turn")

    t.send("split it up\r")
    out = t.read_until(PROMPT)
    check(out is not None and b"Hello there!" in out and b"Let me think." in out,
          "SSE events split across reads (one byte at a time, CRLF) are reassembled")

    t.send("line one \\\r")
    check(t.read_until(rb"\.\.\. ") is not None, "continuation prompt")
    t.send("line two\r")
    t.read_until(PROMPT)
    check(requests(log)[-1]["messages"][-1]["content"] == "line one \nline two", "multi-line with \\")
    t.send('"""\r')
    t.read_until(rb"\.\.\. ")
    t.send("block a\r")
    t.read_until(rb"\.\.\. ")
    t.send("block b\r")
    t.read_until(rb"\.\.\. ")
    t.send('"""\r')
    t.read_until(PROMPT)
    check(requests(log)[-1]["messages"][-1]["content"] == "block a\nblock b", 'multi-line """ block')

    t.send("/reset\r")
    out = t.read_until(PROMPT)
    check(out is not None and b"conversation cleared" in out, "/reset acknowledged")
    t.send("/system be brief\r")
    t.read_until(PROMPT)
    t.send("/think\r")
    t.read_until(PROMPT)
    t.send("fresh question\r")
    t.read_until(PROMPT)
    last = requests(log)[-1]
    check([m["role"] for m in last["messages"]] == ["system", "user"] and
          last["messages"][0]["content"] == "be brief", "/reset cleared history, /system applied")
    check(last.get("chat_template_kwargs") == {"enable_thinking": True}, "/think sets enable_thinking")

    t.send("tell me a long story\r")
    check(t.read_until(rb"word5 ") is not None, "long answer streaming")
    t0 = time.time()
    t.send(b"\x03")
    out = t.read_until(PROMPT, timeout=5)
    check(out is not None and b"[stopped]" in out and time.time() - t0 < 3,
          "Ctrl-C stops the answer and returns to the prompt")
    check(out is not None and b"word399" not in out, "the answer was cut short")
    t.send("/no-think\r")
    t.read_until(PROMPT)
    t.send("still there?\r")
    out = t.read_until(PROMPT)
    check(out is not None and b"Hello there!" in out, "program still works after Ctrl-C")
    last = requests(log)[-1]
    check(last.get("chat_template_kwargs") == {"enable_thinking": False}, "/no-think")
    check(last["messages"][-2]["role"] == "assistant" and last["messages"][-2]["content"].startswith("word0"),
          "partial answer kept in the conversation")

    t.send("half typed")
    time.sleep(0.2)
    t.send(b"\x03")
    out = t.read_until(PROMPT, timeout=5)
    check(out is not None, "Ctrl-C at the prompt gives a fresh prompt")
    t.send("after ctrl-c\r")
    out = t.read_until(PROMPT)
    check(out is not None and b"Hello there!" in out and
          requests(log)[-1]["messages"][-1]["content"] == "after ctrl-c",
          "Ctrl-C at the prompt drops the half-typed line, program stays")

    t.send("please fail\r")
    out = t.read_until(PROMPT)
    check(out is not None and b"mock failure" in out and b"500" in out, "server error shown")

    save = os.path.join(tmp, "conv.json")
    t.send("/save %s\r" % save)
    t.read_until(PROMPT)
    ok = os.path.exists(save) and json.load(open(save))["messages"][0]["role"] == "system"
    check(ok, "/save writes the conversation")
    t.send("/help\r")
    out = t.read_until(PROMPT)
    check(out is not None and b"/no-think" in out, "/help lists the commands")

    t.send("/exit\r")
    _, status = os.waitpid(t.pid, 0)
    check(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "/exit leaves with status 0")
    hist = os.path.join(tmp, "state", "rapid", "chat_history")
    check(os.path.exists(hist), "history file written")
    srv.shutdown()

    # no server: a clear error and exit 1
    import subprocess
    p = subprocess.run([RAPID, "chat", "--url", "http://127.0.0.1:9"], capture_output=True, text=True,
                       env=env, timeout=30)
    check(p.returncode == 1 and "rapid serve" in p.stderr, "no server: clear error")
    print("%d checks failed" % len(FAILS) if FAILS else "all chat checks passed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
