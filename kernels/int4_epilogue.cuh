// Where the int4 GEMV's sums go (kernels/int4_linear.cu): each output row stored as it is, or
// two rows of the block combined: gate and up through SiLU, or a head's dims i and i + D/2
// through RoPE into q and the KV pages. The combined forms compute what the GEMV (bf16 out)
// followed by launch_silu_mul / launch_rope_kv_write does: each sum is rounded to bf16 first,
// then the same device function runs. Their plans may split k otherwise than the plain GEMV's,
// so a sum can differ in its last fp32 bits (and then, rarely, in its bf16 rounding).
//
// A block's sums: tiles_per_block tiles of 16 rows, output o = (local tile * 16 + row) * M + token.
// `tile()` maps a block's local tile to the matrix's tile, -1 past the end.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "rope_kv.cuh"
#include "silu_mul.cuh"

namespace tandem::kernels::int4_epilogue {

struct BlockTiles {
  int tile_block = 0;
  int tiles_per_block = 0;
  int m = 0;  // real tokens (the rest of M is padding)
};

__device__ __forceinline__ float bf16_rounded(float v) {
  return __bfloat162float(__float2bfloat16(v));
}

// y[t, r] = the sum, bf16 or fp32; with kAdd (fp32 y: the residual stream) y[t, r] += the sum
// rounded to bf16, as launch_int4_gemv (bf16 out) followed by launch_add_rmsnorm's add.
template <typename Out, bool kAdd = false>
struct Store {
  static constexpr bool kPairs = false;
  Out* y;
  int ldy;
  int n;
  __device__ int tile(int tile_block, int tiles_per_block, int local, int tiles) const {
    const int t = tile_block * tiles_per_block + local;
    return t < tiles ? t : -1;
  }
  template <int M>
  __device__ void put(const BlockTiles& b, int o, float v) const {
    const int local = o / (16 * M), row = (o / M) % 16, tok = o % M;
    const int r = (b.tile_block * b.tiles_per_block + local) * 16 + row;
    if (tok >= b.m || r >= n) return;  // padding
    if constexpr (kAdd) {
      static_assert(sizeof(Out) == 4, "the residual stream is fp32");
      y[int64_t(tok) * ldy + r] += bf16_rounded(v);
    } else if constexpr (sizeof(Out) == 4) {
      y[int64_t(tok) * ldy + r] = v;
    } else {
      y[int64_t(tok) * ldy + r] = __float2bfloat16(v);
    }
  }
};

// W = gate | up ([2 * width, k], width % 16 == 0): a block's first half of tiles are gate rows,
// its second half the same up rows; act[t, r] = silu(gate) · up.
struct SwiGlu {
  static constexpr bool kPairs = true;
  __nv_bfloat16* act;  // [m, width] out
  int width;
  __device__ int tile(int tile_block, int tiles_per_block, int local, int) const {
    const int half = tiles_per_block / 2, t = tile_block * half + local % half;
    if (t >= width / 16) return -1;
    return local < half ? t : width / 16 + t;
  }
  // Items first, first + step, ... of the block's gate outputs; total(o): output o's sum.
  template <int M, typename Total>
  __device__ void finish(const BlockTiles& b, Total total, int first, int step) const {
    const int half_outputs = b.tiles_per_block / 2 * 16 * M;
    for (int i = first; i < half_outputs; i += step) {
      const int local = i / (16 * M), row = (i / M) % 16, tok = i % M;
      const int r = (b.tile_block * (b.tiles_per_block / 2) + local) * 16 + row;
      if (tok >= b.m || r >= width) continue;
      const float g = bf16_rounded(total(i)), u = bf16_rounded(total(i + half_outputs));
      act[int64_t(tok) * width + r] = __float2bfloat16(silu_times(g, u));
    }
  }
};

// W = q | k | v ([(H + 2 KVH) * D, k]); a block's rows are whole heads (tiles_per_block * 16 a
// multiple of D).
struct Rope {
  static constexpr bool kPairs = true;
  RopeKvTarget target;
  __device__ int tile(int tile_block, int tiles_per_block, int local, int tiles) const {
    const int t = tile_block * tiles_per_block + local;
    return t < tiles ? t : -1;
  }
  template <int M, typename Total>
  __device__ void finish(const BlockTiles& b, Total total, int first, int step) const {
    const int D = target.s.head_dim, half = D / 2;
    const int heads = target.s.num_heads + 2 * target.s.num_kv_heads;
    const int first_head = b.tile_block * b.tiles_per_block * 16 / D;
    const int items = b.tiles_per_block * 8 * M;  // (dim pairs of the block's rows) x tokens
    for (int i = first; i < items; i += step) {
      const int tok = i % M, pair = i / M;
      const int head = first_head + pair / half, dim = pair % half;
      if (tok >= b.m || head >= heads) continue;
      const int row = (pair / half) * D + dim;  // the block's row of dim i; dim i + D/2 half later
      const float x1 = bf16_rounded(total(row * M + tok));
      const float x2 = bf16_rounded(total((row + half) * M + tok));
      rope_store_pair(target, tok, head, dim, x1, x2);
    }
  }
};

}  // namespace tandem::kernels::int4_epilogue
