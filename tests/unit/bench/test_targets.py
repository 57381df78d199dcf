"""benchmarks/targets.py on made-up runs: medians, the sense of each target, missing cases, and
the speculative rows' choice of run.   python3 test_targets.py path/to/targets.py"""
import importlib.util
import json
import os
import sys
import tempfile


def load(path):
    spec = importlib.util.spec_from_file_location("targets", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def main():
    targets = load(sys.argv[1])
    out = tempfile.mkdtemp()
    # Three 7B runs (median 276, met), one above the 0.5B's limit, noise lines before the JSON.
    write(f"{out}/q7b_b1.1.log", 'x\n{"tok_per_s": 270.0}\n')
    write(f"{out}/q7b_b1.2.log", '{"tok_per_s": 276.0}\n')
    write(f"{out}/q7b_b1.3.log", 'warming up\n{"tok_per_s": 281.0}\n{broken\n')
    write(f"{out}/q05b_b1.1.log", '{"tpot_ms": 0.51}\n')
    write(f"{out}/q7b_prefill2048.1.log", '{"ttft_ms": 39.5}\n')
    # A log without the key and one without JSON count as no run.
    write(f"{out}/l8b_b1.1.log", '{"tpot_ms": 3.9}\n')
    write(f"{out}/fp8_q7b_b1.1.log", "Segmentation fault\n")
    # b64 must not be read as b1.
    write(f"{out}/q7b_b64.1.log", '{"tok_per_s": 11500.0}\n')
    spec = {"results": [
        {"batch_size": 1, "spec": [
            {"mode": "adaptive", "token_acceptance": 0.91, "speedup": 2.9},
            {"mode": "adaptive", "token_acceptance": 0.77, "speedup": 2.0},
            {"mode": "fixed", "k": 2, "mean_k": 2.0, "step_ms": 4.5, "token_acceptance": 0.77,
             "speedup": 2.5},
            {"mode": "fixed", "k": 4, "mean_k": 3.5, "step_ms": 5.0, "token_acceptance": 0.77,
             "speedup": 2.4},
            {"mode": "adaptive", "token_acceptance": 0.5, "speedup": 1.3}]},
        {"batch_size": 64, "spec": [
            {"mode": "adaptive", "token_acceptance": 0.9, "speedup": 1.01},
            {"mode": "fixed", "k": 8, "step_ms": 90.0, "token_acceptance": 0.9, "speedup": 0.5},
            {"mode": "adaptive", "token_acceptance": 0.5, "speedup": 0.97}]}]}
    write(f"{out}/spec/spec_D0.25.json", json.dumps(spec) + "\n")
    # The 512-token runs have a row of their own: the lowest acceptance >= 0.75 decides there too,
    # whatever the 128-token runs gave, and a fixed k's speed-up is not counted.
    long_runs = {"results": [{"batch_size": 1, "spec": [
        {"mode": "fixed", "k": 5, "mean_k": 5.0, "step_ms": 7.5, "token_acceptance": 0.78,
         "speedup": 2.27},
        {"mode": "adaptive", "token_acceptance": 0.771, "speedup": 2.18}]}]}
    write(f"{out}/spec_long/spec_D0.20.json", json.dumps(long_runs) + "\n")
    write(f"{out}/spec_long/spec_D0.17.json", json.dumps({"results": [{"batch_size": 1, "spec": [
        {"mode": "adaptive", "token_acceptance": 0.803, "speedup": 2.37},
        {"mode": "adaptive", "token_acceptance": 0.70, "speedup": 1.9}]}]}) + "\n")

    rows = {r["case"]: r for r in targets.latency_rows(out) + targets.spec_rows(out)}
    failures = []

    def expect(case, median, met):
        r = rows[case]
        if r["median"] != median or r["met"] is not met:
            failures.append(f"{case}: median {r['median']} met {r['met']}, want {median} {met}")

    expect("q7b_b1", 276.0, True)
    expect("q05b_b1", 0.51, False)        # at most 0.45
    expect("q7b_prefill2048", 39.5, True)  # at most 40
    expect("l8b_b1", None, None)           # no tok_per_s in its run
    expect("fp8_q7b_b1", None, None)       # no JSON at all
    expect("q7b_b64", 11500.0, False)
    expect("awq_q7b_b1", None, None)
    expect("spec_b1", 2.0, False)          # the fixed k's 2.5 and the 0.5 run are not counted
    expect("spec_b64", 0.97, False)        # the slowest run decides
    expect("spec_b1_long", 2.18, False)    # 0.771's run, not 0.803's or 0.70's
    if len(rows["spec_b1_long"]["runs"]) != 2:
        failures.append(f"spec_b1_long runs {rows['spec_b1_long']['runs']}")
    # Without a spec_long folder the row is missing, never met.
    bare = tempfile.mkdtemp()
    write(f"{bare}/spec/spec_D0.25.json", json.dumps(spec) + "\n")
    long_row = {r["case"]: r for r in targets.spec_rows(bare)}["spec_b1_long"]
    if long_row["median"] is not None or long_row["met"] is not None:
        failures.append(f"spec_b1_long without runs: {long_row}")
    # k = 4 drafted 3.5 a step: 5.0 / (3.5 x 0.24 + 3.35) = 1.193 is the worst. Its nominal k would
    # read 5.0 / 4.31 = 1.160, below k = 2's 4.5 / 3.83 = 1.175; batch 64's 90 ms is not counted.
    want_step = max(4.5 / (2 * 0.24 + 3.35), 5.0 / (3.5 * 0.24 + 3.35))
    expect("spec_step_b1", want_step, False)
    if len(rows["q7b_b1"]["runs"]) != 3:
        failures.append(f"q7b_b1 runs {rows['q7b_b1']['runs']}")
    for f in failures:
        print("FAIL", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
