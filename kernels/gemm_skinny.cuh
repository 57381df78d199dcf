// Skinny GEMM on tensor cores for 2-16 tokens (sm_80+): y[t, n] = Σ_k x[t, k] · w[n, k], the
// shape of a speculative verify pass (k + 1 rows a sequence) and of small decode batches.
//
// Why not cuBLASLt: at 5 rows its kernels run the 7B layer's Linears at ~138 us against ~122 us
// for the one-token GEMV (ncu, benchmarks/NOTES.md v15), split-K reductions add two launches a
// layer, and the SwiGLU cannot fuse. Why not the CUDA-core GEMV (gemv.cuh): past 2 tokens it is
// issue-bound, converting every token's activations again per weight load. Why not tensor-core
// fragments loaded straight from global memory (tried in v9): a warp's load covered 8 rows × 64
// bytes, and the weight stream stalled at 3.5 TB/s. Here each warp streams 16-row tiles through
// a cp.async ring in shared memory, every copy instruction reading 256-512 contiguous bytes of a
// row, and feeds mma.m16n8k16 (weights as A, the tokens as B's 8 columns) by ldmatrix.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "rope_kv.cuh"

namespace tandem::kernels {

// 1 token stays on the GEMV, whose fused forms also fold the norm, the residual add and RoPE.
constexpr int32_t kSkinnyMinTokens = 2;
constexpr int32_t kSkinnyMaxTokens = 32;  // four mma column tiles

// Whether launch_skinny_gemm is measured faster than cuBLASLt for m rows of an [n, k] weight
// (2-8 rows always; 9-32 while its blocks fit one wave).
bool skinny_gemm_wins(int32_t m, int32_t n, int32_t k);
// The same for launch_skinny_swiglu against cuBLASLt and silu_mul (up to 16 rows).
bool skinny_swiglu_wins(int32_t m);

// Tile and pipeline shapes, for benchmarks/bench_int4_gemv.cc to sweep; -1 picks by m.
int32_t skinny_variants();
const char* skinny_variant_name(int32_t variant);
int32_t skinny_variant_tokens(int32_t variant);  // the most tokens the variant takes

// k % 8 == 0, 1 <= m <= kSkinnyMaxTokens. out_f32 picks the output type.
void launch_skinny_gemm(const __nv_bfloat16* x,  // [m, k] in
                        const __nv_bfloat16* w,  // [n, k] in (HF Linear layout)
                        int32_t m, int32_t n, int32_t k,
                        void* y,  // [m, ldy] out, bf16 or fp32
                        bool out_f32, cudaStream_t stream, int32_t ldy = 0,  // 0: ldy = n
                        int32_t variant = -1,
                        bool pdl = false);  // may overlap the kernel before it (pdl.cuh)

// out[t, r] = silu(bf16(gate[t, r])) · bf16(up[t, r]) with gate and up rows r and r + width of
// the stacked gate|up matrix: launch_skinny_gemm then launch_silu_mul in one pass (same bits).
void launch_skinny_swiglu(const __nv_bfloat16* x,  // [m, k] in
                          const __nv_bfloat16* w,  // [2 * width, k] in: gate rows, then up rows
                          int32_t m, int32_t width, int32_t k,
                          __nv_bfloat16* out,  // [m, width] out
                          cudaStream_t stream, int32_t variant = -1,
                          bool pdl = false);  // may overlap the kernel before it (pdl.cuh)

// The q|k|v projection with RoPE and the K/V page write in its epilogue, for 2-32 tokens (a
// verify pass, a small decode batch): launch_skinny_gemm (bf16 out) then launch_rope_kv_write in
// one pass, the same bits, one launch and one seam a layer fewer. skinny_qkv_rope_fuses: whether
// the shape takes it (out's m tokens, an even head size, where the skinny GEMM wins).
bool skinny_qkv_rope_fuses(int32_t m, int32_t k, const RopeKvShape& s);
void launch_skinny_qkv_rope(const __nv_bfloat16* x,  // [m, k] in
                            const __nv_bfloat16* w,  // [(H + 2*KVH) * D, k] in: q | k | v rows
                            int32_t m, int32_t k, const RopeKvTarget& out, cudaStream_t stream,
                            int32_t variant = -1,
                            bool pdl = false);  // may overlap the kernel before it (pdl.cuh)

}  // namespace tandem::kernels
