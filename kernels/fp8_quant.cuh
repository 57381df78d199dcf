// Device helpers of the W8A8 activation quantizer (fp8_linear.cuh), shared by its kernels and by
// the RMSNorm that quantizes its own output (rmsnorm.cuh), so that both round alike:
// scale = max(min(amax, ub) / 448, 1 / (448 · 512)) by IEEE division, q = e4m3(x / scale), round to
// nearest even, saturating (src/runner/cpu/fp8_activations.cc).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::kernels::fp8 {

// kFp8E4M3Max and vLLM's floor on dynamic scales, spelled as fp8_activations.cc spells them so
// host and device round the division identically.
constexpr float kE4M3Max = 448.0f;
constexpr float kMinDynamicScale = 1.0f / (kE4M3Max * 512.0f);

// Round to nearest even, saturating to ±448, NaN → 0x7f: core/dtype.h's f32_to_fp8_e4m3.
__device__ __forceinline__ uint32_t float2_to_e4m3x2(float a, float b) {
  return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
}

__device__ __forceinline__ float bf16_bits_to_float(uint32_t bits16) {
  return __uint_as_float(bits16 << 16);
}

__device__ __forceinline__ float amax8(const uint4& v) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  float a = 0.0f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    a = fmaxf(a, fabsf(bf16_bits_to_float(w[j] & 0xffffu)));
    a = fmaxf(a, fabsf(bf16_bits_to_float(w[j] >> 16)));
  }
  return a;
}

// Eight bf16 → eight e4m3 at `scale`, by IEEE division (no reciprocal) as the CPU does.
__device__ __forceinline__ uint2 quantize8(const uint4& v, float scale) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  uint32_t q[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    q[j] = float2_to_e4m3x2(__fdiv_rn(bf16_bits_to_float(w[j] & 0xffffu), scale),
                            __fdiv_rn(bf16_bits_to_float(w[j] >> 16), scale));
  }
  return make_uint2(q[0] | (q[1] << 16), q[2] | (q[3] << 16));
}

// One value (a bf16 widened to fp32) the way quantize8 converts it: the low byte of the pair.
__device__ __forceinline__ uint8_t quantize1(float v, float scale) {
  return uint8_t(float2_to_e4m3x2(__fdiv_rn(v, scale), 0.0f) & 0xffu);
}

__device__ __forceinline__ float dynamic_scale(float amax, float scale_ub) {
  if (scale_ub > 0.0f) amax = fminf(amax, scale_ub);
  return fmaxf(__fdiv_rn(amax, kE4M3Max), kMinDynamicScale);
}

}  // namespace tandem::kernels::fp8
