#include "sampling/speculative.h"

#include <algorithm>
#include <vector>

#include "core/check.h"

namespace tandem {
namespace {

std::span<const float> row(std::span<const float> rows, size_t i, int32_t vocab) {
  return rows.subspan(i * size_t(vocab), size_t(vocab));
}

void check_shapes(std::span<const int32_t> drafts, size_t draft_rows, size_t target_size,
                  int32_t vocab) {
  TANDEM_CHECK(vocab >= 1);
  TANDEM_CHECK(draft_rows == drafts.size() * size_t(vocab), "draft rows %zu for %zu drafts",
               draft_rows, drafts.size());
  TANDEM_CHECK(target_size == (drafts.size() + 1) * size_t(vocab), "target rows %zu for %zu drafts",
               target_size, drafts.size());
  for (int32_t t : drafts) TANDEM_CHECK(t >= 0 && t < vocab, "draft token %d", t);
}

// The default residual fused with its draw: one pass writes max(0, p_t - p_d) unnormalised into
// `scratch` and sums it, a second finds where u · total falls. The same distribution as
// residual_distribution then sample_from_probs, without their allocation, normalising pass and
// second sum: on a 152k vocabulary a rejection took 0.29-0.33 ms on the host (0.13 now;
// benchmarks/spec_accept_bench.cc), most of a sampled step's acceptance time at batch 4 (2 ms
// on the H200, NOTES.md v15). -1 when the residual is empty.
int32_t sample_residual(std::span<const float> p_t, std::span<const float> p_d, double u,
                        std::vector<float>& scratch) {
  scratch.resize(p_t.size());
  double total = 0.0;
  int32_t last = -1;
  for (size_t i = 0; i < p_t.size(); ++i) {
    const float d = std::max(0.0f, p_t[i] - p_d[i]);
    scratch[i] = d;
    if (d > 0.0f) {
      total += double(d);
      last = int32_t(i);
    }
  }
  if (last < 0) return -1;
  const double target = u * total;
  double cumulative = 0.0;
  for (int32_t i = 0; i < last; ++i) {
    if (!(scratch[size_t(i)] > 0.0f)) continue;
    cumulative += double(scratch[size_t(i)]);
    if (target < cumulative) return i;
  }
  return last;
}

}  // namespace

SpeculativeResult accept_greedy(std::span<const int32_t> draft_tokens,
                                std::span<const float> target, int32_t vocab) {
  check_shapes(draft_tokens, draft_tokens.size() * size_t(vocab), target.size(), vocab);
  SpeculativeResult r;
  for (size_t i = 0; i <= draft_tokens.size(); ++i) {
    const int32_t best = argmax_lowest(row(target, i, vocab));
    r.tokens.push_back(best);
    if (i == draft_tokens.size() || best != draft_tokens[i]) break;
    r.num_accepted++;
  }
  return r;
}

SpeculativeResult accept_greedy_ids(std::span<const int32_t> draft_tokens,
                                    std::span<const int32_t> target_ids) {
  TANDEM_CHECK(target_ids.size() == draft_tokens.size() + 1);
  SpeculativeResult r;
  size_t a = 0;
  while (a < draft_tokens.size() && draft_tokens[a] == target_ids[a]) ++a;
  r.tokens.assign(draft_tokens.begin(), draft_tokens.begin() + ptrdiff_t(a));
  r.tokens.push_back(target_ids[a]);
  r.num_accepted = int32_t(a);
  return r;
}

void residual_distribution(std::span<const float> target_probs, std::span<const float> draft_probs,
                           std::span<float> out) {
  TANDEM_CHECK(target_probs.size() == draft_probs.size() && out.size() == target_probs.size());
  double total = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = std::max(0.0f, target_probs[i] - draft_probs[i]);
    total += double(out[i]);
  }
  if (total > 0.0)
    for (float& p : out) p = float(double(p) / total);
}

SpeculativeResult accept_sampled(std::span<const int32_t> draft_tokens,
                                 std::span<const float> draft_probs,
                                 std::span<const float> target_probs, int32_t vocab,
                                 SamplingRng& rng, ResidualFn residual) {
  TANDEM_CHECK(vocab >= 1);
  TANDEM_CHECK(draft_probs.size() == draft_tokens.size() * size_t(vocab),
               "draft rows %zu for %zu drafts", draft_probs.size(), draft_tokens.size());
  std::vector<const float*> rows(draft_tokens.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = draft_probs.data() + i * size_t(vocab);
  return accept_sampled(draft_tokens, rows, target_probs, vocab, rng, residual);
}

SpeculativeResult accept_sampled(std::span<const int32_t> draft_tokens,
                                 std::span<const float* const> draft_rows,
                                 std::span<const float> target_probs, int32_t vocab,
                                 SamplingRng& rng, ResidualFn residual) {
  TANDEM_CHECK(draft_rows.size() == draft_tokens.size(), "%zu draft rows for %zu drafts",
               draft_rows.size(), draft_tokens.size());
  check_shapes(draft_tokens, draft_tokens.size() * size_t(vocab), target_probs.size(), vocab);
  SpeculativeResult r;
  for (size_t i = 0; i < draft_tokens.size(); ++i) {
    const int32_t x = draft_tokens[i];
    const std::span<const float> p_t = row(target_probs, i, vocab);
    const std::span<const float> p_d(draft_rows[i], size_t(vocab));
    const double pt = p_t[size_t(x)];
    const double pd = p_d[size_t(x)];
    // u < p_t / p_d without dividing: also right when p_d(x) == 0 (a draft the draft
    // distribution could not produce is accepted iff the target allows it).
    const double u = rng.next_uniform();
    if (u * pd < pt) {
      r.tokens.push_back(x);
      r.num_accepted++;
      continue;
    }
    // A rejection with an empty residual only happens through float rounding when p_t ≈ p_d;
    // p_t is then the right distribution.
    const double u_final = rng.next_uniform();
    thread_local std::vector<float> res;  // [vocab] where the target has more mass than the draft
    if (residual == residual_distribution) {
      const int32_t token = sample_residual(p_t, p_d, u_final, res);
      r.tokens.push_back(token >= 0 ? token : sample_from_probs(p_t, u_final));
      return r;
    }
    res.resize(static_cast<size_t>(vocab));
    residual(p_t, p_d, res);
    const bool any = std::any_of(res.begin(), res.end(), [](float p) { return p > 0.0f; });
    r.tokens.push_back(sample_from_probs(any ? std::span<const float>(res) : p_t, u_final));
    return r;
  }
  r.tokens.push_back(
      sample_from_probs(row(target_probs, draft_tokens.size(), vocab), rng.next_uniform()));
  return r;
}

}  // namespace tandem
