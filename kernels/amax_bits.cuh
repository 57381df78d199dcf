// A row's max |x| raised across blocks by its producer, for the FP8 quantize that reads it
// (launch_fp8_quantize_amax): integer atomics on fp32 bits, since non-negative floats order as
// their bits. NaNs count as 0, as fmaxf skips them in launch_fp8_quantize's own pass.
// The slots' layout: amax_slots.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "amax_slots.h"

namespace tandem::kernels {

__device__ __forceinline__ uint32_t abs_bits(float v) {
  const float a = fabsf(v);
  return a == a ? __float_as_uint(a) : 0u;
}

// Every lane of the warp calls it (sm_80+ reduce): one atomic a warp, into token_slots' slot
// `warp_index` mod kAmaxSpread.
__device__ __forceinline__ void raise_amax(uint32_t* token_slots, uint32_t mine, int warp_index) {
  const uint32_t most = __reduce_max_sync(0xffffffffu, mine);
  if ((threadIdx.x & 31) == 0 && most != 0u) {
    atomicMax(token_slots + (warp_index % kAmaxSpread) * kAmaxStride, most);
  }
}

}  // namespace tandem::kernels
