// Lossless acceptance of draft tokens in speculative decoding (Leviathan et al. 2023; Chen et al.
// 2023): the emitted tokens have exactly the distribution target-only decoding would give.
// The target model scored k draft tokens in one forward: k + 1 rows, row i being the target's
// distribution for position i (row k is the "bonus" position after all drafts). Each row is
// processed (apply_logits_processors) with the history up to its position, drafts included, so
// the penalties match what target-only decoding would have applied.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sampling/sampler.h"

namespace tandem {

struct SpeculativeResult {
  std::vector<int32_t> tokens;  // accepted drafts, then one target token: 1..k+1 tokens
  int32_t num_accepted = 0;     // draft tokens accepted (tokens.size() - 1)
};

// Greedy: accept the longest prefix of drafts equal to the target's argmax (lowest id on ties) at
// each position, then the target's argmax at the first mismatch or at the bonus position.
// `target` is [k + 1, vocab] processed logits (or probabilities: only the argmax is read).
SpeculativeResult accept_greedy(std::span<const int32_t> draft_tokens,
                                std::span<const float> target, int32_t vocab);

// The same rule on the target's argmax ids [k + 1] (the runner's greedy sample() of each row,
// an argmax on the device for the CUDA runner): only ids cross to the host, never logits.
SpeculativeResult accept_greedy_ids(std::span<const int32_t> draft_tokens,
                                    std::span<const int32_t> target_ids);

// max(0, p_t - p_d) renormalised, into `out` [vocab]; all zeros when p_t <= p_d everywhere
// (p_t == p_d, where no rejection can happen). The distribution to sample after a rejection.
void residual_distribution(std::span<const float> target_probs, std::span<const float> draft_probs,
                           std::span<float> out);

using ResidualFn = void (*)(std::span<const float> target_probs, std::span<const float> draft_probs,
                            std::span<float> out);

// Sampling: for i in 0..k-1 accept draft x_i with probability min(1, p_t(x_i) / p_d(x_i)); at the
// first rejection sample from the residual (`residual`; tests inject a wrong one to show the
// distribution check catches it) and stop; if all k are accepted sample the bonus from p_t[k].
// `draft_probs` [k, vocab] and `target_probs` [k + 1, vocab] come from logits_to_probs with the
// request's settings. Draws, in this order: one uniform per acceptance test made, then one for
// the final token; the rng advances by (tests made + 1), so a request resumes reproducibly.
SpeculativeResult accept_sampled(std::span<const int32_t> draft_tokens,
                                 std::span<const float> draft_probs,
                                 std::span<const float> target_probs, int32_t vocab,
                                 SamplingRng& rng, ResidualFn residual = residual_distribution);
// The same with the draft's rows wherever they lie: draft_rows[i] is row i, `vocab` floats (the
// speculative decoder keeps each draft round's rows where the runner copied them).
SpeculativeResult accept_sampled(std::span<const int32_t> draft_tokens,
                                 std::span<const float* const> draft_rows,
                                 std::span<const float> target_probs, int32_t vocab,
                                 SamplingRng& rng, ResidualFn residual = residual_distribution);

}  // namespace tandem
