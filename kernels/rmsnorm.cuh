// RMSNorm with the residual add fused in: the residual stream stays fp32 (so repeated adds do not
// lose bits), the normalised output is bf16 for the next GEMM.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::kernels {

// For each row: residual += delta (when delta is not null); out = residual * rsqrt(mean(residual²)
// + eps) * weight.
void launch_add_rmsnorm(float* residual,             // [rows, width] in/out
                        const __nv_bfloat16* delta,  // [rows, width] in, or null
                        const float* weight,         // [width] in
                        int32_t rows, int32_t width, float eps,
                        __nv_bfloat16* out,  // [rows, width] out
                        cudaStream_t stream,
                        bool pdl = false);  // may overlap the launch before (pdl.cuh)

// W8A8 activations of the normalised rows, per token (launch_fp8_quantize with group = width):
// a static scale when set, else max(min(amax, scale_ub) / 448, 1 / (448 · 512)).
struct Fp8RowQuant {
  uint8_t* xq;                // [rows, width] out, e4m3
  float* x_scale;             // [rows] out
  const float* static_scale;  // device scalar, or null (dynamic)
  float scale_ub;             // dynamic: amax cap, 0 = none
};

// launch_add_rmsnorm, whose output a W8A8 Linear then quantizes, in one launch: `out` and the
// residual get launch_add_rmsnorm's bits and `quant` launch_fp8_quantize's on that `out`.
void launch_add_rmsnorm_fp8(float* residual, const __nv_bfloat16* delta, const float* weight,
                            int32_t rows, int32_t width, float eps, __nv_bfloat16* out,
                            const Fp8RowQuant& quant, cudaStream_t stream,
                            bool pdl = false);  // may overlap the launch before (pdl.cuh)

}  // namespace tandem::kernels
