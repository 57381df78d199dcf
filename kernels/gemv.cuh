// Skinny GEMM for decode: y[t, n] = sum_k x[t, k] * w[n, k] for one or two tokens. At batch 1 the
// weight read is the whole cost, and cuBLASLt reaches only 1.0-1.6 TB/s on the q/k/v and o_proj
// shapes (GPU-MACHINE.md); one warp per output row with 16-byte loads streams the weights once.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::kernels {

// Measured on the H200 (Qwen2.5-7B decode, benchmarks/NOTES.md): at 2 tokens the GEMV and
// cuBLASLt tie (4.98 ms/step); at 4 and 8 tokens cuBLASLt wins (5.01 vs 6.22, 5.03 vs 9.93 ms),
// because each warp converts and multiplies every token's activations again per weight load.
constexpr int32_t kGemvMaxTokens = 2;

// k % 8 == 0, 1 <= m <= kGemvMaxTokens. out_f32 picks the output type of y.
void launch_gemv(const __nv_bfloat16* x,  // [m, k] in
                 const __nv_bfloat16* w,  // [n, k] in (HF Linear layout)
                 int32_t m, int32_t n, int32_t k,
                 void* y,                                              // [m, ldy] out, bf16 or fp32
                 bool out_f32, cudaStream_t stream, int32_t ldy = 0);  // 0: ldy = n

// The MLP's first half for decode: out[t, r] = silu(gate[t, r]) * up[t, r] where gate and up are
// rows r and r + width of the stacked gate|up matrix, without the [m, 2 * width] round trip
// and the separate silu_mul launch. Same bits as launch_gemv followed by launch_silu_mul.
void launch_gemv_swiglu(const __nv_bfloat16* x,  // [m, k] in
                        const __nv_bfloat16* w,  // [2 * width, k] in: gate rows, then up rows
                        int32_t m, int32_t width, int32_t k,
                        __nv_bfloat16* out,  // [m, width] out
                        cudaStream_t stream);

}  // namespace tandem::kernels
