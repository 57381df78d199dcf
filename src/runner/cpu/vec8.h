// 8 fp32 lanes for the CPU runner's dot products (dot_rows.cc, int4_dot.cc): GCC vector types,
// one AVX register in the AVX2 copy of a function, two SSE registers in the baseline copy
// (core/target_clones.h). Lane j of an accumulator sums the products of inputs i = j, j + 8, ...
// in increasing i; reduce8 is the one tree over the lanes. Vectors never cross a function
// boundary by value (their ABI differs between the copies). Private to runner/cpu.
#pragma once

#include <cstdint>

namespace tandem::vec8 {

typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef uint32_t u32x8 __attribute__((vector_size(32)));
// Unaligned views of 8 floats / 8 bf16 in the caller's arrays.
typedef float f32x8_view __attribute__((vector_size(32), aligned(4), may_alias));
typedef uint16_t u16x8_view __attribute__((vector_size(16), aligned(2), may_alias));
typedef int32_t i32x8_view __attribute__((vector_size(32), aligned(4), may_alias));

#define TANDEM_LOAD8(p) (*reinterpret_cast<const ::tandem::vec8::f32x8_view*>(p))
#define TANDEM_LOAD8_BF16(p) (*reinterpret_cast<const ::tandem::vec8::u16x8_view*>(p))
#define TANDEM_INLINE inline __attribute__((always_inline))

// The fixed tree over the 8 partial sums, then the tail (inputs past the last multiple of 8).
TANDEM_INLINE float reduce8(const float* acc, float tail) {
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

// reduce8 over an accumulator's lanes.
TANDEM_INLINE float reduce_lanes(const f32x8& acc, float tail) {
  float lanes[8];  // [8] acc's partial sums
  for (int j = 0; j < 8; ++j) lanes[j] = acc[j];
  return reduce8(lanes, tail);
}

}  // namespace tandem::vec8
