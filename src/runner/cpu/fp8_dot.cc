#include "runner/cpu/fp8_dot.h"

#include "core/check.h"
#include "core/target_clones.h"
#include "model/dequant.h"
#include "runner/cpu/vec8.h"

namespace tandem {

namespace {

using namespace vec8;

// One row, streamed in address order (as dot_rows_bf16): 8 codes decoded from the table into
// lanes, scaled, multiplied by the token's 8 inputs.
TANDEM_INLINE float row_fp8(const float* x, const uint8_t* row, const LinearQuant& q, int64_t o,
                            const float* e4m3) {
  const int64_t k = q.in_features, k8 = k & ~int64_t(7);
  const bool blocks = q.fp8_scale == Fp8ScaleGranularity::kBlock;
  float s = fp8_scale_of(q, o, 0);
  f32x8 acc = {};
  for (int64_t i = 0; i < k8; i += 8) {
    if (blocks && i % q.block_in == 0) s = fp8_scale_of(q, o, i);
    f32x8 w;
    for (int j = 0; j < 8; ++j) w[j] = e4m3[row[i + j]];
    acc += TANDEM_LOAD8(x + i) * (w * s);
  }
  float tail = 0;
  for (int64_t i = k8; i < k; ++i) {
    if (blocks) s = fp8_scale_of(q, o, i);
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
  for (int64_t r = 0; r < count; ++r) {
    const int64_t o = row0 + r;
    y[r] = row_fp8(x, bytes + o * q.in_features, q, o, e4m3) + (bias ? bias[r] : 0.0f);
  }
}

}  // namespace tandem
