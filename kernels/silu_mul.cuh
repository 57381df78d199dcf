// SwiGLU activation: out = silu(gate) * up, computed in fp32 and rounded once.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::kernels {

#ifdef __CUDACC__
// silu(g) · u in fp32: the one formula of every SwiGLU kernel (fused ones are tested for the
// same bits as launch_silu_mul).
__device__ __forceinline__ float silu_times(float g, float u) {
  return g / (1.0f + expf(-g)) * u;
}
#endif

void launch_silu_mul(const __nv_bfloat16* gate_up,  // [rows, 2 * width] in: gate | up
                     int32_t rows, int32_t width,
                     __nv_bfloat16* out,  // [rows, width] out
                     cudaStream_t stream);

}  // namespace tandem::kernels
