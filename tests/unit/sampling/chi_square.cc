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

double chi_square_two_sample(std::span<const int64_t> a, std::span<const int64_t> b) {
  const double na = double(std::accumulate(a.begin(), a.end(), int64_t{0}));
  const double nb = double(std::accumulate(b.begin(), b.end(), int64_t{0}));
  double stat = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double total = double(a[i] + b[i]);
    if (total == 0.0) continue;
    const double ea = total * na / (na + nb);
    const double eb = total * nb / (na + nb);
    stat += (double(a[i]) - ea) * (double(a[i]) - ea) / ea;
    stat += (double(b[i]) - eb) * (double(b[i]) - eb) / eb;
  }
  return stat;
}

}  // namespace tandem::testing
