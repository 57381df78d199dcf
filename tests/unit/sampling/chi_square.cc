#include "chi_square.h"

#include <numeric>

namespace tandem::testing {

double chi_square(std::span<const int64_t> observed, std::span<const double> expected_probs) {
  const double n = double(std::accumulate(observed.begin(), observed.end(), int64_t{0}));
  double stat = 0.0;
  for (size_t i = 0; i < observed.size(); ++i) {
    if (expected_probs[i] <= 0.0) continue;
    const double e = n * expected_probs[i];
    const double d = double(observed[i]) - e;
    stat += d * d / e;
  }
  return stat;
}

}  // namespace tandem::testing
