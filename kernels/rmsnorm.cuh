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
                        cudaStream_t stream);

}  // namespace tandem::kernels
