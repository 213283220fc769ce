#!/usr/bin/env python3
"""`rapid serve x.gguf` answers a chat request with the tokenizer and chat template of the
GGUF's own metadata.

Builds a GGUF here: a tiny random Llama (general.architecture "llama", 2 layers, width 64,
tied embeddings; tensors in llama.cpp's names) whose vocabulary is llama.cpp's Phi-3 vocab
(every tokenizer.* key of $RAPID_TEST_CACHE/llama.cpp/models/ggml-vocab-phi-3.gguf copied
as it is), plus a tokenizer.chat_template written for this test. Then serves it on a free
loopback port and checks that a chat completion
  - answers (200, a string, finish_reason, at most max_tokens tokens),
  - counts as prompt tokens exactly what `rapid tokenize --tokenizer x.gguf` gives for the
    template rendered by hand (so the template and the tokenizer are the GGUF's: the
    <|user|> / <|end|> / <|assistant|> markers are Phi-3 special tokens, ChatML's are not),
  - and the server did not fall back to ChatML.
The GGUF reader / writer below is written from the GGUF spec for this test.
"""
import json, os, re, struct, subprocess, sys, tempfile, time, urllib.request

import numpy as np

rapid = os.environ["RAPID"]
cache = os.environ.get("RAPID_TEST_CACHE", os.path.expanduser("~/.cache/rapid-test"))
vocab_path = os.path.join(cache, "llama.cpp/models/ggml-vocab-phi-3.gguf")
if not os.path.exists(vocab_path):
    sys.exit(f"FAIL: {vocab_path} is missing (scripts/setup.d/10-llamacpp-data.sh fetches it)")

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def read_kvs(path):
    """Every metadata entry as (key, type, raw value bytes); the token list's length."""
    b = open(path, "rb").read()
    assert b[:4] == b"GGUF", path
    _, n_t, n_kv = struct.unpack_from("<IQQ", b, 4)
    off, kvs, n_tokens = 24, [], 0

    def value_len(t, o):
        if t == 8:
            return 8 + struct.unpack_from("<Q", b, o)[0]
        if t == 9:
            et, n = struct.unpack_from("<IQ", b, o)
            p = o + 12
            for _ in range(n):
                p += value_len(et, p)
            return p - o
        return SIZES[t]

    for _ in range(n_kv):
        kl = struct.unpack_from("<Q", b, off)[0]
        key = b[off + 8:off + 8 + kl].decode()
        off += 8 + kl
        t = struct.unpack_from("<I", b, off)[0]
        off += 4
        n = value_len(t, off)
        kvs.append((key, t, b[off:off + n]))
        if key == "tokenizer.ggml.tokens":
            n_tokens = struct.unpack_from("<IQ", b, off)[1]
        off += n
    return kvs, n_tokens


def s(x):
    e = x.encode()
    return struct.pack("<Q", len(e)) + e


def kv_u32(k, v):
    return s(k) + struct.pack("<II", 4, v)


def kv_f32(k, v):
    return s(k) + struct.pack("<If", 6, v)


def kv_str(k, v):
    return s(k) + struct.pack("<I", 8) + s(v)


TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n"
            "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


def write_model(path, kvs, vocab):
    D, F, H, KV, L = 64, 128, 4, 2, 2
    rng = np.random.default_rng(7)
    tensors = [("token_embd.weight", (vocab, D)), ("output_norm.weight", (D,))]
    for l in range(L):
        p = f"blk.{l}."
        tensors += [(p + "attn_norm.weight", (D,)), (p + "ffn_norm.weight", (D,)),
                    (p + "attn_q.weight", (D, D)), (p + "attn_k.weight", (KV * D // H, D)),
                    (p + "attn_v.weight", (KV * D // H, D)), (p + "attn_output.weight", (D, D)),
                    (p + "ffn_gate.weight", (F, D)), (p + "ffn_up.weight", (F, D)),
                    (p + "ffn_down.weight", (D, F))]
    meta = [kv_str("general.architecture", "llama"), kv_u32("general.alignment", 32),
            kv_u32("llama.context_length", 512), kv_u32("llama.embedding_length", D),
            kv_u32("llama.block_count", L), kv_u32("llama.feed_forward_length", F),
            kv_u32("llama.attention.head_count", H), kv_u32("llama.attention.head_count_kv", KV),
            kv_f32("llama.rope.freq_base", 10000.0),
            kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5),
            kv_str("tokenizer.chat_template", TEMPLATE)]
    for k, t, raw in kvs:
        if k.startswith("tokenizer.") and k != "tokenizer.chat_template":
            meta.append(s(k) + struct.pack("<I", t) + raw)
    infos, blobs, off = [], [], 0
    for name, shape in tensors:
        n = int(np.prod(shape))
        if len(shape) == 1:
            v = (1.0 + 0.1 * rng.standard_normal(n)).astype("<f4")
        else:
            v = (rng.standard_normal(n) / np.sqrt(shape[1])).astype("<f4")
        infos.append(s(name) + struct.pack("<I", len(shape)) +
                     b"".join(struct.pack("<Q", d) for d in reversed(shape)) +
                     struct.pack("<IQ", 0, off))
        data = v.tobytes()
        data += b"\0" * ((32 - len(data) % 32) % 32)
        blobs.append(data)
        off += len(data)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta)) + b"".join(meta) + b"".join(infos)
    head += b"\0" * ((32 - len(head) % 32) % 32)
    with open(path, "wb") as f:
        f.write(head)
        for d in blobs:
            f.write(d)


kvs, vocab = read_kvs(vocab_path)
assert vocab > 30000, vocab
tmp = tempfile.mkdtemp(prefix="rp_gguf_serve_")
model = os.path.join(tmp, "phi3-vocab-tiny.gguf")
write_model(model, kvs, vocab)

failures = []
question = "What is the capital of France?"
rendered = "<s><|user|>\n" + question + "<|end|>\n<|assistant|>\n"
ids = json.loads(subprocess.check_output([rapid, "tokenize", "--tokenizer", model, "--text", rendered]))
print(f"rendered prompt: {len(ids)} tokens {ids}")
if not any(i >= 32000 for i in ids):
    failures.append("the template's markers are not Phi-3 special tokens in the GGUF vocabulary")

proc = subprocess.Popen([rapid, "serve", model, "--port", "0", "--host", "127.0.0.1", "--threads", "2"],
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
log = ""
try:
    port, deadline = None, time.time() + 120
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
    body = json.dumps({"model": "phi3-vocab-tiny.gguf", "max_tokens": 8, "temperature": 0,
                       "messages": [{"role": "user", "content": question}]}).encode()
    req = urllib.request.Request(base + "/v1/chat/completions", body,
                                 {"Content-Type": "application/json"})
    r = json.load(urllib.request.urlopen(req, timeout=120))
    print(json.dumps(r, indent=1))
    ch = r["choices"][0]
    if not isinstance(ch["message"]["content"], str):
        failures.append("no string content")
    if ch.get("finish_reason") not in ("stop", "length"):
        failures.append(f"finish_reason {ch.get('finish_reason')}")
    if r["usage"]["prompt_tokens"] != len(ids):
        failures.append(f"prompt_tokens {r['usage']['prompt_tokens']}, the GGUF's tokenizer on the "
                        f"GGUF's template gives {len(ids)}")
    if not 0 < r["usage"]["completion_tokens"] <= 8:
        failures.append(f"completion_tokens {r['usage']['completion_tokens']}")
finally:
    proc.terminate()
    try:
        rest, _ = proc.communicate(timeout=20)
        log += rest or ""
    except subprocess.TimeoutExpired:
        proc.kill()
    os.unlink(model)
    os.rmdir(tmp)
if "using ChatML" in log:
    failures.append("the server fell back to ChatML instead of the GGUF's template")
if failures:
    print(log)
    sys.exit("FAIL: " + "; ".join(failures))
print("ok: the GGUF served a chat completion with its own tokenizer and template")
