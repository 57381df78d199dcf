// Where the sampler's radix select stops in one pass (kernels/sample.cu, select_key): walking
// the pass's bins from the top, the first non-empty bin whose weight, added to what lies above
// it, reaches the target. The kernel decides it for every bin at once from a block scan (thread
// t holds bin 255 - t), so the rule is written once here, for the kernel and for the unit test
// that holds it against the serial walk. Plain C++: constexpr, which nvcc's
// --expt-relaxed-constexpr (meson.build) lets device code call.
#pragma once

namespace tandem::kernels {

// w: the bin's weight; through: the weight of the bins from the top down to this one, inclusive;
// above: the weight the earlier passes left above this pass's keys; target: the weight to reach.
// True for exactly the bin the serial walk stops at, false for every other (and for all bins
// when the weights never reach the target). Sums stay below 2^64: weights are counts or
// probabilities in units of 2^-60.
constexpr bool select_stops_at(unsigned long long w, unsigned long long through,
                               unsigned long long above, unsigned long long target) {
  const unsigned long long before = through - w;  // the bins above this one
  // Non-empty, reaching the target, and no non-empty bin above it reached it (before == 0:
  // there is none; a target of 0 stops at the first non-empty bin).
  return w != 0 && above + through >= target && (before == 0 || above + before < target);
}

}  // namespace tandem::kernels
