#include "runner/cuda/rope_frequencies.h"

#include <cmath>
#include <numbers>

namespace tandem {

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  const int64_t half = c.head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    // transformers: 1 / base ** (arange(0, dim, 2).float() / dim), in fp32.
    const float expo = float(2 * i) / float(c.head_dim);
    inv[size_t(i)] = 1.0f / std::pow(float(c.rope_theta), expo);
  }
  if (c.rope_scaling.type != RopeScaling::Type::kLlama3) return inv;
  const RopeScaling& s = c.rope_scaling;
  const double old_ctx = double(s.original_max_position_embeddings);
  const double low_wavelen = old_ctx / s.low_freq_factor;
  const double high_wavelen = old_ctx / s.high_freq_factor;
  for (float& f : inv) {
    const double wavelen = 2.0 * std::numbers::pi / f;
    if (wavelen < high_wavelen) continue;  // high frequencies stay
    if (wavelen > low_wavelen) {
      f = float(f / s.factor);
      continue;
    }
    const double smooth =
        (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    f = float((1.0 - smooth) * f / s.factor + smooth * f);
  }
  return inv;
}

}  // namespace tandem
