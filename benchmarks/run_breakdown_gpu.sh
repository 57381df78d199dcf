#!/bin/bash
# Where a decode step's device time goes, kernel by kernel: ncu times every kernel of STEPS
# batch-1 decode steps of PRESET (each kernel alone, so without the overlap of launches), once per
# query length in QLENS, and benchmarks/kernel_breakdown.py tabulates the first against the last.
#
#   BIN=build OUT=/tmp/out PRESET=qwen2.5-0.5b QLENS="1 2" benchmarks/run_breakdown_gpu.sh
# BIN: a build folder (or the same layout: benchmarks/bench_decode_latency). EXTRA: more
# bench_decode_latency flags (e.g. "--quantization fp8"). Writes $OUT/ncu_q<N>.csv and
# $OUT/breakdown.txt.
set -u
BIN=${BIN:-build}
OUT=${OUT:-/tmp/out}
PRESET=${PRESET:-qwen2.5-0.5b}
QLENS=${QLENS:-1 2}
STEPS=${STEPS:-2}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p "$OUT"
. "$(dirname "$0")/step_lib.sh"
csvs=()
for q in $QLENS; do
  # The profiler starts after the prompt's prefill (--profile-decode); graphs off, so that ncu
  # sees each kernel launch (the same kernels and forms as the captured step).
  step "ncu_q$q" 300 ncu --clock-control none --profile-from-start off \
    --metrics gpu__time_duration.sum --csv "$BIN/benchmarks/bench_decode_latency" \
    --preset "$PRESET" --input-len 128 --output-len $((STEPS + 1)) --batch-size 1 \
    --query-len "$q" --graphs 0 --profile-decode 1 ${EXTRA:-}
  mv "$OUT/ncu_q$q.log" "$OUT/ncu_q$q.csv"
  csvs+=("$OUT/ncu_q$q.csv")
done
# The first run, and the last where there are several.
pick=("${csvs[0]}")
[ ${#csvs[@]} -gt 1 ] && pick+=("${csvs[${#csvs[@]} - 1]}")
python3 "$(dirname "$0")/kernel_breakdown.py" --steps "$STEPS" "${pick[@]}" | tee "$OUT/breakdown.txt"
