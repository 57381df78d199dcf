#include "runner/cpu/fp8_activations.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/dtype.h"
#include "model/dequant.h"

namespace tandem {

namespace {

// vLLM's floor on dynamic scales: an all-zero row must not divide by zero.
constexpr float kMinDynamicScale = 1.0f / (kFp8E4M3Max * 512.0f);

void round_span(const float* x, int64_t count, float scale, float* out) {
  for (int64_t i = 0; i < count; ++i)
    out[i] = fp8_e4m3_to_f32(f32_to_fp8_e4m3(x[i] / scale)) * scale;
}

float dynamic_scale(const float* x, int64_t count, double upper_bound) {
  float amax = 0;
  for (int64_t i = 0; i < count; ++i) amax = std::max(amax, std::fabs(x[i]));
  if (upper_bound > 0) amax = std::min(amax, float(upper_bound));
  return std::max(amax / kFp8E4M3Max, kMinDynamicScale);
}

}  // namespace

void fp8_fake_quantize_activations(const LinearQuant& q, const float* x, int64_t n, int64_t in,
                                   float* out) {
  switch (q.fp8_activations) {
    case Fp8Activations::kNone:
      if (out != x) std::copy_n(x, n * in, out);
      return;
    case Fp8Activations::kStaticTensor: {
      TANDEM_CHECK(q.input_scale != nullptr, "static fp8 activations without an input_scale");
      const float s = float_element(*q.input_scale, 0);
      for (int64_t t = 0; t < n; ++t) round_span(x + t * in, in, s, out + t * in);
      return;
    }
    case Fp8Activations::kDynamicPerToken:
      for (int64_t t = 0; t < n; ++t) {
        const float s = dynamic_scale(x + t * in, in, q.activation_scale_ub);
        round_span(x + t * in, in, s, out + t * in);
      }
      return;
    case Fp8Activations::kDynamicPerTokenGroup:
      TANDEM_CHECK(q.block_in > 0, "per-token-group fp8 activations without a block size");
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t b = 0; b < in; b += q.block_in) {
          const int64_t len = std::min(q.block_in, in - b);
          const float s = dynamic_scale(x + t * in + b, len, 0);
          round_span(x + t * in + b, len, s, out + t * in + b);
        }
      }
      return;
  }
}

}  // namespace tandem
