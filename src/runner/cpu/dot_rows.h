// The dot products of the CPU runner's Linear: several tokens against a block of weight rows.
//
// Every result has one summation order, whatever the batch, the block or the CPU: 8 strided
// partial sums (lane j sums a[i + j] * b[i + j] for i = 0, 8, 16, ...), a fixed tree over them,
// then the tail past the last multiple of 8 in order (reduce8 in dot_rows.cc), then the bias.
// So a token's output has the same bits alone or in a batch of any size (speculative
// verification against plain decoding relies on it), and dot_f32 gives the same bits too.
#pragma once

#include <cstdint>

namespace tandem {

// y[t * ldy + r] = x[t] · rows[r] (+ bias[r]) for t < n, r < count; x is [n, k] and rows
// [count, k], both fp32 row-major; bias is [count] or null.
void dot_rows_f32(const float* x, int64_t n, const float* rows, int64_t count, int64_t k,
                  const float* bias, float* y, int64_t ldy);

// The same for one token and bf16 rows [count, k] (their stored bits), each weight widened
// inside the product: the same bits as dot_rows_f32 on the widened rows.
void dot_rows_bf16(const float* x, const uint16_t* rows, int64_t count, int64_t k,
                   const float* bias, float* y);

// x · y over n elements, in the order above.
float dot_f32(const float* a, const float* b, int64_t n);

}  // namespace tandem
