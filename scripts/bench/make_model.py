#!/usr/bin/env python3
"""Writes a random-weight Llama checkpoint of a given shape (bf16 or f32 safetensors) for
benchmarks. Not a test fixture: weights are random, only the shapes and bytes matter.

usage: make_model.py OUT_DIR [--shape llama-3.2-1b|llama-3-8b|tiny] [--dtype bf16|f16|f32|mlx4|mlx8]
                     [--group-size 64]
The llama-3.2-1b shape: dim 2048, 16 layers, 32 heads / 8 KV heads, ffn 8192,
vocab 128256, untied output (1.5 B parameters, 3.0 GB in bf16). The llama-3-8b shape: dim
4096, 32 layers, 32 / 8 heads, ffn 14336, vocab 128256, untied (8.0 B parameters, 16.1 GB
in bf16). When torch with a GPU is importable the weights are drawn on the GPU (seconds
for the 8B shape instead of minutes); either way they are N(0, 1/cols) random.
--dtype mlx4 / mlx8 (torch with a GPU only) draws the bf16 weights the same way and writes
every 2-D weight MLX-quantized as `rapid quantize --bits 4|8 --group-size G` would from that
bf16 checkpoint (rp_quant_mlx_row with bf16-rounded scale and bias, U32 words + BF16 scales
and biases), in seconds on the GPU instead of minutes on one CPU core.
"""
import json, os, struct, sys
import numpy as np

SHAPES = {
    "llama-3.2-1b": dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
                         num_key_value_heads=8, intermediate_size=8192, vocab_size=128256),
    "llama-3-8b": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                       num_key_value_heads=8, intermediate_size=14336, vocab_size=128256),
    "tiny": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=8,
                 num_key_value_heads=2, intermediate_size=768, vocab_size=4096),
}

def main():
    out = sys.argv[1]
    shape = "llama-3.2-1b"
    dtype = "bf16"
    args = sys.argv[2:]
    gs = 64
    for i, a in enumerate(args):
        if a == "--shape": shape = args[i + 1]
        if a == "--dtype": dtype = args[i + 1]
        if a == "--group-size": gs = int(args[i + 1])
    if dtype in ("mlx4", "mlx8"):
        return main_mlx(out, SHAPES[shape], int(dtype[3:]), gs)
    c = SHAPES[shape]
    tensors = layout(c)
    esize = 4 if dtype == "f32" else 2
    st_dtype = {"bf16": "BF16", "f16": "F16", "f32": "F32"}[dtype]
    header, off = {}, 0
    for name, shp in tensors:
        n = int(np.prod(shp)) * (4 if len(shp) == 1 else esize)
        header[name] = {"dtype": "F32" if len(shp) == 1 else st_dtype, "shape": list(shp),
                        "data_offsets": [off, off + n]}
        off += n
    hs = json.dumps(header).encode()
    hs += b" " * ((8 - len(hs) % 8) % 8)
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    try:
        import torch
        gen = torch.Generator(device="cuda").manual_seed(0) if torch.cuda.is_available() else None
    except ImportError:
        gen = None
    with open(os.path.join(out, "model.safetensors"), "wb") as fp:
        fp.write(struct.pack("<Q", len(hs)))
        fp.write(hs)
        for name, shp in tensors:
            if len(shp) == 1:
                fp.write(np.ones(shp, dtype="<f4").tobytes())
                continue
            scale = 1.0 / np.sqrt(shp[1])
            rows_per = max(1, (1 << 24) // shp[1])
            if gen is not None:
                tdt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dtype]
                view = {"bf16": torch.int16, "f16": torch.int16, "f32": torch.int32}[dtype]
                for r in range(0, shp[0], rows_per * 16):
                    n = min(rows_per * 16, shp[0] - r)
                    x = torch.randn((n, shp[1]), generator=gen, device="cuda", dtype=torch.float32)
                    fp.write((x * scale).to(tdt).view(view).cpu().numpy())
                continue
            for r in range(0, shp[0], rows_per):
                x = (rng.standard_normal((min(rows_per, shp[0] - r), shp[1]), dtype=np.float32) * scale)
                if dtype == "f32":
                    fp.write(x.astype("<f4").tobytes())
                elif dtype == "f16":
                    fp.write(x.astype("<f2").tobytes())
                else:
                    fp.write((x.view(np.uint32) >> 16).astype("<u2").tobytes())
    cfg = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu",
               max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=500000.0,
               tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, **c)
    with open(os.path.join(out, "config.json"), "w") as fp:
        json.dump(cfg, fp, indent=2)
    print(out, off / 1e9, "GB")

def layout(c):
    d, f, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    hd = d // c["num_attention_heads"]
    qd, kvd = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    tensors = [("model.embed_tokens.weight", (v, d)), ("model.norm.weight", (d,)),
               ("lm_head.weight", (v, d))]
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        tensors += [(p + "input_layernorm.weight", (d,)), (p + "post_attention_layernorm.weight", (d,)),
                    (p + "self_attn.q_proj.weight", (qd, d)), (p + "self_attn.k_proj.weight", (kvd, d)),
                    (p + "self_attn.v_proj.weight", (kvd, d)), (p + "self_attn.o_proj.weight", (d, qd)),
                    (p + "mlp.gate_proj.weight", (f, d)), (p + "mlp.up_proj.weight", (f, d)),
                    (p + "mlp.down_proj.weight", (d, f))]
    return tensors

def mlx_quant(x, bits, gs):
    """x: [n, cols] float32 (bf16 values) on the GPU -> (packed int32 [n, cols*bits/32],
    scales bf16, biases bf16 [n, cols/gs]), as rp_quant_mlx_row(round_bf16=1)."""
    import torch
    n, cols = x.shape
    top = float((1 << bits) - 1)
    xg = x.view(n, cols // gs, gs)
    mn, mx = xg.amin(dim=2), xg.amax(dim=2)
    s = torch.clamp((mx - mn) / top, min=1e-7)
    edge = torch.where(mn.abs() > mx.abs(), mn, mx)
    s = torch.where(edge == mx, -s, s)
    q0 = torch.round(edge / s)
    nz = q0 != 0
    s = torch.where(nz, edge / torch.where(nz, q0, torch.ones_like(q0)), s)
    bias = torch.where(nz, edge, torch.zeros_like(edge))
    s = s.to(torch.bfloat16).float()
    bias = bias.to(torch.bfloat16).float()
    q = torch.clamp(torch.round((xg - bias[:, :, None]) / s[:, :, None]), 0, top).to(torch.int64)
    per = 32 // bits
    q = q.view(n, cols // per, per)
    shifts = (torch.arange(per, device=x.device, dtype=torch.int64) * bits)
    words = (q << shifts).sum(dim=2)
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    return words, s.to(torch.bfloat16), bias.to(torch.bfloat16)

def main_mlx(out, c, bits, gs):
    import torch
    assert torch.cuda.is_available(), "--dtype mlx4/mlx8 draws and quantizes on the GPU"
    gen = torch.Generator(device="cuda").manual_seed(0)
    header, off, plan = {}, 0, []
    for name, shp in layout(c):
        if len(shp) == 1:
            n = shp[0] * 4
            header[name] = {"dtype": "F32", "shape": list(shp), "data_offsets": [off, off + n]}
            off += n
            plan.append((name, shp, None))
            continue
        base = name[: -len(".weight")]
        rows, cols = shp
        for suffix, dt, c1, es in ((".weight", "U32", cols * bits // 32, 4),
                                   (".scales", "BF16", cols // gs, 2),
                                   (".biases", "BF16", cols // gs, 2)):
            n = rows * c1 * es
            header[base + suffix] = {"dtype": dt, "shape": [rows, c1], "data_offsets": [off, off + n]}
            off += n
        plan.append((name, shp, base))
    hs = json.dumps(header).encode()
    hs += b" " * ((8 - len(hs) % 8) % 8)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "model.safetensors"), "wb") as fp:
        fp.write(struct.pack("<Q", len(hs)))
        fp.write(hs)
        for name, shp, base in plan:
            if base is None:
                fp.write(np.ones(shp, dtype="<f4").tobytes())
                continue
            rows, cols = shp
            scale = 1.0 / np.sqrt(cols)
            step = max(1, (1 << 26) // cols)
            parts = ([], [], [])
            for r in range(0, rows, step):
                n = min(step, rows - r)
                x = torch.randn((n, cols), generator=gen, device="cuda", dtype=torch.float32)
                x = (x * scale).to(torch.bfloat16).float()
                w, s, b = mlx_quant(x, bits, gs)
                parts[0].append(w.cpu().numpy())
                parts[1].append(s.view(torch.int16).cpu().numpy())
                parts[2].append(b.view(torch.int16).cpu().numpy())
            for p in parts:  # weight, then scales, then biases (the header's order)
                for a in p:
                    fp.write(a.tobytes())
    cfg = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu",
               max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=500000.0,
               tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
               quantization={"group_size": gs, "bits": bits},
               quantization_config={"group_size": gs, "bits": bits}, **c)
    with open(os.path.join(out, "config.json"), "w") as fp:
        json.dump(cfg, fp, indent=2)
    print(out, off / 1e9, "GB")

main()
