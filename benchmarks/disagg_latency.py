#!/usr/bin/env python3
"""Issue #4's latency measures against one running tandemd, through `tandem generate --json`
(the engine's own per-request timings, so client process start-up is not counted):

  ttft_2k      TTFT of a 2,048-token prompt (1 output token), with the exposed KV ship time
               after the last prefill chunk and the prefill time, median of --reps;
  tpot_idle    TPOT of a 128-token prompt generating --output-len tokens, nothing else running,
               with the model's sampling defaults (and once more greedy: tpot_idle_greedy);
  tpot_loaded  the same while a second client streams 8,192-token prompts (1 output token each)
               into prefill back to back; the ratio tpot_loaded / tpot_idle is the target
               (<= 1.1 disaggregated).

  disagg_latency.py --tandem build/tools/tandem --socket S --label L --out L.json
Prompt ids are random in [1000, 100000) from --seed, so no two prompts share a prefix.
"""
import argparse
import json
import random
import statistics
import subprocess
import threading
import time


def generate(tandem, socket, ids, max_tokens, extra=()):
    out = subprocess.run(
        [tandem, "generate", "--socket", socket, "--prompt-ids", ",".join(map(str, ids)),
         "--max-tokens", str(max_tokens), "--ignore-eos", "--json", *extra],
        check=True, capture_output=True, text=True, timeout=300).stdout
    return json.loads(out)


def summary(values):
    values = sorted(values)
    return {"median": statistics.median(values), "min": values[0], "max": values[-1],
            "n": len(values)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--label", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--load-prompt-len", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)

    def prompt(n):
        return [rng.randrange(1000, 100000) for _ in range(n)]

    generate(a.tandem, a.socket, prompt(2048), 1)  # warm-up: first use of each shape
    generate(a.tandem, a.socket, prompt(128), 8)

    ttft = [generate(a.tandem, a.socket, prompt(2048), 1)["timings"] for _ in range(a.reps)]
    idle = [generate(a.tandem, a.socket, prompt(128), a.output_len)["timings"]
            for _ in range(max(2, a.reps // 2))]
    # The same with temperature 0: the model's sampling defaults against plain argmax.
    idle_greedy = [generate(a.tandem, a.socket, prompt(128), a.output_len,
                            ("--temperature", "0"))["timings"] for _ in range(2)]

    stop = threading.Event()
    load_done = []
    load_prompts = [prompt(a.load_prompt_len) for _ in range(4)]

    def load():
        i = 0
        while not stop.is_set():
            t = generate(a.tandem, a.socket, load_prompts[i % len(load_prompts)] + [i], 1)
            load_done.append(t["timings"])
            i += 1

    loader = threading.Thread(target=load)
    loader.start()
    time.sleep(0.5)  # the first long prompt is in prefill before the measured stream starts
    loaded = [generate(a.tandem, a.socket, prompt(128), a.output_len)["timings"]
              for _ in range(max(2, a.reps // 2))]
    stop.set()
    loader.join()

    tpot_idle = summary([t["tpot"] for t in idle])
    tpot_loaded = summary([t["tpot"] for t in loaded])
    report = {
        "label": a.label,
        "ttft_2k_ms": summary([t["ttft"] for t in ttft]),
        "prefill_2k_ms": summary([t["prefill"] for t in ttft]),
        "kv_ship_exposed_2k_ms": summary([t["kv_ship"] for t in ttft]),
        "prefill_chunks_2k": ttft[0]["prefill_chunks"],
        "tpot_idle_ms": tpot_idle,
        "tpot_idle_greedy_ms": summary([t["tpot"] for t in idle_greedy]),
        "tpot_loaded_ms": tpot_loaded,
        "tpot_loaded_over_idle": tpot_loaded["median"] / tpot_idle["median"],
        "load_prompts_done": len(load_done),
        "load_prompt_ttft_ms": summary([t["ttft"] for t in load_done]) if load_done else None,
        "output_len": a.output_len,
        "load_prompt_len": a.load_prompt_len,
    }
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
