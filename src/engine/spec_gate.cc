#include "engine/spec_gate.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <tuple>

namespace tandem {

size_t SpecGate::bucket_of(int32_t batch_size) {
  const auto width = size_t(std::bit_width(uint32_t(std::max(batch_size, 1))));
  return std::min(width - 1, std::tuple_size_v<decltype(buckets_)> - 1);
}

double SpecGate::Samples::median() const {
  const auto n = size_t(std::min<int64_t>(observed, kWindow));
  std::array<double, kWindow> v = ms;
  std::nth_element(v.begin(), v.begin() + (n - 1) / 2, v.begin() + n);
  return v[(n - 1) / 2];
}

double SpecGate::Samples::last_per_token() const {
  const auto i = size_t((observed - 1) % kWindow);
  return ms[i] / tokens[i];
}

SpecGate::Samples::PerToken SpecGate::Samples::per_token() const {
  const auto n = size_t(std::min<int64_t>(observed, kWindow));
  const double cap = 2.0 * median();
  double sum_ms = 0, sum_tokens = 0;
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    if (ms[i] > cap) continue;
    sum_ms += ms[i];
    sum_tokens += tokens[i];
    ++kept;
  }
  PerToken r;
  r.ms = sum_ms / sum_tokens;  // the median step itself is never left out
  if (kept < 2) return r;
  double sum_sq = 0;
  for (size_t i = 0; i < n; ++i) {
    if (ms[i] > cap) continue;
    const double residual = ms[i] - r.ms * tokens[i];
    sum_sq += residual * residual;
  }
  r.error = std::sqrt(sum_sq / double(kept - 1) / double(kept)) / (sum_tokens / double(kept));
  return r;
}

bool SpecGate::shut(int32_t batch_size) const {
  const Bucket& b = buckets_[bucket_of(batch_size)];
  if (b.spec.observed < kMinSpecSamples || b.plain.observed == 0) return false;
  const Samples::PerToken spec = b.spec.per_token(), plain = b.plain.per_token();
  const double plain_err = plain.error * (1.0 + kMargin);
  return spec.ms - plain.ms * (1.0 + kMargin) >
         kConfidence * std::sqrt(spec.error * spec.error + plain_err * plain_err);
}

std::optional<double> SpecGate::plain_step_ms(int32_t batch_size) const {
  const Bucket& b = buckets_[bucket_of(batch_size)];
  if (b.plain.observed == 0) return std::nullopt;
  return b.plain.median();
}

bool SpecGate::clear_win(const Bucket& b) {
  return b.spec.observed >= kMinSpecSamples && b.plain.observed > 0 &&
         b.spec.per_token().ms <= b.plain.per_token().ms * kClearWin;
}

bool SpecGate::speculate(int32_t batch_size, bool* probe) {
  Bucket& b = buckets_[bucket_of(batch_size)];
  if (probe != nullptr) *probe = false;
  const int64_t step = b.steps++;
  // Shut: plain steps, with speculative probes of kProbeSteps steps (spaced as the header says).
  // Open: speculative steps, with a plain probe every kProbePeriod (the first one after
  // kMinSpecSteps, so the comparison starts early; kClearWinPeriod while speculation clearly
  // wins).
  if (shut(batch_size)) {
    if (b.next_probe < 0) {  // just shut: the first probe at the next period's start
      b.probe_period = kProbePeriod;
      b.next_probe = (step / kProbePeriod + 1) * kProbePeriod;
    } else if (step >= b.next_probe + kProbeSteps) {  // a probe ended and the gate stays shut
      const bool promising = b.spec.last_per_token() <= b.plain.per_token().ms * (1.0 + kMargin);
      b.probe_period =
          promising ? kProbePeriod : std::min<int64_t>(2 * b.probe_period, kMaxProbePeriod);
      b.next_probe += b.probe_period;
    }
    const bool probing = step >= b.next_probe && step < b.next_probe + kProbeSteps;
    if (probe != nullptr) *probe = probing;
    return probing;
  }
  b.next_probe = -1;
  if (b.plain.observed == 0) return step != kMinSpecSteps;
  const int64_t period = clear_win(b) ? kClearWinPeriod : kProbePeriod;
  return step % period != period - 1;
}

void SpecGate::observe(int32_t batch_size, bool speculated, double step_ms, int64_t emitted) {
  if (step_ms <= 0 || emitted <= 0) return;
  Bucket& b = buckets_[bucket_of(batch_size)];
  (speculated ? b.spec : b.plain).add(step_ms, double(emitted));
}

}  // namespace tandem
