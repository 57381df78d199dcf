#!/bin/bash
# One device call: the gpu suite, a memcheck pass over the attention test, the latency
# benchmarks, and an ncu per-kernel breakdown of two Qwen2.5-7B decode steps. Binaries are built
# on the project machine and carried in $BIN; everything lands in $OUT.
set -u
BIN=${BIN:-.carry/cuda}
OUT=${OUT:-/tmp/out}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p "$OUT"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
. "$(dirname "$0")/step_lib.sh"
step gpu_kernels 120 "$BIN/gpu_kernels"
step gpu_runner 120 "$BIN/gpu_runner"
step gpu_golden 120 "$BIN/gpu_golden"
step gpu_memory 120 "$BIN/gpu_memory"
step memcheck_attention 120 compute-sanitizer --tool memcheck "$BIN/gpu_kernels" -tc='rope_kv*'
B="$BIN/bench_decode_latency"
step q7b_b1 120 "$B" --preset qwen2.5-7b --input-len 128 --output-len 128 --batch-size 1
[ -n "${QUICK:-}" ] || step q7b_b1_nograph 120 "$B" --preset qwen2.5-7b --input-len 128 --output-len 64 --batch-size 1 --graphs 0
step q7b_prefill2048 120 "$B" --preset qwen2.5-7b --input-len 2048 --output-len 4 --batch-size 1
step l8b_b1 120 "$B" --preset llama-3.1-8b --input-len 128 --output-len 128 --batch-size 1
step q05b_b1 60 "$B" --preset qwen2.5-0.5b --input-len 128 --output-len 128 --batch-size 1
step q7b_b64 150 "$B" --preset qwen2.5-7b --input-len 1024 --output-len 32 --batch-size 64
# The b64 step per kernel (cudaProfilerStart after the prefills; graphs off so ncu sees kernels).
[ -n "${QUICK:-}" ] || step ncu_q7b_b64 200 ncu --clock-control none --profile-from-start off \
  --launch-count 300 --metrics gpu__time_duration.sum --csv \
  "$B" --preset qwen2.5-7b --input-len 1024 --output-len 4 --batch-size 64 --graphs 0 --profile-decode 1
# Prefill of 1 token takes the decode kernels; skip the 6 timed prefills (228 launches each).
[ -n "${QUICK:-}" ] || step ncu_q7b_decode 150 ncu --clock-control none --launch-skip 1400 --launch-count 458 \
  --metrics gpu__time_duration.sum --csv \
  "$B" --preset qwen2.5-7b --input-len 1 --output-len 8 --batch-size 1 --graphs 0
[ -n "${QUICK:-}" ] || step ncu_q7b_prefill 150 ncu --clock-control none --launch-skip 300 --launch-count 300 \
  --metrics gpu__time_duration.sum --csv \
  "$B" --preset qwen2.5-7b --input-len 2048 --output-len 2 --batch-size 1 --graphs 0
for f in q7b_b1 q7b_b1_nograph q7b_prefill2048 l8b_b1 q05b_b1 q7b_b64; do
  [ -f "$OUT/$f.log" ] && grep '^{' "$OUT/$f.log" | tail -1
done | tee "$OUT/results.jsonl"
for f in gpu_kernels gpu_runner gpu_golden gpu_memory memcheck_attention; do tail -n 3 "$OUT/$f.log"; done
# Few files come back: bundle the logs.
(cd "$OUT" && tar czf logs.tgz *.log nvidia-smi.txt && rm -f *.log)
