#!/bin/bash
# Branch wip-lmhead-skinny: TANDEM_LMHEAD_SKINNY=1 runs a verify pass's 3-8 logit rows on the
# skinny GEMM (overlapped launch) instead of cuBLASLt. Run from the checkout on the GPU machine
# with BIN = a folder holding this branch's tools/, benchmarks/ and tests/gpu/ binaries:
#   BIN=/tmp/g OUT=$OUT bash benchmarks/wip_lmhead_skinny_ab.sh
# 1. gpu_runner and gpu_golden with the knob on (the verify rows' tokens against the CPU oracle);
# 2. 7B and 8B verify-shaped steps (--query-len 5: k = 4) and the 0.5B at 3 tokens, off / on
#    alternated x3, device span and TPOT.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
R=${OUT:-/tmp/lmh}; mkdir -p "$R"; OUT=$R
. benchmarks/step_lib.sh
for s in gpu_runner gpu_golden; do
  step ${s}_on 200 env TANDEM_LMHEAD_SKINNY=1 "$BIN/tests/gpu/$s"
done
grep -H "test cases" "$R"/gpu_*.log
L=$BIN/benchmarks/bench_decode_latency
A="--input-len 128 --output-len 128 --batch-size 1 --device-timing 1"
for rep in 1 2 3; do
  for v in 0 1; do
    step q7_q5_$v.$rep 90 env TANDEM_LMHEAD_SKINNY=$v $L --preset qwen2.5-7b $A --query-len 5
    step l8_q5_$v.$rep 90 env TANDEM_LMHEAD_SKINNY=$v $L --preset llama-3.1-8b $A --query-len 5
    step q05_q3_$v.$rep 60 env TANDEM_LMHEAD_SKINNY=$v $L --preset qwen2.5-0.5b $A --query-len 3
  done
done
for f in "$R"/q*.log "$R"/l8*.log; do
  echo "$(basename "$f" .log) $(grep '^{' "$f" | grep -o '"tpot_ms": [0-9.]*\|"forward_device_ms": [0-9.]*' | tr '\n' ' ')"
done | tee "$R/table.txt"
