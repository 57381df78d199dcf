// Device pieces shared by the one-block sample kernel (sample.cu) and its wide form
// (sample_wide.cu): the float order key and the penalties of one logit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "sample.cuh"
#include "sample_wide.cuh"

namespace tandem::kernels {

constexpr uint32_t kNegInfKey = 0x007fffffu;  // order_key(-inf); NaN maps here too

// The prefilter's bucket of logit l below the row's largest m (kSamplePrefilterBuckets of them,
// 1/8 of a logit each); one rounding order wherever it is computed.
__device__ __forceinline__ float prefilter_bucket(float m, float l) {
  return __fmul_rn(__fsub_rn(m, l), 8.0f);
}

// Float order as unsigned order; NaN sorts with -inf (never sampled).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t b = __float_as_uint(isnan(f) ? -INFINITY : f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// One logit after its row's adjustment: the repetition penalty, then the frequency and presence
// penalties, then a ban, with explicit roundings (no FMA contraction), as the host computes them.
__device__ __forceinline__ float adjusted_logit(float l, const LogitAdjust& a,
                                                const SampleRowParams& P) {
  if (a.flags & kAdjustRepeat) {
    l = l > 0.0f ? __fdiv_rn(l, P.repetition_penalty) : __fmul_rn(l, P.repetition_penalty);
  }
  if (a.output_count > 0) {
    l = __fsub_rn(l, __fmul_rn(P.frequency_penalty, float(a.output_count)));
    l = __fsub_rn(l, P.presence_penalty);
  }
  return (a.flags & kAdjustBan) ? -INFINITY : l;
}

// The prefilter's per-bucket totals of row slot `row` from a RowPrefilter's slices, added in
// slice order, into count / mass [kSamplePrefilterBuckets] (shared); returns z, likewise added.
// Block-wide, ends with a barrier. Every caller adds alike, so all agree on the cut below.
__device__ __forceinline__ float prefilter_totals(const RowPrefilter& pre, int row, int* count,
                                                  float* mass) {
  const int first = row * kSampleWideSlices;
  for (int b = threadIdx.x; b < kSamplePrefilterBuckets; b += blockDim.x) {
    int c = 0;
    float w = 0.0f;
    for (int g = 0; g < kSampleWideSlices; ++g) {
      c += pre.count[int64_t(first + g) * kSamplePrefilterBuckets + b];
      w += pre.mass[int64_t(first + g) * kSamplePrefilterBuckets + b];
    }
    count[b] = c, mass[b] = w;
  }
  float z = 0.0f;
  for (int g = 0; g < kSampleWideSlices; ++g) z += pre.z[first + g];
  __syncthreads();
  return z;
}

// The prefilter's cut (one thread): the last bucket that, with every nearer one, holds top-k's
// k tokens, or top-p's mass with a 1% margin over float rounding; -1 when those tokens would not
// fit kSampleMaxCandidates or are never reached (the cuts then run over the whole row). `kept`:
// the tokens up to the cut.
__device__ __forceinline__ int prefilter_walk(const int* count, const float* mass, float z,
                                              const SampleRowParams& P, bool cut_k, int* kept) {
  int c = 0;
  float w = 0.0f;
  for (int b = 0; b < kSamplePrefilterBuckets; ++b) {
    c += count[b];
    w += mass[b];
    if (cut_k ? c >= P.top_k : w >= 1.01f * P.top_p * z) {
      *kept = c;
      return c <= kSampleMaxCandidates ? b : -1;
    }
  }
  return -1;
}

}  // namespace tandem::kernels
