#include "runner/cpu/rope.h"

#include <cmath>
#include <numbers>

namespace tandem {

std::vector<float> rope_inv_freq(const ModelConfig& config) {
  const int64_t dim = config.head_dim;
  std::vector<float> inv(static_cast<size_t>(dim / 2));
  // fp32 like torch: base ** (arange(0, dim, 2).float() / dim), then 1 / that.
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float exponent = float(2 * i) / float(dim);
    inv[size_t(i)] = 1.0f / std::pow(float(config.rope_theta), exponent);
  }
  const RopeScaling& s = config.rope_scaling;
  if (s.type != RopeScaling::Type::kLlama3) return inv;
  const double old_len = double(s.original_max_position_embeddings);
  const double low_freq_wavelen = old_len / s.low_freq_factor;
  const double high_freq_wavelen = old_len / s.high_freq_factor;
  for (float& f : inv) {
    const double wavelen = 2.0 * std::numbers::pi / f;
    if (wavelen < high_freq_wavelen) continue;  // high frequencies stay as trained
    if (wavelen > low_freq_wavelen) {           // low frequencies stretch by `factor`
      f = float(f / s.factor);
      continue;
    }
    const double smooth =
        (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    f = float((1.0 - smooth) * f / s.factor + smooth * f);
  }
  return inv;
}

void apply_rope(float* x, int64_t num_heads, int64_t head_dim, int64_t position,
                const std::vector<float>& inv_freq) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    // torch forms the angle as an fp32 product, then takes cos/sin of it.
    const float angle = float(position) * inv_freq[size_t(i)];
    const float c = std::cos(angle);
    const float s = std::sin(angle);
    for (int64_t h = 0; h < num_heads; ++h) {
      float* head = x + h * head_dim;
      const float x1 = head[i];
      const float x2 = head[i + half];
      head[i] = x1 * c - x2 * s;
      head[i + half] = x2 * c + x1 * s;
    }
  }
}

}  // namespace tandem
