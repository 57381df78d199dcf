#!/usr/bin/env python3
"""A soak run of test_serve.py's cancel storm against one long-lived tandemd (not in CI).

Each round sends 24 concurrent long prompts with 16, 32 or 64 output tokens, kills 0-11 of the
clients at random moments, and then requires that every surviving client got its answer, and
that the daemon goes back to nothing running, nothing waiting and no page in use. On a stall
it prints the daemon's status and log and exits 1. One round of this, in CI, once hit a
two-stage stall that shows only when the timing lines up (docs/serving.md).

  python3 tests/integration/daemon/soak_serve.py build/daemon/tandemd build/tools/tandem \\
      [--rounds 60] [--stages two|one]

Run it from the repository root (it finds the tokenizer under node_modules there).
"""
import argparse
import os
import random
import subprocess
import sys
import time

args = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
args.add_argument("tandemd")
args.add_argument("tandem")
args.add_argument("--rounds", type=int, default=60)
args.add_argument("--stages", choices=("two", "one"), default="two")
opts = args.parse_args()

# test_serve.py takes the two binaries from argv when it is imported.
sys.argv = [sys.argv[0], os.path.abspath(opts.tandemd), os.path.abspath(opts.tandem)]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_serve as t  # noqa: E402

t.tandem("mkmodel", "--preset", "tiny-qwen", "--out", t.MODEL, "--tokenizer", t.QWEN_TOK,
         "--seed", 11)
stages = (("--prefill-device", "cpu:0", "--decode-device", "cpu:1") if opts.stages == "two"
          else ("--device", "cpu"))
daemon = t.Daemon("Soak", *stages)
for r in range(opts.rounds):
    rng = random.Random(r)
    max_tokens = rng.choice([16, 32, 64])
    procs = [t.generate(daemon.socket, c % t.DISTINCT, max_tokens) for c in range(t.CLIENTS)]
    victims = set(rng.sample(range(t.CLIENTS), rng.randrange(0, t.CLIENTS // 2)))
    start = time.time()
    for c in sorted(victims, key=lambda _: rng.random()):
        time.sleep(max(0.0, start + rng.uniform(0.0, 2.0) - time.time()))
        procs[c].kill()
    try:
        for c, p in enumerate(procs):
            out, err = daemon.finish(c, p, timeout=60)
            if c not in victims and p.returncode != 0 and "overloaded:" not in err:
                raise AssertionError(f"client {c} failed: {err}")
        s = daemon.wait_idle(20)
        used = [p["used_pages"] for p in s["pools"]]
        print(f"round {r}: {max_tokens} tokens, {len(victims)} killed, {time.time() - start:.1f} s, "
              f"running {s['running']} waiting {s['waiting']} pages in use {used}", flush=True)
        if s["running"] or s["waiting"] or any(used):
            raise daemon.diagnose(f"round {r}: the daemon did not go idle")
    except (AssertionError, subprocess.TimeoutExpired) as e:
        print(e, file=sys.stderr)
        for p in procs:
            p.kill()
        daemon.proc.kill()
        sys.exit(1)
daemon.stop()
print(f"{opts.rounds} rounds, no stall")
