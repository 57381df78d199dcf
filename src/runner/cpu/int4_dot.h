// One token against an AWQ or GPTQ Linear read in its packed form: the decode step of a 4-bit
// checkpoint on the CPU without dequantizing its rows to fp32 first (dequant_rows wrote 32 bytes
// for every half byte it read). The same bits as dot_rows_f32 on dequant_rows' rows: each
// weight is (q - z) x s exactly as model/dequant.h defines it, and lane i % 8 of each row's
// accumulator sums x[i] x w[i] in increasing i, the order of runner/cpu/dot_rows.h.
#pragma once

#include <cstdint>

#include "model/quant_linear.h"

namespace tandem {

// Rows a call takes at most (a block of linear()'s parallel loop).
inline constexpr int64_t kInt4DotRows = 64;

// Whether int4_dot_rows serves this Linear: AWQ or GPTQ with in and out features multiples of 8
// and, without g_idx, groups that hold whole runs of 8 inputs. Others take dequant_rows.
bool int4_dot_fits(const LinearQuant& q);

// y[r] = x · W[row0 + r] (+ bias[r]) for r < count; x is [in_features]. row0 and count are
// multiples of 8, count <= kInt4DotRows.
void int4_dot_rows(const float* x, const TensorView& w, const LinearQuant& q, int64_t row0,
                   int64_t count, const float* bias, float* y);

}  // namespace tandem
