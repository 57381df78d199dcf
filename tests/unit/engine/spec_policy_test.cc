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

TEST_CASE("draft length: k_tie takes the smallest k within its fraction of the best gain") {
  // c = 0.1 (the policy's starting ratio). At a = 0.81 the gain E(a, k) / (1 + k c) is 2.449 at
  // k = 4, 2.518 at 5, 2.537 at 6 (the best), 2.522 at 7 and 2.485 at 8.
  SpecConfig config;
  config.draft_max = 8;
  Sequence seq;
  seq.spec_acceptance = 0.81;
  CHECK(DraftLengthPolicy(config).choose(seq, 1) == 6);
  config.k_tie = 0.01;  // 2.518 >= 2.537 x 0.99 = 2.512; k = 4's 2.449 is not
  CHECK(DraftLengthPolicy(config).choose(seq, 1) == 5);
  config.k_tie = 0.005;  // 2.518 < 2.524
  CHECK(DraftLengthPolicy(config).choose(seq, 1) == 6);
  // At a = 0.9 k = 8 leads by more than 1% (3.403 against 3.350 at k = 7): it stays.
  config.k_tie = 0.01;
  seq.spec_acceptance = 0.9;
  CHECK(DraftLengthPolicy(config).choose(seq, 1) == 8);
  // A tie never brings back a k that does not beat plain decoding: at a = 0.05 every gain is
  // below 1 (0.955 at k = 1) and the sequence stays plain, whatever the fraction.
  config.k_tie = 0.5;
  seq.spec_acceptance = 0.05;
  CHECK(DraftLengthPolicy(config).choose(seq, 1) == 0);
  // draft_min bounds it from below.
  config.k_tie = 0.01;
  config.draft_min = 6;
  seq.spec_acceptance = 0.81;
  CHECK(DraftLengthPolicy(config).choose(seq, 1) == 6);
  // The batch's shared k takes it too: two sequences at 0.81 share 5, not 6.
  config.draft_min = 1;
  Sequence other;
  other.spec_acceptance = 0.81;
  std::vector<Sequence*> batch{&seq, &other};
  for (const double tie : {0.0, 0.01}) {
    config.k_tie = tie;
    DraftLengthPolicy policy(config);
    std::vector<int32_t> ks{policy.choose(seq, 2), policy.choose(other, 2)};
    policy.share_k(batch, ks);
    CAPTURE(tie);
    CHECK(ks == std::vector<int32_t>(2, tie > 0 ? 5 : 6));
  }
}

TEST_CASE("draft length: sequences whose drafts are off probe on the batch's probe steps only") {
  // Each probe costs the batch a draft round and a catch-up; sequences that arrived at
  // different times must not take turns at it (SpecDecoder passes one schedule for all).
  SpecConfig config;
  config.draft_max = 8;
  config.draft_min = 2;
  DraftLengthPolicy policy(config);
  for (int i = 0; i < 200; ++i) policy.observe_costs(0.8, 5.0);
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
  for (int i = 0; i < 200; ++i) policy.observe_costs(0.8, 5.0);  // c = 0.16
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
    return (tokens(0.95, k) + tokens(0.5, k)) / (1.0 + k * policy.cost_ratio());
  };
  CHECK(ks[0] == ks[1]);
  for (int32_t k = 1; k <= 8; ++k) CHECK(gain(ks[0]) >= gain(k));
  // ... and beats the sequences' own choices, whose step pays max(k) draft rounds anyway.
  const double own_gain = (tokens(0.95, own[0]) + tokens(0.5, own[1])) /
                          (1.0 + std::max(own[0], own[1]) * policy.cost_ratio());
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

// A policy with a draft round at `c` of a verify pass and, where `verify_cost` is set, a verify
// pass at that many of the gate's plain steps, as SpecDecoder feeds them (each EMA settled).
DraftLengthPolicy measured_policy(double c, std::optional<double> verify_cost) {
  SpecConfig config;
  config.draft_max = 8;
  DraftLengthPolicy policy(config);
  const double plain_ms = 4.0, verify_ms = 4.0 * verify_cost.value_or(1.0);
  for (int i = 0; i < 300; ++i) {
    policy.observe_costs(c * verify_ms, verify_ms,
                         verify_cost ? std::optional(plain_ms) : std::nullopt);
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

// The costs of NOTES.md v17's call 3 (batch 16 on the H200): a draft round at 0.155 of a
// verify pass, a verify pass at 1.35 plain steps.
constexpr double kDraftCost = 0.155;
constexpr double kVerifyCost = 1.35;

}  // namespace

TEST_CASE("verify cost: 1 until the gate measured a plain step, then an average of verify/plain") {
  SpecConfig config;
  DraftLengthPolicy policy(config);
  for (int i = 0; i < 50; ++i) policy.observe_costs(0.8, 5.4);  // no plain step measured
  CHECK(policy.verify_cost() == 1.0);
  policy.observe_costs(0.8, 5.4, 4.0);  // the first: the average starts from 1
  CHECK(policy.verify_cost() == doctest::Approx(0.9 + 0.1 * 1.35));
  for (int i = 0; i < 200; ++i) policy.observe_costs(0.8, 5.4, 4.0);
  CHECK(policy.verify_cost() == doctest::Approx(1.35));
  // A first use of a row count (a cuBLASLt algorithm check: 40 ms here) counts as 2 plain steps.
  policy.observe_costs(0.8, 40.0, 4.0);
  CHECK(policy.verify_cost() == doctest::Approx(0.9 * 1.35 + 0.1 * 2.0));
  // Nothing measured, nothing fed.
  policy.observe_costs(0.8, 5.4, std::nullopt);
  CHECK(policy.verify_cost() == doctest::Approx(0.9 * 1.35 + 0.1 * 2.0));
}

TEST_CASE("batch verify cost: batch 16 at acceptance 0.5 decodes plainly at v = 1.35") {
  const std::vector<double> half(16, 0.5);
  // Each sequence: E(0.5, 2) = 1.75 tokens a step, against 1.35 x (1 + 2 x 0.155) = 1.77.
  CHECK(batch_ks(measured_policy(kDraftCost, kVerifyCost), half) == std::vector<int32_t>(16, 0));
  // The old choice, where a verify pass costs one plain step...
  CHECK(batch_ks(measured_policy(kDraftCost, std::nullopt), half) == std::vector<int32_t>(16, 2));
  // ... and where the gate measured it at the batch-1 figure, 1.2: 1.75 > 1.57, still on.
  CHECK(batch_ks(measured_policy(kDraftCost, 1.2), half) == std::vector<int32_t>(16, 2));
}

TEST_CASE("batch verify cost: acceptance 0.7-0.9 keeps speculating at v = 1.35 and 1.6") {
  for (const double v : {kVerifyCost, 1.6}) {
    CAPTURE(v);
    const DraftLengthPolicy policy = measured_policy(kDraftCost, v);
    // E(0.7, 3) = 2.53 against 1.6 x 1.465 = 2.34; E(0.9, 8) = 6.13 against 1.6 x 2.24 = 3.58.
    CHECK(batch_ks(policy, std::vector<double>(16, 0.7)) == std::vector<int32_t>(16, 3));
    CHECK(batch_ks(policy, std::vector<double>(16, 0.8)) == std::vector<int32_t>(16, 5));
    CHECK(batch_ks(policy, std::vector<double>(16, 0.9)) == std::vector<int32_t>(16, 8));
  }
}

TEST_CASE("batch verify cost: the sequences that do not share k count at one token a step") {
  // One sequence at 0.9 among 15 whose drafts fail: alone it chose k = 8, and before a plain
  // step was measured it keeps it...
  std::vector<double> acceptance(16, 0.05);
  acceptance[0] = 0.9;
  std::vector<int32_t> one_on(16, 0);
  one_on[0] = 8;
  CHECK(batch_ks(measured_policy(kDraftCost, std::nullopt), acceptance) == one_on);
  // ... but the batch's step emits 6.1 + 15 tokens for 16 sequences' 2.24 plain steps (even at
  // v = 1): plain decoding.
  CHECK(batch_ks(measured_policy(kDraftCost, 1.0), acceptance) == std::vector<int32_t>(16, 0));
  CHECK(batch_ks(measured_policy(kDraftCost, kVerifyCost), acceptance) ==
        std::vector<int32_t>(16, 0));
  // A seeded sampled sequence keeps its own k whatever the batch does (its tokens must not
  // depend on timings), and counts as not sharing.
  std::vector<double> with_seeded(16, 0.5);
  with_seeded[15] = 0.9;
  std::vector<bool> seeded(16, false);
  seeded[15] = true;
  std::vector<int32_t> seeded_on(16, 0);
  seeded_on[15] = 8;
  CHECK(batch_ks(measured_policy(kDraftCost, kVerifyCost), with_seeded, false, seeded) ==
        seeded_on);
  std::vector<int32_t> all_on(16, 2);
  all_on[15] = 8;
  CHECK(batch_ks(measured_policy(kDraftCost, std::nullopt), with_seeded, false, seeded) == all_on);
}

TEST_CASE("batch verify cost: a probe step speculates, so acceptance estimates can recover") {
  const DraftLengthPolicy policy = measured_policy(kDraftCost, kVerifyCost);
  const std::vector<double> half(16, 0.5);
  CHECK(batch_ks(policy, half, /*probe=*/false) == std::vector<int32_t>(16, 0));
  CHECK(batch_ks(policy, half, /*probe=*/true) == std::vector<int32_t>(16, 2));
  // Sequences whose drafts are off probe with draft_min and share the batch's k.
  std::vector<double> mixed(16, 0.5);
  mixed[0] = 0.05;
  CHECK(batch_ks(policy, mixed, /*probe=*/false) == std::vector<int32_t>(16, 0));
  CHECK(batch_ks(policy, mixed, /*probe=*/true) == std::vector<int32_t>(16, 2));
}
