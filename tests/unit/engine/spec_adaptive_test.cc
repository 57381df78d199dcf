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
      policy.observe_costs(1, draft / k, verify_ms(k), k, gate.plain_step_ms(1));
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

namespace {

// A batch's costs on the H100 (the 7B + 0.5B pattern pair, NOTES.md v59, call A), in ms: a plain
// step, a verify pass's growth per proposal a sequence, a draft round of the whole batch.
struct BatchCosts {
  int32_t batch;
  double plain_ms, growth_ms, round_ms;
};
constexpr BatchCosts kBatch32{32, 5.63, (7.52 - 5.63) / 4, 1.0};
constexpr BatchCosts kBatch64{64, 6.2, (9.7 - 6.2) / 4, 1.14};

// The best fixed k's speed-up over plain decoding under these costs, every sequence proposing.
double best_fixed(const BatchCosts& c, double a) {
  double best = 1.0;
  for (int32_t k = 1; k <= 8; ++k) {
    const double step = c.plain_ms + k * (c.growth_ms + c.round_ms);
    best = std::max(best, expected_tokens(a, k) * c.plain_ms / step);
  }
  return best;
}

// `steps` steps of a batch that never drains (a server's steady state): the gate and the
// policy as SpecDecoder::step drives them, each sequence's acceptance drawn. Returns the
// tokens a millisecond over plain decoding's.
double adaptive_batch_speedup(const BatchCosts& c, double a, int steps, uint32_t seed) {
  SpecConfig config;
  config.max_batch = 1024;
  DraftLengthPolicy policy(config);
  SpecGate gate;
  ProbeSchedule probes;
  std::vector<Sequence> seqs(size_t(c.batch));
  std::vector<Sequence*> batch;
  for (Sequence& s : seqs) batch.push_back(&s);
  std::mt19937 rng(seed);
  std::bernoulli_distribution accept(a);
  std::normal_distribution<double> jitter(1.0, 0.01);
  int64_t emitted = 0;
  double ms = 0;
  for (int s = 0; s < steps; ++s) {
    std::vector<int32_t> ks(batch.size(), 0);
    if (gate.speculate(c.batch)) {
      const bool probe = probes.next_step();
      for (size_t i = 0; i < batch.size(); ++i) ks[i] = policy.choose(*batch[i], c.batch, probe);
      policy.share_k(batch, ks, probe);
      if (!probe && *std::max_element(ks.begin(), ks.end()) > 0) probes.speculated();
    }
    const int32_t max_k = *std::max_element(ks.begin(), ks.end());
    int64_t tokens = 0, proposed = 0;
    double step_ms = c.plain_ms;
    if (max_k == 0) {
      tokens = c.batch;
    } else {
      for (size_t i = 0; i < batch.size(); ++i) {
        if (ks[i] == 0) {
          ++tokens;
          continue;
        }
        int32_t accepted = 0;
        while (accepted < ks[i] && accept(rng)) ++accepted;
        observe_acceptance(*batch[i], ks[i], accepted);
        tokens += accepted + 1;
        proposed += ks[i];
      }
      const double verify = c.plain_ms + c.growth_ms * double(proposed) / c.batch;
      step_ms = max_k * c.round_ms + verify;
      policy.observe_costs(c.batch, c.round_ms, verify, proposed, gate.plain_step_ms(c.batch));
    }
    step_ms *= jitter(rng);
    gate.observe(c.batch, max_k > 0, step_ms, tokens);
    emitted += tokens;
    ms += step_ms;
  }
  return double(emitted) * c.plain_ms / (ms * c.batch);
}

}  // namespace

TEST_CASE("adaptive speculation at batches 32 and 64 stays near the best fixed k") {
  // 400 steps each, four seeds: 0.965-1.0 of the best fixed k, and plain decoding's speed
  // within 0.3% where k = 1 gains 3% (batch 32, acceptance 0.3). The loss is mostly the
  // per-sequence acceptance estimates (about the last ten positions): at 0.6 a few percent of
  // them read below the ~0.33 where a draft stops paying, and those sequences decode plainly.
  // With the verify pass taken as one plain step in the choice of k (before NOTES.md v59):
  // 0.89-0.95 of the best at batch 64 (k = 3 at acceptance 0.6, 1.10x where k = 1 gives
  // 1.21x; k = 4 at 0.75), and 0.98 of plain decoding at batch 32 and acceptance 0.3.
  for (const BatchCosts& c : {kBatch32, kBatch64}) {
    for (const double a : {0.3, 0.6, 0.75, 0.9}) {
      CAPTURE(c.batch);
      CAPTURE(a);
      const double best = best_fixed(c, a);
      CAPTURE(best);
      double sum = 0;
      for (uint32_t seed = 0; seed < 4; ++seed) sum += adaptive_batch_speedup(c, a, 400, seed);
      // Near the break-even, plain decoding's speed within 1%.
      CHECK(sum / 4 >= (best < 1.05 ? 0.99 : 0.95 * best));
    }
  }
}
