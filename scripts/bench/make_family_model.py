#!/usr/bin/env python3
"""Writes a random-weight checkpoint shaped like a model family's flagship, for benchmarks.
Not a fixture: only the shapes and bytes matter. Weights are one random block tiled (fast to
write); the router of the MoE shape still spreads tokens over experts.

usage: make_family_model.py OUT_DIR --shape qwen3.5-4b|qwen3-30b-a3b [--layers N]
                            [--dtype bf16|f32|mlx4|mlx8] [--group-size 64]
  qwen3.5-4b     Qwen3_5ForCausalLM: hidden 2560, 32 layers (3 Gated DeltaNet : 1 gated
                 attention), 16 q / 4 kv heads of 256, DeltaNet 16 k / 32 v heads of 128,
                 ffn 9216, vocab 248320, tied embeddings.
  qwen3-30b-a3b  Qwen3MoeForCausalLM: hidden 2048, 48 layers, 32 q / 4 kv heads of 128,
                 128 experts (top 8) of 768, vocab 151936, untied.
--layers keeps the per-layer shapes and cuts the layer count (the full models do not fit this
machine's memory in bf16). mlx4 / mlx8 write an MLX-quantized checkpoint as mlx_lm.convert -q
lays it out (every 2-D weight, embedding and lm_head included, as packed U32 words with BF16
scales and biases per group; the MoE's experts stacked per projection in
mlp.switch_mlp.{gate,up,down}_proj [E][out][in]): random packed words and scales are written
directly, nothing is materialised in f32, so the full-size models take a few minutes. Prints a JSON line with the bytes one decode step reads: every
weight but the embedding table (one row), the tied lm_head once, and of the experts only the
top-k active ones (k / n_experts of the expert bytes).
"""
import json, os, struct, sys
import numpy as np

SHAPES = {
    "qwen3.5-4b": dict(architectures=["Qwen3_5ForCausalLM"], model_type="qwen3_5_text",
                       hidden_size=2560, num_hidden_layers=32, num_attention_heads=16,
                       num_key_value_heads=4, head_dim=256, intermediate_size=9216,
                       vocab_size=248320, linear_num_key_heads=16, linear_num_value_heads=32,
                       linear_key_head_dim=128, linear_value_head_dim=128,
                       linear_conv_kernel_dim=4, full_attention_interval=4,
                       tie_word_embeddings=True, partial_rotary_factor=0.25,
                       rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                                        "partial_rotary_factor": 0.25}),
    "qwen3-30b-a3b": dict(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
                          hidden_size=2048, num_hidden_layers=48, num_attention_heads=32,
                          num_key_value_heads=4, head_dim=128, intermediate_size=6144,
                          moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8,
                          norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                          vocab_size=151936, tie_word_embeddings=False,
                          rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
}


def tensors_of(c):
    d, v = c["hidden_size"], c["vocab_size"]
    hd, H, KH = c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
    out = [("model.embed_tokens.weight", (v, d), "embed"), ("model.norm.weight", (d,), "w")]
    if not c["tie_word_embeddings"]:
        out.append(("lm_head.weight", (v, d), "w"))
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        out += [(p + "input_layernorm.weight", (d,), "w"),
                (p + "post_attention_layernorm.weight", (d,), "w")]
        linear = c["model_type"] == "qwen3_5_text" and (l + 1) % c["full_attention_interval"] != 0
        if linear:
            nk, nv = c["linear_num_key_heads"], c["linear_num_value_heads"]
            dk, dv, K = c["linear_key_head_dim"], c["linear_value_head_dim"], c["linear_conv_kernel_dim"]
            cd = 2 * nk * dk + nv * dv
            q = p + "linear_attn."
            out += [(q + "in_proj_qkv.weight", (cd, d), "w"), (q + "in_proj_z.weight", (nv * dv, d), "w"),
                    (q + "in_proj_b.weight", (nv, d), "w"), (q + "in_proj_a.weight", (nv, d), "w"),
                    (q + "out_proj.weight", (d, nv * dv), "w"), (q + "norm.weight", (dv,), "w"),
                    (q + "A_log", (nv,), "w"), (q + "dt_bias", (nv,), "w"),
                    (q + "conv1d.weight", (cd, 1, K), "w")]
        else:
            qrows = H * hd * (2 if c["model_type"] == "qwen3_5_text" else 1)
            q = p + "self_attn."
            out += [(q + "q_proj.weight", (qrows, d), "w"), (q + "k_proj.weight", (KH * hd, d), "w"),
                    (q + "v_proj.weight", (KH * hd, d), "w"), (q + "o_proj.weight", (d, H * hd), "w"),
                    (q + "q_norm.weight", (hd,), "w"), (q + "k_norm.weight", (hd,), "w")]
        if c["model_type"] == "qwen3_moe":
            E, f = c["num_experts"], c["moe_intermediate_size"]
            out.append((p + "mlp.gate.weight", (E, d), "w"))
            if c.get("_stacked"):
                q = p + "mlp.switch_mlp."
                out += [(q + "gate_proj.weight", (E, f, d), "expert"), (q + "up_proj.weight", (E, f, d), "expert"),
                        (q + "down_proj.weight", (E, d, f), "expert")]
                continue
            for e in range(E):
                q = p + f"mlp.experts.{e}."
                out += [(q + "gate_proj.weight", (f, d), "expert"), (q + "up_proj.weight", (f, d), "expert"),
                        (q + "down_proj.weight", (d, f), "expert")]
        else:
            f = c["intermediate_size"]
            out += [(p + "mlp.gate_proj.weight", (f, d), "w"), (p + "mlp.up_proj.weight", (f, d), "w"),
                    (p + "mlp.down_proj.weight", (d, f), "w")]
    return out


def write_float(out, c, ts, dtype):
    esize = 4 if dtype == "f32" else 2
    header, off = {}, 0
    read = {"embed_row": 0, "w": 0, "expert": 0}
    for name, shp, kind in ts:
        big = len(shp) == 2
        n = int(np.prod(shp)) * (esize if big else 4)
        header[name] = {"dtype": ("BF16" if dtype == "bf16" else "F32") if big else "F32",
                        "shape": list(shp), "data_offsets": [off, off + n]}
        off += n
        if kind == "embed":
            read["embed_row"] += n // shp[0]
            if c["tie_word_embeddings"]:
                read["w"] += n
        else:
            read[kind] += n
    hs = json.dumps(header).encode()
    hs += b" " * ((8 - len(hs) % 8) % 8)
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    block = rng.standard_normal(1 << 22, dtype=np.float32) * 0.02
    block_b = (block.view(np.uint32) >> 16).astype("<u2").tobytes() if dtype == "bf16" else block.astype("<f4").tobytes()
    with open(os.path.join(out, "model.safetensors"), "wb") as fp:
        fp.write(struct.pack("<Q", len(hs)))
        fp.write(hs)
        for name, shp, kind in ts:
            if len(shp) != 2:
                fp.write(small_tensor(rng, name, shp))
                continue
            tile(fp, block_b, int(np.prod(shp)) * esize)
    return off, read


def small_tensor(rng, name, shp):
    n = int(np.prod(shp))
    v = np.zeros(n, "<f4") if ("norm" in name or "A_log" in name or "dt_bias" in name) \
        else (rng.standard_normal(n, dtype=np.float32) * 0.2).astype("<f4")
    return v.tobytes()


def tile(fp, block, n):
    while n > 0:
        k = min(n, len(block))
        fp.write(block[:k])
        n -= k


def write_mlx(out, c, ts, bits, gs):
    """Packed U32 weights + BF16 scales/biases (w = s * q + b, b = -s * (2^bits - 1) / 2, so
    the weights are centred with a std near 0.02)."""
    header, off, plan = {}, 0, []
    read = {"embed_row": 0, "w": 0, "expert": 0}

    def add(name, dtype, shp, nbytes):
        nonlocal off
        header[name] = {"dtype": dtype, "shape": list(shp), "data_offsets": [off, off + nbytes]}
        off += nbytes
        return nbytes

    for name, shp, kind in ts:
        if len(shp) == 1 or name.endswith("conv1d.weight"):
            n = add(name, "F32", shp, int(np.prod(shp)) * 4)
            plan.append((name, shp, "small"))
            read["w" if kind != "expert" else "expert"] += n
            continue
        *lead, rows, cols = shp
        base = name[:-len(".weight")]
        nb = add(name, "U32", (*lead, rows, cols * bits // 32), int(np.prod(shp)) * bits // 8)
        ng = int(np.prod((*lead, rows))) * (cols // gs)
        ns = add(base + ".scales", "BF16", (*lead, rows, cols // gs), ng * 2)
        add(base + ".biases", "BF16", (*lead, rows, cols // gs), ng * 2)
        plan += [(name, shp, "packed"), (base + ".scales", ng, "scales"), (base + ".biases", ng, "biases")]
        tot = nb + 2 * ns
        if kind == "embed":
            read["embed_row"] += tot // rows
            if c["tie_word_embeddings"]:
                read["w"] += tot
        else:
            read[kind] += tot
    hs = json.dumps(header).encode()
    hs += b" " * ((8 - len(hs) % 8) % 8)
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    words = rng.integers(0, 1 << 32, size=1 << 24, dtype=np.uint32).astype("<u4").tobytes()
    sc = rng.uniform(0.6, 1.4, size=1 << 20).astype(np.float32) * (0.02 * 2 * 3 ** 0.5 / (1 << bits))
    bi = -sc * ((1 << bits) - 1) / 2
    bf = lambda a: (a.view(np.uint32) >> 16).astype("<u2").tobytes()
    sc_b, bi_b = bf(sc), bf(bi)
    with open(os.path.join(out, "model.safetensors"), "wb") as fp:
        fp.write(struct.pack("<Q", len(hs)))
        fp.write(hs)
        for name, shp, kind in plan:
            if kind == "small":
                fp.write(small_tensor(rng, name, shp))
            elif kind == "packed":
                tile(fp, words, int(np.prod(shp)) * bits // 8)
            else:
                tile(fp, sc_b if kind == "scales" else bi_b, shp * 2)
    return off, read


def main():
    out = sys.argv[1]
    args = sys.argv[2:]
    shape, dtype, layers, gs = None, "bf16", None, 64
    for i, a in enumerate(args):
        if a == "--shape": shape = args[i + 1]
        if a == "--dtype": dtype = args[i + 1]
        if a == "--layers": layers = int(args[i + 1])
        if a == "--group-size": gs = int(args[i + 1])
    c = dict(SHAPES[shape])
    if layers:
        c["num_hidden_layers"] = layers
    c.update(hidden_act="silu", max_position_embeddings=32768, rms_norm_eps=1e-6,
             bos_token_id=1, eos_token_id=2)
    mlx = dtype in ("mlx4", "mlx8")
    if mlx:
        c["_stacked"] = True
    ts = tensors_of(c)
    c.pop("_stacked", None)
    if mlx:
        bits = 4 if dtype == "mlx4" else 8
        off, read = write_mlx(out, c, ts, bits, gs)
        c["quantization"] = {"group_size": gs, "bits": bits}
    else:
        off, read = write_float(out, c, ts, dtype)
    cfg = dict(c)
    if c["model_type"] == "qwen3_5_text":
        cfg["layer_types"] = ["linear_attention" if (l + 1) % 4 else "full_attention"
                              for l in range(c["num_hidden_layers"])]
    with open(os.path.join(out, "config.json"), "w") as fp:
        json.dump(cfg, fp, indent=2)
    active_experts = 0
    if c["model_type"] == "qwen3_moe":
        active_experts = read["expert"] * c["num_experts_per_tok"] // c["num_experts"]
    print(json.dumps({"dir": out, "shape": shape, "layers": c["num_hidden_layers"], "dtype": dtype,
                      "file_bytes": off, "decode_bytes": read["w"] + read["embed_row"] + active_experts,
                      "expert_bytes_total": read["expert"], "expert_bytes_active": active_experts}))


main()
