#!/bin/bash
# Quantized weights on one H200 (#9; benchmarks/NOTES.md v8): the per-format GPU tests, the
# kernel benchmarks, Qwen2.5-7B latency per format (FP8 quantized at load from random bf16;
# AWQ and GPTQ checkpoints written here by mkmodel, ~2 minutes each, in the background), and the
# speculative pair with quantized target and draft (pattern models, so acceptance is known).
#
#   BIN=build OUT=/tmp/out benchmarks/run_quant_gpu.sh
# BIN is a build directory (or a folder with the same layout of tools/, tests/gpu/,
# benchmarks/). JSON lines land in $OUT/*.log, a summary in $OUT/summary.txt.
set -u
BIN=${BIN:-build}
OUT=${OUT:-/tmp/out}
WORK=${WORK:-/tmp/tandem-quant-bench}
mkdir -p "$OUT" "$WORK"
T=$BIN/tools/tandem
L=$BIN/benchmarks/bench_decode_latency
T0=$(date +%s)
. "$(dirname "$0")/step_lib.sh"
for Q in awq gptq; do
  [ -f "$WORK/q7b-$Q/config.json" ] || "$T" mkmodel --preset qwen2.5-7b --quantization $Q \
    --out "$WORK/q7b-$Q" > "$OUT/mkmodel_$Q.log" 2>&1 &
done
[ -f "$WORK/t-awq/config.json" ] || "$T" mkmodel --preset qwen2.5-7b --quantization awq \
  --pattern-seed 7 --pattern-divergence 0 --out "$WORK/t-awq" > "$OUT/mkmodel_t_awq.log" 2>&1 &
step gpu_quant_int4 120 "$BIN/tests/gpu/gpu_quant_int4"
step gpu_quant_fp8 120 "$BIN/tests/gpu/gpu_quant_fp8" -s
step gpu_quant_model 180 "$BIN/tests/gpu/gpu_quant_model" -s
step bench_int4 120 "$BIN/benchmarks/bench_int4_gemv" --iters 100
step bench_fp8 120 "$BIN/benchmarks/bench_fp8_linear" --iters 50
A="--preset qwen2.5-7b --batch-size 1"
step fp8_b1 90 "$L" $A --input-len 128 --output-len 128 --quantization fp8
step fp8_prefill 90 "$L" $A --input-len 2048 --output-len 4 --quantization fp8
step bf16_b1 90 "$L" $A --input-len 128 --output-len 128
step mk_t 150 "$T" mkmodel --preset qwen2.5-7b --pattern-seed 7 --pattern-divergence 0 --out "$WORK/t"
step mk_d 60 "$T" mkmodel --preset qwen2.5-0.5b --pattern-seed 7 --pattern-divergence 0.1 --out "$WORK/d"
step mk_d_awq 60 "$T" mkmodel --preset qwen2.5-0.5b --quantization awq --pattern-seed 7 \
  --pattern-divergence 0.1 --out "$WORK/d-awq"
S="--device cuda:0 --input-len 64 --output-len 128 --batch-sizes 1,4 --ks 4"
step spec_bf16 150 "$T" bench spec --model "$WORK/t" --draft "$WORK/d" $S
step spec_fp8 150 "$T" bench spec --model "$WORK/t" --draft "$WORK/d" $S --quantization fp8 \
  --draft-quantization fp8
wait
for Q in awq gptq; do
  step ${Q}_b1 120 "$T" bench latency --model "$WORK/q7b-$Q" --input-len 128 --output-len 64 \
    --batch-size 1 --json
  step ${Q}_prefill 120 "$T" bench latency --model "$WORK/q7b-$Q" --input-len 2048 \
    --output-len 4 --batch-size 1 --json
done
step spec_awq 150 "$T" bench spec --model "$WORK/t-awq" --draft "$WORK/d-awq" $S
