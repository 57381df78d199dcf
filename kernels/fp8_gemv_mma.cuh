// The W8A8 decode GEMV on FP8 tensor cores (mma.sync m16n8k32 e4m3, sm_89+): a block computes
// one tile of 16 weight rows for up to 8 tokens; its warps split k and add their sums in a fixed
// order. The e4m3 products and their sums come from the tensor core, so a weight byte costs a
// fraction of an instruction instead of the CUDA-core GEMV's conversion and FMA per byte (whose
// one-token loop issued ~4x the bf16 GEMV's instructions per weight byte; NOTES.md v22).
// fp8_linear.cu picks it (mma_takes): from two tokens, and at one token for segmented scales;
// at one token with one scale a row the CUDA-core GEMV measured as fast (NOTES.md v23).
//
// Numerics: each mma sums 32 exact e4m3 products in the tensor core. Hopper's FP8 MMA is
// reported to keep fewer mantissa bits than fp32 over long sums (DeepSeek-V3), so every 128
// features (one segment: four mmas from zero) are promoted to an fp32 sum on the CUDA cores; a
// segment's partial is scaled there (block fp8, per-group activations) or added (channel or
// tensor weights, per-token activations). Measured against fp64: 3-8e-8 relative (H200,
// gpu_quant_fp8). A row's sum runs over the same segments in the same order in every form
// (plain, SwiGLU, RoPE) and at every token count, so the forms give the same bits; the CUDA-core
// GEMV (fp8_linear.cu) gives other bits within the same tolerance.
//
// k-permutation: a lane loads 16 contiguous bytes of each of its two rows (fragment rows g and
// g + 8) and the same 16 bytes of its token's activations, and feeds them to two mmas as
// k = {4t..4t+3, 16+4t..16+4t+3}. The A and B fragments take the same bytes at the same k, so
// the dot product is the row's, in another order within the 64 features of a step.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fp8_linear.cuh"
#include "pdl.cuh"

namespace tandem::kernels::fp8_mma {

constexpr int kTileRows = 16;
constexpr int kSegment = 128;  // features between promotions to fp32; a scale block's width
constexpr int kStep = 64;      // features a lane's 16-byte loads cover across its quad

struct Args {
  const uint8_t* xq;     // [m, k] e4m3
  const float* x_scale;  // [m, groups]
  int32_t groups;        // scales a token: 1 (per token or static) or k / 128
  int32_t m;             // 1..kFp8GemvMaxTokens
  Fp8Matrix w;           // k % 128 == 0
};

// D = A·B + D over k = 32: A 16 × 32 (rows), B 32 × 8 (tokens), fp32 D. Built for sm_89+ only;
// the host never launches the kernel elsewhere (takes() checks the device).
__device__ __forceinline__ void mma_e4m3(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
  (void)d, (void)a0, (void)a1, (void)a2, (void)a3, (void)b0, (void)b1;
  __trap();
#endif
}

// One segment of a lane: its two rows' and its token's 16 bytes at each of the two steps.
struct Segment {
  uint4 lo[2], hi[2], x[2];
};

// kParts warps split a tile's segments (contiguous ranges); kUnroll segments a batch, and the
// next batch's loads are issued before this batch's mmas. Epilogue (fp8_linear.cu) maps tile
// rows to weight rows (tile_row: -1 past the end) and stores a lane's finished sums of tile
// rows g and g + 8 for one token (store_tile). kPdl: an overlapped launch whose first weights are
// loaded before the wait (pdl.cuh).
template <int kParts, int kUnroll, bool kSegmented, bool kPdl, typename Epilogue>
__global__ void __launch_bounds__(kParts * 32) gemv_kernel(Args a, Epilogue e) {
  __shared__ float4 partial[kParts][32];  // each warp's fragment sums, added by warp 0
  const int lane = threadIdx.x & 31, part = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int tile = blockIdx.x;
  const int k = a.w.k;
  // This lane's rows (fragment rows g and g + 8); rows past the end read row 0 of the tile, which
  // tiles() guarantees, and are never stored (store_tile checks).
  const int row0 = e.tile_row(tile, 0);
  const int lo = e.tile_row(tile, g), hi = e.tile_row(tile, g + 8);
  const int rlo = lo < 0 ? row0 : lo, rhi = hi < 0 ? row0 : hi;
  const uint8_t* wlo = a.w.weight + int64_t(rlo) * k + 16 * t;
  const uint8_t* whi = a.w.weight + int64_t(rhi) * k + 16 * t;
  // B column g is token g; columns past m repeat the last token and are never stored.
  const uint8_t* xr = a.xq + int64_t(min(g, a.m - 1)) * k + 16 * t;
  const int segments = k / kSegment;
  const int s_begin = segments * part / kParts, s_end = segments * (part + 1) / kParts;

  auto load_weights = [&](int s, Segment& b) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int at = s * kSegment + h * kStep;
      b.lo[h] = __ldcs(reinterpret_cast<const uint4*>(wlo + at));  // streamed once
      b.hi[h] = __ldcs(reinterpret_cast<const uint4*>(whi + at));
    }
  };
  auto load_x = [&](int s, Segment& b) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      b.x[h] = pdl::load_input(reinterpret_cast<const uint4*>(xr + s * kSegment + h * kStep));
    }
  };
  // Segment s's scale per accumulator (rows g, g, g + 8, g + 8; tokens 2t, 2t + 1).
  auto segment_scales = [&](int s, float(&f)[4]) {
    const int tok0 = min(2 * t, a.m - 1), tok1 = min(2 * t + 1, a.m - 1);
    const float x0 = pdl::load_input(a.x_scale + tok0 * a.groups + (a.groups > 1 ? s : 0));
    const float x1 = pdl::load_input(a.x_scale + tok1 * a.groups + (a.groups > 1 ? s : 0));
    float wl, wh;
    if (a.w.block) {
      const int cols = k / kSegment;
      wl = __ldg(a.w.scale + (rlo / kSegment) * cols + s);
      wh = __ldg(a.w.scale + (rhi / kSegment) * cols + s);
    } else {
      wl = __ldg(a.w.scale + rlo);
      wh = __ldg(a.w.scale + rhi);
    }
    f[0] = x0 * wl;
    f[1] = x1 * wl;
    f[2] = x0 * wh;
    f[3] = x1 * wh;
  };
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  auto run_segment = [&](int s, const Segment& b) {
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mma_e4m3(d, b.lo[h].x, b.hi[h].x, b.lo[h].y, b.hi[h].y, b.x[h].x, b.x[h].y);
      mma_e4m3(d, b.lo[h].z, b.hi[h].z, b.lo[h].w, b.hi[h].w, b.x[h].z, b.x[h].w);
    }
    if constexpr (kSegmented) {
      float f[4];
      segment_scales(s, f);
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[i] = fmaf(d[i], f[i], acc[i]);
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[i] += d[i];
    }
  };

  Segment cur[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u)
    if (s_begin + u < s_end) load_weights(s_begin + u, cur[u]);
  if constexpr (kPdl) pdl::grid_dependency_wait();  // the activations come from the predecessor
#pragma unroll
  for (int u = 0; u < kUnroll; ++u)
    if (s_begin + u < s_end) load_x(s_begin + u, cur[u]);
  for (int s = s_begin; s < s_end; s += kUnroll) {
    Segment next[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (s + kUnroll + u < s_end) {
        load_weights(s + kUnroll + u, next[u]);
        load_x(s + kUnroll + u, next[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (s + u < s_end) run_segment(s + u, cur[u]);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) cur[u] = next[u];
  }
  // As the CUDA-core GEMV: the successor launches once every block is past its loop.
  if constexpr (kPdl) pdl::allow_dependents();

  partial[part][lane] = make_float4(acc[0], acc[1], acc[2], acc[3]);
  __syncthreads();
  if (part != 0) return;
  float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int p = 0; p < kParts; ++p) {  // fixed order: the same bits every run
    const float4 q = partial[p][lane];
    v[0] += q.x;
    v[1] += q.y;
    v[2] += q.z;
    v[3] += q.w;
  }
  if constexpr (!kSegmented) {  // one scale per (token, row)
    const int tok0 = min(2 * t, a.m - 1), tok1 = min(2 * t + 1, a.m - 1);
    const float x0 = pdl::load_input(a.x_scale + tok0 * a.groups);
    const float x1 = pdl::load_input(a.x_scale + tok1 * a.groups);
    const float wl = __ldg(a.w.scale + rlo), wh = __ldg(a.w.scale + rhi);
    v[0] *= x0 * wl;
    v[1] *= x1 * wl;
    v[2] *= x0 * wh;
    v[3] *= x1 * wh;
  }
  if (2 * t < a.m) e.store_tile(tile, g, 2 * t, v[0], v[2]);
  if (2 * t + 1 < a.m) e.store_tile(tile, g, 2 * t + 1, v[1], v[3]);
}

}  // namespace tandem::kernels::fp8_mma
