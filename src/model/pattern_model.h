// Pattern models: random-weight models whose greedy output follows a known next-token map, so
// a draft/target pair has an acceptance rate one can set while keeping the real shapes and costs.
//
// The map: ids [0, tokens) form one random cycle pi (from the pattern seed). A model with
// divergence D follows pi except on the ids a hash marks divergent (a fraction D), where it jumps
// two steps, pi(pi(t)); it never leaves the cycle, so a run visits many ids and the fraction of
// steps where two models of one seed disagree is the difference of their divergences.
//
// The weights: o_proj and down_proj are scaled down so the residual stream stays about the input
// token's embedding E[t]; lm_head is untied with row j = sum of E[s] over the ids s the map sends
// to j, so logit j ~ E[s].E[t] peaks at j = next(t) (a random row's dot product is ~sqrt(hidden)
// times smaller). Compute and bytes per token are the preset's: only values change.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"

namespace tandem::mkmodel {

struct PatternOptions {
  uint64_t seed = 0;        // the cycle; target and draft need the same
  double divergence = 0.0;  // fraction of ids where this model jumps two steps
  int64_t tokens = 0;       // cycle length; 0 = every id below bos_token_id (no special tokens)
};

class PatternMap {
 public:
  PatternMap(const PatternOptions& options, const ModelConfig& config);

  int64_t tokens() const { return int64_t(pi_.size()); }
  int32_t base_next(int32_t t) const { return pi_[size_t(t)]; }  // pi
  bool diverges(int32_t t) const;
  // This model's greedy next token after `t` (t < tokens()).
  int32_t next(int32_t t) const { return diverges(t) ? base_next(base_next(t)) : base_next(t); }
  // The ids s with next(s) == j: up to two, -1 for none.
  std::array<int32_t, 2> sources(int32_t j) const;

 private:
  std::vector<int32_t> pi_;      // [tokens] the cycle: pi_[t] follows t
  std::vector<int32_t> pi_inv_;  // [tokens]
  uint64_t divergence_key_ = 0;
  uint64_t threshold_ = 0;  // t diverges when hash(t) < threshold_
};

// Factor for o_proj and down_proj weights that keeps what all layers add to the residual stream
// about a tenth of the embedding's magnitude (derived from the init's 0.02 std and the shapes).
float pattern_residual_scale(const ModelConfig& config);

// Elements [first, first + count) of the pattern lm_head [vocab, hidden] of a model whose
// embedding has tensor key `embed_key`, written as dtype.
void fill_pattern_lm_head(const PatternMap& map, uint64_t embed_key, int64_t hidden, uint64_t first,
                          size_t count, DType dtype, std::byte* out);

// Multiplies `count` values of dtype in place.
void scale_values(std::byte* data, size_t count, DType dtype, float factor);

}  // namespace tandem::mkmodel
