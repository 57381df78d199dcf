#!/usr/bin/env python3
"""Per-kernel device time of a decode step from ncu's CSV (gpu__time_duration.sum), and the
difference between two runs (a 1-token against a 2-token step, main against a branch).

  kernel_breakdown.py --steps N A.csv [B.csv]

Each kernel is keyed by its name without namespaces or template arguments plus its grid, so
that a launch form chosen per token count (gemv_kernel<1, ...> / <2, ...>) lines up across the
two runs while lm_head's grid stays apart from the layers' GEMVs. ncu runs each kernel alone, so
these times hold no overlap between launches: their sum against the step's device span (bench
--device-timing 1) is what the overlap saves. Made by benchmarks/run_breakdown_gpu.sh.
"""
import argparse
import csv
import os
import sys

# ncu picks a unit per row, spelled long ("nsecond") or short ("ns", ncu 2025.3 on the H200 /
# H100 machines) by version.
UNIT_US = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6,
           "ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}


def base_name(name):
    """`void ns::(anonymous namespace)::gemv_kernel<2, float>(const T *, ...)` -> gemv_kernel."""
    # ncu 2025.3 writes the anonymous namespace as "unnamed>::" (its '<' lost), older ones as
    # "(anonymous namespace)::" or "<unnamed>::": a namespace, not a template or an argument list.
    for anon in ("(anonymous namespace)::", "<unnamed>::", "unnamed>::"):
        name = name.replace(anon, "")
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):  # the argument list: the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    head = name[:cut]
    # Template arguments off, then return type and namespaces.
    out, depth = [], 0
    for ch in head:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out).split()[-1].split("::")[-1]


def read(path):
    """{key: [total us, launches]} over every kernel row of one ncu CSV."""
    lines = open(path, errors="replace").read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"{path}: no ncu CSV header")
    rows = list(csv.reader(lines[start:]))
    head = rows[0]
    col = {k: head.index(k) for k in ("ID", "Kernel Name", "Grid Size", "Metric Name",
                                      "Metric Unit", "Metric Value")}
    kernels = {}
    for r in rows[1:]:
        if len(r) != len(head) or r[col["Metric Name"]] != "gpu__time_duration.sum":
            continue
        unit = r[col["Metric Unit"]]
        if unit not in UNIT_US:
            sys.exit(f"{path}: unknown unit {unit!r}")
        us = float(r[col["Metric Value"]].replace(",", "")) * UNIT_US[unit]
        key = f'{base_name(r[col["Kernel Name"]])} {r[col["Grid Size"]]}'
        total = kernels.setdefault(key, [0.0, 0])
        total[0] += us
        total[1] += 1
    return kernels


def table(runs, steps, names=None):
    """Lines of the table: a kernel's us a step (and launches a step) per run, and with two runs
    the second minus the first; the per-step sums."""
    keys = sorted({k for run in runs for k in run},
                  key=lambda k: -max(run.get(k, [0.0])[0] for run in runs))
    names = names or [f"run {i + 1}" for i in range(len(runs))]
    cols = [f"{name[:12]} us (n)" for name in names]
    lines = [f"{'kernel grid':58s}" + "".join(f"{c:>18s}" for c in cols) +
             (f"{'delta us':>11s}" if len(runs) == 2 else "")]
    sums = [0.0] * len(runs)
    for k in keys:
        cells, per = [], []
        for i, run in enumerate(runs):
            us, n = run.get(k, [0.0, 0])
            per.append(us / steps)
            sums[i] += us / steps
            cells.append(f"{us / steps:10.2f} ({n / steps:4.1f})")
        line = f"{k[:58]:58s}" + "".join(f"{c:>18s}" for c in cells)
        if len(runs) == 2:
            line += f"{per[1] - per[0]:11.2f}"
        lines.append(line)
    total = f"{'all kernels, a step':58s}" + "".join(f"{s:18.2f}" for s in sums)
    if len(runs) == 2:
        total += f"{sums[1] - sums[0]:11.2f}"
    lines.append(total)
    return lines, sums


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1, help="decode steps profiled in each run")
    ap.add_argument("csv", nargs="+", help="one or two ncu CSV files")
    a = ap.parse_args()
    if len(a.csv) > 2 or a.steps < 1:
        ap.error("one or two CSV files, --steps >= 1")
    names = [os.path.splitext(os.path.basename(p))[0] for p in a.csv]
    lines, _ = table([read(p) for p in a.csv], a.steps, names)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
