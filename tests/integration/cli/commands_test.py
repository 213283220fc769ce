#!/usr/bin/python3
"""rapid models, ls, info, recipe, doctor, alias, bench and generate --kv-cache-dtype: their
output and exit codes, including a missing model, no GPU (and a fake nvidia-smi), a broken
cache dir, a busy port, and the catalog file itself (required fields, the defaults, recipes
naming real aliases)."""
import json
import os
import re
import socket
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mock_openai  # noqa: E402

RAPID = os.environ["RAPID"]
SRC = os.environ.get("RP_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..", ".."))
FAILS = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILS.append(what)


def run(args, env, timeout=60):
    p = subprocess.run([RAPID] + args, env=env, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def catalog_checks():
    cat = json.load(open(os.path.join(SRC, "models", "catalog.json")))
    models = cat["models"]
    aliases = [m["alias"] for m in models]
    check(len(aliases) == len(set(aliases)), "catalog aliases are unique")
    need = {"alias", "repo", "family", "params_b", "quant", "format", "download_gb", "memory_gb",
            "context", "tool_parser", "reasoning_parser"}
    check(all(need <= set(m) for m in models), "every catalog entry has the required fields")
    for a in ("qwen3.5-4b-4bit", "lfm2.5-1b-4bit", "default"):
        check(a in aliases, "catalog has %s" % a)
    fams = {m["family"] for m in models}
    for f in ("llama3", "qwen2.5", "qwen3", "qwen3.5", "mistral", "gemma3", "gpt_oss", "lfm2", "phi3"):
        check(f in fams, "catalog covers family %s" % f)
    quants = {m["quant"] for m in models}
    check({"4bit", "8bit", "bf16"} <= quants, "catalog has 4-bit, 8-bit and bf16 forms")
    check(any(m["format"] == "gguf" and m.get("files") for m in models), "catalog has GGUF repos with file globs")
    check(all(r["smart"] in aliases and r["fast"] in aliases for r in cat["recipes"]), "recipes name catalog aliases")
    d = [m for m in models if m["alias"] == "default"][0]
    check(d.get("embedded") is True and d["repo"] is None, "default is the embedded model")


def main():
    catalog_checks()
    tmp = tempfile.mkdtemp(prefix="rapid-cmds-")
    base = dict(os.environ, HOME=tmp, HF_HOME=os.path.join(tmp, "hf"),
                RAPID_NVIDIA_SMI=os.path.join(tmp, "no-nvidia-smi"))
    for k in ("HF_HUB_CACHE", "XDG_CONFIG_HOME", "RAPID_CONFIG_DIR", "RAPID_DEFAULT_MODEL", "RAPID_URL"):
        base.pop(k, None)

    # models
    rc, out, err = run(["models"], base)
    check(rc == 0 and out.startswith("ALIAS") and "qwen3.5-4b-4bit" in out and "mlx-community/Qwen3.5-4B-4bit" in out,
          "models lists the catalog")
    rc, out, err = run(["models", "--json"], base)
    j = json.loads(out) if rc == 0 else []
    check(rc == 0 and any(m["alias"] == "lfm2.5-1b-4bit" and m["downloaded"] is False for m in j),
          "models --json, nothing downloaded")
    rc, out, err = run(["models", "--bogus"], base)
    check(rc == 2 and "--bogus" in err, "unknown option: exit 2")
    rc, out, err = run(["ls"], base)
    # nothing in the hub cache: only the embedded default model (when this tree has one)
    listed = [l for l in out.splitlines()[1:] if l.strip()]
    check(rc == 0 and ("nothing downloaded" in out or
                       (len(listed) == 1 and listed[0].startswith("default") and "(embedded)" in listed[0])),
          "ls with an empty cache")

    # aliases
    rc, out, err = run(["alias", "set", "mine", "qwen3.5-4b-4bit"], base)
    check(rc == 0, "alias set")
    aliases = os.path.join(tmp, ".config", "rapid", "aliases.json")
    check(json.load(open(aliases)) == {"mine": "qwen3.5-4b-4bit"}, "aliases.json written")
    rc, out, err = run(["alias", "list"], base)
    check(rc == 0 and "mine" in out and "mlx-community/Qwen3.5-4B-4bit" in out, "alias list resolves the target")
    rc, out, err = run(["info", "mine"], base)
    check(rc == 0 and "qwen3_coder" in out and "downloaded:    no" in out, "info on a user alias uses catalog facts")
    rc, out, err = run(["alias", "rm", "mine"], base)
    check(rc == 0 and json.load(open(aliases)) == {}, "alias rm")
    rc, out, err = run(["alias", "rm", "mine"], base)
    check(rc == 1 and "no user alias" in err, "alias rm of a missing alias: exit 1")
    rc, out, err = run(["alias", "set", "a/b", "x/y"], base)
    check(rc == 1, "alias names cannot hold '/'")
    with open(aliases, "w") as f:
        f.write("{broken")
    rc, out, err = run(["models"], base)
    check(rc == 1 and "aliases.json:1" in err, "broken aliases.json: exit 1 naming the file and line")
    os.remove(aliases)

    # info on directories
    llama = os.path.join(tmp, "llama1b")
    os.makedirs(llama)
    json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256,
               "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
               "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 8192,
               "max_position_embeddings": 131072, "tie_word_embeddings": True,
               "torch_dtype": "bfloat16", "quantization": {"group_size": 64, "bits": 4}},
              open(os.path.join(llama, "config.json"), "w"))
    with open(os.path.join(llama, "model.safetensors"), "wb") as f:
        f.write(b"\0" * 123456)
    rc, out, err = run(["info", llama, "--context", "8192"], base)
    check(rc == 0 and "LlamaForCausalLM" in out and "1.24B" in out, "info: architecture and parameters (%s)" % err)
    check("4-bit, group 64" in out and "131072 tokens" in out and "llama3_json" in out,
          "info: quantization, context, parsers")
    check("KV cache 268.4 MB at 8192 tokens" in out and "weights 123.5 KB" in out, "info: memory for weights (files) and KV")
    rc, out, err = run(["info", llama, "--context", "1024", "--json"], base)
    j = json.loads(out)
    check(rc == 0 and j["params"] == 1235814400 and j["kv_bytes"] == 2 * 16 * 8 * 64 * 2 * 1024, "info --json numbers")
    hybrid = os.path.join(tmp, "hybrid")
    os.makedirs(hybrid)
    json.dump({"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
               "text_config": {"vocab_size": 1000, "hidden_size": 256, "num_hidden_layers": 8,
                               "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
                               "intermediate_size": 512, "max_position_embeddings": 262144,
                               "layer_types": ["linear_attention"] * 3 + ["full_attention"] +
                                              ["linear_attention"] * 3 + ["full_attention"],
                               "linear_num_key_heads": 4, "linear_num_value_heads": 8,
                               "linear_key_head_dim": 32, "linear_value_head_dim": 32}},
              open(os.path.join(hybrid, "config.json"), "w"))
    rc, out, err = run(["info", hybrid, "--json", "--context", "100"], base)
    j = json.loads(out) if rc == 0 else {}
    check(rc == 0 and j["attention_layers"] == 2 and j["kv_bytes"] == 2 * 2 * 64 * 2 * 100 * 2 and
          j["tool_parser"] == "qwen3_coder", "info: hybrid model counts only full-attention KV")
    # the estimate against the parameter count in the golden fixtures' safetensors headers
    gold = os.path.join(SRC, "tests", "golden", "models")
    for name in sorted(os.listdir(gold)) if os.path.isdir(gold) else []:
        d = os.path.join(gold, name)
        if not os.path.exists(os.path.join(d, "config.json")):
            continue
        actual = 0
        for f in os.listdir(d):
            if f.endswith(".safetensors"):
                with open(os.path.join(d, f), "rb") as fh:
                    n = int.from_bytes(fh.read(8), "little")
                    hdr = json.loads(fh.read(n))
                for k, v in hdr.items():
                    if k != "__metadata__":
                        p = 1
                        for x in v["shape"]:
                            p *= x
                        actual += p
        rc, out, err = run(["info", d, "--json"], base)
        est = json.loads(out)["params"] if rc == 0 else -1
        check(rc == 0 and abs(est - actual) <= 0.05 * actual,
              "info: %s parameters %d within 5%% of the checkpoint's %d" % (name, est, actual))
    rc, out, err = run(["info", "qwen3.5-4b-4bit"], base)
    check(rc == 0 and "downloaded:    no" in out and "rapid pull qwen3.5-4b-4bit" in out, "info on a catalog model not downloaded")
    rc, out, err = run(["info", "no-such-model"], base)
    check(rc == 1 and "unknown model" in err and "rapid models" in err, "info on an unknown model: exit 1")
    rc, out, err = run(["info", "someorg/notpulled"], base)
    check(rc == 1 and "rapid pull" in err, "info on a repo not downloaded: exit 1")
    empty = os.path.join(tmp, "empty")
    os.makedirs(empty)
    rc, out, err = run(["info", empty], base)
    check(rc == 1 and "config.json" in err, "info on a directory without config.json: exit 1")
    rc, out, err = run(["info"], base)
    check(rc == 2, "info without a model: usage error")

    # recipe
    def meminfo(gb):
        p = os.path.join(tmp, "meminfo-%d" % gb)
        with open(p, "w") as f:
            f.write("MemTotal: %d kB\nMemFree: 1000 kB\nMemAvailable: %d kB\n" % (gb * 976562, gb * 900000))
        return p
    env = dict(base, RAPID_MEMINFO=meminfo(8))
    rc, out, err = run(["recipe"], env)
    check(rc == 0 and "GPU:      none found" in out and "tier 8 GB" in out, "recipe: 8 GB RAM, no GPU")
    check(re.search(r"smart:\s+qwen3.5-4b-4bit", out) and re.search(r"fast:\s+lfm2.5-1b-4bit", out),
          "recipe: smart and fast picks for 8 GB")
    rc, out, err = run(["recipe", "--json"], dict(base, RAPID_MEMINFO=meminfo(32)))
    j = json.loads(out) if rc == 0 else {}
    check(rc == 0 and j["tier"] == "32 GB" and j["machine"]["gpus"] == [] and j["basis"] == "75% of RAM",
          "recipe --json: 32 GB RAM")
    smi = os.path.join(tmp, "fake-nvidia-smi")
    with open(smi, "w") as f:
        f.write("#!/bin/sh\necho 'NVIDIA H200, 143771, 570.86.15'\n")
    os.chmod(smi, 0o755)
    rc, out, err = run(["recipe", "--json"], dict(base, RAPID_MEMINFO=meminfo(8), RAPID_NVIDIA_SMI=smi))
    j = json.loads(out) if rc == 0 else {}
    check(rc == 0 and j["basis"] == "GPU memory" and j["tier"] == "128 GB" and
          j["machine"]["gpus"][0]["name"] == "NVIDIA H200", "recipe: a GPU sets the budget")
    rc, out, err = run(["recipe", "--memory", "15"], env)
    check(rc == 0 and "tier 16 GB" in out, "recipe --memory")
    rc, out, err = run(["recipe", "--memory", "lots"], env)
    check(rc == 2, "recipe --memory garbage: exit 2")

    # generate --kv-cache-dtype: every storage type greedy-decodes the fixture, the 16-bit
    # ones to f32's ids (int8 / int4 round K and V coarsely enough that a near tie could
    # flip: only well-formed ids there); a bad value is a usage error naming the types
    fx = os.path.join(SRC, "tests", "golden", "models", "llama_gqa")
    ids = ",".join(map(str, json.load(open(os.path.join(fx, "ids.json")))["ids"]))
    gen = ["generate", "--model", fx, "--ids", ids, "--max-tokens", "6", "--ignore-eos",
           "--device", "cpu"]
    outs = {}
    for kt in ("f32", "bf16", "f16", "int8", "int4"):
        rc, out, err = run(gen + ["--kv-cache-dtype", kt], base)
        outs[kt] = out.strip() if rc == 0 else None
    check(all(o and re.fullmatch(r"\d+(,\d+){5}", o) for o in outs.values()) and
          outs["bf16"] == outs["f32"] and outs["f16"] == outs["f32"],
          "generate --kv-cache-dtype: every type decodes, 16-bit ones as f32 (%s)" % outs)
    rc, out, err = run(gen + ["--kv-cache-dtype", "fp8"], base)
    check(rc == 2 and "--kv-cache-dtype must be f32, bf16, f16, int8 or int4" in err,
          "generate --kv-cache-dtype fp8: usage error")

    # serve --device (the server's load runs after the listener is up: a bad device is a
    # load failure, exit 1 with the reason; a bad value is a usage error, exit 2)
    rc, out, err = run(["serve", "--device", "tpu", "--port", "0"], base)
    check(rc == 2 and "--device must be cuda, cpu or auto" in err, "serve --device tpu: usage error")
    if not os.path.exists("/dev/nvidia0"):
        rc, out, err = run(["serve", "--device", "cuda", "--port", "0"], base)
        check(rc == 1 and "CUDA" in err, "serve --device cuda without a GPU: exit 1 naming CUDA")

    # doctor
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    free_port = s.getsockname()[1]
    s.close()
    rc, out, err = run(["doctor", "--port", str(free_port)], base)
    lines = out.splitlines()[1:]
    body = [l for l in lines if l and not re.match(r"^\d+ passed", l)]
    check(all(re.match(r"^(PASS|WARN|FAIL)  \S", l) for l in body), "doctor: PASS/WARN/FAIL lines")
    for what in ("cpu", "memory", "disk", "gpu", "cuda driver", "libraries", "cache dir", "port", "catalog",
                 "default model", "smoke test"):
        check(any(l[6:].startswith(what) for l in body), "doctor checks %s" % what)
    check("WARN  gpu            no NVIDIA GPU found" in out, "doctor: no GPU is a warning")
    check(rc == (1 if any(l.startswith("FAIL") for l in body) else 0) and re.search(r"\d+ passed, \d+ warnings", out),
          "doctor: exit code follows FAIL lines")
    check(re.search(r"(PASS|WARN)  smoke test", out) is not None, "doctor: smoke test reported")
    rc, out, err = run(["doctor", "--port", str(free_port)], dict(base, RAPID_NVIDIA_SMI=smi))
    check("PASS  gpu            0: NVIDIA H200, 150.8 GB, driver 570.86.15" in out, "doctor: GPU from nvidia-smi")
    rc, out, err = run(["doctor", "--port", str(free_port)], dict(base, RAPID_DEFAULT_MODEL=os.path.join(tmp, "gone")))
    check(rc == 1 and "FAIL  default model" in out and "1 failed" in out, "doctor: missing default model FAILs, exit 1")
    fixture = os.path.join(SRC, "tests", "golden", "models", "llama_gqa")
    rc, out, err = run(["doctor", "--port", str(free_port)], dict(base, RAPID_DEFAULT_MODEL=fixture))
    check(rc == 0 and re.search(r"PASS  smoke test     loaded the default model and generated ids \d+(,\d+){3}", out),
          "doctor: load-and-generate smoke test passes on a real checkpoint")
    broken = os.path.join(tmp, "broken-model")
    os.makedirs(broken)
    with open(os.path.join(broken, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 10,
                   "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2}, f)
    rc, out, err = run(["doctor", "--port", str(free_port)], dict(base, RAPID_DEFAULT_MODEL=broken))
    check(rc == 1 and "FAIL  smoke test" in out, "doctor: a model without weights fails the smoke test")
    afile = os.path.join(tmp, "afile")
    open(afile, "w").close()
    rc, out, err = run(["doctor", "--port", str(free_port), "--no-smoke"], dict(base, HF_HOME=os.path.join(afile, "hf")))
    check(rc == 1 and "FAIL  cache dir" in out and "not a directory" in out, "doctor: broken cache dir FAILs, exit 1")
    if os.getuid() != 0:  # root may write anywhere
        ro = os.path.join(tmp, "ro")
        os.makedirs(ro)
        os.chmod(ro, stat.S_IRUSR | stat.S_IXUSR)
        rc, out, err = run(["doctor", "--port", str(free_port), "--no-smoke"], dict(base, HF_HOME=os.path.join(ro, "hf")))
        check(rc == 1 and "FAIL  cache dir" in out and "not writable" in out, "doctor: unwritable cache dir FAILs")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    rc, out, err = run(["doctor", "--port", str(busy.getsockname()[1]), "--no-smoke"], base)
    check("WARN  port" in out and "in use" in out, "doctor: busy port is a warning")
    busy.close()

    # bench against the mock server
    srv, url = mock_openai.start(os.path.join(tmp, "api.log"))
    rc, out, err = run(["bench", "--url", url, "--runs", "2", "--max-tokens", "16", "--prompt-tokens", "64",
                        "--concurrency", "3", "--json"], base)
    j = json.loads(out) if rc == 0 else {}
    check(rc == 0 and len(j["runs"]) == 2 and j["runs"][0]["completion_tokens"] == 16 and
          j["mean"]["decode_tok_s"] > 0 and j["mean"]["ttft_s"] > 0 and j["mean"]["prefill_tok_s"] > 0,
          "bench --json: TTFT, prefill and decode per run (%s)" % err.strip())
    check(j.get("concurrent", {}).get("streams") == 3 and j["concurrent"]["completion_tokens"] == 48 and
          j["concurrent"]["aggregate_decode_tok_s"] > 0, "bench: concurrent streams aggregate")
    rc, out, err = run(["bench", "--url", url, "--runs", "1", "--max-tokens", "8"], base)
    check(rc == 0 and "decode_tok/s" in out and "mean" in out, "bench table output")
    srv.shutdown()
    rc, out, err = run(["bench", "--url", "http://127.0.0.1:9"], base)
    check(rc == 1 and "rapid serve" in err, "bench without a server: exit 1 with the next step")

    rc, out, err = run(["bench", "--model", fixture, "--prompt", "8", "--gen", "4", "--json"], base)
    check(rc == 0 and "decode_tok_s" in out and "bw_ratio" in out, "bench --model DIR runs the in-process benchmark")
    rc, out, err = run(["help", "pull"], base)
    check(rc == 0 and "HF_TOKEN" in out, "help pull")
    rc, out, err = run(["--version"], base)
    check(rc == 0 and out.startswith("rapid "), "--version")
    print("%d checks failed" % len(FAILS) if FAILS else "all command checks passed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
