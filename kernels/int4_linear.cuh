// W4A16 Linears for AWQ and GPTQ checkpoints: y[m, n] = x[m, k] · W^T with 4-bit weights, bf16
// activations and fp32 accumulation. Both formats are repacked at load (model/int4_repack.h) into
// the one layout below, so one set of kernels serves both:
//   w[r, i] = (q[r, i] − zero[r, g]) × scale[r, g],   g = i / group_size
// computed exactly in fp32 (an int4 difference times an fp16 scale is exact), where i counts
// input features in the packed order; packed feature i multiplies x[perm[i]] (GPTQ act-order) or
// x[i] without a permutation.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::kernels {

struct Int4Matrix {
  const uint32_t* qweight = nullptr;  // [n, k / 8]: word c of row r holds packed features
                                      // 8c..8c+7, feature 8c+j in bits 4j..4j+3 (0..15)
  const __half* scales = nullptr;     // [n, k / group_size]
  const uint8_t* zeros = nullptr;     // [n, k / group_size] zero points (0..16)
  const int32_t* perm = nullptr;      // [k] or null
  int32_t n = 0;
  int32_t k = 0;           // k % 32 == 0
  int32_t group_size = 0;  // k % group_size == 0, group_size % 32 == 0
};

// Decode sizes: the weights stream once for all m tokens.
constexpr int32_t kInt4GemvMaxTokens = 4;

// 1 <= m <= kInt4GemvMaxTokens. y row t starts at y + t * ldy (ldy >= n), bf16 or fp32.
void launch_int4_gemv(const __nv_bfloat16* x,  // [m, k] in, row stride k
                      const Int4Matrix& w, int32_t m,
                      void* y,  // [m, ldy] out
                      int32_t ldy, bool out_f32, cudaStream_t stream);

// Prefill sizes: the whole matrix as bf16 in the original feature order (out[r, perm[i]] for a
// permuted matrix), for a cuBLASLt GEMM with the unpermuted activations. The bf16 rounding of
// (q − zero) × scale is the one precision step this path adds (as vLLM's bf16 W4A16 kernels).
void launch_int4_dequant(const Int4Matrix& w,
                         __nv_bfloat16* out,  // [n, k] out
                         cudaStream_t stream);

}  // namespace tandem::kernels
