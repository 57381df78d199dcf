"""Structural checks of `tandem trace` (Chrome Trace Event JSON) and `tandem metrics`
(Prometheus text), shared by the integration tests. Each returns a list of problems (empty =
valid), the Python twin of tests/unit/trace/trace_checks.cc."""
import json
import math
import re

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_HELP = re.compile(rf"^# HELP ({_NAME}) \S.*$")
_TYPE = re.compile(rf"^# TYPE ({_NAME}) (counter|gauge|histogram|summary|untyped)$")
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"'
_SAMPLE = re.compile(rf"^({_NAME})(\{{({_LABEL}(,{_LABEL})*)?\}})? ([-+]?(\d*\.?\d+([eE][-+]?\d+)?|Inf)|NaN)$")
_LE = re.compile(r'le="([^"]*)"')


def check_trace(text, required=()):
    bad = []
    doc = json.loads(text)
    events = doc["traceEvents"]
    named = {e["tid"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    if not named:
        bad.append("no thread_name metadata")
    req = {}
    for e in events:
        if e.get("cat") == "request" and e.get("ph") in ("b", "e"):
            req.setdefault(e["id"], {}).setdefault(e["ph"], []).append(e["ts"])
    for rid, be in req.items():
        if len(be.get("b", [])) != 1 or len(be.get("e", [])) != 1:
            bad.append(f"request {rid}: not one b and one e")
    names = {}
    flows = {}
    for e in events:
        if e.get("ph") == "X":
            if e["dur"] < 0:
                bad.append(f"{e['name']}: negative dur")
            if e["tid"] not in named:
                bad.append(f"{e['name']}: track without thread_name")
            if e.get("cat") != "stage":
                continue
            rid = e["args"]["request_id"]
            names.setdefault(rid, set()).add(e["name"])
            be = req.get(rid)
            if not be:
                bad.append(f"{e['name']}: request {rid} missing")
            elif e["ts"] < be["b"][0] - 0.002 or e["ts"] + e["dur"] > be["e"][0] + 0.002:
                bad.append(f"{e['name']} of request {rid} outside it")
        elif e.get("cat") == "flow":
            flows.setdefault(e["id"], []).append((e["ph"], e["ts"]))
    for fid, evs in flows.items():
        s = [t for ph, t in evs if ph == "s"]
        f = [t for ph, t in evs if ph == "f"]
        if len(s) != 1 or len(f) != 1 or f[0] < s[0]:
            bad.append(f"flow {fid} does not resolve: {evs}")
    if not req:
        bad.append("no requests")
    for rid in req:
        for want in required:
            if want not in names.get(rid, set()):
                bad.append(f"request {rid} has no {want} span")
    return bad


def check_prometheus(text, required=()):
    bad = []
    families = set()
    family, kind = None, None
    hists = {}
    for n, line in enumerate(text.splitlines(), 1):
        if _HELP.match(line):
            continue
        m = _TYPE.match(line)
        if m:
            family, kind = m.group(1), m.group(2)
            if family in families:
                bad.append(f"line {n}: {family} typed twice")
            families.add(family)
            continue
        m = _SAMPLE.match(line)
        if not m:
            bad.append(f"line {n}: not HELP/TYPE/sample: {line!r}")
            continue
        name, labels, value = m.group(1), m.group(3) or "", float(m.group(5).replace("Inf", "inf"))
        if kind == "histogram":
            suffix = next((s for s in ("_bucket", "_sum", "_count") if name == family + s), None)
            if suffix is None:
                bad.append(f"line {n}: {name} outside {family}")
                continue
            h = hists.setdefault((family, _LE.sub("", labels)), {"buckets": [], "count": None})
            if suffix == "_bucket":
                le = _LE.search(labels)
                h["buckets"].append((float(le.group(1).replace("Inf", "inf")), value))
            elif suffix == "_count":
                h["count"] = value
        elif name != family:
            bad.append(f"line {n}: {name} outside {family}")
        elif kind == "counter" and value < 0:
            bad.append(f"line {n}: negative counter")
    for key, h in hists.items():
        b = h["buckets"]
        if not b or not math.isinf(b[-1][0]):
            bad.append(f"{key}: no +Inf bucket")
            continue
        if any(b[i][0] <= b[i - 1][0] or b[i][1] < b[i - 1][1] for i in range(1, len(b))):
            bad.append(f"{key}: buckets not monotone")
        if b[-1][1] != h["count"]:
            bad.append(f"{key}: +Inf != _count")
    for want in required:
        if want not in families:
            bad.append(f"no family {want}")
    return bad


def check_memory(status):
    """`tandem status --json`'s memory: per device, parts + free == total, no negative part."""
    bad = []
    if not status.get("memory"):
        return ["no memory breakdown"]
    for d in status["memory"]:
        parts = sum(p["bytes"] for p in d["parts"])
        if parts + d["free_bytes"] != d["total_bytes"]:
            bad.append(f"{d['device']}: parts {parts} + free {d['free_bytes']} != {d['total_bytes']}")
        bad += [f"{d['device']}: {p['name']} < 0" for p in d["parts"] if p["bytes"] < 0]
        if d["parts"][-1]["name"] != "other":
            bad.append(f"{d['device']}: no 'other' part last")
    return bad
