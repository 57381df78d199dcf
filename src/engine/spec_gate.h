// Whether speculation pays, judged by what whole steps cost. DraftLengthPolicy picks k per
// sequence from acceptance and a draft/verify cost ratio, a model that cannot see the rest of
// a step's wall time: a verify pass over k + 1 rows per sequence that costs several plain
// steps (int4 weights at batch 4 on the H200: 9.1 ms for 20 rows) or the host work around it. The
// gate measures milliseconds per emitted token of speculative and of plain steps, per batch-size
// bucket, and makes a bucket decode plainly while speculation is measurably slower there. Plain
// steps probe the plain cost, and while the gate is shut speculative steps probe the speculative
// one, each every kProbePeriod steps.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace tandem {

class SpecGate {
 public:
  static constexpr int32_t kProbePeriod = 32;  // steps of a bucket between probes
  static constexpr int32_t kMinSpecSteps = 4;  // speculative steps before the gate may shut
  static constexpr double kMargin = 0.05;      // speculation must be this much slower to shut
  static constexpr double kSmoothing = 0.25;   // weight of a new step in the averages

  // What a step of `batch_size` sequences runs: true = the draft policy's k per sequence,
  // false = plain decoding (k = 0 for every sequence). Counts the step.
  bool speculate(int32_t batch_size);
  // A finished step: whether any sequence proposed, its wall time and the tokens it emitted.
  void observe(int32_t batch_size, bool speculated, double step_ms, int64_t emitted);
  // Whether speculation is measured slower than plain decoding for this batch size.
  bool shut(int32_t batch_size) const;

 private:
  struct Bucket {
    int64_t steps = 0;
    int32_t spec_steps = 0, plain_steps = 0;  // observed
    double spec_ms_per_token = 0, plain_ms_per_token = 0;
  };
  static size_t bucket_of(int32_t batch_size);

  std::array<Bucket, 12> buckets_{};  // batch sizes 1, 2-3, 4-7, ..., 1024 and above
};

}  // namespace tandem
