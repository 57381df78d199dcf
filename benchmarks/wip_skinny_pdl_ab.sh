#!/bin/bash
# Session 33 (prepared in session 32): wip-skinny-pdl (new: skinny GEMMs and rope_kv in overlapped form; TANDEM_SKINNY_PDL=1 overlaps 2-32-token bf16 steps) against main (old). Carry main's build as .carry/bin/old and this branch's as .carry/bin/new (tandem, bench_decode_latency, gpu_kernels, gpu_runner, gpu_golden, gpu_quant_model) in .carry/bin.tar.xz; run from the repository root.
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
P="env TANDEM_SKINNY_PDL=1"
step gpu_kernels 100 $N/gpu_kernels
for t in gpu_runner gpu_golden gpu_quant_model; do step ${t}_pdl 40 $P $N/$t; done
L="--input-len 128 --output-len 32"
for i in 1; do  # x1: the spec runs below need the time
  for s in "q5:--preset qwen2.5-7b $L --batch-size 1 --query-len 5" "b4:--preset qwen2.5-7b $L --batch-size 4" \
           "b4q5:--preset qwen2.5-7b $L --batch-size 4 --query-len 5" "d4:--preset qwen2.5-0.5b $L --batch-size 4" \
           "d1q2:--preset qwen2.5-0.5b $L --batch-size 1 --query-len 2"; do
    n=${s%%:*}; a=${s#*:}
    step ${n}_old$i 15 $O/bench_decode_latency $a
    step ${n}_new$i 15 $N/bench_decode_latency $a
    step ${n}_pdl$i 15 $P $N/bench_decode_latency $a
  done
done
W=/tmp/spec; mkdir -p $W
step mk_q7b 100 $N/tandem mkmodel --preset qwen2.5-7b --out $W/q7b --pattern-seed 7 --pattern-divergence 0
step mk_d25 30 $N/tandem mkmodel --preset qwen2.5-0.5b --out $W/d25 --pattern-seed 7 --pattern-divergence 0.25
S="bench spec --model $W/q7b --draft $W/d25 --device cuda:0 --input-len 64 --output-len 128 --batch-sizes 1,4 --ks 4"
for i in 1 2; do
  step spec_old$i 45 $O/tandem $S
  step spec_pdl$i 45 $P $N/tandem $S
done
for f in gpu_kernels gpu_runner_pdl gpu_golden_pdl gpu_quant_model_pdl; do
  [ -f "$OUT/r/$f.log" ] && echo "$f: $(grep -E 'test cases:' $OUT/r/$f.log | tail -1)" >> "$OUT/r/tests.txt"
done
(cd "$OUT" && tar czf results.tgz r)
cat "$OUT/r/summary.txt"; cat $OUT/r/tests.txt; cut -c1-40,100-200 "$OUT/r/lines.txt"
