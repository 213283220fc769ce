#!/usr/bin/env bash
# scripts/bench-llamacpp.sh - llama.cpp as a same-machine peer of rapid (issue #8): prefill and
# decode of the random Llama-3.2-1B-shaped checkpoint as GGUF Q4_0, Q8_0 and BF16, llama.cpp
# and rapid on the same file, interleaved so the figures share the machine's load.
#
#   scripts/bench-llamacpp.sh [RAPID_BINARY]      (default build/rapid; gguf_make and bwprobe
#                                                  are taken from next to it)
#   env: BENCH_DIR (~/.cache/rapid-bench), LLAMACPP_DIR (~/.cache/rapid-llamacpp),
#        NLC_VERSION (3.21.1: node-llama-cpp and @node-llama-cpp/linux-x64), THREADS (2),
#        PROMPT (128), GEN (32), TYPES ("q4_0 q8_0 bf16"), REPS (3: runs of each pair),
#        ST_BF16 (1: rapid also runs the bf16 safetensors checkpoint), LLAMACPP_FA (auto | on |
#        off), LOCK (/tmp/rapid-cpu.lock: held for each GGUF write and each llama.cpp + rapid
#        pair, as the shared machine's benchmarks agree), LOGS (a directory for llama.cpp's logs)
# llama.cpp comes from npm (no other registry is reachable here): node-llama-cpp's prebuilt CPU
# libraries, driven through its public API by scripts/bench/llamacpp_bench.mjs, which times what
# `rapid bench --prompt N --gen N --threads T --json` times (src/cli/model_bench.c) and sets
# decode against rapid's own bandwidth probe (build/bwprobe) run after each decode window. The
# GGUF files are gguf_make's (tests/bench/gguf_make.c) with its placeholder vocabulary, which
# llama.cpp needs to load them: llama-3.2-1b-TYPE-vocab.gguf next to the other bench files.
# The end prints, per type and engine, the median (and range) over REPS of pp tok/s, tg tok/s
# and decode / bandwidth bound (median of the windows, each against the probe after it), and
# the ggml CPU variant llama.cpp loaded.
set -euo pipefail
RAPID=${1:-build/rapid}
BIN=$(dirname "$RAPID")
DIR=${BENCH_DIR:-$HOME/.cache/rapid-bench}
LDIR=${LLAMACPP_DIR:-$HOME/.cache/rapid-llamacpp}
NLC_VERSION=${NLC_VERSION:-3.21.1}
THREADS=${THREADS:-2}
PROMPT=${PROMPT:-128}
GEN=${GEN:-32}
TYPES=${TYPES:-q4_0 q8_0 bf16}
REPS=${REPS:-3}
ST_BF16=${ST_BF16:-1}
LOCK=${LOCK:-/tmp/rapid-cpu.lock}
LOGS=${LOGS:-$(mktemp -d)}
DRIVER=$(dirname "$0")/bench/llamacpp_bench.mjs
SUMMARY=$(mktemp)
trap 'rm -f "$SUMMARY"' EXIT
BF16=$DIR/llama-3.2-1b-bf16
for f in "$RAPID" "$BIN/gguf_make" "$BIN/bwprobe"; do
    [ -x "$f" ] || { echo "bench-llamacpp.sh: $f missing (make build)" >&2; exit 2; }
done
[ -f "$BF16/model.safetensors" ] || { echo "bench-llamacpp.sh: $BF16 missing (scripts/bench-quant.sh makes it)" >&2; exit 2; }
mkdir -p "$LOGS"

# node-llama-cpp and its prebuilt linux-x64 libraries, pinned, outside the repo; no install
# scripts (they would look for a GPU build), no optional GPU packages
if [ ! -f "$LDIR/node_modules/node-llama-cpp/package.json" ] ||
    ! grep -q "\"version\": \"$NLC_VERSION\"" "$LDIR/node_modules/node-llama-cpp/package.json"; then
    mkdir -p "$LDIR"
    npm install --prefix "$LDIR" --ignore-scripts --omit=optional --no-audit --no-fund \
        "node-llama-cpp@$NLC_VERSION" "@node-llama-cpp/linux-x64@$NLC_VERSION" >&2
fi

gguf_of() { # type -> the vocab'd GGUF, written once
    local out=$DIR/llama-3.2-1b-$1-vocab.gguf
    if [ ! -f "$out" ]; then
        flock "$LOCK" "$BIN/gguf_make" "$BF16" "$1" "$out.tmp" vocab >&2
        mv "$out.tmp" "$out"
    fi
    echo "$out"
}
for t in $TYPES; do gguf_of "$t" > /dev/null; done

run_rapid() { # label model
    local out
    out=$("$RAPID" bench --model "$2" --threads "$THREADS" --prompt "$PROMPT" --gen "$GEN" --json)
    echo "rapid:     $out"
    echo "$out" | grep '^{' | sed "s|^{|{\"engine\":\"rapid\",\"name\":\"$1\",|" >> "$SUMMARY"
}
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$REPS"); do
    for t in $TYPES; do
        g=$(gguf_of "$t")
        echo "== $t (run $r of $REPS)"
        exec 9> "$LOCK"
        flock 9
        out=$(node "$DRIVER" --model "$g" --threads "$THREADS" --prompt "$PROMPT" --gen "$GEN" \
            --probe "$BIN/bwprobe" --log "$LOGS/llamacpp-$t-$r.log" 2> "$LOGS/llamacpp-$t-$r.err") ||
            { cat "$LOGS/llamacpp-$t-$r.err" >&2; exit 1; }
        echo "llama.cpp: $out"
        echo "$out" | grep '^{' | sed "s|^{|{\"name\":\"$t\",|" >> "$SUMMARY"
        run_rapid "$t" "$g"
        if [ "$t" = bf16 ] && [ "$ST_BF16" = 1 ]; then
            run_rapid bf16-st "$BF16"
        fi
        flock -u 9
        exec 9>&-
        echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    done
done
echo "llama.cpp logs: $LOGS"
echo "== medians (range) over $REPS run(s), $THREADS threads: pp$PROMPT tok/s, tg$GEN tok/s, decode / bandwidth bound"
/usr/bin/python3 - "$SUMMARY" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
keys = []
for r in rows:
    if (r["name"], r["engine"]) not in keys:
        keys.append((r["name"], r["engine"]))
def cell(rs, k, fmt):
    v = [r[k] for r in rs]
    return (fmt % statistics.median(v)) + " (" + (fmt % min(v)) + "-" + (fmt % max(v)) + ")"
print("| type | engine | pp tok/s | tg tok/s | decode / bound | bytes/token | probe GB/s | CPU share pp/tg | ggml CPU variant |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
for name, eng in keys:
    rs = [r for r in rows if r["name"] == name and r["engine"] == eng]
    print("| %s | %s | %s | %s | %s | %.3f GB | %s | %.0f%%/%.0f%% | %s |" % (
        name, eng, cell(rs, "prefill_tok_s", "%.1f"), cell(rs, "decode_tok_s", "%.2f"),
        cell(rs, "bw_ratio", "%.3f"), rs[0]["bytes_per_token"] / 1e9,
        cell(rs, "read_bw_gb_s", "%.1f"),
        100 * statistics.median([r["prefill_cpu_share"] for r in rs]),
        100 * statistics.median([r["decode_cpu_share"] for r in rs]),
        rs[0].get("cpu_variant", "-")))
PY
