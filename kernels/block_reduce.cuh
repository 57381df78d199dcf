// Warp and block reductions shared by the row kernels (device code only).
#pragma once

#include <cuda_runtime.h>

namespace tandem::kernels {

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Every thread of the block gets the result. `scratch` holds 32 floats; the trailing barrier
// lets callers reuse it immediately. Fixed order: the same inputs give the same bits.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int nwarps = (blockDim.x + 31) >> 5;
  float r = lane < nwarps ? scratch[lane] : 0.0f;
  r = warp_sum(r);
  __syncthreads();
  return r;
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int nwarps = (blockDim.x + 31) >> 5;
  float r = lane < nwarps ? scratch[lane] : -INFINITY;
  r = warp_max(r);
  __syncthreads();
  return r;
}

// Argmax over the block: NaN never wins, ties go to the lower id; (-inf, INT_MAX) when no
// thread saw a number. Every thread gets the result; `sv`/`si` hold 32 entries each.
__device__ __forceinline__ bool argmax_better(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

__device__ __forceinline__ void warp_argmax(float& bv, int& bi) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (argmax_better(ov, oi, bv, bi)) bv = ov, bi = oi;
  }
}

// The block's best (value, index) into every thread's bv, bi; sv/si: 32 slots of shared memory.
__device__ __forceinline__ void block_argmax_value(float& bv, int& bi, float* sv, int* si) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  warp_argmax(bv, bi);
  if (lane == 0) sv[warp] = bv, si[warp] = bi;
  __syncthreads();
  const int nwarps = (blockDim.x + 31) >> 5;
  bv = lane < nwarps ? sv[lane] : -INFINITY;
  bi = lane < nwarps ? si[lane] : 0x7fffffff;
  warp_argmax(bv, bi);
  __syncthreads();
}

__device__ __forceinline__ int block_argmax(float bv, int bi, float* sv, int* si) {
  block_argmax_value(bv, bi, sv, si);
  return bi;
}

}  // namespace tandem::kernels
