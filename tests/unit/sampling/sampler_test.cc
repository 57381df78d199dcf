#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "chi_square.h"
#include "sampling/sampler.h"

using namespace tandem;
using tandem::testing::chi_square;
using tandem::testing::kChiSquare7Dof999;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

ResolvedSampling sampling(float temperature = 1.0f) {
  ResolvedSampling p;
  p.temperature = temperature;
  return p;
}

// Logits whose softmax is `probs`.
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(p > 0 ? float(std::log(p)) : kNegInf);
  return l;
}

std::vector<float> probs_of(const std::vector<float>& logits, const ResolvedSampling& p) {
  std::vector<float> out(logits.size());
  logits_to_probs(logits, p, out);
  return out;
}

void check_probs(const std::vector<float>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("token " << i);
    if (want[i] == 0.0)
      CHECK(got[i] == 0.0f);
    else
      CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5));
  }
}

}  // namespace

TEST_CASE("penalties, suppression and padded rows, against hand-computed values") {
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.0f, 9.0f};
  ResolvedSampling p = sampling();
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  const std::vector<int32_t> prompt = {0, 1};
  const std::vector<int32_t> output = {1, 2, 2};
  const std::vector<int32_t> suppress = {5};
  apply_logits_processors(logits, p, TokenHistory{prompt, output}, suppress, /*valid_vocab=*/6);
  CHECK(logits[0] == 1.0f);     // prompt only: 2 / 2
  CHECK(logits[1] == -2.75f);   // -1 * 2, then - 0.5 * 1 - 0.25
  CHECK(logits[2] == -1.0f);    // 0.5 / 2, then - 0.5 * 2 - 0.25
  CHECK(logits[3] == 3.0f);     // untouched
  CHECK(logits[4] == -2.0f);    // untouched
  CHECK(logits[5] == kNegInf);  // suppressed (eos before min_tokens)
  CHECK(logits[6] == kNegInf);  // padded embedding row beyond valid_vocab
}

TEST_CASE("repetition penalty below 1 and negative frequency/presence favour seen tokens") {
  std::vector<float> logits = {2.0f, -2.0f, 1.0f};
  ResolvedSampling p = sampling();
  p.repetition_penalty = 0.5f;
  p.frequency_penalty = -1.0f;
  p.presence_penalty = -2.0f;
  const std::vector<int32_t> prompt = {0, 1};
  const std::vector<int32_t> output = {0};
  apply_logits_processors(logits, p, TokenHistory{prompt, output}, {}, 3);
  CHECK(logits[0] == 7.0f);   // 2 / 0.5 = 4, + 1 + 2
  CHECK(logits[1] == -1.0f);  // -2 * 0.5
  CHECK(logits[2] == 1.0f);
}

TEST_CASE("default settings leave logits alone") {
  std::vector<float> logits = {0.25f, -3.0f, 7.5f};
  const std::vector<int32_t> history = {0, 1, 2, 2};
  apply_logits_processors(logits, sampling(), TokenHistory{history, history}, {}, 3);
  CHECK(logits == std::vector<float>{0.25f, -3.0f, 7.5f});
}

TEST_CASE("logits_to_probs: temperature, top-k, top-p, min-p") {
  const std::vector<float> logits = logits_of({0.4, 0.3, 0.2, 0.1});
  check_probs(probs_of(logits, sampling()), {0.4, 0.3, 0.2, 0.1});

  SUBCASE("temperature 2 takes square roots") {
    const double s = std::sqrt(0.4) + std::sqrt(0.3) + std::sqrt(0.2) + std::sqrt(0.1);
    check_probs(probs_of(logits, sampling(2.0f)),
                {std::sqrt(0.4) / s, std::sqrt(0.3) / s, std::sqrt(0.2) / s, std::sqrt(0.1) / s});
  }
  SUBCASE("top-k 2") {
    ResolvedSampling p = sampling();
    p.top_k = 2;
    check_probs(probs_of(logits, p), {4.0 / 7, 3.0 / 7, 0, 0});
  }
  SUBCASE("top-p keeps the smallest set reaching p") {
    ResolvedSampling p = sampling();
    p.top_p = 0.6f;  // 0.4 < 0.6 <= 0.7
    check_probs(probs_of(logits, p), {4.0 / 7, 3.0 / 7, 0, 0});
    p.top_p = 0.75f;  // 0.7 < 0.75 <= 0.9
    check_probs(probs_of(logits, p), {4.0 / 9, 3.0 / 9, 2.0 / 9, 0});
  }
  SUBCASE("top-p always keeps one token") {
    ResolvedSampling p = sampling();
    p.top_p = 0.01f;
    check_probs(probs_of(logits, p), {1, 0, 0, 0});
  }
  SUBCASE("min-p drops tokens below min_p * p_max") {
    ResolvedSampling p = sampling();
    p.min_p = 0.3f;  // threshold 0.12
    check_probs(probs_of(logits, p), {4.0 / 9, 3.0 / 9, 2.0 / 9, 0});
    p.min_p = 0.6f;  // threshold 0.24
    check_probs(probs_of(logits, p), {4.0 / 7, 3.0 / 7, 0, 0});
  }
  SUBCASE("top-p before min-p") {
    // [0.5, 0.3, 0.2], top_p 0.6 keeps {0.5, 0.3}; min-p 0.5 (threshold 0.25) keeps both. Min-p
    // first would drop 0.2, renormalise to 0.625 and let top-p keep one token.
    ResolvedSampling p = sampling();
    p.top_p = 0.6f;
    p.min_p = 0.5f;
    check_probs(probs_of(logits_of({0.5, 0.3, 0.2}), p), {0.625, 0.375, 0});
  }
  SUBCASE("top-k keeps every token tied at the threshold") {
    ResolvedSampling p = sampling();
    p.top_k = 2;
    check_probs(probs_of({1.0f, 1.0f, 1.0f, 0.0f}, p), {1.0 / 3, 1.0 / 3, 1.0 / 3, 0});
  }
  SUBCASE("top-p ties in probability go to the lower id") {
    ResolvedSampling p = sampling();
    p.top_p = 0.4f;  // softmax(1, 1, 0) = 0.42, 0.42, 0.16: one token reaches 0.4
    check_probs(probs_of({1.0f, 1.0f, 0.0f}, p), {1, 0, 0});
  }
  SUBCASE("top-k beyond the finite logits keeps them all") {
    ResolvedSampling p = sampling();
    p.top_k = 3;
    check_probs(probs_of({0.0f, kNegInf, 0.0f, kNegInf}, p), {0.5, 0, 0.5, 0});
  }
  SUBCASE("-inf rows get zero probability") {
    check_probs(probs_of({0.0f, kNegInf, 0.0f}, sampling()), {0.5, 0, 0.5});
  }
}

namespace {

// logits_to_probs with top-k written the plain way (scale every logit in double, cut at the k-th
// largest scaled value, softmax over everything): the definition the fast path must equal bit
// for bit. Top-p, min-p and the final normalisation are shared code, so rows here use top-k only.
std::vector<float> top_k_reference(const std::vector<float>& logits, float temperature, int k) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> scaled(logits.size());
  for (size_t i = 0; i < logits.size(); ++i)
    scaled[i] = std::isnan(logits[i]) ? -inf : double(logits[i]) / double(temperature);
  std::vector<double> sorted = scaled;
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<>());
  for (double& v : scaled)
    if (v < sorted[size_t(k - 1)]) v = -inf;
  double max = -inf;
  for (double v : scaled) max = std::max(max, v);
  std::vector<double> p(scaled.size());
  double sum = 0.0;
  for (size_t i = 0; i < scaled.size(); ++i) {
    p[i] = std::isfinite(scaled[i]) ? std::exp(scaled[i] - max) : 0.0;
    sum += p[i];
  }
  for (double& v : p) v /= sum;
  const double total = std::accumulate(p.begin(), p.end(), 0.0);
  std::vector<float> out(p.size());
  for (size_t i = 0; i < p.size(); ++i) out[i] = float(p[i] / total);
  return out;
}

}  // namespace

TEST_CASE("top-k probabilities equal the plain two-step definition bit for bit") {
  std::mt19937 gen(17);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  int cases = 0;
  for (size_t vocab : {size_t(5), size_t(64), size_t(1000), size_t(151936)}) {
    for (int k : {1, 2, 3, 20, 50, 999}) {
      if (size_t(k) >= vocab) continue;
      for (float temperature : {0.3f, 0.7f, 1.0f, 1.7f}) {
        std::vector<float> logits(vocab);
        for (float& l : logits) l = normal(gen);
        // Awkward rows: ties at the cut, NaN and -inf entries, fewer finite logits than k,
        // negative and positive zeros.
        if (vocab >= 64) {
          for (size_t i = 0; i < 10; ++i) logits[i * 5] = 4.25f;
          logits[1] = std::numeric_limits<float>::quiet_NaN();
          logits[2] = kNegInf;
          logits[3] = -0.0f;
          logits[4] = 0.0f;
        } else if (k >= 3) {
          logits[0] = kNegInf;
          logits[1] = std::numeric_limits<float>::quiet_NaN();
        }
        CAPTURE(vocab);
        CAPTURE(k);
        CAPTURE(temperature);
        ResolvedSampling p;
        p.temperature = temperature;
        p.top_k = k;
        const std::vector<float> got = probs_of(logits, p);
        const std::vector<float> want = top_k_reference(logits, temperature, k);
        CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
        ++cases;
      }
    }
  }
  CHECK(cases > 60);
}

TEST_CASE("greedy: argmax with the lowest id on ties, and no draw") {
  SamplingRng rng{1, 0};
  const ResolvedSampling greedy = sampling(0.0f);
  CHECK(sample_token(std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f}, greedy, rng) == 1);
  CHECK(sample_token(std::vector<float>{kNegInf, -5.0f, -5.0f}, greedy, rng) == 1);
  CHECK(sample_token(std::vector<float>{std::nanf(""), 0.0f, 1.0f}, greedy, rng) == 2);
  CHECK(rng.counter == 0);
  check_probs(probs_of({1.0f, 3.0f, 3.0f, 2.0f}, greedy), {0, 1, 0, 0});
}

TEST_CASE("sample_from_probs is the inverse CDF of one draw") {
  const std::vector<float> probs = {0.25f, 0.0f, 0.5f, 0.25f};
  CHECK(sample_from_probs(probs, 0.0) == 0);
  CHECK(sample_from_probs(probs, 0.2499) == 0);
  CHECK(sample_from_probs(probs, 0.25) == 2);  // skips the zero-probability id 1
  CHECK(sample_from_probs(probs, 0.7499) == 2);
  CHECK(sample_from_probs(probs, 0.75) == 3);
  CHECK(sample_from_probs(probs, 0.9999999) == 3);
  // Unnormalised input is scaled by its total.
  CHECK(sample_from_probs(std::vector<float>{1.0f, 1.0f, 0.0f}, 0.6) == 1);
}

TEST_CASE("sampling uses one draw and is reproducible per seed") {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = float(std::sin(double(i)));
  const ResolvedSampling p = sampling(0.8f);
  auto run = [&](uint64_t seed) {
    SamplingRng rng{seed, 0};
    std::vector<int32_t> tokens;
    for (int i = 0; i < 40; ++i) tokens.push_back(sample_token(logits, p, rng));
    CHECK(rng.counter == 40);
    return tokens;
  };
  CHECK(run(42) == run(42));
  CHECK(run(42) != run(43));
  // The token is the inverse CDF of exactly the draw at the rng's counter.
  SamplingRng rng{99, 5};
  std::vector<float> probs(logits.size());
  logits_to_probs(logits, p, probs);
  CHECK(sample_token(logits, p, rng) == sample_from_probs(probs, philox_uniform(99, 5)));
}

TEST_CASE("sample_token never picks padded rows or suppressed ids") {
  std::vector<float> logits = {0.0f, 0.0f, 5.0f, 50.0f, 50.0f};
  const std::vector<int32_t> suppress = {2};
  apply_logits_processors(logits, sampling(), TokenHistory{}, suppress, /*valid_vocab=*/3);
  SamplingRng rng{3, 0};
  for (int i = 0; i < 1000; ++i) {
    const int32_t t = sample_token(logits, sampling(), rng);
    REQUIRE((t == 0 || t == 1));
  }
  CHECK(sample_token(logits, sampling(0.0f), rng) == 0);
}

TEST_CASE("sample_token's empirical distribution matches logits_to_probs (chi-square)") {
  const std::vector<double> want = {0.30, 0.20, 0.15, 0.10, 0.10, 0.07, 0.05, 0.03};
  const std::vector<float> logits = logits_of(want);
  const ResolvedSampling p = sampling();
  SamplingRng rng{2024, 0};
  std::vector<int64_t> counts(want.size(), 0);
  const int trials = 20000;
  for (int i = 0; i < trials; ++i) counts[size_t(sample_token(logits, p, rng))]++;
  const double stat = chi_square(counts, want);
  INFO("chi-square " << stat);
  CHECK(stat < kChiSquare7Dof999);
  // The same counts against a slightly different distribution must fail: the test has power.
  const std::vector<double> off = {0.27, 0.23, 0.15, 0.10, 0.10, 0.07, 0.05, 0.03};
  CHECK(chi_square(counts, off) > kChiSquare7Dof999);
}

TEST_CASE("truncated sampling only returns kept tokens, in proportion") {
  const std::vector<double> base = {0.30, 0.20, 0.15, 0.10, 0.10, 0.07, 0.05, 0.03};
  ResolvedSampling p = sampling();
  p.top_k = 5;
  p.top_p = 0.7f;  // of the top 5 (sum 0.85): 0.3529, 0.2353, 0.1765 reach 0.7647
  SamplingRng rng{7, 0};
  std::vector<int64_t> counts(base.size(), 0);
  for (int i = 0; i < 20000; ++i) counts[size_t(sample_token(logits_of(base), p, rng))]++;
  for (size_t i = 3; i < counts.size(); ++i) CHECK(counts[i] == 0);
  const std::vector<double> want = {0.30 / 0.65, 0.20 / 0.65, 0.15 / 0.65, 0, 0, 0, 0, 0};
  CHECK(chi_square(counts, want) < 13.82);  // 2 degrees of freedom, 0.1 %
}
