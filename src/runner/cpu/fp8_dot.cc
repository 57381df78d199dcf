#include "runner/cpu/fp8_dot.h"

#include "core/check.h"
#include "core/target_clones.h"
#include "model/dequant.h"
#include "runner/cpu/vec8.h"

namespace tandem {

namespace {

using namespace vec8;

// Row o's scale for inputs [i, i + 8): one per tensor or row, or its block's.
TANDEM_INLINE float scale_at(const LinearQuant& q, int64_t o, int64_t i, int64_t block_cols) {
  switch (q.fp8_scale) {
    case Fp8ScaleGranularity::kTensor:
      return float_element(*q.scale, 0);
    case Fp8ScaleGranularity::kChannel:
      return float_element(*q.scale, o);
    case Fp8ScaleGranularity::kBlock:
      return float_element(*q.scale, (o / q.block_out) * block_cols + i / q.block_in);
  }
  return 0;
}

// One row, streamed in address order (as dot_rows_bf16): 8 codes decoded from the table into
// lanes, scaled, multiplied by the token's 8 inputs.
TANDEM_INLINE float row_fp8(const float* x, const uint8_t* row, const LinearQuant& q, int64_t o,
                            int64_t block_cols, const float* e4m3) {
  const int64_t k = q.in_features, k8 = k & ~int64_t(7);
  const bool blocks = q.fp8_scale == Fp8ScaleGranularity::kBlock;
  float s = scale_at(q, o, 0, block_cols);
  f32x8 acc = {};
  for (int64_t i = 0; i < k8; i += 8) {
    if (blocks && i % q.block_in == 0) s = scale_at(q, o, i, block_cols);
    f32x8 w;
    for (int j = 0; j < 8; ++j) w[j] = e4m3[row[i + j]];
    acc += TANDEM_LOAD8(x + i) * (w * s);
  }
  float tail = 0;
  for (int64_t i = k8; i < k; ++i) {
    if (blocks) s = scale_at(q, o, i, block_cols);
    tail += x[i] * (e4m3[row[i]] * s);
  }
  return reduce_lanes(acc, tail);
}

}  // namespace

bool fp8_dot_fits(const LinearQuant& q) {
  return q.format == QuantFormat::kFp8 &&
         (q.fp8_scale != Fp8ScaleGranularity::kBlock || (q.block_in > 0 && q.block_in % 8 == 0));
}

TANDEM_CLONES void fp8_dot_rows(const float* x, const TensorView& w, const LinearQuant& q,
                                int64_t row0, int64_t count, const float* bias, float* y) {
  TANDEM_CHECK(fp8_dot_fits(q) && row0 >= 0 && row0 + count <= q.out_features,
               "fp8_dot_rows: rows [%lld, +%lld) of %s", (long long)row0, (long long)count,
               w.name.c_str());
  const float* e4m3 = e4m3_table();
  const auto* bytes = reinterpret_cast<const uint8_t*>(w.data);
  const int64_t block_cols = q.block_in > 0 ? (q.in_features + q.block_in - 1) / q.block_in : 0;
  for (int64_t r = 0; r < count; ++r) {
    const int64_t o = row0 + r;
    y[r] = row_fp8(x, bytes + o * q.in_features, q, o, block_cols, e4m3) + (bias ? bias[r] : 0.0f);
  }
}

}  // namespace tandem
