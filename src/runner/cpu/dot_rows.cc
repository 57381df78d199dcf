#include "runner/cpu/dot_rows.h"

#include "core/dtype.h"
#include "core/target_clones.h"
#include "runner/cpu/vec8.h"

namespace tandem {

namespace {

using namespace vec8;

// out[r] = the 8 partial sums of acc[r] reduced, plus the tail of row r, plus its bias.
template <int R, typename Tail>
TANDEM_INLINE void finish(const f32x8 (&acc)[R], const float* bias, Tail tail, float* out) {
  for (int r = 0; r < R; ++r) out[r] = reduce_lanes(acc[r], tail(r)) + (bias ? bias[r] : 0.0f);
}

// T tokens of x ([T, k], row stride ldx) against R rows ([R, k]): T * R dot products at once,
// each row load feeding T of them and each token load R, so that a multiply-add needs (T + R) /
// (T * R) loads instead of 2. Outputs y[t * ldy + r].
template <int T, int R>
TANDEM_INLINE void tile_f32(const float* x, int64_t ldx, const float* rows, int64_t k,
                            const float* bias, float* y, int64_t ldy) {
  f32x8 acc[T][R] = {};
  const int64_t k8 = k & ~int64_t(7);
  for (int64_t i = 0; i < k8; i += 8) {
    f32x8 w[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) w[r] = TANDEM_LOAD8(rows + r * k + i);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const f32x8 a = TANDEM_LOAD8(x + t * ldx + i);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[t][r] += a * w[r];
    }
  }
  for (int t = 0; t < T; ++t) {
    const float* xt = x + t * ldx;
    finish<R>(
        acc[t], bias,
        [&](int r) {
          float tail = 0;
          for (int64_t i = k8; i < k; ++i) tail += xt[i] * rows[r * k + i];
          return tail;
        },
        y + t * ldy);
  }
}

// Every row of `rows` against T tokens, 4 rows at a time.
template <int T>
TANDEM_INLINE void token_tile(const float* x, int64_t ldx, const float* rows, int64_t count,
                              int64_t k, const float* bias, float* y, int64_t ldy) {
  auto at = [&](int64_t r) { return bias ? bias + r : nullptr; };
  int64_t r = 0;
  for (; r + 4 <= count; r += 4) tile_f32<T, 4>(x, ldx, rows + r * k, k, at(r), y + r, ldy);
  switch (count - r) {
    case 3:
      tile_f32<T, 3>(x, ldx, rows + r * k, k, at(r), y + r, ldy);
      break;
    case 2:
      tile_f32<T, 2>(x, ldx, rows + r * k, k, at(r), y + r, ldy);
      break;
    case 1:
      tile_f32<T, 1>(x, ldx, rows + r * k, k, at(r), y + r, ldy);
      break;
    default:
      break;
  }
}

// How far ahead row_bf16 asks for weights, in bf16 elements (4 KiB): the rows are contiguous,
// so this runs on into the next rows, and past the matrix's end it is a no-op.
constexpr int64_t kBf16PrefetchAhead = 2048;

// One token against one bf16 row, 8 weights widened (bits << 16, as bf16_to_f32) at a time. A
// row at a time streams the weights in address order: on a 2-core AMD EPYC machine one thread
// read an lm_head-sized matrix this way at 18 GB/s, against 7.3 and 10.6 with 2 and 4 rows
// interleaved and 15.5 for the scalar loop before (NOTES v38). On a 2-core Intel Xeon the
// hardware prefetcher alone kept one thread at 7.4 GB/s from DRAM; a software prefetch a cache
// line at a time, 4 KiB ahead, 14.4 (2 KiB 12.7, 8 KiB 14.1; two threads at once 13.6 each;
// NOTES v44). The arithmetic, and so every bit, is unchanged.
TANDEM_INLINE void row_bf16(const float* x, const uint16_t* row, int64_t k, const float* bias,
                            float* y) {
  f32x8 acc[1] = {};
  const int64_t k8 = k & ~int64_t(7);
  for (int64_t i = 0; i < k8; i += 8) {
    if ((i & 31) == 0) __builtin_prefetch(row + i + kBf16PrefetchAhead);  // 64-byte lines
    const u32x8 bits = __builtin_convertvector(TANDEM_LOAD8_BF16(row + i), u32x8) << 16;
    acc[0] += TANDEM_LOAD8(x + i) * (f32x8)bits;  // a vector cast keeps the bits
  }
  finish<1>(
      acc, bias,
      [&](int) {
        float tail = 0;
        for (int64_t i = k8; i < k; ++i) tail += x[i] * bf16_to_f32(row[i]);
        return tail;
      },
      y);
}

}  // namespace

// Rows outer, tokens inner: 4 rows (4 * k floats) stay in L1 while the tokens stream past them
// four at a time. 4 x 4 tiles keep 16 accumulators in the 16 AVX registers, the rows' loads
// folded into the multiplies: 60 GFLOP/s on one core of a CI-like machine at 128 tokens x 896
// features, against 47 with 2 x 4 tiles and 22 for the scalar loop before (the baseline copy
// spills them, on the CPUs without AVX2 that nobody serves from).
TANDEM_CLONES void dot_rows_f32(const float* x, int64_t n, const float* rows, int64_t count,
                                int64_t k, const float* bias, float* y, int64_t ldy) {
  constexpr int64_t kRows = 4;
  for (int64_t r0 = 0; r0 < count; r0 += kRows) {
    const int64_t rc = count - r0 < kRows ? count - r0 : kRows;
    const float* rb = rows + r0 * k;
    const float* bb = bias ? bias + r0 : nullptr;
    int64_t t = 0;
    for (; t + 4 <= n; t += 4) token_tile<4>(x + t * k, k, rb, rc, k, bb, y + t * ldy + r0, ldy);
    if (t + 2 <= n) {
      token_tile<2>(x + t * k, k, rb, rc, k, bb, y + t * ldy + r0, ldy);
      t += 2;
    }
    if (t < n) token_tile<1>(x + t * k, k, rb, rc, k, bb, y + t * ldy + r0, ldy);
  }
}

TANDEM_CLONES void dot_rows_bf16(const float* x, const uint16_t* rows, int64_t count, int64_t k,
                                 const float* bias, float* y) {
  for (int64_t r = 0; r < count; ++r)
    row_bf16(x, rows + r * k, k, bias ? bias + r : nullptr, y + r);
}

float dot_f32(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float tail = 0;
  for (; i < n; ++i) tail += a[i] * b[i];
  return reduce8(acc, tail);
}

}  // namespace tandem
