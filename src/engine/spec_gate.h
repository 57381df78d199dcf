// Whether speculation pays, judged by what whole steps cost. DraftLengthPolicy picks k per
// sequence from acceptance and a draft/verify cost ratio, a model that cannot see the rest of
// a step's wall time: a verify pass over k + 1 rows per sequence that costs several plain
// steps (int4 weights at batch 4 on the H200: 9.1 ms for 20 rows) or the host work around it. The
// gate measures milliseconds per emitted token of speculative and of plain steps, per batch-size
// bucket, and makes a bucket decode plainly while speculation is measurably slower there. Plain
// steps probe the plain cost every kProbePeriod steps, and while the gate is shut speculative
// steps probe the speculative one: kProbePeriod steps after it shut, then twice as long after
// each probe that still lost (up to kMaxProbePeriod), and kProbePeriod again after a probe that
// came in at the plain cost or below. Each side is judged by the milliseconds a token of its
// last kWindow steps, leaving out the steps over twice their median: a step that meets a shape
// for the first time (a CUDA graph capture, a cuBLASLt algorithm check: tens of milliseconds on
// the H200) is an outlier, and an average with it shut batch 1 of the bf16 pair on the GPU,
// where speculating is 1.84x faster.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace tandem {

class SpecGate {
 public:
  static constexpr int32_t kProbePeriod = 32;  // steps of a bucket between probes
  // The longest wait for a speculative probe while the gate is shut. Each probe costs the draft's
  // catch-up on the plain steps' tokens and a speculative step (~9.6 ms against 4.2 for a plain
  // step at batch 16 on the H200 pair, NOTES.md v31), and a gate that stays shut keeps paying
  // for its probes. (Batch 16 at acceptance 0.5, 0.85-0.91x plain, lost mostly to the policy's
  // probes with the gate open: three of four timed runs in NOTES.md v49.)
  static constexpr int32_t kMaxProbePeriod = 8 * kProbePeriod;
  // Consecutive speculative steps of a probe while shut: the first catches the draft up on the
  // plain steps' tokens (SpecDecoder does not report it), the next is measured.
  static constexpr int32_t kProbeSteps = 2;
  static constexpr int32_t kMinSpecSteps = 4;  // speculative steps before the first plain probe
  // Speculative steps measured before the gate may shut: the outlier cut (twice their lower
  // median) then leaves out up to three first-use outliers.
  static constexpr int32_t kMinSpecSamples = 6;
  static constexpr double kMargin = 0.05;  // speculation must be this much slower to shut
  // ... and by this many standard errors of the two windows' difference. Without it, a window
  // of unlucky steps (1 of 8 proposals accepted where half are) shut batch 1 of the H200 pair at
  // acceptance 0.5, and its probes, one measured step each kProbePeriod, rarely reopened it
  // within a 128-token request: 1.00x where k = 1-2 win 1.19-1.27x (NOTES.md v31, v32).
  static constexpr double kConfidence = 2.0;
  // While a speculative token costs at most kClearWin of a plain one (over kMinSpecSamples
  // steps), plain probes come every kClearWinPeriod steps instead: each costs a speculating
  // batch (1 - 1 / speed-up) of a step's tokens (2 of ~35 steps in a 128-token run at 1.86x,
  // most of adaptive's gap to a fixed k on the H200), and the plain cost of a batch size drifts
  // slowly (context length), while the speculative side is measured at every step.
  static constexpr double kClearWin = 0.75;
  static constexpr int32_t kClearWinPeriod = 4 * kProbePeriod;
  static constexpr int32_t kWindow = 8;  // recent steps per side

  // What a step of `batch_size` sequences runs: true = the draft policy's k per sequence,
  // false = plain decoding (k = 0 for every sequence). Counts the step. `probe`, when given, is
  // set to whether the step is one of the shut gate's speculative probes.
  bool speculate(int32_t batch_size, bool* probe = nullptr);
  // A finished step: whether any sequence proposed, its wall time and the tokens it emitted.
  void observe(int32_t batch_size, bool speculated, double step_ms, int64_t emitted);
  // Whether speculation is measured slower than plain decoding for this batch size.
  bool shut(int32_t batch_size) const;
  // The lower median wall time of the last kWindow plain steps of this batch size's bucket (ms),
  // or nothing before the first: what DraftLengthPolicy weighs a verify pass against. Whole
  // steps, not per token: while decode is bandwidth-bound a plain step costs about the same
  // across a bucket's batch sizes (the 7B on the H200: 3.95 ms at batch 4, 4.20 at 16, NOTES.md
  // v15) where its time per token halves from one end of the bucket to the other.
  std::optional<double> plain_step_ms(int32_t batch_size) const;

 private:
  // The last kWindow steps' milliseconds and emitted tokens, and how many were observed.
  struct Samples {
    std::array<double, kWindow> ms{};
    std::array<double, kWindow> tokens{};
    int64_t observed = 0;
    void add(double step_ms, double emitted) {
      ms[size_t(observed % kWindow)] = step_ms;
      tokens[size_t(observed++ % kWindow)] = emitted;
    }
    double median() const;  // of the steps' ms, the lower median: outliers above it never decide
    // Milliseconds a token over the window's steps, leaving out the steps over twice the
    // median (a first use of a shape: a graph capture). Not a median of each step's ms a token
    // (the rule before NOTES.md v31): at acceptance 0.5 and k = 1 a step emits 1 or 2 tokens at
    // about the same cost, and that median can land on the 1-token steps (4.7 ms a token against
    // 3.8 plain, the H200 pair's costs) while the window's tokens say speculating pays.
    // `error` is its standard error over the same steps, from how far each step's ms lies from
    // `ms` times its tokens (a ratio estimate's linearised error); 0 below two steps. At batch 1,
    // acceptance 0.5 and k = 1 the steps emit 1 or 2 tokens, and eight of them put a window's ms
    // a token within about +-25% of its mean.
    struct PerToken {
      double ms = 0, error = 0;
    };
    PerToken per_token() const;
    // The last step's milliseconds a token (observed > 0).
    double last_per_token() const;
  };
  struct Bucket {
    int64_t steps = 0;
    Samples spec, plain;  // plain's median step is also plain_step_ms()
    // While shut: the step the next speculative probe starts at and the wait before it; -1 while
    // open.
    int64_t next_probe = -1;
    int64_t probe_period = kProbePeriod;
  };
  static size_t bucket_of(int32_t batch_size);
  static bool clear_win(const Bucket& b);

  std::array<Bucket, 12> buckets_{};  // batch sizes 1, 2-3, 4-7, ..., 1024 and above
};

}  // namespace tandem
