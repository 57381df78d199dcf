#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/check.h"

namespace tandem {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void check_ids(std::span<const int32_t> ids, size_t vocab, const char* what) {
  for (int32_t id : ids)
    TANDEM_CHECK(id >= 0 && size_t(id) < vocab, "%s id %d outside the logits row of %zu", what, id,
                 vocab);
}

// Softmax in double over the finite entries; -inf entries get probability 0.
void softmax(const std::vector<double>& logits, std::vector<double>& probs) {
  double max = -std::numeric_limits<double>::infinity();
  for (double v : logits) max = std::max(max, v);
  TANDEM_CHECK(std::isfinite(max), "no finite logit left to sample from");
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    probs[i] = std::isfinite(logits[i]) ? std::exp(logits[i] - max) : 0.0;
    sum += probs[i];
  }
  for (double& p : probs) p /= sum;
}

// vLLM's top-k (keep every token whose logit is at least the k-th largest; ties at the threshold
// all stay) followed by softmax, with the cut found on the float logits and only the kept tokens
// scaled and exponentiated (the rest stay exactly 0, as exp gives them there): dividing by a
// positive temperature preserves their order, and no two distinct floats meet in double, so
// `logit >= k-th largest logit` keeps exactly the tokens `scaled >= k-th largest scaled` keeps.
// The sum runs in index order over the same nonzero terms, so the result is bit-identical
// (tests/unit/sampling/sampler_test.cc checks it against the two-step form). A row's top-k
// selection is then over floats, not a copy of doubles: the host's share of a sampled
// speculative step is mostly this function.
void top_k_softmax(std::span<const float> logits, float temperature, int32_t k,
                   std::vector<double>& probs) {
  constexpr float kNegInfF = -std::numeric_limits<float>::infinity();
  std::vector<float> sorted(logits.size());  // [vocab] NaN as -inf, for the selection
  for (size_t i = 0; i < logits.size(); ++i)
    sorted[i] = std::isnan(logits[i]) ? kNegInfF : logits[i];
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<>());
  const float threshold = sorted[size_t(k - 1)];
  std::vector<int32_t> kept;  // ids at or above the threshold, in index order
  double max = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isnan(logits[i]) || logits[i] < threshold) continue;
    kept.push_back(int32_t(i));
    max = std::max(max, double(logits[i]) / double(temperature));
  }
  TANDEM_CHECK(std::isfinite(max), "no finite logit left to sample from");
  std::fill(probs.begin(), probs.end(), 0.0);
  double sum = 0.0;
  for (int32_t i : kept) {
    const double scaled = double(logits[size_t(i)]) / double(temperature);
    probs[size_t(i)] = std::isfinite(scaled) ? std::exp(scaled - max) : 0.0;
    sum += probs[size_t(i)];
  }
  for (double& p : probs) p /= sum;  // every entry, as softmax divides them
}

// Keep the smallest set of most likely tokens whose cumulative probability reaches top_p (ties
// in probability go to the lower id, so the kept set is deterministic); at least one token.
void apply_top_p(std::vector<double>& probs, float top_p) {
  if (top_p >= 1.0f) return;
  // Only tokens still in play are ordered: after top-k that is k of them, not the whole vocab.
  std::vector<int32_t> order;  // [candidates] ids, most likely first
  for (size_t i = 0; i < probs.size(); ++i)
    if (probs[i] > 0.0) order.push_back(int32_t(i));
  // Probability descending, lower id first: a strict total order, so sorting only a prefix
  // (partial_sort) puts the same ids first as sorting everything would. The prefix doubles until
  // it holds the cut, which for a peaked distribution is a few dozen tokens of 150k.
  const auto before = [&](int32_t a, int32_t b) {
    const double pa = probs[size_t(a)], pb = probs[size_t(b)];
    return pa > pb || (pa == pb && a < b);
  };
  double cumulative = 0.0;
  size_t kept = 0, sorted = 0;
  while (kept < order.size() && (kept == 0 || cumulative < double(top_p))) {
    if (kept == sorted) {
      const size_t next = std::min(order.size(), std::max<size_t>(64, 4 * sorted));
      std::partial_sort(order.begin() + ptrdiff_t(sorted), order.begin() + ptrdiff_t(next),
                        order.end(), before);
      sorted = next;
    }
    cumulative += probs[size_t(order[kept])];
    ++kept;
  }
  for (size_t i = kept; i < order.size(); ++i) probs[size_t(order[i])] = 0.0;
}

// Drop tokens less likely than min_p times the most likely one; the most likely always stays.
void apply_min_p(std::vector<double>& probs, float min_p) {
  if (min_p <= 0.0f) return;
  const double threshold = double(min_p) * *std::max_element(probs.begin(), probs.end());
  for (double& p : probs)
    if (p < threshold) p = 0.0;
}

}  // namespace

void apply_logits_processors(std::span<float> logits, const ResolvedSampling& params,
                             const TokenHistory& history, std::span<const int32_t> suppress,
                             int32_t valid_vocab) {
  const size_t vocab = logits.size();
  TANDEM_CHECK(valid_vocab >= 1 && size_t(valid_vocab) <= vocab, "valid_vocab %d, row of %zu",
               valid_vocab, vocab);
  check_ids(history.prompt, vocab, "prompt");
  check_ids(history.output, vocab, "output");
  check_ids(suppress, vocab, "suppressed");

  // vLLM's order: repetition penalty on prompt ∪ output, then frequency and presence on output.
  if (params.repetition_penalty != 1.0f) {
    std::vector<uint8_t> seen(vocab, 0);  // [vocab] 1 = in prompt or output
    for (int32_t id : history.prompt) seen[size_t(id)] = 1;
    for (int32_t id : history.output) seen[size_t(id)] = 1;
    for (size_t i = 0; i < vocab; ++i) {
      if (!seen[i]) continue;
      // Dividing a positive logit and multiplying a negative one both make the token less likely.
      logits[i] = logits[i] > 0.0f ? logits[i] / params.repetition_penalty
                                   : logits[i] * params.repetition_penalty;
    }
  }
  if (params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f) {
    std::vector<int32_t> counts(vocab, 0);  // [vocab] occurrences in output
    for (int32_t id : history.output) counts[size_t(id)]++;
    for (size_t i = 0; i < vocab; ++i) {
      if (counts[i] == 0) continue;
      logits[i] -= params.frequency_penalty * float(counts[i]);
      logits[i] -= params.presence_penalty;
    }
  }
  for (int32_t id : suppress) logits[size_t(id)] = kNegInf;
  for (size_t i = size_t(valid_vocab); i < vocab; ++i) logits[i] = kNegInf;
}

void logits_to_probs(std::span<const float> logits, const ResolvedSampling& params,
                     std::span<float> probs) {
  TANDEM_CHECK(probs.size() == logits.size(), "probs %zu, logits %zu", probs.size(), logits.size());
  if (params.greedy()) {
    // Temperature 0 is the limit of a one-hot distribution at the argmax.
    std::fill(probs.begin(), probs.end(), 0.0f);
    probs[size_t(argmax_lowest(logits))] = 1.0f;
    return;
  }
  std::vector<double> p(logits.size());  // [vocab] probabilities, renormalised after each cut
  if (params.top_k > 0 && size_t(params.top_k) < logits.size()) {
    top_k_softmax(logits, params.temperature, params.top_k, p);
  } else {
    std::vector<double> scaled(logits.size());  // [vocab] logits / temperature
    for (size_t i = 0; i < logits.size(); ++i) {
      // NaN logits are never sampled.
      scaled[i] = std::isnan(logits[i]) ? -std::numeric_limits<double>::infinity()
                                        : double(logits[i]) / double(params.temperature);
    }
    softmax(scaled, p);
  }
  apply_top_p(p, params.top_p);
  apply_min_p(p, params.min_p);
  const double total = std::accumulate(p.begin(), p.end(), 0.0);
  for (size_t i = 0; i < p.size(); ++i) probs[i] = float(p[i] / total);
}

int32_t argmax_lowest(std::span<const float> values) {
  TANDEM_CHECK(!values.empty());
  int32_t best = -1;
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i])) continue;
    // Strictly greater: the first (lowest) id of equal maxima wins.
    if (best < 0 || values[i] > values[size_t(best)]) best = int32_t(i);
  }
  TANDEM_CHECK(best >= 0, "every logit is NaN");
  return best;
}

int32_t sample_from_probs(std::span<const float> probs, double u) {
  TANDEM_CHECK(u >= 0.0 && u < 1.0, "uniform draw %f outside [0, 1)", u);
  double total = 0.0;
  int32_t last_nonzero = -1;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] > 0.0f) {
      total += double(probs[i]);
      last_nonzero = int32_t(i);
    }
  }
  TANDEM_CHECK(last_nonzero >= 0, "no token has positive probability");
  const double target = u * total;
  double cumulative = 0.0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (!(probs[i] > 0.0f)) continue;
    cumulative += double(probs[i]);
    if (target < cumulative) return int32_t(i);
  }
  return last_nonzero;  // only reachable through rounding in the last addition
}

int32_t sample_token(std::span<const float> processed_logits, const ResolvedSampling& params,
                     SamplingRng& rng) {
  if (params.greedy()) return argmax_lowest(processed_logits);
  std::vector<float> probs(processed_logits.size());  // [vocab]
  logits_to_probs(processed_logits, params, probs);
  return sample_from_probs(probs, rng.next_uniform());
}

}  // namespace tandem
