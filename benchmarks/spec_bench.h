// The speculative-decoding benchmark behind `tandem bench spec`: a target and a draft runner on
// one device, batch B decoding N tokens (greedily, or sampled at --temperature), without
// speculation and with SpecDecoder at
// fixed k and with the adaptive policy. It reports what the cost model needs (draft step time,
// verify time as a function of k), the measured acceptance, and tok/s with and without. Every
// speculative run must reproduce the plain run's tokens; the result says whether it did.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "runner/runner.h"

namespace tandem::bench {

struct SpecBenchOptions {
  int32_t input_len = 64;
  int32_t output_len = 128;  // tokens generated per sequence (N)
  std::vector<int32_t> batch_sizes = {1, 4, 16, 64};
  std::vector<int32_t> ks = {1, 2, 4, 8};  // fixed draft lengths; the adaptive run uses max(ks)
  int32_t spec_max_batch = 32;             // the adaptive policy's --spec-max-batch
  // An adaptive run for each (SpecConfig::k_tie), in one process: the A/B of the policy's
  // choice between near-equal k meets the same warm graphs and the same plain runs.
  std::vector<double> k_ties = {0.0};
  int32_t valid_vocab = 0;  // ids both models sample over
  int32_t draft_vocab = 0;  // of them, those the draft scores (the engines' --draft-vocab; 0 = all)
  int32_t max_forward_tokens = 0;  // the runners' max_batch_tokens (0: no limit)
  // 0: greedy (every speculative run must reproduce the plain run's tokens). > 0: sampled at
  // this temperature, unseeded generators fixed per sequence: the rejection rule runs, and the
  // tokens differ from the plain run's (the distributions are equal), so no comparison is made.
  float temperature = 0.0f;
  // The engines' --async-decode (default on): plain steps launched before the last one's tokens
  // are read, and an all-greedy speculative step's draft rounds likewise (SpecConfig::
  // async_rounds). Off: both synchronous.
  bool async_decode = true;
};

struct SpecRun {
  std::string mode;  // "fixed" or "adaptive"
  int32_t k = 0;     // fixed: k; adaptive: draft_max
  double k_tie = 0;  // adaptive: SpecConfig::k_tie
  int64_t steps = 0;
  int64_t plain_steps = 0;      // steps without drafts (adaptive: the policy's or the gate's)
  double draft_step_ms = 0;     // one draft forward of the batch (mean)
  double verify_ms = 0;         // the target's k+1-position pass (mean per step)
  double accept_ms = 0;         // host acceptance (mean per step)
  double step_ms = 0;           // a whole speculative step (mean)
  double acceptance_rate = 0;   // accepted / proposed
  double token_acceptance = 0;  // per-token alpha: accepted / (accepted + rejections)
  double tokens_per_step = 0;   // per sequence: accepted + 1
  double mean_k = 0;            // proposals per sequence and speculative step (adaptive: chosen k)
  // The steps without draft rounds (gated, or k = 0 for all), mean ms: what a plain step costs
  // inside the speculative decoder (the draft's catch-up in chunks included).
  double plain_step_ms = 0;
  double cost_ratio = 0;   // the policy's c (draft round / verify pass) at the end of the run
  double verify_cost = 0;  // the policy's v (verify pass / plain step) at the end (1: unmeasured)
  double tok_per_s = 0;
  double speedup = 0;  // tok_per_s over the plain run's
  // tok_per_s over the mean of the plain runs before and after all speculative runs (A-B-A):
  // cancels a drift that is linear in time (batch 64: plain 4.846 ms before, 4.950 after, the
  // plain-routed adaptive run 4.944 between them; H200, NOTES.md v16).
  double speedup_bracketed = 0;
  // tok/s over the timed steps in which every sequence was still decoding, and over the plain
  // run's tok/s: what a server that keeps its batch full would see. A closed batch's sequences
  // finish at different steps when they speculate, and its last steps run a few sequences at
  // nearly a full step's cost: batch 64 at acceptance ~0.6 (H100, NOTES.md v59), adaptive
  // 0.875x end to end and 1.045x with the batch full, fixed k = 4 0.834x and 0.933x.
  double full_batch_tok_per_s = 0;
  double full_batch_speedup = 0;
  bool outputs_match = false;  // greedy only (null in the JSON when sampled)
  // CUDA graphs the runners captured during the timed steps (0 in a steady state; each capture
  // costs milliseconds inside a step's time).
  int64_t timed_captures = 0;
};

struct SpecBatchResult {
  int32_t batch_size = 0;
  double plain_step_ms = 0;  // mean decode step of the batch without speculation (the baseline)
  // The same, timed again after the speculative runs: the baseline runs first, and a drift
  // between the two (clocks, the allocator) shows here instead of in the speed-ups.
  double plain_after_step_ms = 0;
  double plain_tok_per_s = 0;
  std::vector<SpecRun> runs;
};

// The runners need page pools for max(batch_sizes) sequences of input_len + output_len +
// max(ks) + 1 tokens, and max_batch_tokens >= max(batch) * (max(ks) + 1).
Result<std::vector<SpecBatchResult>> run_spec_bench(ModelRunner& target, ModelRunner& draft,
                                                    const SpecBenchOptions& opts);

std::string spec_bench_json(const SpecBenchOptions& opts, const std::vector<SpecBatchResult>& r,
                            const std::string& target_label, const std::string& draft_label);

}  // namespace tandem::bench
