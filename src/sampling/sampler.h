// Reference (CPU) logits processing and sampling. The CUDA sampler must give the same token for
// the same logits, settings and random draw; tests compare them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sampling/sampling_params.h"

namespace tandem {

// Counter-based generator: the n-th draw of a request depends only on (seed, n), so CPU and GPU
// samplers, and a request resumed after preemption, draw the same numbers.
struct SamplingRng {
  uint64_t seed = 0;
  uint64_t counter = 0;  // draws made so far
  // Uniform in [0, 1) for draw number `counter`, then counter++.
  double next_uniform();
};
double philox_uniform(uint64_t seed, uint64_t counter);

// What the penalties need to know about a sequence.
struct TokenHistory {
  std::span<const int32_t> prompt;  // repetition_penalty looks at prompt + output
  std::span<const int32_t> output;  // presence/frequency penalties look at output only
};

// In place on one row of logits [vocab]: penalties, then min_tokens suppression of eos/stop ids
// (`suppress`), then rows >= valid_vocab set to -inf (padded embedding rows are never sampled).
void apply_logits_processors(std::span<float> logits, const ResolvedSampling& params,
                             const TokenHistory& history, std::span<const int32_t> suppress,
                             int32_t valid_vocab);

// Temperature, top-k, top-p and min-p turn processed logits into a probability vector [vocab]
// (zeros outside the kept set). Speculative decoding applies this to draft and target alike.
void logits_to_probs(std::span<const float> logits, const ResolvedSampling& params,
                     std::span<float> probs);

// Greedy (argmax, lowest id on ties) when temperature == 0, else inverse-CDF sampling of
// logits_to_probs with one uniform draw.
int32_t sample_token(std::span<const float> processed_logits, const ResolvedSampling& params,
                     SamplingRng& rng);

}  // namespace tandem
