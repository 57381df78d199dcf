// Reference (CPU) logits processing and sampling. The CUDA sampler must give the same token for
// the same logits, settings and random draw; tests compare them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sampling/philox.h"
#include "sampling/sampling_params.h"

namespace tandem {

// Counter-based generator: the n-th draw of a request depends only on (seed, n), so CPU and GPU
// samplers, and a request resumed after preemption, draw the same numbers.
struct SamplingRng {
  uint64_t seed = 0;
  uint64_t counter = 0;  // draws made so far
  // Uniform in [0, 1) for draw number `counter`, then counter++.
  double next_uniform() { return philox_uniform(seed, counter++); }
};
// philox_uniform(seed, counter) lives in sampling/philox.h, shared with the CUDA sampler.

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
// The rules the CUDA sampler mirrors, in order: logits / temperature; top-k keeps every logit >=
// the k-th largest (ties all stay); softmax; top-p sorts by probability (lower id first on ties)
// and keeps tokens until their sum reaches top_p (at least one); min-p drops p < min_p × p_max;
// renormalise. Temperature 0 gives a one-hot vector at the argmax (lowest id on ties).
void logits_to_probs(std::span<const float> logits, const ResolvedSampling& params,
                     std::span<float> probs);

// Greedy (argmax, lowest id on ties) when temperature == 0, without a draw; else inverse-CDF
// sampling of logits_to_probs with exactly one uniform draw.
int32_t sample_token(std::span<const float> processed_logits, const ResolvedSampling& params,
                     SamplingRng& rng);

// The pieces of sample_token, shared with speculative acceptance.
// Lowest id among the largest values; NaN never wins.
int32_t argmax_lowest(std::span<const float> values);
// The first id whose cumulative probability exceeds u × total (total = sum of probs, so rounding
// in the normalisation cannot run off the end); zero-probability ids are never returned.
int32_t sample_from_probs(std::span<const float> probs, double u);

}  // namespace tandem
