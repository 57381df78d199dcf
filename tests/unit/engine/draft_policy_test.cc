// DraftLengthPolicy: k from acceptance and the measured step costs, including a verify pass that
// costs several plain steps (where speculation must switch off), and the plain-step probes.
#include <doctest/doctest.h>

#include "engine/sequence.h"
#include "engine/spec_decoder.h"

using namespace tandem;

namespace {

// Feeds `steps` speculative steps at k = 4 with these times (ms), after one plain step when
// plain_ms > 0.
void observe(DraftLengthPolicy& p, double plain_ms, double draft_round_ms, double verify_ms,
             int steps = 60) {
  if (plain_ms > 0) p.observe_step(0, 0.0, plain_ms);
  for (int i = 0; i < steps; ++i) p.observe_step(4, draft_round_ms, verify_ms);
}

// The speed-up the policy estimated before it measured the verify pass (verify = one plain step).
double expected_speedup_without_growth(double a, int k, double c) {
  double tokens = 0, term = 1;
  for (int i = 0; i <= k; ++i, term *= a) tokens += term;
  return tokens / (1.0 + k * c);
}

Sequence with_acceptance(double a) {
  Sequence seq;
  seq.spec_acceptance = a;
  seq.decode_steps = 3;  // not a 16th-step probe
  return seq;
}

}  // namespace

TEST_CASE("bandwidth-bound verify: the policy speculates with the longest k at high acceptance") {
  DraftLengthPolicy p(SpecConfig{});
  // Qwen2.5-7B + 0.5B bf16 on the H200: plain 4.3 ms, verify of 5 rows 5.0, draft 1.1 a round.
  observe(p, 4.3, 1.1, 5.0);
  CHECK(p.verify_growth() == doctest::Approx((5.0 / 4.3 - 1) / 4).epsilon(0.05));
  CHECK(p.cost_ratio() == doctest::Approx(1.1 / 4.3).epsilon(0.05));
  CHECK(p.choose(with_acceptance(0.9), 1) == 4);
  CHECK(p.gain(0.9, 4) > 1.5);
  // Drafts that fail switch it off.
  CHECK(p.choose(with_acceptance(0.1), 1) == 0);
}

TEST_CASE("a verify pass that costs several plain steps switches speculation off") {
  DraftLengthPolicy p(SpecConfig{});
  // AWQ 7B + 0.5B at batch 4 on the H200: 20 verify rows leave the int4 GEMV: 12.9 ms against a
  // plain 3.85 ms step, draft 1.47 ms a round; measured 0.82x with k = 4.
  observe(p, 3.85, 1.47, 12.9);
  CHECK(p.gain(0.9, 4) < 1.0);
  CHECK(p.choose(with_acceptance(0.9), 4) == 0);
  // Without the verify's growth the same costs would have chosen k = 4 (the old policy).
  CHECK(expected_speedup_without_growth(0.9, 4, p.cost_ratio()) > 1.0);
  // The 16th-step probe still proposes draft_min, so a cheaper verify would be noticed.
  Sequence probe = with_acceptance(0.9);
  probe.decode_steps = 15;
  CHECK(p.choose(probe, 4) == 1);
}

TEST_CASE("plain-step probes: the first after 8 speculative steps, then every 64") {
  DraftLengthPolicy p(SpecConfig{});
  for (int i = 0; i < DraftLengthPolicy::kFirstPlainProbe; ++i) {
    CHECK_FALSE(p.probe_plain());
    p.observe_step(4, 1.0, 5.0);
  }
  CHECK(p.probe_plain());
  p.observe_step(0, 0.0, 4.0);  // the plain step
  CHECK_FALSE(p.probe_plain());
  for (int i = 0; i < DraftLengthPolicy::kPlainProbeInterval - 1; ++i) p.observe_step(4, 1.0, 5.0);
  CHECK_FALSE(p.probe_plain());
  p.observe_step(4, 1.0, 5.0);
  CHECK(p.probe_plain());

  // A fixed k (benchmarks) and speculation off never probe.
  SpecConfig fixed;
  fixed.fixed_k = 4;
  DraftLengthPolicy f(fixed);
  SpecConfig off;
  off.enabled = false;
  DraftLengthPolicy o(off);
  for (int i = 0; i < 200; ++i) {
    f.observe_step(4, 1.0, 5.0);
    o.observe_step(0, 0.0, 4.0);
  }
  CHECK_FALSE(f.probe_plain());
  CHECK_FALSE(o.probe_plain());
  CHECK(f.choose(with_acceptance(0.0), 1) == 4);
}
