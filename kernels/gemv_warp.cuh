// Device-side inner loop of the GEMV (gemv.cuh), shared by the plain, residual-adding, SwiGLU
// and q|k|v-with-RoPE kernels so that all of them sum every output in the same order (their
// fused/unfused pairs are tested for equal bits), and the RMSNorm prologue of the folded ones.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "block_reduce.cuh"
#include "gemv.cuh"
#include "pdl.cuh"

namespace tandem::kernels::gemv_warp {

constexpr int kWarps = 8;  // per block
constexpr int kThreads = kWarps * 32;

// One warp per output row (or R rows), lanes strided over k.
constexpr int kBytesInFlight = 4;  // 16-byte weight loads in flight per lane, over all R rows

__device__ __forceinline__ void fma8(float& acc, const uint4& w, const uint4& x) {
  const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 wf = __bfloat1622float2(w2[j]);
    const float2 xf = __bfloat1622float2(x2[j]);
    acc = fmaf(wf.x, xf.x, acc);
    acc = fmaf(wf.y, xf.y, acc);
  }
}

// A lane's first N 16-byte loads of each row (features 8 (lane + 32 u) .. + 7, u < N), issued
// before the grid dependency wait of an overlapped launch (pdl.cuh): weights never depend on
// the kernel before, so their DRAM latency hides behind its tail. Loads past the row are left
// unset and never read.
template <int R, int N>
struct FirstLoads {
  uint4 w[N > 0 ? N : 1][R];
};

template <int R, int N, int kParts = 1>
__device__ __forceinline__ void load_first(const __nv_bfloat16* const (&rows)[R], int k,
                                           FirstLoads<R, N>& first, int part = 0) {
  const int c0 = (threadIdx.x & 31) + 32 * part, k8 = k / 8;
#pragma unroll
  for (int u = 0; u < N; ++u) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int c = c0 + 32 * kParts * u;
      if (c < k8) first.w[u][r] = __ldcs(reinterpret_cast<const uint4*>(rows[r]) + c);
    }
  }
}

// acc[r][t] = Σ_k rows[r][k] · x[t][k] over the warp (every lane holds the total). Each lane
// sums features c ≡ lane (mod 32) in ascending order, then the warp reduces by xor shuffles:
// the order depends on neither R, the unroll nor N. kSharedX: x is in shared memory (a block
// staged it), else read by pdl::load_input. N > 0: the lane's first N loads of each
// row were made by load_first (same sums, same bits).
// kParts > 1 (a split row): this warp is part `part` of kParts warps sharing the rows and sums
// only chunks c ≡ lane + 32 part (mod 32 kParts); combine_parts adds the parts' totals.
template <int M, int R, bool kSharedX = false, int kUnroll = kBytesInFlight / R, int N = 0,
          int kParts = 1>
__device__ __forceinline__ void dot_rows(const __nv_bfloat16* const (&rows)[R],
                                         const __nv_bfloat16* __restrict__ x, int k,
                                         float (&acc)[R][M],
                                         const FirstLoads<R, N>* first = nullptr, int part = 0) {
  static_assert(kUnroll >= 1, "R <= kBytesInFlight");
  constexpr int kStride = 32 * kParts;  // chunks between a lane's successive loads
  const uint4* x4 = reinterpret_cast<const uint4*>(x);
  const int k8 = k / 8;
  const uint4* w4[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    w4[r] = reinterpret_cast<const uint4*>(rows[r]);
#pragma unroll
    for (int t = 0; t < M; ++t) acc[r][t] = 0.0f;
  }
  auto fma_chunk = [&](const uint4(&wv)[R], int c) {
#pragma unroll
    for (int t = 0; t < M; ++t) {
      const uint4 xv = kSharedX ? x4[t * k8 + c] : pdl::load_input(x4 + t * k8 + c);
#pragma unroll
      for (int r = 0; r < R; ++r) fma8(acc[r][t], wv[r], xv);
    }
  };
  int c = (threadIdx.x & 31) + 32 * part;
#pragma unroll
  for (int u = 0; u < N; ++u) {
    if (c < k8) {  // the loads of load_first, in order
      fma_chunk(first->w[u], c);
      c += kStride;
    }
  }
  for (; c + kStride * (kUnroll - 1) < k8; c += kStride * kUnroll) {
    uint4 wv[kUnroll][R];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int r = 0; r < R; ++r) wv[u][r] = __ldcs(w4[r] + c + kStride * u);  // streamed once
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) fma_chunk(wv[u], c + kStride * u);
  }
  // The last chunks one load at a time: one batch of predicated loads measured slower (7B
  // batch 1 3.72 -> 3.75-3.77 ms, 0.5B 0.639 -> 0.649; H200, NOTES.md v22).
  for (; c < k8; c += kStride) {
    uint4 wv[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wv[r] = __ldcs(w4[r] + c);
    fma_chunk(wv, c);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int t = 0; t < M; ++t) {
      for (int o = 16; o > 0; o >>= 1) acc[r][t] += __shfl_xor_sync(0xffffffffu, acc[r][t], o);
    }
  }
}

// A split row's total (dot_rows with kParts > 1): warps w = g kParts + p of a block are parts
// p = 0 .. kParts - 1 of row group g; part 0 gets acc = ((part 0 + part 1) + ...), the others
// keep their own. Every thread of the block must call it (a barrier).
template <int kParts, int R, int M>
__device__ __forceinline__ void combine_parts(float (&acc)[R][M], int part) {
  if constexpr (kParts > 1) {
    __shared__ float partial[kWarps][R][M];
    const int warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) {
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < M; ++t) partial[warp][r][t] = acc[r][t];
    }
    __syncthreads();
    if (part == 0) {
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < M; ++t)
#pragma unroll
          for (int q = 1; q < kParts; ++q) acc[r][t] += partial[warp + q][r][t];
    }
  }
}

// Host side: f(std::integral_constant<int, P>{}) with P = parts (gemv_row_parts: 1, 2 or 4), so a
// launcher picks the kernel instantiation of its split.
template <typename F>
void with_parts(int parts, F&& f) {
  if (parts == 4) {
    f(std::integral_constant<int, 4>{});
  } else if (parts == 2) {
    f(std::integral_constant<int, 2>{});
  } else {
    f(std::integral_constant<int, 1>{});
  }
}

// 1 / rms of one fp32 row (width % 4 == 0, 16-byte aligned), every thread of the block taking
// part and getting the result; `scratch` holds 32 floats (block_sum).
__device__ __forceinline__ float row_inv_rms(const float* __restrict__ row, int width, float eps,
                                             float* scratch) {
  const float4* row4 = reinterpret_cast<const float4*>(row);
  float ss = 0.0f;
  for (int c = threadIdx.x; c < width / 4; c += blockDim.x) {
    const float4 v = pdl::load_input(row4 + c);
    ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  return rsqrtf(block_sum(ss, scratch) / float(width) + eps);
}

// The block's GEMV input from the residual stream (NormedRows, normed_rows.cuh): row t of xs is
// bf16(residual[t] · rsqrt(mean(residual[t]²) + eps) · weight), the formula and rounding of
// launch_add_rmsnorm (its sum of squares in another order). Every thread takes part; xs is
// complete for the whole block on return.
template <int M>
__device__ __forceinline__ void stage_normed(const NormedRows& in, int width,
                                             __nv_bfloat16* __restrict__ xs) {
  __shared__ float scratch[32];
  const int w4 = width / 4;
  const float4* weight = reinterpret_cast<const float4*>(in.weight);
#pragma unroll
  for (int t = 0; t < M; ++t) {
    const float4* row = reinterpret_cast<const float4*>(in.residual + int64_t(t) * width);
    const float inv = row_inv_rms(in.residual + int64_t(t) * width, width, in.eps, scratch);
    for (int c = threadIdx.x; c < w4; c += blockDim.x) {
      const float4 v = pdl::load_input(row + c), g = __ldg(weight + c);
      __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(xs + int64_t(t) * width + 4 * c);
      out[0] = __floats2bfloat162_rn(v.x * inv * g.x, v.y * inv * g.y);
      out[1] = __floats2bfloat162_rn(v.z * inv * g.z, v.w * inv * g.w);
    }
  }
  __syncthreads();
}

// A GEMV block's start: with kPdl (an overlapped launch, pdl.cuh) the lane's first N loads of
// each row are made, and then it waits for its predecessor (the kernel lets its own successor
// launch after its loop: allow_successor); with
// kNorm the block stages x = RMSNorm(in.residual) into `staged` (every thread takes part).
// Returns the x that dot_rows reads.
template <int M, bool kPdl, bool kNorm, int R, int N, int kParts = 1>
__device__ __forceinline__ const __nv_bfloat16* start_block(const __nv_bfloat16* const (&rows)[R],
                                                            int k, const __nv_bfloat16* x,
                                                            const NormedRows& in,
                                                            __nv_bfloat16* staged,
                                                            FirstLoads<R, N>& first, int part = 0) {
  if constexpr (kPdl) {
    load_first<R, N, kParts>(rows, k, first, part);
    pdl::grid_dependency_wait();
  }
  if constexpr (kNorm) {
    stage_normed<M>(in, k, staged);
    return staged;
  }
  return x;
}

// Where an overlapped GEMV lets its successor launch (pdl.cuh). A grid of several waves does it
// after each warp's loop (allow_successor): a successor launched at the grid's start let the
// kernel after it launch too, whose blocks then sat on SM slots the grid's later waves needed
// (the int4 and FP8 GEMVs: AWQ 7B 2.010 -> 1.950 ms, FP8 7B 2.99 -> 2.69; H200, NOTES.md v21).
// A grid that is resident all at once (kLead: the launcher asked lead_if_one_wave) has no later
// wave to crowd, so it lets its successor launch at its start (lead_trigger), and the
// successor's work before its wait (the decode attention's page lookups and K/V copies, the
// next GEMV's first weight loads) runs under this grid's loop instead of after it. Measured with
// a switch that forced these triggers (H200, x2-x3 alternated, NOTES.md v37): bf16 7B batch 1
// 3.65-3.68 -> 3.60 ms, 8B 3.98-3.99 -> 3.88-3.91, the folded 0.5B 0.546-0.549 -> 0.516-0.517.
template <bool kPdl, bool kLead>
__device__ __forceinline__ void lead_trigger() {
  if constexpr (kPdl && kLead) pdl::allow_dependents();
}
template <bool kPdl, bool kLead = false>
__device__ __forceinline__ void allow_successor() {
  if constexpr (kPdl && !kLead) pdl::allow_dependents();
}

}  // namespace tandem::kernels::gemv_warp
