#!/usr/bin/env python3
"""Turns a run into pictures (SVG, Python stdlib only).

  plot.py TRACE.json [-o OUT.svg]   `tandem trace` output: per-request stage breakdown (stacked
                                    bars of time per span name) and p50/p90/p99 of each stage's
                                    span durations.
  plot.py BENCH.json [-o OUT.svg]   a benchmarks/results file: every {p50, p90, p99, ...} object
                                    in it becomes a group of percentile bars.
"""
import argparse
import json
import math
import sys
from xml.sax.saxutils import escape

COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
          "#ff9da7", "#9c755f", "#bab0ac"]
# Stages in pipeline order; others follow alphabetically.
ORDER = ["tokenize", "queue", "prefill_chunk", "kv_ship", "decode_ready", "decode_step",
         "spec_draft", "spec_verify", "detokenize", "stream_write"]


def percentile(values, q):
    v = sorted(values)
    if not v:
        return 0.0
    k = (len(v) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


class Svg:
    def __init__(self, width, height):
        self.w, self.h, self.items = width, height, []

    def rect(self, x, y, w, h, fill, title=None):
        t = f"<title>{escape(title)}</title>" if title else ""
        self.items.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" '
                          f'height="{h:.1f}" fill="{fill}">{t}</rect>')

    def text(self, x, y, s, size=11, anchor="start", weight="normal"):
        self.items.append(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" '
                          f'text-anchor="{anchor}" font-weight="{weight}" '
                          f'font-family="sans-serif">{escape(str(s))}</text>')

    def line(self, x1, y1, x2, y2, color="#ccc"):
        self.items.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
                          f'stroke="{color}"/>')

    def render(self):
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.w}" height="{self.h}" '
                f'viewBox="0 0 {self.w} {self.h}"><rect width="100%" height="100%" fill="white"/>'
                + "".join(self.items) + "</svg>\n")


def nice_max(v):
    if v <= 0:
        return 1.0
    e = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 2.5, 5, 10):
        if m * e >= v:
            return m * e
    return 10 * e


def axis(svg, x0, y0, width, vmax, unit, ticks=5):
    for i in range(ticks + 1):
        x = x0 + width * i / ticks
        svg.line(x, y0, x, y0 + 4, "#666")
        svg.text(x, y0 + 16, f"{vmax * i / ticks:g}", 10, "middle")
    svg.text(x0 + width, y0 + 30, unit, 10, "end")


def stage_order(names):
    return [n for n in ORDER if n in names] + sorted(n for n in names if n not in ORDER)


def plot_trace(doc, title):
    events = doc["traceEvents"]
    per_req, durations = {}, {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "stage":
            rid = e["args"]["request_id"]
            ms = e["dur"] / 1000.0
            per_req.setdefault(rid, {}).setdefault(e["name"], 0.0)
            per_req[rid][e["name"]] += ms
            durations.setdefault(e["name"], []).append(ms)
    if not per_req:
        sys.exit("no stage spans in the trace")
    stages = stage_order(durations)
    color = {s: COLORS[i % len(COLORS)] for i, s in enumerate(stages)}
    reqs = sorted(per_req)[-20:]
    left, right, bar_h = 120, 40, 18
    width = 900
    plot_w = width - left - right
    top1 = 60
    h1 = len(reqs) * (bar_h + 6)
    top2 = top1 + h1 + 90
    h2 = len(stages) * (3 * 10 + 10)
    svg = Svg(width, top2 + h2 + 80)
    svg.text(width / 2, 24, title, 15, "middle", "bold")
    svg.text(left, top1 - 12, "Time per stage per request (sum of span durations, ms; "
             "stages overlap in time, e.g. KV ship under prefill)", 12)
    vmax = nice_max(max(sum(r.values()) for r in per_req.values()))
    for i, rid in enumerate(reqs):
        y = top1 + i * (bar_h + 6)
        svg.text(left - 8, y + bar_h - 5, f"request {rid}", 11, "end")
        x = left
        for s in stages:
            v = per_req[rid].get(s, 0.0)
            w = plot_w * v / vmax
            svg.rect(x, y, w, bar_h, color[s], f"{s}: {v:.3f} ms")
            x += w
    axis(svg, left, top1 + h1, plot_w, vmax, "ms")
    # Legend.
    lx = left
    for s in stages:
        svg.rect(lx, top1 + h1 + 40, 10, 10, color[s])
        svg.text(lx + 14, top1 + h1 + 49, s, 10)
        lx += 14 + 7 * len(s) + 16
    # Percentiles of span durations per stage.
    svg.text(left, top2 - 12, "Span duration percentiles per stage (p50 / p90 / p99, ms)", 12)
    pmax = nice_max(max(percentile(v, 0.99) for v in durations.values()))
    for i, s in enumerate(stages):
        y = top2 + i * 40
        svg.text(left - 8, y + 17, f"{s} (n={len(durations[s])})", 10, "end")
        for j, (q, shade) in enumerate(((0.5, 1.0), (0.9, 0.7), (0.99, 0.45))):
            v = percentile(durations[s], q)
            svg.rect(left, y + j * 10, plot_w * v / pmax, 9, color[s], f"p{int(q * 100)} {v:.3f} ms")
            svg.items[-1] = svg.items[-1].replace("<rect ", f'<rect fill-opacity="{shade}" ', 1)
            svg.text(left + plot_w * v / pmax + 4, y + j * 10 + 8, f"p{int(q * 100)} {v:.3f}", 9)
    axis(svg, left, top2 + len(stages) * 40, plot_w, pmax, "ms")
    return svg.render()


def find_percentiles(node, path=""):
    """Every dict with p50-style keys: (path, {label: value})."""
    out = []
    if isinstance(node, dict):
        ps = {k: v for k, v in node.items()
              if isinstance(v, (int, float)) and k.lower().lstrip("p").replace(".", "").isdigit()
              and k.lower().startswith("p")}
        if ps:
            out.append((path or "result", ps))
        for k, v in node.items():
            out += find_percentiles(v, f"{path}.{k}" if path else k)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += find_percentiles(v, f"{path}[{i}]")
    return out


def plot_bench(doc, title):
    groups = find_percentiles(doc)
    if not groups:
        sys.exit("no percentile objects (p50, p90, ...) in the JSON")
    left, width = 220, 900
    plot_w = width - left - 60
    rows = sum(len(g) for _, g in groups)
    svg = Svg(width, 80 + rows * 14 + len(groups) * 16 + 40)
    svg.text(width / 2, 24, title, 15, "middle", "bold")
    vmax = nice_max(max(v for _, g in groups for v in g.values()))
    y = 50
    for gi, (path, g) in enumerate(groups):
        svg.text(left - 8, y + 10, path, 11, "end", "bold")
        for k in sorted(g, key=lambda k: float(k[1:] or 0)):
            svg.rect(left, y, plot_w * g[k] / vmax, 11, COLORS[gi % len(COLORS)], f"{k} {g[k]}")
            svg.text(left + plot_w * g[k] / vmax + 4, y + 9, f"{k} {g[k]:g}", 9)
            y += 14
        y += 16
    axis(svg, left, y, plot_w, vmax, "(units of the file)")
    return svg.render()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("-o", "--output", help="SVG path (default: INPUT with .svg)")
    ap.add_argument("--title")
    a = ap.parse_args()
    with open(a.input) as f:
        doc = json.load(f)
    title = a.title or a.input.rsplit("/", 1)[-1]
    svg = plot_trace(doc, title) if "traceEvents" in doc else plot_bench(doc, title)
    out = a.output or a.input.rsplit(".", 1)[0] + ".svg"
    with open(out, "w") as f:
        f.write(svg)
    print(out)


if __name__ == "__main__":
    main()
