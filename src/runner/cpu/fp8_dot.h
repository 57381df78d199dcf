// One token against an FP8 Linear read as stored: each row's e4m3 codes decoded and scaled in
// the vector lanes instead of dequant_rows writing an fp32 copy of 16 rows first. The same bits
// as dot_rows_f32 on dequant_rows' rows: each weight is e4m3(code) x scale as model/dequant.h
// defines it, and lane i % 8 sums x[i] x w[i] in increasing i (runner/cpu/dot_rows.h).
#pragma once

#include <cstdint>

#include "model/quant_linear.h"

namespace tandem {

// Whether fp8_dot_rows serves this Linear: FP8 with a scale per tensor or row, or blocks whose
// width is a multiple of 8 inputs. Others take dequant_rows.
bool fp8_dot_fits(const LinearQuant& q);

// y[r] = x · W[row0 + r] (+ bias[r]) for r < count; x is [in_features], already rounded as the
// format's activations are (fp8_activations.h).
void fp8_dot_rows(const float* x, const TensorView& w, const LinearQuant& q, int64_t row0,
                  int64_t count, const float* bias, float* y);

}  // namespace tandem
