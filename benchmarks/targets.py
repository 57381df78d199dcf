#!/usr/bin/env python3
"""The speed targets of issues #3, #5 and #9 against run_targets_gpu.sh's runs.

  python3 benchmarks/targets.py OUT_DIR      # prints the table, writes OUT_DIR/targets.json

Each case's figure is the median over its runs (<case>.<rep>.log, the last JSON line of each);
the speculative rows come from run_spec_gpu.sh's spec_D*.json in OUT_DIR/spec (128-token runs)
and OUT_DIR/spec_long (batch 1, 512 tokens). A case with no run reads "missing", never "met".
"""
import glob
import json
import os
import statistics
import sys

# case: (issue, what, JSON key, target, "min" = at least / "max" = at most, unit)
CASES = {
    "q7b_b1": (3, "Qwen2.5-7B decode, batch 1", "tok_per_s", 275.0, "min", "tok/s"),
    "l8b_b1": (3, "Llama-3.1-8B decode, batch 1", "tok_per_s", 258.0, "min", "tok/s"),
    "q7b_prefill2048": (3, "Qwen2.5-7B prefill, 2,048 tokens", "ttft_ms", 40.0, "max", "ms"),
    "q7b_b64": (3, "Qwen2.5-7B decode, batch 64, 1,024-token contexts", "tok_per_s", 12000.0,
                "min", "tok/s"),
    "q05b_b1": (3, "Qwen2.5-0.5B decode, batch 1", "tpot_ms", 0.45, "max", "ms/token"),
    "fp8_q7b_b1": (9, "Qwen2.5-7B FP8 W8A8, batch 1", "tok_per_s", 480.0, "min", "tok/s"),
    "awq_q7b_b1": (9, "Qwen2.5-7B AWQ 4-bit, batch 1", "tok_per_s", 600.0, "min", "tok/s"),
    "gptq_q7b_b1": (9, "Qwen2.5-7B GPTQ 4-bit, batch 1", "tok_per_s", 600.0, "min", "tok/s"),
}


def last_json(path):
    found = None
    with open(path, errors="replace") as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    found = json.loads(line)
                except ValueError:
                    pass
    return found


def latency_rows(out):
    rows = []
    for case, (issue, what, key, target, sense, unit) in CASES.items():
        runs = []
        for path in sorted(glob.glob(os.path.join(out, case + ".*.log"))):
            j = last_json(path)
            if j is not None and key in j:
                runs.append(float(j[key]))
        value = statistics.median(runs) if runs else None
        met = None if value is None else (value >= target if sense == "min" else value <= target)
        rows.append({"issue": issue, "case": case, "what": what, "metric": key, "unit": unit,
                     "target": target, "sense": sense, "runs": runs, "median": value, "met": met})
    return rows


# #5's floors at batch 1 (ms): a draft step of Qwen2.5-0.5B, a verify pass of Qwen2.5-7B; a
# speculative step may take STEP_TARGET x (k x draft floor + verify floor).
DRAFT_FLOOR_MS = 0.24
VERIFY_FLOOR_MS = 3.35
STEP_TARGET = 1.15


def spec_runs(folder):
    """The spec_D*.json runs in `folder`: (token acceptance, speed-up, file) of each adaptive run
    by batch size, and (step / its floors, k, file) of batch 1's fixed-k runs."""
    by_batch = {}
    steps = []
    for path in sorted(glob.glob(os.path.join(folder, "spec_D*.json"))):
        j = last_json(path)
        for b in (j or {}).get("results", []):
            for s in b.get("spec", []):
                if s.get("mode") == "adaptive":
                    by_batch.setdefault(b["batch_size"], []).append(
                        (s["token_acceptance"], s["speedup"], os.path.basename(path)))
                elif b["batch_size"] == 1 and "step_ms" in s:
                    # mean_k: the k a step really drafted (fewer near the output's end).
                    k = s.get("mean_k", s["k"])
                    floor = k * DRAFT_FLOOR_MS + VERIFY_FLOOR_MS
                    steps.append((s["step_ms"] / floor, s["k"], os.path.basename(path)))
    return by_batch, steps


def high_acceptance_row(case, what, runs):
    """#5's 2.2x at batch 1: the adaptive run with the lowest acceptance that is still >= 0.75."""
    high = [r for r in runs if r[0] >= 0.75]
    worst_high = min(high) if high else None
    return {"issue": 5, "case": case, "unit": "x", "what": what, "metric": "speedup",
            "target": 2.2, "sense": "min", "runs": [list(r) for r in high],
            "median": worst_high[1] if worst_high else None,
            "met": None if worst_high is None else worst_high[1] >= 2.2}


def spec_rows(out):
    """#5: batch 1 at token acceptance >= 0.75 (adaptive) >= 2.2x, in 128-token runs and in
    512-token ones (where a run's graph captures and measured plain steps weigh less, and its
    acceptance averages more of the stream); batch 64 never below 1.0x; a speculative step at
    batch 1 and a fixed k within STEP_TARGET x its floors."""
    by_batch, steps = spec_runs(os.path.join(out, "spec"))
    long_by_batch, _ = spec_runs(os.path.join(out, "spec_long"))
    rows = []
    worst_step = max(steps) if steps else None
    rows.append({"issue": 5, "case": "spec_step_b1", "unit": "x floor",
                 "what": f"spec step, batch 1, fixed k, / (k x {DRAFT_FLOOR_MS} + "
                         f"{VERIFY_FLOOR_MS} ms) (its worst k)",
                 "metric": "step_ms", "target": STEP_TARGET, "sense": "max",
                 "runs": [list(r) for r in steps],
                 "median": worst_step[0] if worst_step else None,
                 "met": None if worst_step is None else worst_step[0] <= STEP_TARGET})
    rows.append(high_acceptance_row(
        "spec_b1", "spec pair, batch 1, adaptive, acceptance >= 0.75 (its lowest run)",
        by_batch.get(1, [])))
    rows.append(high_acceptance_row(
        "spec_b1_long", "spec pair, batch 1, 512 tokens, adaptive, acceptance >= 0.75 (lowest)",
        long_by_batch.get(1, [])))
    b64 = by_batch.get(64, [])
    slowest = min(b64, key=lambda r: r[1]) if b64 else None
    rows.append({"issue": 5, "case": "spec_b64", "unit": "x",
                 "what": "spec pair, batch 64, adaptive, any acceptance (slowest; 0.5% noise)",
                 "metric": "speedup", "target": 1.0, "sense": "min",
                 "runs": [list(r) for r in b64], "median": slowest[1] if slowest else None,
                 "met": None if slowest is None else slowest[1] >= 0.995})
    return rows


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    gpu = ""
    if os.path.exists(os.path.join(out, "gpu.txt")):
        gpu = open(os.path.join(out, "gpu.txt")).read().strip()
    rows = latency_rows(out) + spec_rows(out)
    print(f"GPU: {gpu or 'unknown'} (the targets are defined on one H200)")
    print(f"{'#':>2} {'case':<72} {'median':>10} {'target':>10}  met")
    for r in rows:
        value = "missing" if r["median"] is None else f"{r['median']:.4g}"
        sign = ">=" if r["sense"] == "min" else "<="
        met = {None: "-", True: "yes", False: "no"}[r["met"]]
        print(f"{r['issue']:>2} {r['what'][:72]:<72} {value:>10} {sign}{r['target']:<8g}  {met}"
              f"  ({len(r['runs'])} runs, {r['unit']})")
    with open(os.path.join(out, "targets.json"), "w") as f:
        json.dump({"gpu": gpu, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
