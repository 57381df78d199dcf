// The draft length policy's inputs and choices (src/engine/spec_decoder.h): the per-token
// acceptance estimate from step outcomes, and the k it leads to.
#include <doctest/doctest.h>

#include <random>

#include "engine/spec_decoder.h"

using namespace tandem;

namespace {

// Steps of k proposals where each is accepted with probability a until the first rejection,
// through observe_acceptance; returns the final estimate.
double estimate(double a, int32_t k, int steps, uint32_t seed) {
  Sequence seq;
  std::mt19937 g(seed);
  std::bernoulli_distribution accept(a);
  for (int s = 0; s < steps; ++s) {
    int32_t accepted = 0;
    while (accepted < k && accept(g)) ++accepted;
    observe_acceptance(seq, k, accepted);
  }
  return seq.spec_acceptance;
}

// The mean of the estimate over the last `window` of `steps` steps: the decayed counts cover
// about five steps, so one step's value still moves with the draws.
double mean_estimate(double a, int32_t k, int steps, int window, uint32_t seed) {
  Sequence seq;
  std::mt19937 g(seed);
  std::bernoulli_distribution accept(a);
  double sum = 0;
  for (int s = 0; s < steps; ++s) {
    int32_t accepted = 0;
    while (accepted < k && accept(g)) ++accepted;
    observe_acceptance(seq, k, accepted);
    if (s >= steps - window) sum += seq.spec_acceptance;
  }
  return sum / window;
}

}  // namespace

TEST_CASE("acceptance estimate: per-token acceptance whatever k, not accepted/proposed") {
  for (const double a : {0.5, 0.75, 0.9}) {
    for (const int32_t k : {1, 4, 8}) {
      CAPTURE(a);
      CAPTURE(k);
      // accepted/proposed would be (a - a^(k+1)) / (k (1 - a)): at a = 0.9, k = 8, 0.64.
      CHECK(mean_estimate(a, k, 2000, 1500, 7) == doctest::Approx(a).epsilon(0.04));
    }
  }
}

TEST_CASE("acceptance estimate: starts at 0.7, falls within a few steps of failing drafts") {
  Sequence seq;
  CHECK(seq.spec_acceptance == doctest::Approx(0.7));
  for (int s = 0; s < 5; ++s) observe_acceptance(seq, 4, 0);
  CHECK(seq.spec_acceptance < 0.2);
  for (int s = 0; s < 20; ++s) observe_acceptance(seq, 4, 4);
  CHECK(seq.spec_acceptance > 0.98);
}

TEST_CASE("draft length: long drafts at high acceptance, none where drafts fail") {
  SpecConfig config;
  config.draft_max = 8;
  DraftLengthPolicy policy(config);
  // A draft step at ~0.16 of a verify pass, as measured for the bf16 Qwen2.5 7B + 0.5B pair.
  for (int i = 0; i < 200; ++i) policy.observe_costs(0.8, 5.0);
  CHECK(policy.cost_ratio() == doctest::Approx(0.16).epsilon(0.01));
  Sequence seq;
  seq.spec_acceptance = estimate(0.92, 8, 400, 3);
  CHECK(policy.choose(seq, 1) == 8);
  seq.spec_acceptance = 0.1;
  CHECK(policy.choose(seq, 1) == 0);
  // Above max_batch nothing speculates.
  seq.spec_acceptance = 0.9;
  CHECK(policy.choose(seq, config.max_batch + 1) == 0);
}
