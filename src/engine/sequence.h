// One request's state inside the engine. vLLM v1's unifying idea: a sequence is a list of tokens
// (prompt, then output) and a count of those whose K/V is computed; a step schedules some of the
// rest. A new prompt, a chunk, a decode token and a resumed (preempted) request are all the same
// move, so one scheduler and one batch builder serve them all.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/events.h"
#include "kv/page_pool.h"
#include "sampling/sampler.h"
#include "sampling/sampling_params.h"
#include "sampling/stop_checker.h"
#include "tokenizer/tokenizer.h"
#include "trace/trace.h"

namespace tandem {

using Clock = std::chrono::steady_clock;

inline double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct Sequence {
  uint64_t id = 0;
  EngineObserver* observer = nullptr;
  int64_t arrival_order = 0;  // FCFS order; preempted sequences keep theirs

  std::vector<int32_t> tokens;  // prompt then output
  int32_t prompt_len = 0;
  int64_t num_computed = 0;  // tokens whose K/V is in `pages`
  BlockTable pages;          // in the decode stage's pool (the only pool on one device)
  BlockTable prefill_pages;  // in the prefill stage's pool, while a two-stage prefill runs

  // Prefix caching (engine/prefix_cache.h).
  std::vector<uint64_t> page_hashes;  // [full pages of tokens] hash chain, extended lazily
  int64_t cached_tokens = 0;          // tokens taken from the cache when last admitted
  // Two stages: the first decode page not yet valid on the decode stage (pages before it were
  // there already, or shipped). The next chunk ships from it.
  int32_t ship_from_page = 0;

  ResolvedSampling params;
  SamplingRng rng;
  std::unique_ptr<IncrementalDetokenizer> detok;
  std::unique_ptr<StopChecker> stop;

  // Speculative decoding (a draft model on the decode stage).
  bool speculative = false;
  BlockTable draft_pages;  // in the draft's pool
  BlockTable
      draft_prefill_pages;     // in the prefill stage's draft pool, while a two-stage prefill runs
  int64_t draft_computed = 0;  // tokens whose draft K/V is in draft_pages
  SamplingRng draft_rng;       // the draft's own stream: proposals never shift the target's draws
  // Running per-token acceptance (observe_acceptance in engine/spec_decoder.h): decayed counts
  // of accepted and tried draft positions, and their ratio. The start, 0.7 over one position, is
  // optimistic so that every sequence probes speculation.
  double spec_acceptance = 0.7;
  double spec_accepted_decayed = 0.7;
  double spec_tried_decayed = 1.0;
  SpecStats spec;

  int32_t preemptions = 0;
  RequestTrace trace;  // spans of every stage that worked on it
  Clock::time_point arrival;
  std::optional<Clock::time_point> first_scheduled;
  std::optional<Clock::time_point> prefill_done;
  std::optional<Clock::time_point> first_token;
  double kv_ship_exposed_ms = 0;  // KV transfer time not hidden behind prefill compute
  int32_t prefill_chunks = 0;
  int32_t decode_steps = 0;

  int32_t output_len() const { return int32_t(tokens.size()) - prompt_len; }
  std::span<const int32_t> prompt() const { return {tokens.data(), size_t(prompt_len)}; }
  std::span<const int32_t> output() const {
    return {tokens.data() + prompt_len, tokens.size() - size_t(prompt_len)};
  }
  // Tokens still to compute before the next sample.
  int64_t pending() const { return int64_t(tokens.size()) - num_computed; }
  bool in_prefill() const { return num_computed < prompt_len; }
};

}  // namespace tandem
