// The adaptive policy as a whole: SpecGate and DraftLengthPolicy driven as SpecDecoder::step
// drives them at batch 1, on the H200 pair's measured costs, against the best fixed k. Models,
// not runners: a step's acceptance is drawn (per-token acceptance a, independent positions) and
// its time comes from the costs below, so each policy rule can be judged over hundreds of
// requests in milliseconds.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "engine/spec_decoder.h"
#include "engine/spec_gate.h"

using namespace tandem;

namespace {

// The bf16 Qwen2.5-7B + 0.5B pair on one H200 at batch 1 (NOTES.md v31, call 9), in ms: a
// plain step; a verify pass of k + 1 positions; a draft round of one token, and of the first
// round's two or more (the last proposal's K/V and the bonus token, plus one a plain step).
constexpr double kPlainMs = 3.705;
double verify_ms(int32_t k) {
  return 3.72 + 0.02 * k;
}
double round_ms(int64_t tokens) {
  return tokens == 1 ? 0.58 : 0.85 + 0.01 * double(tokens - 2);
}

double expected_tokens(double a, int32_t k) {
  double sum = 0, term = 1;
  for (int32_t i = 0; i <= k; ++i, term *= a) sum += term;
  return sum;
}

// The best fixed k's speed-up over plain decoding under the same costs (steady state).
double best_fixed(double a) {
  double best = 1.0;
  for (int32_t k = 1; k <= 8; ++k) {
    const double step = verify_ms(k) + round_ms(2) + double(k - 1) * round_ms(1);
    best = std::max(best, expected_tokens(a, k) * kPlainMs / step);
  }
  return best;
}

// One request of `tokens` output tokens: plain decoding's time over the adaptive run's.
double adaptive_speedup(double a, int tokens, uint32_t seed) {
  SpecConfig config;  // draft_max 8, draft_min 1
  DraftLengthPolicy policy(config);
  SpecGate gate;
  Sequence seq;
  std::mt19937 rng(seed);
  std::bernoulli_distribution accept(a);
  std::normal_distribution<double> jitter(1.0, 0.01);
  ProbeSchedule probes;  // SpecDecoder::probes_
  int64_t lag = 1;       // tokens the draft's next first round carries (q_len)
  int emitted = 0;
  double ms = 0;
  while (emitted < tokens) {
    int32_t k = 0;
    if (gate.speculate(1)) {
      const bool probe = probes.next_step();
      std::vector<Sequence*> seqs{&seq};
      std::vector<int32_t> ks{policy.choose(seq, 1, probe)};
      policy.share_k(seqs, ks, probe);
      k = ks[0];
      if (!probe && k > 0) probes.speculated();
    }
    double step_ms;
    int32_t step_tokens = 1;
    const int64_t catchup = lag - 1;  // SpecDecoder's last_max_catchup_
    if (k == 0) {
      step_ms = kPlainMs * jitter(rng);
      ++lag;  // the draft skips the token
    } else {
      int32_t accepted = 0;
      while (accepted < k && accept(rng)) ++accepted;
      const double draft = round_ms(lag) + double(k - 1) * round_ms(1);
      step_ms = (draft + verify_ms(k)) * jitter(rng);
      step_tokens = accepted + 1;
      observe_acceptance(seq, k, accepted);
      policy.observe_costs(draft / k, verify_ms(k), gate.plain_step_ms(1));
      // All accepted: the last proposal's K/V and the bonus token; else the correction token.
      lag = accepted == k ? 2 : 1;
    }
    if (k == 0 || catchup <= 2) gate.observe(1, k > 0, step_ms, step_tokens);  // steady steps
    emitted += step_tokens;
    ms += step_ms;
  }
  return double(emitted) * kPlainMs / ms;
}

double mean_adaptive_speedup(double a, int requests) {
  double sum = 0;
  for (int r = 0; r < requests; ++r) sum += adaptive_speedup(a, 128, uint32_t(r));
  return sum / requests;
}

}  // namespace

TEST_CASE("adaptive speculation at batch 1 stays near the best fixed k, acceptance 0.3-0.9") {
  // 200 requests of 128 tokens each: 0.976-1.00 of the best fixed k. Before NOTES.md v32 (the
  // acceptance estimate over about five steps, the gate shutting on any window 5% slower):
  // 0.93 at acceptance 0.4 and 0.5 (1.16x against 1.25x), 0.96 at 0.3: noise shut speculation,
  // and the gate's and the policy's probes reopened it slowly. The H200 pair ran 1.00x at 0.5
  // where k = 1-2 ran 1.19-1.27x (v31).
  for (const double a : {0.3, 0.4, 0.5, 0.6, 0.75, 0.9}) {
    CAPTURE(a);
    const double best = best_fixed(a);
    CAPTURE(best);
    CHECK(mean_adaptive_speedup(a, 200) >= 0.965 * best);
  }
}

TEST_CASE("adaptive speculation at batch 1: never much slower than plain where drafts fail") {
  for (const double a : {0.0, 0.1, 0.2}) {
    CAPTURE(a);
    CHECK(mean_adaptive_speedup(a, 200) >= 0.9);
  }
}
