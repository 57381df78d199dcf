// Random inputs for speculative acceptance of sampled sequences over ProbRows slots, shared by
// the CPU runner's test (tests/unit/runner) and the CUDA kernel's (tests/gpu): per sequence k
// proposals drawn from its draft rows, and k + 1 target rows. Positions are forced where the
// rule has distinct paths: rows equal (always accepted), the proposal's target mass zeroed
// (always rejected), the target a scaled-down draft (rejected half the time with an empty
// residual: the host then draws from p_t), or independent rows. Rows lie at shuffled slots with
// NaN rows between them, so reading a wrong slot shows.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "sampling/sampler.h"
#include "sampling/speculative.h"

namespace tandem::testing {

struct AcceptSeqCase {
  std::vector<int32_t> tokens;       // [k]
  std::vector<int32_t> draft_slots;  // [k]
  int32_t target_slot = 0;           // first of k + 1
  SamplingRng rng;                   // the state before acceptance
};

struct AcceptCase {
  int32_t width = 0;
  std::vector<float> draft_rows;   // [draft slots, width]; unused slots NaN
  std::vector<float> target_rows;  // [target slots, width]; unused slots NaN
  std::vector<AcceptSeqCase> seqs;
  int32_t draft_slots() const { return int32_t(draft_rows.size() / size_t(width)); }
  int32_t target_slots() const { return int32_t(target_rows.size() / size_t(width)); }
};

// One probability row [width]: softmax of `logits`, ids below `cut` (when finite) zero, as the
// top-k/top-p processors leave them.
inline void softmax_row(std::span<const float> logits, float cut, std::span<float> out) {
  double total = 0.0;
  const float m = *std::max_element(logits.begin(), logits.end());
  for (size_t i = 0; i < logits.size(); ++i) {
    const bool kept = !(logits[i] < cut) || logits[i] == m;
    out[i] = kept ? float(std::exp(double(logits[i]) - double(m))) : 0.0f;
    total += double(out[i]);
  }
  for (float& p : out) p = float(double(p) / total);
}

inline AcceptCase make_accept_case(int32_t num_seqs, int32_t width, int32_t max_k, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  AcceptCase c;
  c.width = width;
  std::vector<int32_t> ks(static_cast<size_t>(num_seqs));
  int32_t drafts = 0, targets = 0;
  for (int32_t& k : ks) {
    k = int32_t(g() % uint32_t(max_k + 1));
    drafts += k;
    targets += k + 1;
  }
  // Slots: drafts shuffled among twice as many; target blocks in reverse order, a gap after each.
  std::vector<int32_t> draft_slot(size_t(2 * drafts + 1));
  std::iota(draft_slot.begin(), draft_slot.end(), 0);
  std::shuffle(draft_slot.begin(), draft_slot.end(), g);
  const size_t W = size_t(width);
  c.draft_rows.assign(draft_slot.size() * W, NAN);
  c.target_rows.assign(size_t(targets + num_seqs) * W, NAN);
  std::vector<float> base(W), logits(W);
  int32_t next_draft = 0, next_target = targets + num_seqs;
  for (int32_t s = 0; s < num_seqs; ++s) {
    AcceptSeqCase& q = c.seqs.emplace_back();
    const int32_t k = ks[size_t(s)];
    next_target -= k + 2;
    q.target_slot = next_target;
    // Counters past 2^32 for some: both words of Philox's counter matter.
    q.rng = SamplingRng{uint64_t(seed) * 7919u + uint64_t(s),
                        (s % 3 == 2 ? (uint64_t(1) << 32) : 0) + g() % 1000u};
    for (int32_t j = 0; j <= k; ++j) {
      const std::span<float> p_t(c.target_rows.data() + size_t(q.target_slot + j) * W, W);
      for (float& x : base) x = normal(g);
      const float cut = g() % 2 ? -INFINITY : 0.0f;
      if (j == k) {  // the bonus row
        softmax_row(base, cut, p_t);
        break;
      }
      const int32_t slot = draft_slot[size_t(next_draft++)];
      q.draft_slots.push_back(slot);
      const std::span<float> p_d(c.draft_rows.data() + size_t(slot) * W, W);
      softmax_row(base, cut, p_d);
      std::uniform_real_distribution<double> u(0.0, 1.0);
      const int32_t x = sample_from_probs(p_d, u(g));
      q.tokens.push_back(x);
      switch (g() % 4) {
        case 0:  // equal rows: u · p < p always accepts
          std::copy(p_d.begin(), p_d.end(), p_t.begin());
          break;
        case 1:  // the proposal impossible for the target: always rejected
          for (size_t i = 0; i < W; ++i) logits[i] = base[i] + 0.5f * normal(g);
          softmax_row(logits, -INFINITY, p_t);
          p_t[size_t(x)] = 0.0f;
          break;
        case 2:  // p_t = p_d / 2 everywhere: rejected half the time, with an empty residual
          for (size_t i = 0; i < W; ++i) p_t[i] = p_d[i] * 0.5f;
          break;
        default:  // a related but different distribution
          for (size_t i = 0; i < W; ++i) logits[i] = base[i] + 0.7f * normal(g);
          softmax_row(logits, cut, p_t);
          break;
      }
    }
  }
  return c;
}

// The host rule (sampling/speculative.h) on the case's rows; `rngs` get the generators after.
inline std::vector<SpeculativeResult> reference_accept(const AcceptCase& c,
                                                       std::vector<SamplingRng>& rngs) {
  std::vector<SpeculativeResult> out;
  rngs.clear();
  const size_t W = size_t(c.width);
  for (const AcceptSeqCase& q : c.seqs) {
    std::vector<const float*> drafts;
    for (int32_t slot : q.draft_slots) drafts.push_back(c.draft_rows.data() + size_t(slot) * W);
    SamplingRng rng = q.rng;
    const std::span<const float> target(c.target_rows.data() + size_t(q.target_slot) * W,
                                        (q.tokens.size() + 1) * W);
    out.push_back(accept_sampled(q.tokens, drafts, target, c.width, rng));
    rngs.push_back(rng);
  }
  return out;
}

}  // namespace tandem::testing
