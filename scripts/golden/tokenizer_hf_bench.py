#!/usr/bin/env python3
"""HF `tokenizers` side of benchmarks/tokenizer_bench.cc: same prompts, encoded one at a time on
one thread (run with RAYON_NUM_THREADS=1), same JSON fields.

  RAYON_NUM_THREADS=1 python3 scripts/golden/tokenizer_hf_bench.py --tokenizer DIR \
      --prompts tests/golden/tokenizer/bench_prompts.json [--rounds 20]"""
import argparse
import json
import pathlib
import time

import tokenizers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    tok = tokenizers.Tokenizer.from_file(str(pathlib.Path(args.tokenizer) / "tokenizer.json"))
    prompts = json.loads(pathlib.Path(args.prompts).read_text())
    result = {"impl": "hf-tokenizers " + tokenizers.__version__, "tokenizer": args.tokenizer,
              "rounds": args.rounds, "kinds": {}}
    for kind, texts in prompts.items():
        for t in texts:  # warm the word cache, as the C++ side does
            tok.encode(t, add_special_tokens=False)
        nbytes = sum(len(t.encode()) for t in texts)
        ntokens = sum(len(tok.encode(t, add_special_tokens=False).ids) for t in texts)
        start = time.perf_counter()
        for _ in range(args.rounds):
            for t in texts:
                tok.encode(t, add_special_tokens=False)
        secs = time.perf_counter() - start
        n = args.rounds * len(texts)
        result["kinds"][kind] = {"prompts": len(texts), "bytes_per_prompt": nbytes / len(texts),
                                 "tokens_per_prompt": ntokens / len(texts),
                                 "ms_per_prompt": secs * 1e3 / n,
                                 "mb_per_s": nbytes * args.rounds / secs / 1e6}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
