// The latency benchmark's measurement, on any ModelRunner (the CPU runner too): one prompt's
// prefill (TTFT), then batch_size sequences decoding (greedily unless decode_sampling says
// otherwise), one token per sequence per step (TPOT), as vLLM's benchmark_latency reports them.
// Times are host-visible: each step ends when the host has the ids. With async_decode (the
// engine's default, `--async-decode`) one-token steps run as the engine runs them: the next
// step is launched, fed its tokens on the device, before this step's ids are read. With
// query_len > 1 each step carries that many tokens a sequence, every one a logit row, as a
// speculative verify pass does (k = query_len - 1): the step's cost as a function of k, apart
// from the draft; such a step reads its ids at once.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "gpu_clocks.h"
#include "runner/runner.h"

namespace tandem::bench {

struct LatencyOptions {
  int32_t input_len = 128;
  int32_t output_len = 128;
  int32_t batch_size = 1;
  int32_t query_len = 1;        // tokens a sequence per decode step, each sampled
  int32_t prefill_repeats = 5;  // TTFT is the median of these, after one warm-up
  bool async_decode = true;     // query_len 1 only: a verify-shaped step reads its ids at once
  // Decode steps sample with these settings (default greedy); penalties see prompt + output.
  ResolvedSampling decode_sampling = [] {
    ResolvedSampling s;
    s.temperature = 0.0f;
    return s;
  }();
  // Called once after the prefills, before the first decode step (a profiler's start).
  std::function<void()> before_decode;
};

struct LatencyResult {
  double ttft_ms = 0;    // median prefill of one prompt + its first sample
  double tpot_ms = 0;    // median decode step (batch_size * query_len tokens)
  double tok_per_s = 0;  // tokens a second through decode steps: batch_size * query_len / TPOT
  int64_t weight_bytes_per_step = 0;
  double achieved_tb_per_s = 0;  // weight bytes / TPOT
  double mbu = 0;                // against the 4.2 TB/s copy ceiling (GPU-MACHINE.md)
  // Median device span of a step's forward (CUDA events) where the runner records one
  // (RunnerOptions::device_timing); 0 otherwise. TPOT minus it is the sampling and the host's
  // turnaround between steps.
  double forward_device_ms = 0;
  double prefill_device_ms = 0;  // the first sequence's prompt forward, first event to last
  // The GPU's SM clock and power over the timed prefills and over the timed decode steps
  // (gpu_clocks.h); no samples on the CPU or without NVML.
  ClockStats prefill_clocks, decode_clocks;
  // [batch_size][(output_len - 1) * query_len] the decode steps' ids, for checks that the
  // asynchronous and the synchronous loop decode the same tokens.
  std::vector<std::vector<int32_t>> outputs;
};

// Needs runner.num_pages() >= batch_size * latency_pages_per_seq(opts, page_size), room for
// batch_size * query_len tokens and logit rows a step.
int32_t latency_pages_per_seq(const LatencyOptions& opts, int32_t page_size);
// weight_bytes_per_step: bytes read per decode step (weights, without the gathered embedding).
Result<LatencyResult> run_latency(ModelRunner& runner, const LatencyOptions& opts,
                                  int64_t weight_bytes_per_step);

std::string to_json(const LatencyOptions& opts, const LatencyResult& r, const std::string& label);

}  // namespace tandem::bench
