#!/usr/bin/python3
"""Writes a tiny random-weight Llama (hidden 64, 2 layers) for the server's integration tests.

usage: make_tiny_model.py OUT_DIR QWEN3_TOKENIZER_MODELS_DIR

config.json + model.safetensors (bf16, written by hand: 8-byte little-endian header length,
JSON header, raw tensor bytes) + generation_config.json, and the Qwen3 tokenizer.json with a
tokenizer_config.json whose chat_template is plain ChatML (with a tools section), so the
vocabulary matches the tokenizer. Deterministic (fixed seed); nothing here is committed.
"""
import json
import os
import shutil
import struct
import sys

import numpy as np

HIDDEN, LAYERS, HEADS, KV_HEADS, FFN, CTX = 64, 2, 4, 2, 128, 512
HEAD_DIM = HIDDEN // HEADS

CHATML = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n' }}{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if message.role != 'system' %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content }}"
    "{%- for call in message.tool_calls or [] %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + call.function.name + '\", \"arguments\": ' }}"
    "{{- call.function.arguments | tojson }}{{- '}\\n</tool_call>' }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def bf16(a):
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def main():
    out, tokdir = sys.argv[1], sys.argv[2]
    tmp = "%s.tmp%d" % (out, os.getpid())  # parallel test jobs may generate it at once
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    tok_cfg = json.load(open(os.path.join(tokdir, "tokenizer_config.json")))
    tok = json.load(open(os.path.join(tokdir, "tokenizer.json")))
    vocab = max([len(tok["model"]["vocab"])] + [t["id"] + 1 for t in tok["added_tokens"]])
    eos = next(t["id"] for t in tok["added_tokens"] if t["content"] == "<|im_end|>")
    rng = np.random.default_rng(1234)
    tensors = {"model.embed_tokens.weight": rng.normal(0, 0.5, (vocab, HIDDEN))}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        tensors[p + "input_layernorm.weight"] = 1 + rng.normal(0, 0.1, HIDDEN)
        tensors[p + "post_attention_layernorm.weight"] = 1 + rng.normal(0, 0.1, HIDDEN)
        tensors[p + "self_attn.q_proj.weight"] = rng.normal(0, 0.1, (HEADS * HEAD_DIM, HIDDEN))
        tensors[p + "self_attn.k_proj.weight"] = rng.normal(0, 0.1, (KV_HEADS * HEAD_DIM, HIDDEN))
        tensors[p + "self_attn.v_proj.weight"] = rng.normal(0, 0.1, (KV_HEADS * HEAD_DIM, HIDDEN))
        tensors[p + "self_attn.o_proj.weight"] = rng.normal(0, 0.1, (HIDDEN, HEADS * HEAD_DIM))
        tensors[p + "mlp.gate_proj.weight"] = rng.normal(0, 0.1, (FFN, HIDDEN))
        tensors[p + "mlp.up_proj.weight"] = rng.normal(0, 0.1, (FFN, HIDDEN))
        tensors[p + "mlp.down_proj.weight"] = rng.normal(0, 0.1, (HIDDEN, FFN))
    tensors["model.norm.weight"] = 1 + rng.normal(0, 0.1, HIDDEN)

    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, a in tensors.items():
        data = bf16(a).tobytes()
        header[name] = {"dtype": "BF16", "shape": list(a.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    hjson = json.dumps(header).encode()
    hjson += b" " * ((8 - len(hjson) % 8) % 8)
    with open(os.path.join(tmp, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)

    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": HIDDEN, "intermediate_size": FFN, "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
        "max_position_embeddings": CTX, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "vocab_size": vocab, "tie_word_embeddings": True, "hidden_act": "silu",
        "torch_dtype": "bfloat16", "bos_token_id": None, "eos_token_id": eos,
    }
    json.dump(config, open(os.path.join(tmp, "config.json"), "w"), indent=1)
    json.dump({"eos_token_id": [eos]}, open(os.path.join(tmp, "generation_config.json"), "w"))
    tok_cfg["chat_template"] = CHATML
    tok_cfg["model_max_length"] = CTX
    json.dump(tok_cfg, open(os.path.join(tmp, "tokenizer_config.json"), "w"), ensure_ascii=False)
    shutil.copy(os.path.join(tokdir, "tokenizer.json"), os.path.join(tmp, "tokenizer.json"))
    try:
        os.rename(tmp, out)
    except OSError:  # another job finished first: keep its copy
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
