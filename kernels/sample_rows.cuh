// Device pieces shared by the one-block sample kernel (sample.cu) and its wide form
// (sample_wide.cu): the float order key and the penalties of one logit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "sample.cuh"

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

}  // namespace tandem::kernels
