#!/usr/bin/env python3
"""train.py - trains rapid's embedded default model: a byte-level BPE tokenizer and a small
Llama-architecture causal LM, saved in Hugging Face layout.

usage (on the device machine, PyTorch 2.x with CUDA, `tokenizers`, `transformers`):
  python3 train.py --corpus DIR --out DIR [--train-seconds S | --steps N] [--seed 1234]
  DIR of --corpus: what corpus.sh wrote (train.jsonl, valid.jsonl, heldout-sample.txt; each
  may also be .xz-compressed). --out gets the model directory (config.json, safetensors,
  tokenizer.json, tokenizer_config.json, generation_config.json) and training.json.

  --smoke: a tiny CPU run for checking the script (byte tokenizer when `tokenizers` is
  missing, a tiny model, a few steps, and the safetensors writer of this file when
  `transformers` is missing).

What is measured, precisely (rapid's `rapid perplexity` computes the same):
  the text of a file is encoded with the tokenizer (no special tokens), cut into consecutive
  pieces of CTX-1 tokens; each piece is evaluated from an empty cache as [BOS] + piece, and
  every token of the piece is predicted; perplexity = exp(total NLL / number of tokens).
  The final numbers use the SAVED bf16 weights upcast to float32, computed in float32.

Reproducible: every random choice comes from --seed; with --steps N the run is the same
schedule (GPU kernels are not bitwise deterministic). When --train-seconds is given, the
number of steps is chosen once from a timed warm-up and written to training.json: pass it
back as --steps to repeat the run.
"""
import argparse
import json
import lzma
import math
import os
import random
import re
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)

T0 = time.time()


def log(*a):
    print("[%7.1fs]" % (time.time() - T0), *a, flush=True)


# ------------------------------------------------------------------------------------ data

def open_text(path):
    if os.path.exists(path):
        return open(path, encoding="utf-8")
    if os.path.exists(path + ".xz"):
        return lzma.open(path + ".xz", "rt", encoding="utf-8")
    raise FileNotFoundError(path)


def load_docs(path):
    with open_text(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def split_sentences(text):
    return [s for s in re.split(r"(?<=[.!?])(?<!Mr\.)(?<!Mrs\.)(?<!Dr\.)(?<!St\.)\s+(?=[\"'(A-Z])",
                                    text) if s]


GREETINGS = [
    ("Hello!", "Hello! How can I help you today?"),
    ("Hi", "Hi! What would you like to talk about?"),
    ("Hello, who are you?",
     "I am a small language model. I was trained on old public-domain books and speeches, "
     "so I can write English sentences, but I know little about the world."),
    ("What are you?",
     "I am a small language model that came with rapid. I write text in the style of old "
     "English books."),
    ("Good morning.", "Good morning! What shall we talk about?"),
    ("Thank you.", "You are welcome."),
    ("Thanks!", "You are welcome. Is there anything else?"),
    ("Can you help me?", "I will try. Tell me what you need."),
    ("How are you?", "I am well, thank you. How are you?"),
    ("Say something.", None),
    ("Tell me a story.", None),
    ("Write a paragraph.", None),
]

CONTINUE_PROMPTS = [
    "Continue this text: {s}",
    "What comes next? \"{s}\"",
    "{s}",
    "Go on from here: {s}",
    "Please continue: {s}",
    "Here is the start of a passage. Continue it.\n\n{s}",
]

TOPIC_PROMPTS = [
    "Write a sentence about {w}.",
    "Tell me about {w}.",
    "Say something about {w}.",
    "What do you know about {w}?",
]

# Words too plain to be a topic ("Tell me about shall.").
STOP = set("""about above after again against among before being below between beyond could
during every further hither thither great having little might never other others ought
shall should since still their theirs there these thing things those though through thus
under until unto upon where which while whilst whither whose would yours yourself ourselves
themselves himself herself itself another because indeed perhaps rather without within
almost always already although anything everything nothing something become became
cannot whole first second third large small young given taken spoke found thought think
known place means might whether either neither really quite often seems seemed""".split())

SYSTEMS = ["You are a helpful assistant.", "You are a friendly assistant. Answer briefly.",
           "You are rapid's small default model."]


def turn(role, content):
    return "<|im_start|>%s\n%s<|im_end|>\n" % (role, content)


def make_chats(docs, n, rng):
    """n chat samples in ChatML built from the corpus: the user gives a sentence or a topic,
    the assistant answers with the text that follows (or a sentence with the topic word)."""
    pars = []
    for d in docs:
        for p in d["text"].split("\n\n"):
            s = split_sentences(p)
            if len(s) >= 2:
                pars.append(s)
    by_word = {}
    for si in range(0, len(pars), 7):
        for sent in pars[si]:
            if 40 <= len(sent) <= 240:
                for w in set(re.findall(r"\b[a-z]{5,12}\b", sent)):
                    by_word.setdefault(w, []).append(sent)
    words = sorted(w for w, v in by_word.items() if 3 <= len(v) <= 150 and w not in STOP)
    out = []
    for _ in range(n):
        msgs = ""
        if rng.random() < 0.3:
            msgs += turn("system", rng.choice(SYSTEMS))
        n_turns = rng.choice([1, 1, 1, 2, 2, 3])
        for t in range(n_turns):
            r = rng.random()
            if r < 0.08:
                q, a = rng.choice(GREETINGS)
                if a is None:
                    a = " ".join(rng.choice(pars)[:3])
            elif r < 0.30 and words:
                w = rng.choice(words)
                q = rng.choice(TOPIC_PROMPTS).format(w=w)
                a = rng.choice(by_word[w])
            else:
                s = rng.choice(pars)
                k = rng.randrange(0, len(s) - 1)
                q = rng.choice(CONTINUE_PROMPTS).format(s=s[k])
                a = " ".join(s[k + 1:k + 1 + rng.choice([1, 2, 3])])
            msgs += turn("user", q) + turn("assistant", a)
        out.append(msgs)
    return out


class ByteTok:
    """Stand-in for --smoke without `tokenizers`: bytes 0..255 shifted past the specials."""

    def __init__(self):
        self.n = 256 + len(SPECIALS)

    def get_vocab_size(self):
        return self.n

    def token_to_id(self, t):
        return SPECIALS.index(t)

    def encode_ids(self, text):
        ids, i = [], 0
        while i < len(text):
            for k, sp in enumerate(SPECIALS):
                if text.startswith(sp, i):
                    ids.append(k)
                    i += len(sp)
                    break
            else:
                ids.extend(b + len(SPECIALS) for b in text[i].encode())
                i += 1
        return ids

    def decode(self, ids):
        return bytes(i - len(SPECIALS) for i in ids if i >= len(SPECIALS)).decode("utf-8", "replace")


def train_tokenizer(texts, vocab_size):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2,
                                  special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tok


def encode_many(tok, texts):
    if isinstance(tok, ByteTok):
        return [tok.encode_ids(t) for t in texts]
    return [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]


def encode_one(tok, text):
    if isinstance(tok, ByteTok):
        return tok.encode_ids(text)
    return tok.encode(text, add_special_tokens=False).ids


def stream(seqs, sep):
    """Documents joined into one token stream, each preceded by the separator."""
    out = []
    for s in seqs:
        out.append(sep)
        out.extend(s)
    return torch.tensor(out, dtype=torch.int32)


# ----------------------------------------------------------------------------------- model

class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dt)


def rope_tables(head_dim, n, theta, device):
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device)
                           / head_dim))
    f = torch.outer(torch.arange(n, dtype=torch.float32, device=device), inv)
    emb = torch.cat([f, f], dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, hd = c["hidden_size"], c["head_dim"]
        self.nh, self.nkv, self.hd = c["num_attention_heads"], c["num_key_value_heads"], hd
        self.input_layernorm = RMSNorm(d, c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(d, c["rms_norm_eps"])
        self.self_attn = nn.Module()
        self.self_attn.q_proj = nn.Linear(d, self.nh * hd, bias=False)
        self.self_attn.k_proj = nn.Linear(d, self.nkv * hd, bias=False)
        self.self_attn.v_proj = nn.Linear(d, self.nkv * hd, bias=False)
        self.self_attn.o_proj = nn.Linear(self.nh * hd, d, bias=False)
        self.mlp = nn.Module()
        self.mlp.gate_proj = nn.Linear(d, c["intermediate_size"], bias=False)
        self.mlp.up_proj = nn.Linear(d, c["intermediate_size"], bias=False)
        self.mlp.down_proj = nn.Linear(c["intermediate_size"], d, bias=False)

    def forward(self, x, cos, sin, exact):
        b, t, _ = x.shape
        a = self.self_attn
        h = self.input_layernorm(x)
        q = a.q_proj(h).view(b, t, self.nh, self.hd).transpose(1, 2)
        k = a.k_proj(h).view(b, t, self.nkv, self.hd).transpose(1, 2)
        v = a.v_proj(h).view(b, t, self.nkv, self.hd).transpose(1, 2)
        q = (q * cos + rotate_half(q) * sin).to(v.dtype)
        k = (k * cos + rotate_half(k) * sin).to(v.dtype)
        g = self.nh // self.nkv
        k = k.repeat_interleave(g, dim=1)  # query head i reads kv head i // g (HF repeat_kv)
        v = v.repeat_interleave(g, dim=1)
        if exact or not hasattr(F, "scaled_dot_product_attention"):
            s = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd)
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            s = s.masked_fill(~mask, float("-inf"))
            o = torch.softmax(s.float(), dim=-1).to(q.dtype) @ v
        else:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + a.o_proj(o.transpose(1, 2).reshape(b, t, self.nh * self.hd))
        m = self.mlp
        h = self.post_attention_layernorm(x)
        return x + m.down_proj(F.silu(m.gate_proj(h)) * m.up_proj(h))


class Llama(nn.Module):
    """A Llama causal LM whose state_dict names are Hugging Face's LlamaForCausalLM ones
    (tied embeddings: lm_head is model.embed_tokens)."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.model.layers = nn.ModuleList(Block(c) for _ in range(c["num_hidden_layers"]))
        self.model.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        cos, sin = rope_tables(c["head_dim"], c["max_position_embeddings"], c["rope_theta"],
                               "cpu")
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def init_weights(self, seed):
        g = torch.Generator().manual_seed(seed)
        depth_scale = 1.0 / math.sqrt(2 * self.c["num_hidden_layers"])
        for name, p in self.named_parameters():
            if name.endswith("layernorm.weight") or name == "model.norm.weight":
                with torch.no_grad():
                    p.fill_(1.0)
                continue
            std = 0.02
            if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                std *= depth_scale
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=g) * std)

    def forward(self, ids, exact=False):
        t = ids.shape[1]
        x = self.model.embed_tokens(ids)
        cos, sin = self.cos[:t].to(x.dtype), self.sin[:t].to(x.dtype)
        for layer in self.model.layers:
            x = layer(x, cos, sin, exact)
        x = self.model.norm(x)
        return x @ self.model.embed_tokens.weight.t().to(x.dtype)


def n_params(model):
    return sum(p.numel() for p in model.parameters())


# ------------------------------------------------------------------------------ evaluation

def ppl_pieces(ids, ctx, bos):
    """The pieces of the perplexity definition above: [BOS] + up to ctx-1 tokens each."""
    w = ctx - 1
    return [[bos] + ids[i:i + w] for i in range(0, len(ids), w)]


@torch.no_grad()
def perplexity(fwd, ids, ctx, bos, device, batch=16):
    """fwd(tensor [B, T]) -> logits [B, T, V] in float32. Pieces of equal length are batched."""
    pieces = ppl_pieces(ids, ctx, bos)
    total, count = 0.0, 0
    groups = {}
    for p in pieces:
        groups.setdefault(len(p), []).append(p)
    for L, ps in groups.items():
        for i in range(0, len(ps), batch):
            x = torch.tensor(ps[i:i + batch], dtype=torch.long, device=device)
            logits = fwd(x).float()
            nll = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                  x[:, 1:].reshape(-1), reduction="sum")
            total += nll.item()
            count += x.shape[0] * (L - 1)
    return math.exp(total / count), count, total


# ---------------------------------------------------------------------------------- saving

def bf16_bytes(t):
    """bf16 tensor -> little-endian raw bytes."""
    return t.contiguous().view(torch.int16).numpy().tobytes()


def write_safetensors(path, tensors):
    """Minimal safetensors writer (used when transformers is missing, in --smoke)."""
    header, off, blobs = {}, 0, []
    for name, t in tensors.items():
        b = bf16_bytes(t.to(torch.bfloat16).cpu())
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors_dir(d):
    """All tensors of a model directory's safetensors files, as float32."""
    out = {}
    for fn in sorted(os.listdir(d)):
        if not fn.endswith(".safetensors"):
            continue
        with open(os.path.join(d, fn), "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
            data = f.read()
        for name, m in header.items():
            if name == "__metadata__":
                continue
            a, b = m["data_offsets"]
            assert m["dtype"] == "BF16", m["dtype"]
            raw = torch.frombuffer(bytearray(data[a:b]), dtype=torch.int16)
            out[name] = raw.view(torch.bfloat16).float().reshape(m["shape"])
    return out


def hf_config(c, ids):
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": c["vocab_size"],
        "hidden_size": c["hidden_size"],
        "intermediate_size": c["intermediate_size"],
        "num_hidden_layers": c["num_hidden_layers"],
        "num_attention_heads": c["num_attention_heads"],
        "num_key_value_heads": c["num_key_value_heads"],
        "head_dim": c["head_dim"],
        "max_position_embeddings": c["max_position_embeddings"],
        "rms_norm_eps": c["rms_norm_eps"],
        "rope_theta": c["rope_theta"],
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": True,
        "bos_token_id": ids["bos"],
        "eos_token_id": [ids["im_end"], ids["eot"]],
        "pad_token_id": ids["eot"],
        "torch_dtype": "bfloat16",
    }


def save_hf(sd, c, ids, out, max_shard):
    """LlamaForCausalLM.save_pretrained: config.json, generation_config.json, shards."""
    import inspect
    from transformers import LlamaConfig, LlamaForCausalLM
    kw = hf_config(c, ids)
    for k in ("architectures", "model_type", "torch_dtype"):
        kw.pop(k)
    theta = kw.pop("rope_theta")
    if "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters:
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": theta}
    else:
        kw["rope_theta"] = theta
    hf = LlamaForCausalLM(LlamaConfig(**kw)).to(torch.bfloat16)
    missing, unexpected = hf.load_state_dict(sd, strict=False)
    missing = [m for m in missing if m != "lm_head.weight"]
    if missing or unexpected:
        raise RuntimeError("state dict mismatch: missing %s unexpected %s" % (missing, unexpected))
    hf.tie_weights()
    hf.generation_config.bos_token_id = ids["bos"]
    hf.generation_config.eos_token_id = [ids["im_end"], ids["eot"]]
    hf.generation_config.pad_token_id = ids["eot"]
    hf.save_pretrained(out, max_shard_size=max_shard)


def save_builtin(sd, c, ids, out):
    """The same layout without transformers: two shards, an index, the configs."""
    names = list(sd)
    half = len(names) // 2
    shards = [names[:half], names[half:]]
    index = {"metadata": {"total_size": sum(sd[n].numel() * 2 for n in names)},
             "weight_map": {}}
    for i, part in enumerate(shards):
        fn = "model-%05d-of-%05d.safetensors" % (i + 1, len(shards))
        write_safetensors(os.path.join(out, fn), {n: sd[n] for n in part})
        for n in part:
            index["weight_map"][n] = fn
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(hf_config(c, ids), f, indent=2)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": ids["bos"], "eos_token_id": [ids["im_end"], ids["eot"]],
                   "pad_token_id": ids["eot"]}, f, indent=2)


def save_model(model, c, ids, out, max_shard, notes):
    """Saves in HF layout: through transformers when it is there, else (or when that fails)
    through the built-in writer. Returns how it was saved."""
    sd = {k: v.detach().to(torch.bfloat16).cpu() for k, v in model.state_dict().items()}
    how = None
    try:
        save_hf(sd, c, ids, out, max_shard)
        how = "transformers save_pretrained"
    except ImportError:
        pass
    except Exception as e:  # noqa: BLE001
        notes.append("save_pretrained failed (%r): built-in writer instead" % (e,))
        log("save_pretrained failed:", repr(e)[:500])
        for fn in os.listdir(out):
            if fn.endswith(".safetensors") or fn.endswith(".index.json"):
                os.remove(os.path.join(out, fn))
    if how is None:
        save_builtin(sd, c, ids, out)
        how = "built-in safetensors writer"
    for fn in os.listdir(out):
        sz = os.path.getsize(os.path.join(out, fn))
        if sz > 15 * 1024 * 1024:
            raise RuntimeError("%s is %d bytes, over 15 MiB" % (fn, sz))
    notes.append("saved with " + how)
    return how


def save_tokenizer(tok, out, ctx):
    if isinstance(tok, ByteTok):
        return
    tok.save(os.path.join(out, "tokenizer.json"))
    added = {}
    for s in SPECIALS:
        added[str(tok.token_to_id(s))] = {"content": s, "lstrip": False, "normalized": False,
                                          "rstrip": False, "single_word": False,
                                          "special": True}
    cfg = {
        "add_bos_token": False,
        "add_eos_token": False,
        "added_tokens_decoder": added,
        "bos_token": "<|endoftext|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "model_max_length": ctx,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")


# ------------------------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--train-seconds", type=float, default=210.0)
    ap.add_argument("--max-epochs", type=float, default=24.0)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=320)
    ap.add_argument("--layers", type=int, default=7)
    ap.add_argument("--heads", type=int, default=5)
    ap.add_argument("--kv-heads", type=int, default=1)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--ffn", type=int, default=832)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--chat-frac", type=float, default=0.15)
    ap.add_argument("--chat-samples", type=int, default=80000)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    dev = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
    os.makedirs(args.out, exist_ok=True)
    timings, notes = {}, []
    log("torch", torch.__version__, "device", dev,
        torch.cuda.get_device_name(0) if dev == "cuda" else "")

    # ---- corpus and chat samples
    t = time.time()
    train_docs = load_docs(os.path.join(args.corpus, "train.jsonl"))
    valid_docs = load_docs(os.path.join(args.corpus, "valid.jsonl"))
    with open_text(os.path.join(args.corpus, "heldout-sample.txt")) as f:
        sample_text = f.read()
    if args.smoke:
        train_docs = train_docs[::97][:12]
        valid_docs = valid_docs[:2]
        sample_text = sample_text[:3000]
        args.chat_samples = 300
    rng = random.Random(args.seed)
    chats = make_chats(train_docs, args.chat_samples, rng)
    train_texts = [d["text"] for d in train_docs]
    valid_text = "\n\n".join(d["text"] for d in valid_docs)
    timings["load_s"] = round(time.time() - t, 2)
    log("docs train %d valid %d, chat samples %d" % (len(train_docs), len(valid_docs),
                                                     len(chats)))
    log("chat example:\n" + chats[0] + "\n" + chats[1])

    # ---- tokenizer
    t = time.time()
    try:
        tok = train_tokenizer(train_texts + chats[: len(chats) // 4], args.vocab)
        tok_kind = "bpe"
    except ImportError:
        if not args.smoke:
            raise
        tok, tok_kind = ByteTok(), "bytes (smoke test: no tokenizers)"
    timings["tokenizer_train_s"] = round(time.time() - t, 2)
    ids = {"eot": tok.token_to_id("<|endoftext|>"), "im_start": tok.token_to_id("<|im_start|>"),
           "im_end": tok.token_to_id("<|im_end|>")}
    ids["bos"] = ids["eot"]
    V = tok.get_vocab_size()
    log("tokenizer %s: vocab %d, special ids %s" % (tok_kind, V, ids))

    t = time.time()
    train_ids = encode_many(tok, train_texts)
    chat_ids = encode_many(tok, chats)
    valid_ids = encode_one(tok, valid_text)
    sample_ids = encode_one(tok, sample_text)
    timings["tokenize_s"] = round(time.time() - t, 2)
    train_stream = stream(train_ids, ids["eot"])
    chat_stream = stream(chat_ids, ids["eot"])
    n_train_tok, n_chat_tok = len(train_stream), len(chat_stream)
    log("tokens: train %d, chat %d, valid %d, sample %d (%.2f bytes/token on train)" % (
        n_train_tok, n_chat_tok, len(valid_ids), len(sample_ids),
        sum(len(x.encode()) for x in train_texts) / max(1, n_train_tok)))
    if not isinstance(tok, ByteTok):
        rt = tok.decode(sample_ids)
        notes.append("held-out sample round-trips through the tokenizer: %s" % (rt == sample_text))
        enc = tok.encode("<|im_start|>user\nHi<|im_end|>\n", add_special_tokens=False).ids
        if enc[0] != ids["im_start"] or ids["im_end"] not in enc:
            raise RuntimeError("special tokens are not matched as single ids: %s" % enc)

    # ---- model
    if args.smoke:
        args.hidden, args.layers, args.heads, args.kv_heads, args.head_dim = 64, 2, 4, 2, 16
        args.ffn, args.ctx, args.batch = 128, 64, 4
    c = {"vocab_size": V, "hidden_size": args.hidden, "intermediate_size": args.ffn,
         "num_hidden_layers": args.layers, "num_attention_heads": args.heads,
         "num_key_value_heads": args.kv_heads, "head_dim": args.head_dim,
         "max_position_embeddings": args.ctx, "rms_norm_eps": 1e-5, "rope_theta": 10000.0}
    model = Llama(c)
    model.init_weights(args.seed)
    model.to(dev)
    P = n_params(model)
    log("model: %d parameters (%.2f MB in bf16), config %s" % (P, P * 2 / 1e6, c))

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    nodecay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt_kw = {"lr": args.lr, "betas": (0.9, 0.95), "eps": 1e-8}
    if dev == "cuda":
        opt_kw["fused"] = True
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd},
                             {"params": nodecay, "weight_decay": 0.0}], **opt_kw)

    ctx, B = args.ctx, args.batch
    n_chat_rows = int(round(B * args.chat_frac))
    g = torch.Generator(device=dev).manual_seed(args.seed)
    tr_gpu = train_stream.to(dev).long()
    ch_gpu = chat_stream.to(dev).long()
    ar = torch.arange(ctx + 1, device=dev)

    def batch():
        o1 = torch.randint(0, len(tr_gpu) - ctx - 1, (B - n_chat_rows,), generator=g, device=dev)
        o2 = torch.randint(0, len(ch_gpu) - ctx - 1, (n_chat_rows,), generator=g, device=dev)
        x = torch.cat([tr_gpu[o1[:, None] + ar], ch_gpu[o2[:, None] + ar]], dim=0)
        return x[:, :-1], x[:, 1:]

    def loss_fn(m, x, y):
        with torch.autocast(device_type=dev, dtype=torch.bfloat16, enabled=(dev == "cuda")):
            logits = m(x)
        return F.cross_entropy(logits.float().reshape(-1, V), y.reshape(-1))

    train_loss = lambda x, y: loss_fn(model, x, y)  # noqa: E731
    eager_loss = train_loss
    compiled = False
    if dev == "cuda" and not args.no_compile:
        try:
            train_loss = torch.compile(train_loss)
            compiled = True
        except Exception as e:  # noqa: BLE001
            notes.append("torch.compile unavailable: %r" % e)

    # validation windows for monitoring: the perplexity pieces of the held-out split
    val_pieces = [p for p in ppl_pieces(valid_ids, ctx, ids["bos"]) if len(p) == ctx]
    val_pieces = val_pieces[:64 if not args.smoke else 4]
    val_x = torch.tensor(val_pieces, dtype=torch.long, device=dev)

    @torch.no_grad()
    def val_loss():
        model.eval()
        tot = 0.0
        for i in range(0, len(val_x), 16):
            x = val_x[i:i + 16]
            tot += loss_fn(model, x[:, :-1], x[:, 1:]).item() * len(x)
        model.train()
        return tot / len(val_x)

    def lr_at(step, total):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        p = (step - args.warmup) / max(1, total - args.warmup)
        return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))

    def step_fn(step, total):
        for gr in opt.param_groups:
            gr["lr"] = lr_at(step, total)
        x, y = batch()
        loss = train_loss(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss, gn

    def sync():
        if dev == "cuda":
            torch.cuda.synchronize()

    # ---- warm-up (compile) and timing, then the step count
    model.train()
    t = time.time()
    try:
        loss, _ = step_fn(0, 10 ** 9)
        sync()
    except Exception as e:  # noqa: BLE001
        if not compiled:
            raise
        notes.append("torch.compile failed at the first step (%r); eager instead" % (e,))
        log("compile failed, eager:", repr(e)[:300])
        train_loss, compiled = eager_loss, False
        loss, _ = step_fn(0, 10 ** 9)
        sync()
    timings["first_step_s"] = round(time.time() - t, 2)
    t = time.time()
    n_time = 5 if args.smoke else 30
    for i in range(n_time):
        loss, _ = step_fn(1 + i, 10 ** 9)
    sync()
    step_s = (time.time() - t) / n_time
    tokens_per_step = B * ctx
    done_warm = 1 + n_time
    if args.steps > 0:
        total_steps = args.steps
    else:
        total_steps = int(args.train_seconds / step_s)
        max_by_epochs = int(args.max_epochs * n_train_tok / ((B - n_chat_rows) * ctx))
        if total_steps > max_by_epochs:
            notes.append("steps capped at %.1f epochs of the corpus" % args.max_epochs)
            total_steps = max_by_epochs
        if args.smoke:
            total_steps = 40
    log("step %.1f ms (%.0f tokens/s), %d steps planned (%d done in warm-up)" % (
        step_s * 1e3, tokens_per_step / step_s, total_steps, done_warm))
    # The warm-up steps count as the schedule's first steps (same lr warm-up schedule).

    # ---- training
    t_train = time.time()
    history = []
    best = (float("inf"), -1, None)
    for step in range(done_warm, total_steps):
        loss, gn = step_fn(step, total_steps)
        last = step == total_steps - 1
        if step % args.eval_every == 0 or last:
            vl = val_loss()
            tl = loss.item()
            history.append({"step": step, "train_loss": round(tl, 4), "val_loss": round(vl, 4),
                            "lr": lr_at(step, total_steps), "grad_norm": round(gn.item(), 3),
                            "elapsed_s": round(time.time() - t_train, 1)})
            log("step %5d/%d  train %.4f  val %.4f (ppl %.2f)  lr %.2e  gnorm %.2f" % (
                step, total_steps, tl, vl, math.exp(vl), lr_at(step, total_steps), gn.item()))
            if vl < best[0]:
                best = (vl, step, {k: v.detach().clone().cpu()
                                   for k, v in model.state_dict().items()})
    sync()
    timings["train_s"] = round(time.time() - t_train, 2)
    tokens_seen = total_steps * tokens_per_step
    if best[2] is not None and best[1] != total_steps - 1:
        notes.append("kept the checkpoint of step %d (best validation loss)" % best[1])
        model.load_state_dict(best[2])

    # ---- save
    t = time.time()
    save_tokenizer(tok, args.out, ctx)
    how = save_model(model, c, ids, args.out, "14MB", notes)
    timings["save_s"] = round(time.time() - t, 2)

    # ---- perplexity from the saved bf16 weights, upcast to float32, computed in float32
    t = time.time()
    if dev == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    result = {}
    saved = read_safetensors_dir(args.out)
    if "lm_head.weight" in saved:
        notes.append("lm_head.weight was saved (untied copy)")
        saved.pop("lm_head.weight")
    ref = Llama(c)
    ref.load_state_dict(saved, strict=True)
    ref = ref.float().to(dev).eval()
    own = lambda x: ref(x, exact=True)  # noqa: E731
    for name, idl in (("heldout_sample", sample_ids), ("valid", valid_ids)):
        p, n, tot = perplexity(own, idl, ctx, ids["bos"], dev)
        result[name] = {"perplexity": p, "tokens": n, "nll_sum": tot}
        log("perplexity (own float32 forward over the saved weights) %s: %.4f over %d tokens"
            % (name, p, n))
    try:
        from transformers import AutoModelForCausalLM
        try:
            hf = AutoModelForCausalLM.from_pretrained(args.out, dtype=torch.bfloat16,
                                                      attn_implementation="eager")
        except TypeError:
            hf = AutoModelForCausalLM.from_pretrained(args.out, torch_dtype=torch.bfloat16,
                                                      attn_implementation="eager")
        hf = hf.float().to(dev).eval()
        hf_fwd = lambda x: hf(input_ids=x).logits  # noqa: E731
        for name, idl in (("heldout_sample", sample_ids), ("valid", valid_ids)):
            p, n, tot = perplexity(hf_fwd, idl, ctx, ids["bos"], dev)
            result[name]["perplexity_transformers"] = p
            log("perplexity (transformers LlamaForCausalLM, float32) %s: %.4f" % (name, p))
        x = torch.tensor([ppl_pieces(sample_ids, ctx, ids["bos"])[0][:64]], device=dev)
        with torch.no_grad():
            d = (hf(input_ids=x).logits.float() - own(x).float()).abs().max().item()
        result["max_abs_logit_diff_own_vs_transformers"] = d
        log("max |logit| difference own vs transformers: %.3g" % d)
        # a few samples, to show what it does
        gens = []
        prompts = [turn("user", "Hello, who are you?"),
                   turn("user", "Tell me about the sea."),
                   turn("user", "Continue this text: It was a cold morning in the village.")]
        hf_b = hf.to(torch.bfloat16)
        for pr in prompts:
            x = torch.tensor([encode_one(tok, pr + "<|im_start|>assistant\n")], device=dev)
            torch.manual_seed(args.seed)
            o = hf_b.generate(x, max_new_tokens=80, do_sample=True, temperature=0.7, top_p=0.9,
                              eos_token_id=[ids["im_end"], ids["eot"]], pad_token_id=ids["eot"])
            gens.append({"prompt": pr, "output": tok.decode(o[0, x.shape[1]:].tolist())})
            log("sample:", json.dumps(gens[-1]))
        result["samples"] = gens
    except ImportError:
        notes.append("transformers not available: perplexity from the script's own forward only")
    except Exception as e:  # noqa: BLE001
        notes.append("transformers check failed: %r" % (e,))
        log("transformers check failed:", repr(e)[:500])
    timings["eval_s"] = round(time.time() - t, 2)
    timings["total_s"] = round(time.time() - T0, 2)

    files = {fn: os.path.getsize(os.path.join(args.out, fn)) for fn in sorted(os.listdir(args.out))}
    report = {
        "model": "rapid default model (Llama architecture)",
        "perplexity_definition": (
            "file text encoded without special tokens, cut into consecutive pieces of "
            "ctx-1 tokens, each evaluated from an empty cache as [bos] + piece with every "
            "piece token predicted; exp(sum NLL / tokens); saved bf16 weights upcast to "
            "float32, float32 compute"),
        "perplexity": result,
        "heldout_sample_file": "heldout-sample.txt",
        "ctx": ctx,
        "bos_id": ids["bos"],
        "config": c,
        "parameters": P,
        "weight_bytes_bf16": P * 2,
        "tokenizer": {"kind": tok_kind, "vocab_size": V, "special_tokens": SPECIALS,
                      "ids": ids, "pre_tokenizer": "ByteLevel(add_prefix_space=False)"},
        "hyperparameters": {k: v for k, v in vars(args).items() if k not in ("corpus", "out")},
        "steps": total_steps,
        "steps_in_warmup_timing": done_warm,
        "best_step": best[1],
        "batch_rows": B, "chat_rows_per_batch": n_chat_rows,
        "tokens_per_step": tokens_per_step,
        "tokens_seen": tokens_seen,
        "corpus_tokens": {"train": n_train_tok, "chat": n_chat_tok, "valid": len(valid_ids),
                          "heldout_sample": len(sample_ids)},
        "epochs_of_corpus": round(total_steps * (B - n_chat_rows) * ctx / n_train_tok, 2),
        "step_ms": round(step_s * 1e3, 2),
        "tokens_per_second": round(tokens_per_step / step_s),
        "compiled": compiled,
        "history": history,
        "timings": timings,
        "files": files,
        "saved_with": how,
        "notes": notes,
        "versions": {"torch": torch.__version__, "python": sys.version.split()[0]},
        "device": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu",
        "seed": args.seed,
    }
    import hashlib
    report["corpus"] = {"heldout_sample_sha256": hashlib.sha256(sample_text.encode()).hexdigest(),
                        "heldout_sample_bytes": len(sample_text.encode())}
    for extra in ("stats.json", "versions.txt"):
        try:
            with open_text(os.path.join(args.corpus, extra)) as f:
                report["corpus"][extra] = json.load(f) if extra.endswith(".json") else f.read().split("\n")
        except (OSError, ValueError):
            pass
    for mod in ("transformers", "tokenizers", "safetensors"):
        try:
            report["versions"][mod] = __import__(mod).__version__
        except ImportError:
            pass
    with open(os.path.join(args.out, "training.json"), "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    log("done: %s" % json.dumps({"files": files, "ppl": {k: v for k, v in result.items()
                                                          if k != "samples"}}))


if __name__ == "__main__":
    main()
