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
#        off) and LLAMACPP_MMAP (1 | 0) for llama.cpp (scripts/bench/llamacpp_bench.mjs),
#        LOCK (/tmp/rapid-cpu.lock: held for each GGUF write and each llama.cpp + rapid pair,
#        as the shared machine's benchmarks agree), LOGS (a directory for llama.cpp's logs),
#        MAX_OTHER (0.05), TRIES (3): a pair is run again (up to TRIES times) when, during either
#        run, processes other than the benchmark used more than MAX_OTHER of the machine's CPU
#        time (/proc/stat's busy time less the run's own, from the shell's `times`); the last
#        try is kept either way and its share is printed (column "other CPU")
# llama.cpp comes from npm (no other registry is reachable here): node-llama-cpp's prebuilt CPU
# libraries, driven through its public API by scripts/bench/llamacpp_bench.mjs, which times what
# `rapid bench --prompt N --gen N --threads T --json` times (src/cli/model_bench.c) and sets
# decode against rapid's own bandwidth probe (build/bwprobe) run after each decode window. The
# GGUF files are gguf_make's (tests/bench/gguf_make.c) with its placeholder vocabulary, which
# llama.cpp needs to load them: llama-3.2-1b-TYPE-vocab.gguf next to the other bench files.
# The end prints, per type and engine, the median (and range) over REPS of pp tok/s, tg tok/s
# and decode / bandwidth bound (median of the windows, each against the probe after it), and
# the ggml CPU variant llama.cpp loaded; then rapid's speed over llama.cpp's per pair.
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
MAX_OTHER=${MAX_OTHER:-0.05}
TRIES=${TRIES:-3}
NCPU=$(nproc)
DRIVER=$(dirname "$0")/bench/llamacpp_bench.mjs
SUMMARY=$(mktemp)
PAIR=$(mktemp)
TIMES=$(mktemp)
trap 'rm -f "$SUMMARY" "$PAIR" "$TIMES"' EXIT
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

# CPU seconds of the whole machine (/proc/stat's busy jiffies) and of this shell's children
busy_s() { awk '/^cpu /{printf "%.2f\n", ($2 + $3 + $4 + $7 + $8 + $9) / 100}' /proc/stat; }
CH=0
children_s() { # sets CH (in this shell: $(times) would be a subshell's, which starts at 0)
    times > "$TIMES"
    CH=$(tail -1 "$TIMES" | awk '{s = 0; for (i = 1; i <= 2; i++) {split($i, a, /[ms]/); s += a[1] * 60 + a[2]}; print s}')
}
OTHER=0
measured() { # cmd... : runs it (stdout in RUN_OUT), sets OTHER = others' share of the CPU meanwhile
    local t0 b0 c0 rc=0
    t0=$(date +%s.%N) b0=$(busy_s)
    children_s
    c0=$CH
    RUN_OUT=$("$@") || rc=$?
    children_s
    OTHER=$(awk -v t0="$t0" -v t1="$(date +%s.%N)" -v b0="$b0" -v b1="$(busy_s)" -v c0="$c0" \
        -v c1="$CH" -v n="$NCPU" \
        'BEGIN {o = ((b1 - b0) - (c1 - c0)) / ((t1 - t0) * n); printf "%.3f", o < 0 ? 0 : o}')
    return $rc
}
record() { # engine label json
    echo "$3" | grep '^{' | sed "s|^{|{\"engine\":\"$1\",\"name\":\"$2\",\"other_cpu\":$OTHER,|" >> "$PAIR"
}
llamacpp() { # type gguf run
    node "$DRIVER" --model "$2" --threads "$THREADS" --prompt "$PROMPT" --gen "$GEN" \
        --probe "$BIN/bwprobe" --log "$LOGS/llamacpp-$1-$3.log" 2> "$LOGS/llamacpp-$1-$3.err" ||
        { cat "$LOGS/llamacpp-$1-$3.err" >&2; return 1; }
}
rapid() { "$RAPID" bench --model "$1" --threads "$THREADS" --prompt "$PROMPT" --gen "$GEN" --json; }
clean() { # the pair's runs all under MAX_OTHER
    awk -v m="$MAX_OTHER" -F'"other_cpu":' '{split($2, a, ","); if (a[1] + 0 > m) bad = 1} END {exit bad}' "$PAIR"
}
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$REPS"); do
    for t in $TYPES; do
        g=$(gguf_of "$t")
        for try in $(seq "$TRIES"); do
            echo "== $t (run $r of $REPS, try $try)"
            : > "$PAIR"
            exec 9> "$LOCK"
            flock 9
            measured llamacpp "$t" "$g" "$r"
            echo "llama.cpp (others used $OTHER of the CPU): $RUN_OUT"
            record llama.cpp "$t" "$RUN_OUT"
            measured rapid "$g"
            echo "rapid     (others used $OTHER of the CPU): $RUN_OUT"
            record rapid "$t" "$RUN_OUT"
            if [ "$t" = bf16 ] && [ "$ST_BF16" = 1 ]; then
                measured rapid "$BF16"
                echo "rapid, safetensors (others used $OTHER of the CPU): $RUN_OUT"
                record rapid bf16-st "$RUN_OUT"
            fi
            flock -u 9
            exec 9>&-
            echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
            if clean; then break; fi
            [ "$try" = "$TRIES" ] && echo "(kept although others used more than $MAX_OTHER of the CPU)"
        done
        cat "$PAIR" >> "$SUMMARY"
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
print("| type | engine | pp tok/s | tg tok/s | decode / bound | bytes/token | probe GB/s | CPU share pp/tg | other CPU | ggml CPU variant |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
for name, eng in keys:
    rs = [r for r in rows if r["name"] == name and r["engine"] == eng]
    print("| %s | %s | %s | %s | %s | %.3f GB | %s | %.0f%%/%.0f%% | %.0f%% max | %s |" % (
        name, eng, cell(rs, "prefill_tok_s", "%.1f"), cell(rs, "decode_tok_s", "%.2f"),
        cell(rs, "bw_ratio", "%.3f"), rs[0]["bytes_per_token"] / 1e9,
        cell(rs, "read_bw_gb_s", "%.1f"),
        100 * statistics.median([r["prefill_cpu_share"] for r in rs]),
        100 * statistics.median([r["decode_cpu_share"] for r in rs]),
        100 * max(r["other_cpu"] for r in rs), rs[0].get("cpu_variant", "-")))
print("rapid / llama.cpp, the median (range) of each interleaved pair's ratio:")
for name in dict.fromkeys(r["name"] for r in rows if r["engine"] == "llama.cpp"):
    ps = [(a, b) for i, a in enumerate(rows) for b in rows[i + 1:i + 2]
          if a["engine"] == "llama.cpp" and a["name"] == name and b["name"] == name]
    for k, what in (("decode_tok_s", "tg"), ("prefill_tok_s", "pp")):
        v = [b[k] / a[k] for a, b in ps]
        print("  %-5s %s %.2f (%.2f-%.2f)" % (name, what, statistics.median(v), min(v), max(v)))
PY
