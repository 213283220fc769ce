// scripts/bench/llamacpp_bench.mjs - llama.cpp's prefill and decode speed on a GGUF file,
// timed as `rapid bench --model FILE --prompt N --gen N --threads T --json` times rapid
// (src/cli/model_bench.c), through node-llama-cpp's public API (its prebuilt CPU libraries).
//
//   node llamacpp_bench.mjs --model FILE.gguf [--prompt 128] [--gen 32] [--threads 2]
//        [--probe build/bwprobe] [--log FILE]
//   env: LLAMACPP_DIR (~/.cache/rapid-llamacpp: where node-llama-cpp is installed),
//        LLAMACPP_FA (auto | on | off: flash attention, default node-llama-cpp's "auto"),
//        LLAMACPP_MMAP (1: weights read through the file's mapping, llama.cpp's default; 0: read
//        into memory)
//
// What is timed, as in rapid's bench: a warm-up pass over 4 prompt tokens; prefill = the median
// of 3 passes over the same N-token prompt (ids (i * 7919 + 13) % vocab), each into an empty
// cache, logits of the last token only; decode = N tokens after the last pass (greedy, each
// fed back), in 4 windows, each followed by rapid's bandwidth probe (build/bwprobe, a
// separate process with T threads): decode / bandwidth bound = the median over the windows of
// tok/s x bytes per token / the probe after it, and the whole run against the best probe.
// Bytes per token: every tensor of the file except token_embd, plus one row of it (token_embd
// when there is no output.weight: the lm_head reads all of it). Prints a JSON line (the fields
// of rapid's --json, plus the ggml CPU variant llama.cpp loaded and its log's key lines).
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {pathToFileURL} from "node:url";

const args = {prompt: "128", gen: "32", threads: "2", probe: "build/bwprobe", log: ""};
for (let i = 2; i < process.argv.length; i += 2) {
    const k = process.argv[i].replace(/^--/, "");
    if (!(k in args) && k !== "model") {
        console.error(`llamacpp_bench: unknown option ${process.argv[i]}`);
        process.exit(2);
    }
    args[k] = process.argv[i + 1];
}
if (!args.model) {
    console.error("usage: node llamacpp_bench.mjs --model FILE.gguf [--prompt N] [--gen N] " +
        "[--threads T] [--probe BWPROBE] [--log FILE]");
    process.exit(2);
}
const nPrompt = +args.prompt, nGen = +args.gen, threads = +args.threads;

// ---- bytes a decode step reads, from the GGUF header -------------------------------------
// ggml type -> [block elements, block bytes] for the types gguf_make writes
const GGML = {0: [1, 4], 1: [1, 2], 2: [32, 18], 3: [32, 20], 6: [32, 22], 7: [32, 24],
    8: [32, 34], 30: [1, 2]};

function ggufTensors(file) {
    const fd = fs.openSync(file, "r");
    const head = Buffer.alloc(64 << 20); // the metadata (a 128k-token vocabulary: ~3 MB)
    const len = fs.readSync(fd, head, 0, head.length, 0);
    fs.closeSync(fd);
    let o = 0;
    const u32 = () => { const v = head.readUInt32LE(o); o += 4; return v; };
    const u64 = () => { const v = Number(head.readBigUInt64LE(o)); o += 8; return v; };
    const str = () => { const n = u64(); const s = head.toString("utf8", o, o + n); o += n; return s; };
    const size = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8};
    const skip = (t) => {
        if (t === 8) str();
        else if (t === 9) {
            const et = u32(), n = u64();
            for (let i = 0; i < n; i++) skip(et);
        } else o += size[t];
    };
    if (head.toString("latin1", 0, 4) !== "GGUF") throw new Error(`${file}: not a GGUF file`);
    o = 8;
    const nT = u64(), nKV = u64();
    for (let i = 0; i < nKV; i++) { str(); skip(u32()); }
    const out = [];
    for (let i = 0; i < nT; i++) {
        const name = str(), nd = u32(), dims = [];
        for (let d = 0; d < nd; d++) dims.push(u64());
        const type = u32();
        u64();
        const bt = GGML[type];
        if (!bt) throw new Error(`${name}: ggml type ${type} not counted`);
        const n = dims.reduce((a, b) => a * b, 1);
        out.push({name, dims, bytes: n / bt[0] * bt[1]});
        if (o > len) throw new Error(`${file}: header larger than read`);
    }
    return out;
}

function decodeBytes(tensors) {
    let total = 0, emb = null;
    for (const t of tensors) {
        if (t.name === "token_embd.weight") emb = t;
        else total += t.bytes;
    }
    if (emb) total += tensors.some((t) => t.name === "output.weight") ? emb.bytes / emb.dims[1] : emb.bytes;
    return total;
}

// ---- llama.cpp ----------------------------------------------------------------------------
const dir = process.env.LLAMACPP_DIR || path.join(os.homedir(), ".cache/rapid-llamacpp");
const nlc = await import(pathToFileURL(path.join(dir, "node_modules/node-llama-cpp/dist/index.js")).href);
const logLines = [];
const llama = await nlc.getLlama({
    gpu: false, build: "never", usePrebuiltBinaries: true, progressLogs: false,
    maxThreads: threads, logLevel: nlc.LlamaLogLevel.debug,
    logger: (level, msg) => logLines.push(`[${level}] ${msg}`),
});
const fa = {on: true, off: false, auto: "auto"}[process.env.LLAMACPP_FA || "auto"];
const mmap = process.env.LLAMACPP_MMAP !== "0";
const model = await llama.loadModel({modelPath: args.model, gpuLayers: 0, useMmap: mmap});
const ctx = await model.createContext({
    contextSize: nPrompt + nGen + 8, batchSize: Math.max(nPrompt, 8), sequences: 1,
    threads: {ideal: threads, min: threads}, flashAttention: fa,
});
const seq = ctx.getSequence();
const tensors = ggufTensors(args.model);
const nVocab = tensors.find((t) => t.name === "token_embd.weight")?.dims[1];
if (!nVocab) throw new Error(`${args.model}: no token_embd.weight`);
const ids = Array.from({length: nPrompt}, (_, i) => (i * 7919 + 13) % nVocab);
const greedy = {generateNext: {token: true, options: {temperature: 0}}};
const withLast = (toks) => toks.map((t, i) => (i === toks.length - 1 ? [t, greedy] : t));

const now = () => Number(process.hrtime.bigint()) * 1e-9;
const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) * 1e-6; };
const probe = () => {
    const r = spawnSync(args.probe, [String(threads), "3"], {encoding: "utf8"});
    if (r.status !== 0) throw new Error(`${args.probe}: ${r.stderr || r.error}`);
    return parseFloat(r.stdout);
};

await seq.controlledEvaluate(withLast(ids.slice(0, Math.min(4, nPrompt)))); // warm-up
const tPf = [], sharePf = [];
let last = null;
for (let r = 0; r < (nPrompt <= 512 ? 3 : 1); r++) {
    await seq.clearHistory();
    const t0 = now(), c0 = cpu();
    const res = await seq.controlledEvaluate(withLast(ids));
    const dt = now() - t0;
    tPf.push(dt);
    sharePf.push((cpu() - c0) / dt / threads);
    last = res[nPrompt - 1]?.next?.token;
}
const order = tPf.map((t, i) => i).sort((a, b) => tPf[a] - tPf[b]);
const mid = order[Math.floor((order.length - 1) / 2)];
const bytes = decodeBytes(tensors);
const nWin = Math.min(nGen, 4), winRatio = [];
let tDecode = 0, bw = 0, cpuDec = 0, tok = last ?? 1;
for (let w = 0; w < nWin; w++) {
    const wTok = Math.floor(nGen * (w + 1) / nWin) - Math.floor(nGen * w / nWin);
    const t0 = now(), c0 = cpu();
    for (let i = 0; i < wTok; i++) {
        const res = await seq.controlledEvaluate([[tok, greedy]]);
        tok = res[0]?.next?.token ?? 1;
    }
    const tw = now() - t0;
    cpuDec += cpu() - c0;
    tDecode += tw;
    const bww = probe();
    bw = Math.max(bw, bww);
    winRatio.push(bww > 0 ? wTok / tw * bytes / (bww * 1e9) : 0);
}
winRatio.sort((a, b) => a - b);
const ratio = nWin % 2 ? winRatio[(nWin - 1) / 2] : (winRatio[nWin / 2 - 1] + winRatio[nWin / 2]) / 2;
const tg = nGen / tDecode, pp = nPrompt / tPf[mid];

const variant = logLines.map((l) => l.match(/libggml-cpu-([a-z0-9_]+)\.so/)).find((m) => m)?.[1] ?? "unknown";
if (args.log) fs.writeFileSync(args.log, logLines.join("\n") + "\n");
const keyLines = logLines.filter((l) => /load_backend|CPU_REPACK|system_info|flash_attn|n_threads|file type/.test(l));
for (const l of keyLines) console.error(`llama.cpp log: ${l.trim()}`);
const r3 = (x) => Math.round(x * 1000) / 1000;
console.log(JSON.stringify({
    engine: "llama.cpp", model: args.model, cpu_variant: variant,
    flash_attention: process.env.LLAMACPP_FA || "auto", mmap, threads, prompt: nPrompt, gen: nGen,
    prefill_tok_s: Math.round(pp * 100) / 100, prefill_runs_tok_s: tPf.map((t) => Math.round(nPrompt / t * 10) / 10),
    ttft_s: r3(tPf[mid]), decode_tok_s: Math.round(tg * 100) / 100, bytes_per_token: Math.round(bytes),
    read_bw_gb_s: Math.round(bw * 100) / 100, bw_ratio: r3(ratio), bw_ratio_whole: r3(bw > 0 ? tg * bytes / (bw * 1e9) : 0),
    windows: nWin, prefill_cpu_share: Math.round(sharePf[mid] * 100) / 100,
    decode_cpu_share: Math.round(cpuDec / tDecode / threads * 100) / 100,
}));
await ctx.dispose();
await model.dispose();
await llama.dispose();
