#include "engine/spec_gate.h"

#include <algorithm>
#include <bit>
#include <tuple>

namespace tandem {

size_t SpecGate::bucket_of(int32_t batch_size) {
  const auto width = size_t(std::bit_width(uint32_t(std::max(batch_size, 1))));
  return std::min(width - 1, std::tuple_size_v<decltype(buckets_)> - 1);
}

bool SpecGate::shut(int32_t batch_size) const {
  const Bucket& b = buckets_[bucket_of(batch_size)];
  return b.spec_steps >= kMinSpecSteps && b.plain_steps > 0 &&
         b.spec_ms_per_token > b.plain_ms_per_token * (1.0 + kMargin);
}

bool SpecGate::speculate(int32_t batch_size) {
  Bucket& b = buckets_[bucket_of(batch_size)];
  const int64_t step = b.steps++;
  // Shut: plain steps, with a speculative probe every kProbePeriod. Open: speculative steps,
  // with a plain probe every kProbePeriod (the first one after kMinSpecSteps, so the
  // comparison starts early).
  if (shut(batch_size)) return step % kProbePeriod == 0;
  if (b.plain_steps == 0) return step != kMinSpecSteps;
  return step % kProbePeriod != kProbePeriod - 1;
}

void SpecGate::observe(int32_t batch_size, bool speculated, double step_ms, int64_t emitted) {
  if (step_ms <= 0 || emitted <= 0) return;
  Bucket& b = buckets_[bucket_of(batch_size)];
  const double ms_per_token = step_ms / double(emitted);
  int32_t& n = speculated ? b.spec_steps : b.plain_steps;
  double& avg = speculated ? b.spec_ms_per_token : b.plain_ms_per_token;
  avg = n == 0 ? ms_per_token : (1.0 - kSmoothing) * avg + kSmoothing * ms_per_token;
  ++n;
}

}  // namespace tandem
