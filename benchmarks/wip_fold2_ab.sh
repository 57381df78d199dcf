#!/bin/bash
# Session 33, call 1 (prepared in session 32): wip-fold2 (new: 2-token GEMVs with first loads; TANDEM_FOLD2=1 folds 2-token 0.5B steps) against main (old); GPU tests of new with the switch on and off.
set -u
OUT=${OUT:-/tmp/out}
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p "$OUT/r"
cd .carry && tar xJf bin.tar.xz && cd ..
T0=$(date +%s); LIMIT=${LIMIT:-570}
step() {  # name need_s cmd...
  local name=$1 need=$2; shift 2
  local left=$(( LIMIT - ($(date +%s) - T0) ))
  if (( left < need )); then echo "$name SKIPPED (left $left)" >> "$OUT/r/summary.txt"; return; fi
  local t=$(date +%s)
  timeout $(( left - 5 )) "$@" > "$OUT/r/$name.log" 2>&1
  echo "$name rc=$? $(( $(date +%s) - t ))s" >> "$OUT/r/summary.txt"
  grep '^{' "$OUT/r/$name.log" | tail -1 | sed "s/^/$name /" >> "$OUT/r/lines.txt"
  (cd "$OUT" && tar czf results.tgz r)
}
N=.carry/bin/new; O=.carry/bin/old
F="env TANDEM_FOLD2=1"
for t in gpu_kernels gpu_runner gpu_golden gpu_quant_model; do step $t 100 $N/$t; done
for t in gpu_runner gpu_golden gpu_quant_model; do step ${t}_fold2 40 $F $N/$t; done
Q="--preset qwen2.5-0.5b --input-len 128 --output-len 64 --batch-size 1"
for i in 1 2; do
  step q2_old$i 10 $O/bench_decode_latency $Q --query-len 2
  step q2_new$i 10 $N/bench_decode_latency $Q --query-len 2
  step q2_fold2_$i 10 $F $N/bench_decode_latency $Q --query-len 2
  step b2_old$i 10 $O/bench_decode_latency $Q --batch-size 2
  step b2_fold2_$i 10 $F $N/bench_decode_latency $Q --batch-size 2
  step q1_old$i 10 $O/bench_decode_latency $Q
  step q1_new$i 10 $N/bench_decode_latency $Q
  step q2_7b_old$i 15 $O/bench_decode_latency --preset qwen2.5-7b --input-len 128 --output-len 32 --batch-size 1 --query-len 2
  step q2_7b_new$i 15 $N/bench_decode_latency --preset qwen2.5-7b --input-len 128 --output-len 32 --batch-size 1 --query-len 2
done
W=/tmp/spec; mkdir -p $W
step mk_q7b 100 $N/tandem mkmodel --preset qwen2.5-7b --out $W/q7b --pattern-seed 7 --pattern-divergence 0
step mk_d25 30 $N/tandem mkmodel --preset qwen2.5-0.5b --out $W/d25 --pattern-seed 7 --pattern-divergence 0.25
S="bench spec --model $W/q7b --draft $W/d25 --device cuda:0 --input-len 64 --output-len 128 --batch-sizes 1,4 --ks 4"
for i in 1 2; do
  step spec_old$i 45 $O/tandem $S
  step spec_fold2_$i 45 $F $N/tandem $S
done
NC="ncu --clock-control none --profile-from-start off --launch-count 400 --metrics gpu__time_duration.sum --csv"
step ncu_q2_fold2 40 $F $NC $N/bench_decode_latency --preset qwen2.5-0.5b --input-len 128 --output-len 5 --batch-size 1 --graphs 0 --profile-decode 1 --query-len 2
for f in gpu_kernels gpu_runner gpu_golden gpu_quant_model gpu_runner_fold2 gpu_golden_fold2 gpu_quant_model_fold2; do
  [ -f "$OUT/r/$f.log" ] && echo "$f: $(grep -E 'test cases:' $OUT/r/$f.log | tail -1)" >> "$OUT/r/tests.txt"
done
(cd "$OUT" && tar czf results.tgz r)
cat "$OUT/r/summary.txt"; cat $OUT/r/tests.txt; cut -c1-40,100-200 "$OUT/r/lines.txt"
