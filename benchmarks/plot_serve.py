#!/usr/bin/env python3
"""Compare `tandem bench serve` runs (python stdlib only): one SVG with p99 TTFT, p99 TPOT,
throughput and goodput against request rate, one line per configuration, and a text table with
the issue #8 targets: (a)'s p99 TPOT under load / its unloaded TPOT (<= 1.2), and (a)'s best
goodput / (b)'s (>= 1.5). An unloaded run is read from <name>-unloaded.json next to <name>.json.
Missing files are skipped (a configuration that could not run on this machine).

  plot_serve.py --out compare.svg --table compare.txt a.json b.json c.json
"""
import argparse
import json
import math
import os
import sys

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]
W, H, ML, MB, MT = 430, 270, 62, 42, 32


def rate_of(r):
    return math.inf if r["request_rate"] == "inf" else float(r["request_rate"])


def nice_ceil(v):
    if v <= 0:
        return 1.0
    p = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 5, 10):
        if v <= m * p:
            return m * p
    return 10 * p


def panel(title, unit, series, get, x0, y0, slo=None):
    w, h = W - ML - 20, H - MB - MT
    left, top = x0 + ML, y0 + MT
    xs = sorted({rate_of(r) for _, doc in series for r in doc["results"] if math.isfinite(rate_of(r))})
    xmax = max(xs) if xs else 1.0
    ymax = max([get(r) for _, doc in series for r in doc["results"]] + [slo * 1.1 if slo else 0])
    ymax = nice_ceil(ymax * 1.05)
    px = lambda x: left + x / xmax * w
    py = lambda y: top + h - y / ymax * h
    out = [f"<text x='{x0 + W / 2:.1f}' y='{y0 + 20}' text-anchor='middle' font-weight='bold'>{title}</text>",
           f"<rect x='{left}' y='{top}' width='{w}' height='{h}' fill='none' stroke='#888'/>"]
    for i in range(5):
        v = ymax * i / 4
        out.append(f"<line x1='{left}' x2='{left + w}' y1='{py(v):.1f}' y2='{py(v):.1f}' stroke='#eee'/>")
        out.append(f"<text x='{left - 5}' y='{py(v) + 4:.1f}' text-anchor='end' font-size='11'>{v:g}</text>")
    for x in xs:
        out.append(f"<text x='{px(x):.1f}' y='{top + h + 15}' text-anchor='middle' font-size='11'>{x:g}</text>")
    out.append(f"<text x='{left + w / 2}' y='{top + h + 32}' text-anchor='middle' font-size='11'>"
               f"request rate (req/s); {unit}</text>")
    if slo:
        out.append(f"<line x1='{left}' x2='{left + w}' y1='{py(slo):.1f}' y2='{py(slo):.1f}' "
                   f"stroke='#999' stroke-width='2'/>")
    for k, (name, doc) in enumerate(series):
        pts = [(px(rate_of(r)), py(get(r))) for r in doc["results"] if math.isfinite(rate_of(r))]
        color = COLORS[k % len(COLORS)]
        out.append(f"<polyline fill='none' stroke='{color}' stroke-width='2' points='"
                   + " ".join(f"{x:.1f},{y:.1f}" for x, y in pts) + f"'><title>{name}</title></polyline>")
        out += [f"<circle cx='{x:.1f}' cy='{y:.1f}' r='3' fill='{color}'/>" for x, y in pts]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--table")
    ap.add_argument("runs", nargs="+")
    args = ap.parse_args()
    series, unloaded = [], {}
    for path in args.runs:
        if not os.path.exists(path):
            print(f"plot_serve: {path} missing, skipped", file=sys.stderr)
            continue
        with open(path) as f:
            doc = json.load(f)
        series.append((doc["label"], doc))
        u = path[:-len(".json")] + "-unloaded.json"
        if os.path.exists(u):
            with open(u) as f:
                unloaded[doc["label"]] = json.load(f)["results"][0]
    if not series:
        sys.exit("plot_serve: no runs to compare")
    slo = series[0][1]["slo"]
    svg = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{2 * W}' height='{2 * H + 70}' "
           "font-family='sans-serif' font-size='12'>", "<rect width='100%' height='100%' fill='white'/>"]
    svg += panel("TTFT p99 (ms)", "grey: SLO", series, lambda r: r["ttft_ms"]["p99"], 0, 0, slo["ttft_ms"])
    svg += panel("TPOT p99 (ms)", "grey: SLO", series, lambda r: r["tpot_ms"]["p99"], W, 0, slo["tpot_ms"])
    svg += panel("Throughput (req/s)", "completed", series, lambda r: r["request_throughput"], 0, H)
    svg += panel("Goodput (req/s)", "within the SLO", series, lambda r: r["goodput"], W, H)
    for k, (name, _) in enumerate(series):
        y = 2 * H + 20 + 16 * (k // 3)
        x = 20 + 280 * (k % 3)
        svg.append(f"<line x1='{x}' x2='{x + 24}' y1='{y - 4}' y2='{y - 4}' stroke='{COLORS[k % len(COLORS)]}' stroke-width='3'/>")
        svg.append(f"<text x='{x + 30}' y='{y}'>{name}</text>")
    svg.append("</svg>")
    with open(args.out, "w") as f:
        f.write("\n".join(svg) + "\n")

    lines = [f"SLO: TTFT p99 <= {slo['ttft_ms']} ms, TPOT p99 <= {slo['tpot_ms']} ms",
             f"{'config':<18}{'rate':>6}{'done':>6}{'fail':>6}{'TTFT p99':>10}{'TPOT p50':>10}"
             f"{'TPOT p99':>10}{'req/s':>8}{'good/s':>8}"]
    for name, doc in series:
        for r in doc["results"]:
            lines.append(f"{name:<18}{str(r['request_rate']):>6}{r['completed']:>6}{r['failed']:>6}"
                         f"{r['ttft_ms']['p99']:>10.1f}{r['tpot_ms']['p50']:>10.2f}"
                         f"{r['tpot_ms']['p99']:>10.2f}{r['request_throughput']:>8.2f}{r['goodput']:>8.2f}")
        if name in unloaded:
            u = unloaded[name]["tpot_ms"]["p50"]
            worst = max(r["tpot_ms"]["p99"] for r in doc["results"])
            lines.append(f"{name}: unloaded TPOT {u:.2f} ms; worst p99 TPOT under load "
                         f"{worst:.2f} ms = {worst / u if u else float('nan'):.2f}x (target for (a): <= 1.2x)")
    best = {name: max(r["goodput"] for r in doc["results"]) for name, doc in series}
    a = next((n for n in best if n.startswith("a")), None)
    b = next((n for n in best if n.startswith("b")), None)
    if a and b:
        ratio = best[a] / best[b] if best[b] > 0 else float("inf")
        lines.append(f"best goodput: {a} {best[a]:.2f} req/s, {b} {best[b]:.2f} req/s: "
                     f"{ratio:.2f}x (target >= 1.5x)")
    text = "\n".join(lines)
    print(text)
    if args.table:
        with open(args.table, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
