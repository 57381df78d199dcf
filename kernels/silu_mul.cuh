// SwiGLU activation: out = silu(gate) * up, computed in fp32 and rounded once.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::kernels {

void launch_silu_mul(const __nv_bfloat16* gate_up,  // [rows, 2 * width] in: gate | up
                     int32_t rows, int32_t width,
                     __nv_bfloat16* out,  // [rows, width] out
                     cudaStream_t stream);

}  // namespace tandem::kernels
