// What `tandem bench serve` sends: prompt and output lengths drawn from a seeded lognormal
// (ShareGPT-like: most requests short, a long tail) or read from a JSONL file, and the arrival
// time of each request (Poisson or fixed rate).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"

namespace tandem::bench {

struct ServeRequest {
  std::vector<int32_t> prompt_ids;  // [prompt_len] sent as token ids, when `prompt_text` is empty
  std::string prompt_text;          // sent as raw text (tokenized by the daemon) when set
  int32_t prompt_len = 0;           // tokens; 0 when only the daemon knows (text prompts)
  int32_t output_len = 0;           // max_tokens, with ignore_eos: every request runs this long
};

struct WorkloadOptions {
  int32_t num_prompts = 64;
  uint64_t seed = 0;
  // Lognormal lengths: median `input_len` / `output_len`, shape `len_sigma` (0 = every request
  // exactly the median), clamped to [1, max_*]. ShareGPT's conversations fit sigma ~ 0.8.
  int32_t input_len = 256;
  int32_t output_len = 128;
  double len_sigma = 0.8;
  int32_t max_input_len = 4096;
  int32_t max_output_len = 1024;
  // Synthetic prompts are uniform random ids in [min_token_id, max_token_id): ordinary
  // vocabulary of every supported tokenizer, no special tokens.
  int32_t min_token_id = 1000;
  int32_t max_token_id = 20000;
  // JSONL, one request a line: {"prompt": "text"} or {"prompt_ids": [..]} or {"prompt_len": N},
  // with "output_len" (or "max_tokens"); lines are used in order and repeated to num_prompts.
  std::string dataset;
};

Result<std::vector<ServeRequest>> make_workload(const WorkloadOptions& options);

enum class Arrivals { kPoisson, kFixed };

// Send offsets in seconds from the start, ascending: exponential gaps of mean 1/rate (Poisson)
// or exactly 1/rate; an infinite rate sends everything at 0.
std::vector<double> arrival_offsets(int32_t n, double rate, Arrivals kind, uint64_t seed);

}  // namespace tandem::bench
