#include "runner/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "model/dequant.h"
#include "runner/cpu/dot_rows.h"
#include "runner/cpu/fp8_activations.h"
#include "runner/cpu/fp8_dot.h"
#include "runner/cpu/int4_dot.h"

namespace tandem {

void weight_row_to_f32(const TensorView& w, int64_t row, float* out) {
  const int64_t cols = w.shape.size() == 2 ? w.shape[1] : w.shape[0];
  const size_t offset = size_t(row * cols);
  switch (w.dtype) {
    case DType::kF32:
      std::memcpy(out, w.data + offset * 4, size_t(cols) * 4);
      return;
    case DType::kBF16: {
      const auto* p = reinterpret_cast<const uint16_t*>(w.data) + offset;
      for (int64_t i = 0; i < cols; ++i) out[i] = bf16_to_f32(p[i]);
      return;
    }
    case DType::kF16: {
      const auto* p = reinterpret_cast<const uint16_t*>(w.data) + offset;
      for (int64_t i = 0; i < cols; ++i) out[i] = f16_to_f32(p[i]);
      return;
    }
    default:
      // load_model_dir only admits float weights; anything else is a loader bug.
      TANDEM_CHECK(false, "weight %s has dtype %s; the CPU runner reads F32/F16/BF16",
                   w.name.c_str(), std::string(dtype_name(w.dtype)).c_str());
  }
}

void linear(ThreadPool& pool, const float* x, int64_t n, const TensorView& w,
            const TensorView* bias, float* y) {
  TANDEM_CHECK(w.shape.size() == 2, "%s is not a matrix", w.name.c_str());
  LinearQuant dense;
  dense.out_features = w.shape[0];
  dense.in_features = w.shape[1];
  linear(pool, x, n, w, dense, bias, y);
}

void linear(ThreadPool& pool, const float* x, int64_t n, const TensorView& w,
            const LinearQuant& quant, const TensorView* bias, float* y) {
  const bool quantized = quant.format != QuantFormat::kNone;
  TANDEM_CHECK(quantized || (w.shape.size() == 2 && w.shape[0] == quant.out_features &&
                             w.shape[1] == quant.in_features),
               "%s is not a [%lld, %lld] matrix", w.name.c_str(), (long long)quant.out_features,
               (long long)quant.in_features);
  const int64_t out_features = quant.out_features;
  const int64_t in_features = quant.in_features;
  std::vector<float> x_fp8;  // [n, in_features] the inputs a W8A8 GEMM sees
  if (quant.format == QuantFormat::kFp8 && quant.fp8_activations != Fp8Activations::kNone) {
    x_fp8.resize(size_t(n * in_features));
    fp8_fake_quantize_activations(quant, x, n, in_features, x_fp8.data());
    x = x_fp8.data();
  }
  std::vector<float> bias_f32;  // [out_features]
  if (bias) {
    bias_f32.resize(size_t(out_features));
    weight_row_to_f32(*bias, 0, bias_f32.data());
  }
  const float* bias_at = bias ? bias_f32.data() : nullptr;
  if (n == 1 && (int4_dot_fits(quant) || fp8_dot_fits(quant))) {
    // One token of a quantized Linear: its rows read as stored (int4_dot.h, fp8_dot.h).
    const int64_t blocks = (out_features + kInt4DotRows - 1) / kInt4DotRows;
    pool.parallel_for(blocks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t blk = begin; blk < end; ++blk) {
        const int64_t o0 = blk * kInt4DotRows;
        const int64_t count = std::min(kInt4DotRows, out_features - o0);
        const float* b = bias_at ? bias_at + o0 : nullptr;
        if (quant.format == QuantFormat::kFp8) {
          fp8_dot_rows(x, w, quant, o0, count, b, y + o0);
        } else {
          int4_dot_rows(x, w, quant, o0, count, b, y + o0);
        }
      }
    });
    return;
  }
  // Parallel over blocks of output features: a block of weight rows is widened once and reused
  // for every row of x (so weights are read once per call whatever the batch size).
  constexpr int64_t kBlock = 16;
  const int64_t blocks = (out_features + kBlock - 1) / kBlock;
  pool.parallel_for(blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> rows(
        static_cast<size_t>(kBlock * in_features));  // [kBlock, in_features] widened
    for (int64_t blk = begin; blk < end; ++blk) {
      const int64_t o0 = blk * kBlock;
      const int64_t count = std::min(kBlock, out_features - o0);
      const float* b = bias_at ? bias_at + o0 : nullptr;
      if (n == 1 && !quantized && w.dtype == DType::kBF16) {
        // Decode of a bf16 model: widen inside the dot (one pass over the weights), the same
        // bits as on widened rows.
        const auto* wp = reinterpret_cast<const uint16_t*>(w.data) + o0 * in_features;
        dot_rows_bf16(x, wp, count, in_features, b, y + o0);
        continue;
      }
      if (quantized) {
        dequant_rows(w, quant, o0, count, rows.data());
      } else {
        for (int64_t r = 0; r < count; ++r)
          weight_row_to_f32(w, o0 + r, rows.data() + r * in_features);
      }
      dot_rows_f32(x, n, rows.data(), count, in_features, b, y + o0, out_features);
    }
  });
}

void rms_norm(const float* x, int64_t n, int64_t dim, const TensorView& weight, double eps,
              float* y) {
  std::vector<float> w(static_cast<size_t>(dim));  // [dim]
  weight_row_to_f32(weight, 0, w.data());
  for (int64_t t = 0; t < n; ++t) {
    const float* xr = x + t * dim;
    float* yr = y + t * dim;
    // HF sums squares in fp32 (torch's mean), then rsqrt(variance + eps) in fp32.
    const float variance = dot_f32(xr, xr, dim) / float(dim);
    const float inv = 1.0f / std::sqrt(variance + float(eps));
    for (int64_t i = 0; i < dim; ++i) yr[i] = w[size_t(i)] * (xr[i] * inv);
  }
}

void silu_mul(const float* gate, const float* up, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace tandem
