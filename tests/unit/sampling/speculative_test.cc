#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "chi_square.h"
#include "sampling/speculative.h"

using namespace tandem;
using tandem::testing::chi_square;
using tandem::testing::chi_square_two_sample;
using tandem::testing::kChiSquare7Dof999;

namespace {

constexpr int32_t kVocab = 8;

// Target and draft disagree a lot (acceptance rate 0.55), so a wrong rejection path shows.
const std::vector<float> kTarget = {0.30f, 0.20f, 0.15f, 0.10f, 0.10f, 0.05f, 0.05f, 0.05f};
const std::vector<float> kDraft = {0.05f, 0.05f, 0.10f, 0.10f, 0.15f, 0.15f, 0.20f, 0.20f};
// kDraft with a capped vocabulary (--draft-vocab 5): ids 5-7, which the target gives 0.15,
// are never proposed, and the residual must give them all of their mass.
const std::vector<float> kCappedDraft = {0.05f / 0.45f, 0.05f / 0.45f, 0.10f / 0.45f, 0.10f / 0.45f,
                                         0.15f / 0.45f, 0.0f,          0.0f,          0.0f};
// A second target row for position 1.
const std::vector<float> kTarget1 = {0.05f, 0.05f, 0.05f, 0.05f, 0.10f, 0.10f, 0.20f, 0.40f};

std::vector<float> rows(std::initializer_list<const std::vector<float>*> parts) {
  std::vector<float> out;
  for (const std::vector<float>* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

// The broken rule the distribution test must catch: sample from p_t after a rejection instead
// of from max(0, p_t - p_d).
void target_instead_of_residual(std::span<const float> target, std::span<const float>,
                                std::span<float> out) {
  std::copy(target.begin(), target.end(), out.begin());
}

struct Counts {
  std::vector<int64_t> first = std::vector<int64_t>(kVocab, 0);   // first emitted token
  std::vector<int64_t> second = std::vector<int64_t>(kVocab, 0);  // second, when emitted
};

// k = 2 drafts drawn from `draft` (their own stream), verified against rows kTarget, kTarget1
// and a bonus row, over fixed seeds.
Counts run_trials(int trials, ResidualFn residual, const std::vector<float>& draft = kDraft) {
  const std::vector<float> draft_probs = rows({&draft, &draft});
  const std::vector<float> target_probs = rows({&kTarget, &kTarget1, &kTarget});
  Counts c;
  for (int s = 0; s < trials; ++s) {
    SamplingRng draft_rng{uint64_t(s) + 1000000, 0};
    const std::vector<int32_t> drafts = {sample_from_probs(draft, draft_rng.next_uniform()),
                                         sample_from_probs(draft, draft_rng.next_uniform())};
    SamplingRng rng{uint64_t(s), 0};
    const SpeculativeResult r =
        accept_sampled(drafts, draft_probs, target_probs, kVocab, rng, residual);
    REQUIRE(r.tokens.size() == size_t(r.num_accepted) + 1);
    // Draws: one per acceptance test made, one for the final token.
    REQUIRE(rng.counter == uint64_t(std::min(r.num_accepted + 1, 2) + 1));
    c.first[size_t(r.tokens[0])]++;
    if (r.tokens.size() >= 2) c.second[size_t(r.tokens[1])]++;
  }
  return c;
}

std::vector<double> to_double(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}

}  // namespace

TEST_CASE("greedy acceptance: longest matching prefix, then the target's token") {
  // Target argmax per row: 3, 1, 1 (a tie with 5: the lower id), 6 (bonus).
  std::vector<float> target(4 * kVocab, 0.0f);
  target[0 * kVocab + 3] = 5.0f;
  target[1 * kVocab + 1] = 2.0f;
  target[2 * kVocab + 1] = 4.0f;
  target[2 * kVocab + 5] = 4.0f;
  target[3 * kVocab + 6] = 1.0f;

  SpeculativeResult r = accept_greedy(std::vector<int32_t>{3, 1, 1}, target, kVocab);
  CHECK(r.tokens == std::vector<int32_t>{3, 1, 1, 6});  // all accepted, plus the bonus
  CHECK(r.num_accepted == 3);
  r = accept_greedy(std::vector<int32_t>{3, 1, 5}, target, kVocab);
  CHECK(r.tokens == std::vector<int32_t>{3, 1, 1});  // the tie goes to id 1, not the draft's 5
  CHECK(r.num_accepted == 2);
  r = accept_greedy(std::vector<int32_t>{0, 1, 1}, target, kVocab);
  CHECK(r.tokens == std::vector<int32_t>{3});
  CHECK(r.num_accepted == 0);
  // No drafts: just the target's token.
  r = accept_greedy({}, std::span<const float>(target).first(kVocab), kVocab);
  CHECK(r.tokens == std::vector<int32_t>{3});
}

TEST_CASE("sampled acceptance: equal distributions accept every draft") {
  const std::vector<float> same = rows({&kTarget, &kTarget, &kTarget});
  for (uint64_t s = 0; s < 500; ++s) {
    SamplingRng rng{s, 0};
    const std::vector<int32_t> drafts = {int32_t(s % 8), int32_t((s / 8) % 8)};
    const SpeculativeResult r =
        accept_sampled(drafts, std::span<const float>(same).first(2 * kVocab), same, kVocab, rng);
    REQUIRE(r.num_accepted == 2);
    REQUIRE(r.tokens.size() == 3);
  }
}

TEST_CASE("sampled acceptance: a draft the target gives zero probability is always rejected") {
  std::vector<float> target = {0.0f, 0.5f, 0.5f, 0, 0, 0, 0, 0};
  std::vector<float> draft = {1.0f, 0, 0, 0, 0, 0, 0, 0};
  std::vector<float> target_rows = rows({&target, &target});
  for (uint64_t s = 0; s < 200; ++s) {
    SamplingRng rng{s, 0};
    const SpeculativeResult r =
        accept_sampled(std::vector<int32_t>{0}, draft, target_rows, kVocab, rng);
    REQUIRE(r.num_accepted == 0);
    REQUIRE((r.tokens[0] == 1 || r.tokens[0] == 2));  // from the residual = target here
  }
}

TEST_CASE("the default residual's fused draw picks the tokens of the generic path") {
  // accept_sampled fuses residual_distribution with its draw (no normalising pass); an injected
  // residual takes the generic path: residual into a row, then sample_from_probs. The same draws
  // must give the same tokens (the fused draw scans unnormalised mass against u · total).
  const auto generic = [](std::span<const float> t, std::span<const float> d, std::span<float> o) {
    residual_distribution(t, d, o);
  };
  const std::vector<float> draft_probs = rows({&kDraft, &kDraft});
  const std::vector<float> target_probs = rows({&kTarget, &kTarget1, &kTarget});
  int rejections = 0;
  for (int s = 0; s < 4000; ++s) {
    SamplingRng draft_rng{uint64_t(s) + 7000000, 0};
    const std::vector<int32_t> drafts = {sample_from_probs(kDraft, draft_rng.next_uniform()),
                                         sample_from_probs(kDraft, draft_rng.next_uniform())};
    SamplingRng a{uint64_t(s), 0}, b{uint64_t(s), 0};
    const SpeculativeResult fused = accept_sampled(drafts, draft_probs, target_probs, kVocab, a);
    const SpeculativeResult plain =
        accept_sampled(drafts, draft_probs, target_probs, kVocab, b, +generic);
    CAPTURE(s);
    REQUIRE(fused.tokens == plain.tokens);
    REQUIRE(a.counter == b.counter);
    rejections += fused.num_accepted < 2;
  }
  CHECK(rejections > 1000);  // the residual path really ran
}

TEST_CASE("residual_distribution is normalize(max(0, p_t - p_d))") {
  std::vector<float> out(kVocab);
  residual_distribution(kTarget, kDraft, out);
  // Positive differences: 0.25, 0.15, 0.05 (sum 0.45).
  const std::vector<float> want = {0.25f / 0.45f, 0.15f / 0.45f, 0.05f / 0.45f, 0, 0, 0, 0, 0};
  for (int i = 0; i < kVocab; ++i) CHECK(out[size_t(i)] == doctest::Approx(want[size_t(i)]));
}

TEST_CASE("sampled acceptance is reproducible per seed") {
  const std::vector<float> draft_probs = rows({&kDraft, &kDraft});
  const std::vector<float> target_probs = rows({&kTarget, &kTarget1, &kTarget});
  const std::vector<int32_t> drafts = {6, 7};
  for (uint64_t s = 0; s < 50; ++s) {
    SamplingRng a{s, 0}, b{s, 0};
    const SpeculativeResult ra = accept_sampled(drafts, draft_probs, target_probs, kVocab, a);
    const SpeculativeResult rb = accept_sampled(drafts, draft_probs, target_probs, kVocab, b);
    REQUIRE(ra.tokens == rb.tokens);
    REQUIRE(a.counter == b.counter);
  }
}

namespace {

// The first token of each of `trials` follows kTarget, the second kTarget1: the second token is
// emitted when the first draft was accepted, which does not depend on the second draft, so given
// that it must follow the target's row 1. The first draft is accepted in a fraction `accept` of
// trials (the sum over ids of min(p_t, p_d)).
void check_target_distribution(const Counts& c, int trials, double accept) {
  const double first = chi_square(c.first, to_double(kTarget));
  const double second = chi_square(c.second, to_double(kTarget1));
  INFO("chi-square first " << first << ", second " << second);
  CHECK(first < kChiSquare7Dof999);
  CHECK(second < kChiSquare7Dof999);
  const int64_t emitted_second = std::accumulate(c.second.begin(), c.second.end(), int64_t{0});
  CHECK(emitted_second == doctest::Approx(accept * trials).epsilon(0.03));
}

}  // namespace

TEST_CASE("speculative sampling emits tokens with the target's distribution (chi-square)") {
  const Counts c = run_trials(20000, residual_distribution);
  check_target_distribution(c, 20000, 0.55);

  // And against target-only sampling (sample_token's inverse CDF, its own seeds).
  std::vector<int64_t> target_only(kVocab, 0);
  for (int s = 0; s < 20000; ++s)
    target_only[size_t(sample_from_probs(kTarget, philox_uniform(uint64_t(s) + 5000000, 0)))]++;
  const double two_sample = chi_square_two_sample(c.first, target_only);
  INFO("two-sample chi-square " << two_sample);
  CHECK(two_sample < kChiSquare7Dof999);
}

TEST_CASE("a draft with a capped vocabulary keeps the target's distribution (chi-square)") {
  const Counts c = run_trials(20000, residual_distribution, kCappedDraft);
  for (const int64_t n : {c.first[5], c.first[6], c.first[7]}) CHECK(n > 0);
  // Acceptance: 1/9 + 1/9 + 0.15 + 0.10 + 0.10 = 0.572 (kTarget against kCappedDraft).
  check_target_distribution(c, 20000, 0.5722);
  // The broken rule fails here too: p_t after a rejection over-weights the draft's ids.
  const Counts broken = run_trials(20000, target_instead_of_residual, kCappedDraft);
  CHECK(chi_square(broken.first, to_double(kTarget)) > kChiSquare7Dof999);
}

TEST_CASE("the distribution test fails a rule that samples p_t instead of the residual") {
  const Counts c = run_trials(20000, target_instead_of_residual);
  const double first = chi_square(c.first, to_double(kTarget));
  INFO("chi-square of the broken rule " << first);
  CHECK(first > kChiSquare7Dof999);
  std::vector<int64_t> target_only(kVocab, 0);
  for (int s = 0; s < 20000; ++s)
    target_only[size_t(sample_from_probs(kTarget, philox_uniform(uint64_t(s) + 5000000, 0)))]++;
  CHECK(chi_square_two_sample(c.first, target_only) > kChiSquare7Dof999);
}

TEST_CASE("one-hot (greedy) probabilities make sampled acceptance agree with greedy") {
  // Target argmax 3 then 5, bonus 1; the draft proposes 3 then 4.
  std::vector<float> target(3 * kVocab, 0.0f), draft(2 * kVocab, 0.0f);
  target[0 * kVocab + 3] = target[1 * kVocab + 5] = target[2 * kVocab + 1] = 1.0f;
  draft[0 * kVocab + 3] = draft[1 * kVocab + 4] = 1.0f;
  const std::vector<int32_t> drafts = {3, 4};
  for (uint64_t s = 0; s < 100; ++s) {
    SamplingRng rng{s, 0};
    const SpeculativeResult r = accept_sampled(drafts, draft, target, kVocab, rng);
    REQUIRE(r.tokens == std::vector<int32_t>{3, 5});
    REQUIRE(r.tokens == accept_greedy(drafts, target, kVocab).tokens);
  }
}
