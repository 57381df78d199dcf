// The decode q|k|v projection with RoPE, the q/k/v bias and the K/V page write in its
// epilogue: launch_gemv followed by launch_rope_kv_write in one kernel, with the same bits
// (the projection is rounded to bf16 before the bias, as the two-kernel path stores it).
// Removes a launch and the [T, (H + 2*KVH) * D] round trip per layer and decode step.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "gemv.cuh"
#include "rope_kv.cuh"

namespace tandem::kernels {

// 1 <= out.s.num_tokens <= kGemvMaxTokens, k % 8 == 0, head_dim % 16 == 0. Each warp computes
// output rows i and i + D/2 of a head together, so that it can rotate them.
void launch_qkv_rope_gemv(const __nv_bfloat16* x,  // [T, k] in: normalised hidden states
                          const __nv_bfloat16* w,  // [(H + 2*KVH) * D, k] in: q | k | v rows
                          int32_t k, const RopeKvTarget& out, cudaStream_t stream,
                          bool pdl = false);  // one token: may overlap the launch before

// The same with x = RMSNorm(residual) (NormedRows, gemv.cuh): the layer's input norm folds in
// too. pdl: at one token, the launch may overlap the kernel before it (pdl.cuh; sm_90+ only).
void launch_qkv_rope_gemv(const NormedRows& x, const __nv_bfloat16* w, int32_t k,
                          const RopeKvTarget& out, cudaStream_t stream, bool pdl = false);

}  // namespace tandem::kernels
