// The draft length policy's inputs and choices (src/engine/spec_decoder.h): the per-token
// acceptance estimate from step outcomes, and the k it leads to.
#include <doctest/doctest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <vector>

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
  for (int i = 0; i < 200; ++i) policy.observe_costs(1, 0.8, 5.0, 8);
  CHECK(policy.cost_ratio(1) == doctest::Approx(0.16).epsilon(0.01));
  Sequence seq;
  seq.spec_acceptance = estimate(0.92, 8, 400, 3);
  CHECK(policy.choose(seq, 1) == 8);
  seq.spec_acceptance = 0.1;
  CHECK(policy.choose(seq, 1) == 0);
  // Above max_batch nothing speculates.
  seq.spec_acceptance = 0.9;
  CHECK(policy.choose(seq, config.max_batch + 1) == 0);
}

TEST_CASE("draft length: sequences whose drafts are off probe on the batch's probe steps only") {
  // Each probe costs the batch a draft round and a catch-up; sequences that arrived at
  // different times must not take turns at it (SpecDecoder passes one schedule for all).
  SpecConfig config;
  config.draft_max = 8;
  config.draft_min = 2;
  DraftLengthPolicy policy(config);
  for (int i = 0; i < 200; ++i) policy.observe_costs(4, 0.8, 5.0, 4 * 8);
  Sequence seq;
  seq.spec_acceptance = 0.05;
  for (int32_t steps = 0; steps < 40; ++steps) {
    seq.decode_steps = steps;
    CAPTURE(steps);
    CHECK(policy.choose(seq, 4) == 0);
    CHECK(policy.choose(seq, 4, /*probe=*/true) == 2);
  }
  // A sequence whose drafts pay ignores the probe flag.
  seq.spec_acceptance = 0.9;
  CHECK(policy.choose(seq, 4, true) == policy.choose(seq, 4));
}

namespace {

// The probe steps among `steps` speculative steps; `speculating(step)` says whether a sequence
// speculated on a step that was not a probe (as SpecDecoder reports it).
template <typename F>
std::vector<int64_t> probe_steps(int64_t steps, F speculating) {
  ProbeSchedule schedule;
  std::vector<int64_t> probes;
  for (int64_t s = 0; s < steps; ++s) {
    if (schedule.next_step()) {
      probes.push_back(s);
    } else if (speculating(s)) {
      schedule.speculated();
    }
  }
  return probes;
}

}  // namespace

TEST_CASE("probe schedule: every 16th step while some sequence speculates") {
  // A mixed batch: the sequences that are off probe beside the ones that speculate.
  const auto probes = probe_steps(100, [](int64_t) { return true; });
  CHECK(probes == std::vector<int64_t>{15, 31, 47, 63, 79, 95});
}

TEST_CASE("probe schedule: twice as long after each probe that left the whole batch plain") {
  // Batch 16 at acceptance 0.5 on the H200 pair: each probe cost 11-17 ms against a 4.03 ms
  // plain step, every 16 steps (NOTES.md v49).
  const auto probes = probe_steps(700, [](int64_t) { return false; });
  CHECK(probes == std::vector<int64_t>{15, 31, 63, 127, 255, 383, 511, 639});
}

TEST_CASE("probe schedule: a probe that revives speculation brings the short period back") {
  // The probe at 255 makes the sequences speculate again from 256 to 270, plain after: the next
  // probe comes 16 steps after 256, then the waits double again.
  const auto probes = probe_steps(400, [](int64_t s) { return s > 255 && s <= 270; });
  CHECK(probes == std::vector<int64_t>{15, 31, 63, 127, 255, 272, 288, 320, 384});
}

TEST_CASE("draft length: one k for the batch, reproducible sequences keep their own") {
  SpecConfig config;
  config.draft_max = 8;
  DraftLengthPolicy policy(config);
  for (int i = 0; i < 200; ++i) policy.observe_costs(4, 0.8, 5.0, 4 * 8);  // c = 0.16
  Sequence good, poor, failing, seeded;
  good.spec_acceptance = 0.95;
  poor.spec_acceptance = 0.5;
  failing.spec_acceptance = 0.05;
  seeded.spec_acceptance = 0.5;
  seeded.params.temperature = 0.7f;
  seeded.params.has_seed = true;
  REQUIRE(DraftLengthPolicy::reproducible(seeded));
  std::vector<Sequence*> batch{&good, &poor, &failing, &seeded};
  std::vector<int32_t> ks;
  for (Sequence* s : batch) ks.push_back(policy.choose(*s, int32_t(batch.size())));
  REQUIRE(ks[0] == 8);
  REQUIRE(ks[1] > 0);
  REQUIRE(ks[1] < 8);
  REQUIRE(ks[2] == 0);
  const int32_t seeded_k = ks[3];
  const std::vector<int32_t> own = ks;
  policy.share_k(batch, ks);
  auto tokens = [](double a, int32_t k) {  // E(a, k)
    double sum = 0, term = 1;
    for (int32_t i = 0; i <= k; ++i, term *= a) sum += term;
    return sum;
  };
  // The shared k maximises the pair's expected tokens over the step's cost...
  auto gain = [&](int32_t k) {
    return (tokens(0.95, k) + tokens(0.5, k)) / (1.0 + k * policy.cost_ratio(4));
  };
  CHECK(ks[0] == ks[1]);
  for (int32_t k = 1; k <= 8; ++k) CHECK(gain(ks[0]) >= gain(k));
  // ... and beats the sequences' own choices, whose step pays max(k) draft rounds anyway.
  const double own_gain = (tokens(0.95, own[0]) + tokens(0.5, own[1])) /
                          (1.0 + std::max(own[0], own[1]) * policy.cost_ratio(4));
  CHECK(gain(ks[0]) > own_gain);
  CHECK(ks[2] == 0);         // drafts that fail stay off
  CHECK(ks[3] == seeded_k);  // the seeded sequence's tokens must not depend on the batch
  // A fixed k is left alone.
  SpecConfig fixed = config;
  fixed.fixed_k = 3;
  std::vector<int32_t> fks{3, 3, 3, 3};
  DraftLengthPolicy(fixed).share_k(batch, fks);
  CHECK(fks == std::vector<int32_t>{3, 3, 3, 3});
}

namespace {

// What the decoder measured at one batch size, in ms: a plain step (the gate's), a draft round
// and a verify pass of k proposals a sequence.
struct Measured {
  int32_t batch;
  double plain_ms, draft_ms, verify_ms;
  int32_t k;
};
// The 7B + 0.5B pattern pair on an H100 (NOTES.md v59, call A): at batch 64 a verify pass of
// 64 x 5 rows costs 1.56 plain steps, at batch 1 one of 5 rows 1.03.
constexpr Measured kBatch64{64, 6.2, 1.14, 9.7, 4};
constexpr Measured kBatch1{1, 4.85, 0.45, 4.98, 4};

// A policy after `m`'s steps, each EMA settled; without a plain step where `plain` is false.
DraftLengthPolicy measured_policy(const Measured& m, bool plain = true) {
  SpecConfig config;
  config.draft_max = 8;
  config.max_batch = 1024;
  DraftLengthPolicy policy(config);
  for (int i = 0; i < 300; ++i) {
    policy.observe_costs(m.batch, m.draft_ms, m.verify_ms, int64_t(m.batch) * m.k,
                         plain ? std::optional(m.plain_ms) : std::nullopt);
  }
  return policy;
}

// The batch's k after choose() and share_k() for sequences of these acceptances (`seeded`
// marks reproducible ones), as SpecDecoder::step picks them.
std::vector<int32_t> batch_ks(const DraftLengthPolicy& policy,
                              const std::vector<double>& acceptance, bool probe = false,
                              const std::vector<bool>& seeded = {}) {
  std::vector<Sequence> seqs(acceptance.size());
  std::vector<Sequence*> batch;
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].spec_acceptance = acceptance[i];
    if (i < seeded.size() && seeded[i]) {
      seqs[i].params.temperature = 0.7f;
      seqs[i].params.has_seed = true;
    }
    batch.push_back(&seqs[i]);
  }
  std::vector<int32_t> ks;
  for (Sequence* s : batch) ks.push_back(policy.choose(*s, int32_t(batch.size()), probe));
  policy.share_k(batch, ks, probe);
  return ks;
}

double expected(double a, int32_t k) {  // E(a, k)
  double sum = 0, term = 1;
  for (int32_t i = 0; i <= k; ++i, term *= a) sum += term;
  return sum;
}

// The speed-up over plain decoding of every sequence of `m`'s batch proposing k at acceptance
// a, with a verify pass that grows linearly in k from the plain step (the measured line).
double modelled_speedup(const Measured& m, double a, int32_t k) {
  const double growth = (m.verify_ms - m.plain_ms) / m.k;
  return expected(a, k) * m.plain_ms / (m.plain_ms + k * (growth + m.draft_ms));
}

}  // namespace

TEST_CASE("step costs: per batch-size bucket; d and g once the gate measured a plain step") {
  DraftLengthPolicy policy = measured_policy(kBatch64, /*plain=*/false);
  CHECK(policy.cost_ratio(64) == doctest::Approx(1.14 / 9.7).epsilon(0.01));
  CHECK(policy.draft_cost(64) == 0.0);  // no plain step: nothing measured, no guess
  CHECK(policy.verify_growth(64) == 0.0);
  CHECK(policy.step_cost(64, 4, 64) == doctest::Approx(1.0 + 4 * 1.14 / 9.7).epsilon(0.01));
  // Other buckets keep the starting ratio: a batch of 64 says nothing about a batch of 1.
  CHECK(policy.cost_ratio(1) == DraftLengthPolicy::kFixedCostRatio);
  CHECK(policy.cost_ratio(32) == DraftLengthPolicy::kFixedCostRatio);
  CHECK(policy.cost_ratio(127) == doctest::Approx(1.14 / 9.7).epsilon(0.01));  // same bucket

  // The first plain-step measurement sets d and g; later ones average in.
  policy.observe_costs(64, 1.14, 9.7, 64 * 4, 6.2);
  CHECK(policy.draft_cost(64) == doctest::Approx(1.14 / 6.2));
  CHECK(policy.verify_growth(64) == doctest::Approx((9.7 / 6.2 - 1.0) / 4));
  // Half the batch proposing 8 each: the same rows beyond the batch's, the same growth.
  policy.observe_costs(64, 1.14, 9.7, 32 * 8, 6.2);
  CHECK(policy.verify_growth(64) == doctest::Approx((9.7 / 6.2 - 1.0) / 4));
  // The step's cost in plain steps at another k, and with fewer sequences sharing it.
  const double d = 1.14 / 6.2, g = (9.7 / 6.2 - 1.0) / 4;
  CHECK(policy.step_cost(64, 2, 64) == doctest::Approx(1.0 + 2 * (d + g)));
  CHECK(policy.step_cost(64, 2, 16) == doctest::Approx(1.0 + 2 * (d + g / 4)));
  // At k = 4 it is the measured step: (9.7 + 4 x 1.14) / 6.2.
  CHECK(policy.step_cost(64, 4, 64) == doctest::Approx((9.7 + 4 * 1.14) / 6.2));

  // A first use of a row count (a cuBLASLt algorithm check: 40 ms here) counts as a growth of
  // kMaxGrowthSample; a verify pass measured below the plain step as none.
  DraftLengthPolicy outlier = measured_policy(kBatch1);
  outlier.observe_costs(1, 0.45, 40.0, 4, 4.85);
  const double settled = (4.98 / 4.85 - 1.0) / 4;
  CHECK(outlier.verify_growth(1) ==
        doctest::Approx(0.9 * settled + 0.1 * DraftLengthPolicy::kMaxGrowthSample));
  DraftLengthPolicy below = measured_policy(kBatch1);
  below.observe_costs(1, 0.45, 4.0, 4, 4.85);
  CHECK(below.verify_growth(1) == doctest::Approx(0.9 * settled));
  // No proposal, no sample.
  below.observe_costs(1, 0.45, 4.0, 0, 4.85);
  CHECK(below.verify_growth(1) == doctest::Approx(0.9 * settled));
}

TEST_CASE("draft length at batch 64: the verify pass's growth with k keeps drafts short") {
  // At acceptance 0.6 the measured line makes k = 1 the best (1.20x) and k = 3, what a verify
  // pass taken as one plain step picks, 1.09x; k = 4 ran 0.83x end to end on the H100.
  const DraftLengthPolicy policy = measured_policy(kBatch64);
  for (const double a : {0.6, 0.75, 0.9}) {
    CAPTURE(a);
    const std::vector<int32_t> ks = batch_ks(policy, std::vector<double>(64, a));
    int32_t best = 1;
    for (int32_t k = 1; k <= 8; ++k) {
      if (modelled_speedup(kBatch64, a, k) > modelled_speedup(kBatch64, a, best)) best = k;
    }
    CAPTURE(best);
    CHECK(ks == std::vector<int32_t>(64, best));
  }
  CHECK(batch_ks(policy, std::vector<double>(64, 0.6)) == std::vector<int32_t>(64, 1));
  CHECK(batch_ks(policy, std::vector<double>(64, 0.9)) == std::vector<int32_t>(64, 5));
  // Before a plain step is measured: the verify pass as one plain step, k = 3.
  CHECK(batch_ks(measured_policy(kBatch64, false), std::vector<double>(64, 0.6)) ==
        std::vector<int32_t>(64, 3));
  // Where no k pays, plain decoding: at 0.3 k = 1 emits 1.3 tokens for 1.33 plain steps.
  CHECK(modelled_speedup(kBatch64, 0.3, 1) < 1.0);
  CHECK(batch_ks(policy, std::vector<double>(64, 0.3)) == std::vector<int32_t>(64, 0));
}

TEST_CASE("draft length at batch 1: the verify pass barely grows, long drafts stay") {
  const DraftLengthPolicy policy = measured_policy(kBatch1);
  CHECK(policy.verify_growth(1) == doctest::Approx((4.98 / 4.85 - 1.0) / 4));
  Sequence seq;
  seq.spec_acceptance = 0.8;
  CHECK(policy.choose(seq, 1) == 6);
  seq.spec_acceptance = 0.9;
  CHECK(policy.choose(seq, 1) == 8);
}

TEST_CASE("batch costs: the sequences that do not share k count at one token a step") {
  // One sequence at 0.9 among 63 whose drafts fail: the batch's step would emit ~4 tokens more
  // than a plain step's 64, for the cost of ~1.9 plain steps: plain decoding.
  std::vector<double> acceptance(64, 0.05);
  acceptance[0] = 0.9;
  CHECK(batch_ks(measured_policy(kBatch64), acceptance) == std::vector<int32_t>(64, 0));
  // Before a plain step is measured, the lone sequence keeps its own choice.
  CHECK(batch_ks(measured_policy(kBatch64, false), acceptance)[0] > 0);
  // A seeded sampled sequence keeps its own k whatever the batch does (its tokens must not
  // depend on timings), and counts as not sharing.
  std::vector<double> with_seeded(64, 0.3);
  with_seeded[63] = 0.9;
  std::vector<bool> seeded(64, false);
  seeded[63] = true;
  std::vector<int32_t> seeded_on(64, 0);
  seeded_on[63] = 8;
  CHECK(batch_ks(measured_policy(kBatch64), with_seeded, false, seeded) == seeded_on);
}

TEST_CASE("batch costs: a probe step speculates, so acceptance estimates can recover") {
  const DraftLengthPolicy policy = measured_policy(kBatch64);
  const std::vector<double> low(64, 0.3);
  CHECK(batch_ks(policy, low, /*probe=*/false) == std::vector<int32_t>(64, 0));
  CHECK(batch_ks(policy, low, /*probe=*/true) == std::vector<int32_t>(64, 1));
  // Sequences whose drafts are off probe with draft_min and share the batch's k.
  std::vector<double> mixed(64, 0.3);
  mixed[0] = 0.05;
  CHECK(batch_ks(policy, mixed, /*probe=*/false) == std::vector<int32_t>(64, 0));
  CHECK(batch_ks(policy, mixed, /*probe=*/true) == std::vector<int32_t>(64, 1));
}
