// The runner-level speculative acceptance of sampled sequences (ModelRunner::accept_sampled over
// ProbRows) on the CPU runner: the same tokens, accepted counts and generator states as the
// host rule accept_sampled on the same rows, with every path of the rule exercised; and
// probs_into() writes what probs() returns, draws included.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "accept_case.h"
#include "runner_driver.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

// The case's rows in stores of `runner`, then its accept_sampled; `rngs` get the generators.
std::vector<SpeculativeResult> runner_accept(ModelRunner& runner, const AcceptCase& c,
                                             std::vector<SamplingRng>& rngs) {
  ProbRows draft = runner.make_prob_rows(c.draft_slots(), c.width);
  ProbRows target = runner.make_prob_rows(c.target_slots(), c.width);
  REQUIRE(draft.device() == ProbRows::kHost);
  std::memcpy(draft.data(), c.draft_rows.data(), draft.bytes());
  std::memcpy(target.data(), c.target_rows.data(), target.bytes());
  rngs.clear();
  for (const AcceptSeqCase& q : c.seqs) rngs.push_back(q.rng);
  std::vector<SampledDrafts> seqs;
  for (size_t i = 0; i < c.seqs.size(); ++i) {
    const AcceptSeqCase& q = c.seqs[i];
    seqs.push_back(SampledDrafts{q.tokens, q.draft_slots, q.target_slot, &rngs[i]});
  }
  std::vector<SpeculativeResult> out(seqs.size());
  runner.accept_sampled(seqs, draft, target, out);
  return out;
}

}  // namespace

TEST_CASE("CPU runner accept_sampled equals the host rule on the same rows") {
  const ModelDir model = load_golden_model("qwen2_untied_fp16_gqa4");
  RunnerDriver driver(model, 16);
  int rejected = 0, all_accepted = 0, plain = 0, empty_residual = 0;
  for (const int32_t width : {7, 1000, 151936}) {
    const uint32_t cases = width > 100000 ? 2 : 60;
    for (uint32_t seed = 0; seed < cases; ++seed) {
      CAPTURE(width);
      CAPTURE(seed);
      const AcceptCase c = make_accept_case(width > 100000 ? 3 : 6, width, 8, seed);
      std::vector<SamplingRng> want_rngs, got_rngs;
      const std::vector<SpeculativeResult> want = reference_accept(c, want_rngs);
      const std::vector<SpeculativeResult> got = runner_accept(driver.runner(), c, got_rngs);
      REQUIRE(got.size() == want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i);
        CHECK(got[i].tokens == want[i].tokens);
        CHECK(got[i].num_accepted == want[i].num_accepted);
        CHECK(got_rngs[i].counter == want_rngs[i].counter);
        const AcceptSeqCase& q = c.seqs[i];
        const int32_t k = int32_t(q.tokens.size());
        if (k == 0) {
          ++plain;
        } else if (want[i].num_accepted == k) {
          ++all_accepted;
        } else {
          ++rejected;
          // An empty residual (p_t = p_d / 2 at the rejected position): the draw is from p_t.
          const float* p_t =
              c.target_rows.data() + size_t(q.target_slot + want[i].num_accepted) * size_t(width);
          const float* p_d = c.draft_rows.data() +
                             size_t(q.draft_slots[size_t(want[i].num_accepted)]) * size_t(width);
          bool empty = true;
          for (int32_t t = 0; t < width && empty; ++t) empty = !(p_t[t] > p_d[t]);
          empty_residual += empty;
        }
      }
    }
  }
  // Every path of the rule ran, many times.
  CHECK(rejected > 50);
  CHECK(all_accepted > 20);
  CHECK(plain > 20);
  CHECK(empty_residual > 10);
}

TEST_CASE("CPU runner probs_into writes probs()' rows and draws into its slots") {
  const ModelDir model = load_golden_model("qwen2_untied_fp16_gqa4");
  RunnerDriver driver(model, 16);
  ModelRunner& runner = driver.runner();
  TestSeq a, b;
  a.tokens = {1, 5, 9, 14};
  b.tokens = {3, 3, 7};
  driver.step({{&a, 4, true}, {&b, 3}});  // 5 logit rows
  const int32_t width = int32_t(driver.vocab()) - 3;
  ResolvedSampling hot, cut;
  hot.temperature = 0.9f;
  cut.temperature = 0.7f;
  cut.top_k = 20;
  cut.top_p = 0.8f;
  const std::vector<int32_t> prompt = {1, 5}, output = {9, 14}, ban = {2};
  std::vector<SamplingRng> rngs = {{11, 0}, {12, 3}, {13, 7}};
  std::vector<SampleRequest> reqs = {
      {4, &hot, TokenHistory{prompt, output}, ban, &rngs[0]},
      {1, &cut, TokenHistory{prompt, {}}, {}, &rngs[1]},
      {3, &cut, TokenHistory{prompt, output}, {}, &rngs[2]},
  };
  const std::vector<SamplingRng> before = rngs;
  std::vector<float> host(reqs.size() * size_t(width));
  std::vector<int32_t> host_draws(reqs.size());
  runner.probs(reqs, width, host, host_draws);
  const std::vector<SamplingRng> after_host = rngs;

  rngs = before;
  ProbRows rows = runner.make_prob_rows(6, width);
  std::vector<int32_t> draws(reqs.size());
  runner.probs_into(reqs, rows, 2, draws);
  CHECK(std::memcmp(rows.row(2), host.data(), host.size() * sizeof(float)) == 0);
  CHECK(draws == host_draws);
  for (size_t i = 0; i < rngs.size(); ++i) CHECK(rngs[i].counter == after_host[i].counter);
}
