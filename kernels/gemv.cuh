// Skinny GEMM for decode: y[t, n] = sum_k x[t, k] * w[n, k] for one or two tokens. At batch 1 the
// weight read is the whole cost, and cuBLASLt reaches only 1.0-1.6 TB/s on the q/k/v and o_proj
// shapes (GPU-MACHINE.md); one warp per output row with 16-byte loads streams the weights once.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "normed_rows.cuh"

namespace tandem::kernels {

// Measured on the H200 (Qwen2.5-7B decode, benchmarks/NOTES.md v6): at 2 tokens the GEMV and
// cuBLASLt tie (4.98 ms/step); at 4 and 8 tokens cuBLASLt wins (5.01 vs 6.22, 5.03 vs 9.93 ms),
// because each warp converts and multiplies every token's activations again per weight load.
constexpr int32_t kGemvMaxTokens = 2;
// A tensor-core form for 3-8 tokens (16 weight rows as an mma's A operand, loaded straight
// from global memory) lost to cuBLASLt at those sizes: 157.6 vs 130.3 us for one 7B layer's
// Linears at 5 tokens (NOTES.md v9), so it was removed.

// NormedRows (normed_rows.cuh) inputs: m * k * 2 bytes of shared memory per block.
constexpr int32_t kNormedRowsMaxBytes = 48 * 1024;

// Warps sharing each row (1, 2 or 4) in a one-token launch of launch_gemv / launch_gemv_add and
// of launch_qkv_rope_gemv (pairs of rows there) for a matrix of n rows: more than one where
// one a row would leave the SMs short of warps (a small model's Linears). A split row sums its
// parts in a fixed order (same bits every run, and the same for every kernel at the same n).
int gemv_row_parts(int32_t n);

// k % 8 == 0, 1 <= m <= kGemvMaxTokens. out_f32 picks the output type of y.
void launch_gemv(const __nv_bfloat16* x,  // [m, k] in
                 const __nv_bfloat16* w,  // [n, k] in (HF Linear layout)
                 int32_t m, int32_t n, int32_t k,
                 void* y,                                             // [m, ldy] out, bf16 or fp32
                 bool out_f32, cudaStream_t stream, int32_t ldy = 0,  // 0: ldy = n
                 bool pdl = false);  // one token: may overlap the launch before (pdl.cuh, sm_90+)

// The MLP's first half for decode: out[t, r] = silu(gate[t, r]) * up[t, r] where gate and up are
// rows r and r + width of the stacked gate|up matrix, without the [m, 2 * width] round trip
// and the separate silu_mul launch. Same bits as launch_gemv followed by launch_silu_mul.
void launch_gemv_swiglu(const __nv_bfloat16* x,  // [m, k] in
                        const __nv_bfloat16* w,  // [2 * width, k] in: gate rows, then up rows
                        int32_t m, int32_t width, int32_t k,
                        __nv_bfloat16* out,  // [m, width] out
                        cudaStream_t stream,
                        bool pdl = false);  // one token: may overlap the launch before (pdl.cuh)

// The same with x = RMSNorm(residual) (see NormedRows). pdl: at one token, the launch may
// overlap the kernel before it (pdl.cuh; sm_90 and newer only).
void launch_gemv_swiglu(const NormedRows& x, const __nv_bfloat16* w, int32_t m, int32_t width,
                        int32_t k, __nv_bfloat16* out, cudaStream_t stream, bool pdl = false);

// Greedy ids from the lm_head GEMV itself (launch_gemv_argmax): the index of the largest fp32
// output of each token's row among rows [0, valid), lowest index on ties, 0 when every output is
// NaN: launch_argmax_rows' ids, without its launch after the forward. Each block offers its
// best row to a 64-bit atomic maximum per token; a one-block kernel launched after the GEMV
// (overlapped with pdl) turns the maxima into ids and leaves the scratch zeroed for the next
// launch.
struct GemvArgmax {
  void* scratch = nullptr;      // kGemvArgmaxScratchBytes, device, zeroed before the first launch
  int32_t valid = 0;            // rows >= valid (a padded vocabulary) are never chosen
  int32_t* out = nullptr;       // [m] ids, device or mapped host memory
  int32_t* out_copy = nullptr;  // [m] or null: the same ids again (e.g. mapped host memory)
};
inline constexpr size_t kGemvArgmaxScratchBytes = 256;

// launch_gemv into fp32 y with the greedy ids of its m rows (GemvArgmax).
void launch_gemv_argmax(const __nv_bfloat16* x,  // [m, k] in
                        const __nv_bfloat16* w,  // [n, k] in
                        int32_t m, int32_t n, int32_t k,
                        float* y,  // [m, ldy] out
                        const GemvArgmax& argmax, cudaStream_t stream, bool pdl = false,
                        int32_t ldy = 0);  // 0: ldy = n

// o_proj and down_proj for decode: residual[t, r] += bf16(Σ_k x[t, k] · w[r, k]), the residual
// add of launch_add_rmsnorm (fp32, of the bf16-rounded projection) in the GEMV's epilogue. Each
// row is one warp's, and x never aliases the residual, so nothing races. pdl: as above.
void launch_gemv_add(const __nv_bfloat16* x,  // [m, k] in
                     const __nv_bfloat16* w,  // [n, k] in
                     int32_t m, int32_t n, int32_t k,
                     float* residual,  // [m, n] in/out
                     cudaStream_t stream, bool pdl = false);

}  // namespace tandem::kernels
