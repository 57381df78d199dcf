#include "int4_linear.cuh"

#include <cooperative_groups.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <type_traits>

#include "cuda_check.cuh"
#include "device_info.cuh"
#include "gemv_warp.cuh"
#include "int4_epilogue.cuh"
#include "int4_plan.h"
#include "pdl.cuh"

namespace tandem::kernels {
namespace {

constexpr int kWarps = int4_plan::kWarps;
constexpr int kThreads = kWarps * 32;
constexpr int kUnroll = 4;  // 16-byte qweight loads per lane per batch; two batches in flight
// Within the default 48 KB, so several blocks share an SM; larger m * k is staged in chunks.
// Shared memory a block may use for x (and the k-split sums), where the device allows it: with
// 48 KB, 20 tokens of a 3,584-feature x took 6 chunks, each a barrier that stalls the weight
// stream. 96 KB (two blocks an SM): the 7B's Linears at 20 tokens 277 -> 221 us a layer, at 5
// tokens -4 us, at 1-2 unchanged; 160 KB (one block an SM) lost everywhere (NOTES.md v11).
constexpr int kSmemBytes = 96 * 1024;

// bf16x2 a + b in one instruction (fma with 1.0).
__device__ __forceinline__ uint32_t bf16x2_add(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(0x3F803F80u), "r"(b));
  return d;
}

// (w & 0x000F000F) | 0x43004300 as one LOP3. Written in C, ptxas emits the AND and the OR as two
// LOP3s (one takes a single immediate): 8 a word instead of 4 (sm_90a SASS, NOTES.md v18).
__device__ __forceinline__ uint32_t nibble_pair_bits(uint32_t w) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(w), "n"(0x000F000F), "n"(0x43004300));
  return d;
}

// One k-step word → the A registers, (q − zero) exact in bf16: 0x4300 | q is 128 + q, and
// zero_lo / zero_hi hold −(128 + zero) of rows j and j + 8 (registers 0, 2 and 1, 3).
__device__ __forceinline__ void unpack(uint32_t w, uint32_t zero_lo, uint32_t zero_hi,
                                       uint32_t (&a)[4]) {
  a[0] = bf16x2_add(nibble_pair_bits(w), zero_lo);
  a[1] = bf16x2_add(nibble_pair_bits(w >> 4), zero_hi);
  a[2] = bf16x2_add(nibble_pair_bits(w >> 8), zero_lo);
  a[3] = bf16x2_add(nibble_pair_bits(w >> 12), zero_hi);
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// −(128 + z) as bf16x2 bits: 128 + z (z <= 16) is 0x4300 | z.
__device__ __forceinline__ uint32_t neg_zero_bits(uint32_t z) {
  return (0xC300u | z) * 0x10001u;
}

// acc += scale · part: registers 0, 1 are row j's (scale_lo), 2, 3 row j + 8's (scale_hi).
template <int NT>
__device__ __forceinline__ void add_scaled(float (&acc)[NT][4], const float (&part)[NT][4],
                                           float scale_lo, float scale_hi) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    acc[nt][0] = fmaf(scale_lo, part[nt][0], acc[nt][0]);
    acc[nt][1] = fmaf(scale_lo, part[nt][1], acc[nt][1]);
    acc[nt][2] = fmaf(scale_hi, part[nt][2], acc[nt][2]);
    acc[nt][3] = fmaf(scale_hi, part[nt][3], acc[nt][3]);
  }
}

// The fp16 scale in half `h` (0: low, row j; 1: high, row j + 8) of a half2 word, as fp32.
__device__ __forceinline__ float scale_half(uint32_t s2, int h) {
  return __half2float(
      __ushort_as_half(static_cast<unsigned short>(h == 0 ? s2 & 0xffffu : s2 >> 16)));
}

// The group a warp is in while it walks its k-slice: scale and zero of rows j and j + 8, the
// next group's prefetched, and the fp32 sum of (q − zero) · x since the group began.
template <int NT>
struct GroupWalk {
  const uint32_t* scales;  // this tile's [groups, 8] half2 (rows j, j + 8), at lane's j
  const uint16_t* zeros;   // this tile's [groups, 8] byte pairs, at lane's j
  int groups = 0;
  int blocks_per_group = 0;
  int group = 0;
  int left = 0;  // blocks of this group still to come
  float scale_lo = 0, scale_hi = 0;
  uint32_t zero_lo = 0, zero_hi = 0;
  uint32_t next_scales = 0;
  uint16_t next_zeros = 0;
  float part[NT][4] = {};

  __device__ void set(uint32_t s2, uint16_t z2) {
    scale_lo = scale_half(s2, 0);
    scale_hi = scale_half(s2, 1);
    zero_lo = neg_zero_bits(z2 & 0xffu);
    zero_hi = neg_zero_bits(z2 >> 8);
  }
  // The next group's scales and zeros; past the last group the last one again (unused), so the
  // walk needs no branch for it.
  __device__ void prefetch() {
    const int at = min(group + 1, groups - 1) * 8;
    next_scales = __ldg(scales + at);
    next_zeros = __ldg(zeros + at);
  }
  __device__ void start(int block) {
    group = block / blocks_per_group;
    left = blocks_per_group - block % blocks_per_group;
    set(__ldg(scales + group * 8), __ldg(zeros + group * 8));
    prefetch();
  }
  __device__ void flush(float (&acc)[NT][4]) {
    add_scaled(acc, part, scale_lo, scale_hi);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) part[nt][i] = 0.0f;
    }
  }
  // Before each block: moves to the next group when this one is done.
  __device__ void step(float (&acc)[NT][4]) {
    if (left == 0) {
      flush(acc);
      ++group;
      set(next_scales, next_zeros);
      prefetch();
      left = blocks_per_group;
    }
    --left;
  }
  // x fragments of one 32-feature block, one per token tile.
  struct XFrags {
    uint4 v[NT];
  };
  // One 32-feature block: two k-steps of 16, each unpacked once for all NT token tiles.
  __device__ void block(uint32_t w0, uint32_t w1, const XFrags& x) {
    const uint4(&xv)[NT] = x.v;
    uint32_t a[4];
    unpack(w0, zero_lo, zero_hi, a);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) mma_bf16(part[nt], a, xv[nt].x, xv[nt].y);
    unpack(w1, zero_lo, zero_hi, a);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) mma_bf16(part[nt], a, xv[nt].z, xv[nt].w);
  }
};

// Group size 128 (AWQ's and GPTQ's usual): a group is one pair of 16-byte loads a lane, and every
// k-range a warp walks (chunks, cluster slices, warp splits) is cut at group boundaries, so each
// group is handled whole, with its scale and zero point loaded beside its weights. That drops
// GroupWalk's per-block countdown and its prefetch address arithmetic (GroupWalk's loop issued
// 103-104 instructions a 512-byte warp load at one token, H200 ncu; the 7B's int4 Linears a
// layer 59.1 -> 48.8 us, NOTES.md v19).
constexpr int kG128 = 128;

// Two groups in flight: [0..1] group g's pairs 2g and 2g + 1, [2..3] group g + 1's.
struct Batch128 {
  uint4 w[4];
  uint32_t scales[2];  // half2: rows j, j + 8
  uint32_t zeros[2];   // byte pairs: rows j, j + 8
};

// q: the tile's qweight at the lane; scales, zeros: the tile's [groups, 8], at the lane's j.
__device__ __forceinline__ void load_batch128(Batch128& b, const uint4* q, const uint32_t* scales,
                                              const uint16_t* zeros, int g, bool two) {
  b.w[0] = __ldcs(q + (2 * g) * 32);
  b.w[1] = __ldcs(q + (2 * g + 1) * 32);
  b.scales[0] = __ldg(scales + g * 8);
  b.zeros[0] = __ldg(zeros + g * 8);
  if (two) {
    b.w[2] = __ldcs(q + (2 * g + 2) * 32);
    b.w[3] = __ldcs(q + (2 * g + 3) * 32);
    b.scales[1] = __ldg(scales + (g + 1) * 8);
    b.zeros[1] = __ldg(zeros + (g + 1) * 8);
  }
}

// mma with a zero accumulator in: the first k-step of a group.
__device__ __forceinline__ void mma_bf16_first(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                               uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%10,%10,%10};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}

// One group: 4 blocks of 32 features (pair p0's words x, y then z, w; then pair p1's), summed in
// fp32 from zero in k order, then acc += scale · sum: the sums GroupWalk forms, in its order.
// xg[nt]: the group's first block of token tile nt (4 uint4 a block).
template <int NT>
__device__ __forceinline__ void run_group128(float (&acc)[NT][4], const uint4& p0, const uint4& p1,
                                             uint32_t s2, uint32_t z2,
                                             const uint4* const (&xg)[NT]) {
  // −(128 + z) in both halves: byte z, then 0xC3 (neg_zero_bits as one PRMT).
  const uint32_t zero_lo = __byte_perm(z2, 0xC3u, 0x4040);
  const uint32_t zero_hi = __byte_perm(z2, 0xC3u, 0x4141);
  const uint32_t words[8] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
  float part[NT][4];
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    uint4 xv[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) xv[nt] = xg[nt][b * 4];
    uint32_t a[4];
    unpack(words[2 * b], zero_lo, zero_hi, a);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      if (b == 0) {
        mma_bf16_first(part[nt], a, xv[nt].x, xv[nt].y);
      } else {
        mma_bf16(part[nt], a, xv[nt].x, xv[nt].y);
      }
    }
    unpack(words[2 * b + 1], zero_lo, zero_hi, a);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) mma_bf16(part[nt], a, xv[nt].z, xv[nt].w);
  }
  add_scaled(acc, part, scale_half(s2, 0), scale_half(s2, 1));
}

// Words of x per token in shared memory: the chunk's bf16 plus 64 bytes when that makes the
// stride a multiple of 128 bytes, so two tokens' fragment loads fall in different banks.
__host__ __device__ inline int x_stride_words(int chunk) {
  const int bytes = chunk * 2;
  return (bytes % 128 == 0 ? bytes + 64 : bytes) / 4;
}

// The GEMV's input: x as given, or (norm.residual set) x = RMSNorm(norm.residual), each block
// normalising the rows itself (NormedRows, normed_rows.cuh): the layer's norm launch folds in.
struct Int4Input {
  const __nv_bfloat16* x = nullptr;  // [m, k], or null with norm.residual
  NormedRows norm{nullptr, nullptr, 0.0f};
};

// bf16 pair (lo, hi) as one word, lo in the low half.
__device__ __forceinline__ uint32_t bf16_pair_bits(float lo, float hi) {
  const __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&p);
}

// Stages x[:, c0 .. c0 + kc) in B-fragment order: block b of token t is 32 words at
// t * stride + b * 16, lane quad position q's four words at q * 4 + s * 2 + (features 8..15 of
// k-step s), each holding features (2q, 2q + 1) of that half k-step.
// Rows m .. M - 1 (padding up to a whole token tile) are zeros. A normed input's rows are
// bf16(residual · inv_rms[t] · weight), launch_add_rmsnorm's formula.
template <int M, bool kNormed>
__device__ void stage_x(const Int4Input& in, const int32_t* __restrict__ perm, int m, int k, int c0,
                        int kc, int stride, const float* inv_rms, uint32_t* xs) {
  const int units = kc / 8;  // 8 features each
  const __nv_bfloat16* __restrict__ x = in.x;
  const float* __restrict__ res = in.norm.residual;
  const float* __restrict__ gamma = in.norm.weight;
  for (int u = threadIdx.x; u < M * units; u += kThreads) {
    const int tok = u / units, j = u % units;
    const int f = c0 + 8 * j;
    uint32_t v[4] = {0, 0, 0, 0};  // padding rows stay zero
    if (kNormed && tok < m) {
      const float* row = res + int64_t(tok) * k;
      const float inv = inv_rms[tok];
      if (perm == nullptr) {
        // 16-byte loads: with one 4-byte load a feature (a lane's 8 features 32 bytes apart
        // within a warp's load), the 7B's gate|up took 24.8 -> 32.8 us (H200, NOTES.md v20).
        const float4 a = pdl::load_input(reinterpret_cast<const float4*>(row + f));
        const float4 b = pdl::load_input(reinterpret_cast<const float4*>(row + f + 4));
        const float4 ga = __ldg(reinterpret_cast<const float4*>(gamma + f));
        const float4 gb = __ldg(reinterpret_cast<const float4*>(gamma + f + 4));
        v[0] = bf16_pair_bits(a.x * inv * ga.x, a.y * inv * ga.y);
        v[1] = bf16_pair_bits(a.z * inv * ga.z, a.w * inv * ga.w);
        v[2] = bf16_pair_bits(b.x * inv * gb.x, b.y * inv * gb.y);
        v[3] = bf16_pair_bits(b.z * inv * gb.z, b.w * inv * gb.w);
      } else {
        auto normed = [&](int i) { return pdl::load_input(row + i) * inv * __ldg(gamma + i); };
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          v[q] =
              bf16_pair_bits(normed(__ldg(perm + f + 2 * q)), normed(__ldg(perm + f + 2 * q + 1)));
        }
      }
    } else if (tok < m && perm == nullptr) {
      const uint4 raw = pdl::load_input(reinterpret_cast<const uint4*>(x + int64_t(tok) * k + f));
      v[0] = raw.x;
      v[1] = raw.y;
      v[2] = raw.z;
      v[3] = raw.w;
    } else if (tok < m) {
      const unsigned short* xt = reinterpret_cast<const unsigned short*>(x) + int64_t(tok) * k;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const uint32_t lo = pdl::load_input(xt + __ldg(perm + f + 2 * q));
        const uint32_t hi = pdl::load_input(xt + __ldg(perm + f + 2 * q + 1));
        v[q] = lo | (hi << 16);
      }
    }
    const int b = j / 4, s = (j % 4) / 2, half = j % 2;
    uint32_t* dst = xs + tok * stride + b * 16 + s * 2 + half;
#pragma unroll
    for (int q = 0; q < 4; ++q) dst[q * 4] = v[q];
  }
}

// Block: `tiles_per_block` row tiles of 16, each by kWarps / tiles_per_block warps splitting k.
// M tokens are staged (m of them real, the rest zeros), in NT tiles of 8: each unpacked weight
// fragment multiplies all of them. With `parts` > 1 (sm_90), a cluster of `parts` consecutive
// blocks shares the same tiles, block p of it taking the p-th slice of k, and the cluster adds
// the slices' sums through distributed shared memory in rank order (no workspace, same bits on
// every run). That spreads Linears with few tiles (n = 3,584: 224) over every SM.
// kSliced: the cluster form (parts > 1), a separate instantiation so that the unsliced one keeps
// its code. Both are held to three blocks an SM up to one token tile (80 registers): the k-slice
// bookkeeping took one shared kernel to 95 registers and two blocks an SM, 10-25% slower at one
// token (H200, NOTES.md v12). kGroups128: the group-128 path (group_size 128), its own
// instantiation too (sharing one kernel, both paths spilled under the 80-register cap).
// Epi: where the sums go (int4_epilogue.cuh). kNormed: `in` is NormedRows, its own instantiation
// (one token) so that the other kernels keep their code and registers.
template <int M, bool kSliced, bool kGroups128, bool kNormed, typename Epi>
__global__ void __launch_bounds__(kThreads, M <= 8 ? 3 : 2)
    int4_gemv_kernel(Int4Input in, Int4Matrix w, int m, int tiles_per_block, int sliced_parts,
                     int chunk, Epi epi) {
  constexpr int NT = (M + 7) / 8;
  const int parts = kSliced ? sliced_parts : 1;
  extern __shared__ uint4 smem[];
  const int stride = x_stride_words(chunk);
  uint32_t* xs = reinterpret_cast<uint32_t*>(smem);        // [M, stride]
  float* red = reinterpret_cast<float*>(xs + M * stride);  // [kWarps, 16, M]
  float* sums = red + kWarps * 16 * M;  // [tiles_per_block, 16, M] (parts > 1 or pairs)

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int j = lane >> 2, quad = lane & 3;
  const int splits = kWarps / tiles_per_block;
  const int part = blockIdx.x % parts, tile_block = blockIdx.x / parts;
  const int mapped = epi.tile(tile_block, tiles_per_block, warp / splits, (w.n + 15) / 16);
  const bool active = mapped >= 0;
  const int tile = active ? mapped : 0;
  const int split = warp % splits;
  const int k = w.k;
  const int pairs = k / 64;
  const bool odd_block = (k / 32) % 2 == 1;
  const int groups = k / w.group_size;

  const uint4* qtile = reinterpret_cast<const uint4*>(w.qweight + int64_t(tile) * 2 * k);
  GroupWalk<NT> walk;
  walk.scales = reinterpret_cast<const uint32_t*>(w.scales) + int64_t(tile) * groups * 8 + j;
  walk.zeros = reinterpret_cast<const uint16_t*>(w.zeros) + int64_t(tile) * groups * 8 + j;
  walk.groups = groups;
  walk.blocks_per_group = w.group_size / 32;
  float acc[NT][4] = {};

  // This block's slice of k: whole units (groups of 128 on the group-128 path, else pairs of
  // 32-feature blocks, the odd last block with the last).
  const int unit = kGroups128 ? kG128 : 64;
  const int units = k / unit;
  const int k_begin = unit * (units * part / parts);
  const int k_end = part == parts - 1 ? k : unit * (units * (part + 1) / parts);
  // Each chunk is a multiple of 128 features (smem_plan), so chunks keep groups whole.
  // An overlapped launch (pdl.cuh) gets here with its first weights in flight; x and every
  // output wait for the kernel before.
  // A normed input's 1 / rms per token, over the whole row (this block may stage only a slice).
  __shared__ float inv_rms[M];
  __shared__ float scratch[32];
  auto stage_chunk = [&](int c0, int kc) {
    if (c0 > k_begin) __syncthreads();  // every warp is done with the previous chunk
    if constexpr (kNormed) {
      // The norm's weights need no predecessor: into L1 before the wait, a 128-byte line a thread,
      // so that staging pays one trip to L2 (the residual's) after it.
      for (int line = threadIdx.x; line < kc / 32; line += kThreads) {
        asm volatile("prefetch.global.L1 [%0];" ::"l"(in.norm.weight + c0 + 32 * line));
      }
    }
    pdl::grid_dependency_wait();
    if (kNormed && c0 == k_begin) {
      for (int t = 0; t < m; ++t) {
        const float inv =
            gemv_warp::row_inv_rms(in.norm.residual + int64_t(t) * k, k, in.norm.eps, scratch);
        if (threadIdx.x == 0) inv_rms[t] = inv;
      }
      __syncthreads();
    }
    stage_x<M, kNormed>(in, w.perm, m, k, c0, kc, stride, inv_rms, xs);
    __syncthreads();
  };
  // x fragments of token j of each tile at the chunk's first block. Rows past M (M < 8, or a
  // partial last tile) read row M - 1 as they are: each output column of the mma depends only on
  // its own x row, and columns past M are never stored, so no mask is needed (masking took ~12%
  // of the one-token loop's instructions; without it the 7B's int4 layer at one token is 72.8 ->
  // 67.6 us, H200, NOTES.md v13).
  const uint4* xfrag[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    xfrag[nt] = reinterpret_cast<const uint4*>(xs + min(nt * 8 + j, M - 1) * stride) + quad;
  }
  for (int c0 = k_begin; c0 < k_end; c0 += chunk) {
    const int kc = min(chunk, k_end - c0);
    if constexpr (kGroups128) {
      // This warp's groups of the chunk; the first two groups' loads are in flight while x is
      // staged.
      const int cg = kc / kG128;
      const int g0 = c0 / kG128 + cg * split / splits;
      const int g1 = c0 / kG128 + cg * (split + 1) / splits;
      const bool any = active && g1 > g0;
      const uint32_t* gscales = walk.scales;
      const uint16_t* gzeros = walk.zeros;
      const uint4* q = qtile + lane;
      Batch128 cur = {}, nxt = {};
      if (any) load_batch128(cur, q, gscales, gzeros, g0, g0 + 1 < g1);
      stage_chunk(c0, kc);
      if (!any) continue;
      // Group g's x: 4 blocks of 4 uint4 from the chunk's start.
      auto run = [&](const Batch128& b, int g) {
        const uint4* xg[NT];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) xg[nt] = xfrag[nt] + (g * kG128 - c0) / 32 * 4;
        run_group128<NT>(acc, b.w[0], b.w[1], b.scales[0], b.zeros[0], xg);
        if (g + 1 < g1) {
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) xg[nt] += 16;
          run_group128<NT>(acc, b.w[2], b.w[3], b.scales[1], b.zeros[1], xg);
        }
      };
      // Two batches of two groups in flight, alternating registers at one token tile (as the
      // general loop below).
      if constexpr (NT == 1) {
        for (int g = g0; g < g1; g += 4) {
          if (g + 2 < g1) load_batch128(nxt, q, gscales, gzeros, g + 2, g + 3 < g1);
          run(cur, g);
          if (g + 2 >= g1) break;
          if (g + 4 < g1) load_batch128(cur, q, gscales, gzeros, g + 4, g + 5 < g1);
          run(nxt, g + 2);
        }
      } else {
        for (int g = g0; g < g1; g += 2) {
          if (g + 2 < g1) load_batch128(nxt, q, gscales, gzeros, g + 2, g + 3 < g1);
          run(cur, g);
          cur = nxt;
        }
      }
      continue;
    }
    // This warp's pairs of the chunk, and the odd last block for the last warp of a tile.
    const int chunk_pairs = kc / 64;
    const int p0 = c0 / 64 + chunk_pairs * split / splits;
    const int p1 = c0 / 64 + chunk_pairs * (split + 1) / splits;
    const bool tail = active && odd_block && c0 + kc == k && split == splits - 1;
    const bool any = active && (p1 > p0 || tail);

    // The first weights and group are in flight while x is staged.
    uint4 cur[kUnroll] = {};
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (active && p0 + u < p1) cur[u] = __ldcs(qtile + (p0 + u) * 32 + lane);
    if (any) walk.start(2 * p0);
    stage_chunk(c0, kc);
    if (!any) continue;

    auto x_block = [&](int b) {
      typename GroupWalk<NT>::XFrags xv;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) xv.v[nt] = xfrag[nt][b * 4];
      return xv;
    };
    // Two batches of kUnroll loads in flight. At one token tile they alternate between `cur` and
    // `nxt`, so that no batch is copied from one set of registers to the other (16 moves a
    // batch); with several tiles the copy form measured faster (7B, 16 tokens 104.9 -> 98.4 us a
    // layer, 32 tokens even; H200, NOTES.md v18).
    auto run_batch = [&](const uint4(&w4)[kUnroll], int p) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (p + u < p1) {
          const int b = 2 * (p + u - c0 / 64);  // block within the chunk
          walk.step(acc);
          walk.block(w4[u].x, w4[u].y, x_block(b));
          walk.step(acc);
          walk.block(w4[u].z, w4[u].w, x_block(b + 1));
        }
      }
    };
    auto load_batch = [&](uint4(&w4)[kUnroll], int p) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (p + u < p1) w4[u] = __ldcs(qtile + (p + u) * 32 + lane);
    };
    uint4 nxt[kUnroll] = {};
    if constexpr (NT == 1) {
      for (int p = p0; p < p1; p += 2 * kUnroll) {
        load_batch(nxt, p + kUnroll);
        run_batch(cur, p);
        if (p + kUnroll >= p1) break;
        load_batch(cur, p + 2 * kUnroll);
        run_batch(nxt, p + kUnroll);
      }
    } else {
      for (int p = p0; p < p1; p += kUnroll) {
        load_batch(nxt, p + kUnroll);
        run_batch(cur, p);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) cur[u] = nxt[u];
      }
    }
    if (tail) {
      const uint2 q = __ldcs(
          reinterpret_cast<const uint2*>(w.qweight + int64_t(tile) * 2 * k + pairs * 128) + lane);
      const int b = 2 * (pairs - c0 / 64);
      walk.step(acc);
      walk.block(q.x, q.y, x_block(b));
    }
    walk.flush(acc);
  }

  // A block whose k slice is empty (more cluster ranks than groups: the 0.5B's q|k|v, k = 896,
  // over 8 ranks) staged nothing, so it waits here, before any output is written.
  pdl::grid_dependency_wait();
  // An overlapped launch's successor may launch once every block is past its loop, not at its
  // start: a successor launched early lets the kernel after it launch too, whose blocks then sit
  // on SM slots this grid still needs (AWQ 7B batch 1 2.010 -> 1.950 ms; H200, NOTES.md v21).
  pdl::allow_dependents();
  // C fragment of tile nt: acc[nt][0..1] row j, tokens 8 nt + 2 quad + 0..1; [2..3] row j + 8.
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int tok = nt * 8 + 2 * quad + e;
      if (tok < M) {
        red[(warp * 16 + j) * M + tok] = acc[nt][e];
        red[(warp * 16 + j + 8) * M + tok] = acc[nt][2 + e];
      }
    }
  }
  __syncthreads();
  const int outputs = tiles_per_block * 16 * M;
  const int4_epilogue::BlockTiles bt{tile_block, tiles_per_block, m};
  constexpr bool kKeep = kSliced || Epi::kPairs;  // every sum in `sums` before any is used
  for (int o = threadIdx.x; o < outputs; o += kThreads) {
    const int local = o / (16 * M), row = (o / M) % 16, tok = o % M;
    float v = 0.0f;
    for (int s = 0; s < splits; ++s) v += red[((local * splits + s) * 16 + row) * M + tok];
    if constexpr (kKeep) {
      sums[o] = v;
    } else {
      epi.template put<M>(bt, o, v);
    }
  }
  if constexpr (!kKeep) return;
  if constexpr (!kSliced) {
    __syncthreads();
    if constexpr (Epi::kPairs) {
      epi.template finish<M>(
          bt, [&](int o) { return sums[o]; }, threadIdx.x, kThreads);
    }
    return;
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Each rank adds every rank's slice sums, in rank order, for its share of the outputs; the
  // second sync keeps every block's shared memory alive until the others have read it.
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  auto total = [&](int o) {
    float v = 0.0f;
    for (int p = 0; p < parts; ++p) v += cluster.map_shared_rank(sums, p)[o];
    return v;
  };
  if constexpr (Epi::kPairs) {
    epi.template finish<M>(bt, total, part * kThreads + threadIdx.x, parts * kThreads);
  } else {
    for (int o = part * kThreads + threadIdx.x; o < outputs; o += parts * kThreads) {
      epi.template put<M>(bt, o, total(o));
    }
  }
  cluster.sync();
#endif
}

// What the launch plans need from the current device, asked once per device: the two stages
// of a disaggregated engine may run on GPUs of different kinds.
struct DeviceFacts {
  int device = 0;
  int smem_budget = 0;  // shared memory a block may use for x: kSmemBytes or the opt-in limit
  int sms = 0;
  bool clusters = false;  // sm_90: thread-block clusters with distributed shared memory
};

const DeviceFacts& device_facts() {
  static std::mutex mutex;
  static std::map<int, DeviceFacts> known;  // references stay valid as devices are added
  int device = 0;
  TANDEM_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  auto [it, fresh] = known.try_emplace(device);
  if (fresh) {
    DeviceFacts& f = it->second;
    int optin = 0, major = 0;
    TANDEM_CUDA_CHECK(
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, device));
    TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    f.device = device;
    f.smem_budget = std::min(kSmemBytes, optin);
    f.clusters = major >= 9;
  }
  return it->second;
}

// Shared memory of a launch: x in chunks of `chunk` features, the warps' sums and, sliced or
// with a paired epilogue, the block's sums.
struct SmemPlan {
  int chunk = 0;
  size_t bytes = 0;
};

template <int M>
SmemPlan smem_plan(int smem_budget, int k, bool keep_sums) {
  const int reduce_bytes = kWarps * 16 * M * 4 * (keep_sums ? 2 : 1);
  SmemPlan p;
  p.chunk = std::min(((smem_budget - reduce_bytes) / M - 64) / 2 / 128 * 128, k);
  p.bytes = size_t(M) * x_stride_words(p.chunk) * 4 + size_t(reduce_bytes);
  return p;
}

template <typename Kernel>
void allow_smem(Kernel* kernel, size_t bytes) {
  if (bytes > 48 * 1024) {
    TANDEM_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  }
}

using int4_plan::Plan;

template <int M, bool kGroups128, bool kNormed, typename Epi>
void launch_gemv_m(const Int4Input& x, const Int4Matrix& w, int32_t m, const Epi& epi,
                   cudaStream_t stream, bool pdl) {
  const int tiles = (w.n + 15) / 16;
  const DeviceFacts& dev = device_facts();
  auto* sliced = int4_gemv_kernel<M, true, kGroups128, kNormed, Epi>;
  const SmemPlan sliced_smem = smem_plan<M>(dev.smem_budget, w.k, true);
  auto sliced_slots = [&] {
    allow_smem(sliced, sliced_smem.bytes);  // before the occupancy query, which counts on it
    return dev.sms * resident_blocks_per_sm(reinterpret_cast<const void*>(sliced), kThreads,
                                            sliced_smem.bytes);
  };
  Plan plan;
  if constexpr (std::is_same_v<Epi, int4_epilogue::Rope>) {
    plan = int4_plan::whole_heads_plan(tiles, dev.clusters, sliced_slots);
  } else {
    plan = int4_plan::choose_plan(tiles, w.k, M, kGroups128, dev.sms, dev.clusters, sliced_slots);
  }
  if constexpr (std::is_same_v<Epi, int4_epilogue::SwiGlu>) {
    plan.tiles_per_block = std::max(plan.tiles_per_block, 2);  // gate and up rows together
  }
  const int blocks = (tiles + plan.tiles_per_block - 1) / plan.tiles_per_block * plan.parts;
  if (plan.parts == 1) {
    auto* kernel = int4_gemv_kernel<M, false, kGroups128, kNormed, Epi>;
    const SmemPlan smem = smem_plan<M>(dev.smem_budget, w.k, Epi::kPairs);
    allow_smem(kernel, smem.bytes);
    pdl::launch(pdl, kernel, dim3(unsigned(blocks)), dim3(kThreads), smem.bytes, stream, x, w, m,
                plan.tiles_per_block, 1, smem.chunk, epi);
    return;
  }
  allow_smem(sliced, sliced_smem.bytes);  // a forced plan may not have asked the slots
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned(blocks));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = sliced_smem.bytes;
  config.stream = stream;
  cudaLaunchAttribute attrs[2] = {};
  attrs[0].id = cudaLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = unsigned(plan.parts);
  attrs[0].val.clusterDim.y = 1;
  attrs[0].val.clusterDim.z = 1;
  attrs[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[1].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attrs;
  config.numAttrs = pdl ? 2 : 1;
  TANDEM_CUDA_CHECK(cudaLaunchKernelEx(&config, sliced, x, w, m, plan.tiles_per_block, plan.parts,
                                       sliced_smem.chunk, epi));
}

// The instantiation for m tokens: exact up to one tile of 8; beyond, whole tiles with padded
// rows (16, 24, 32).
template <int M>
constexpr int next_tokens() {
  return M < 8 ? M + 1 : M + 8;
}

// The group-128 path up to 16 tokens: the 7B's int4 Linears a layer at 1 / 2 / 8 / 16 tokens
// 59.1 / 61.0 / 71.8 / 98.7 -> 48.8 / 54.1 / 65.7 / 98.0 us, but at 32 168.4 -> 171.0 (gate|up
// 94.2 -> 99.2; H200, NOTES.md v19). The paired epilogues run on it only (their callers check).
constexpr int kGroups128MaxTokens = 16;

// kMaxM: the most tokens the callers of this epilogue pass (instantiations up to it only).
template <typename Epi, int kMaxM = kInt4GemvMaxTokens, int M = 1>
void dispatch(const Int4Input& x, const Int4Matrix& w, int32_t m, const Epi& epi,
              cudaStream_t stream, bool pdl) {
  if constexpr (M < kMaxM) {
    if (m > M) return dispatch<Epi, kMaxM, next_tokens<M>()>(x, w, m, epi, stream, pdl);
  }
  if constexpr (M <= kGroups128MaxTokens) {
    if (w.group_size == kG128) {
      // A normed input comes with one token and group size 128 only (check_fold, the callers).
      if constexpr (M <= kInt4FoldMaxTokens && Epi::kPairs) {
        if (x.norm.residual != nullptr) {
          return launch_gemv_m<M, true, true>(x, w, m, epi, stream, pdl);
        }
      }
      return launch_gemv_m<M, true, false>(x, w, m, epi, stream, pdl);
    }
  }
  if constexpr (!Epi::kPairs) launch_gemv_m<M, false, false>(x, w, m, epi, stream, pdl);
}

// One thread per qweight word: its 8 weights, rows j and j + 8 of a tile, to bf16.
__global__ void int4_dequant_kernel(Int4Matrix w, __nv_bfloat16* __restrict__ out) {
  const int64_t k = w.k;
  const int64_t words = int64_t((w.n + 15) / 16) * 2 * k;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= words) return;
  const int64_t tile = idx / (2 * k);
  const int64_t o = idx % (2 * k);
  const int64_t pairs = k / 64;
  int64_t b;
  int lane, s;
  if (o < pairs * 128) {
    b = 2 * (o / 128) + (o % 4) / 2;
    lane = int((o % 128) / 4);
    s = int(o % 2);
  } else {
    b = 2 * pairs;
    lane = int((o - pairs * 128) / 2);
    s = int(o % 2);
  }
  const int j = lane / 4;
  const int64_t f0 = b * 32 + s * 16 + 2 * (lane % 4);
  const int64_t group = b * 32 / w.group_size;
  const int64_t groups = k / w.group_size;
  const uint32_t word = w.qweight[idx];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t r = tile * 16 + j + 8 * h;
    if (r >= w.n) continue;
    const int64_t at = (tile * groups + group) * 16 + 2 * j + h;
    const float scale = __half2float(w.scales[at]);
    const int zero = w.zeros[at];
#pragma unroll
    for (int c = 0; c < 2; ++c) {  // features f0 + 8c, f0 + 8c + 1: register m = h + 2c
      const int m = h + 2 * c;
      const int64_t f = f0 + 8 * c;
      const __nv_bfloat16 v0 = __float2bfloat16(float(int((word >> (4 * m)) & 15u) - zero) * scale);
      const __nv_bfloat16 v1 =
          __float2bfloat16(float(int((word >> (4 * (m + 4))) & 15u) - zero) * scale);
      __nv_bfloat16* row = out + r * k;
      if (w.perm == nullptr) {
        *reinterpret_cast<__nv_bfloat162*>(row + f) = __halves2bfloat162(v0, v1);
      } else {
        row[w.perm[f]] = v0;
        row[w.perm[f + 1]] = v1;
      }
    }
  }
}

bool valid(const Int4Matrix& w) {
  return w.n > 0 && w.k > 0 && w.k % 32 == 0 && w.group_size > 0 && w.group_size % 32 == 0 &&
         w.k % w.group_size == 0;
}

}  // namespace

void launch_int4_gemv(const __nv_bfloat16* x, const Int4Matrix& w, int32_t m, void* y, int32_t ldy,
                      bool out_f32, cudaStream_t stream, bool pdl) {
  if (m < 1 || m > kInt4GemvMaxTokens || !valid(w) || ldy < w.n) {
    std::fprintf(stderr, "int4 gemv: unsupported m=%d n=%d k=%d group_size=%d ldy=%d\n", m, w.n,
                 w.k, w.group_size, ldy);
    std::abort();
  }
  const Int4Input in{x};
  if (out_f32) {
    dispatch(in, w, m, int4_epilogue::Store<float>{static_cast<float*>(y), ldy, w.n}, stream, pdl);
  } else {
    dispatch(in, w, m,
             int4_epilogue::Store<__nv_bfloat16>{static_cast<__nv_bfloat16*>(y), ldy, w.n}, stream,
             pdl);
  }
  TANDEM_CUDA_CHECK_LAUNCH();
}

void launch_int4_gemv_add(const __nv_bfloat16* x, const Int4Matrix& w, int32_t m, float* residual,
                          cudaStream_t stream, bool pdl) {
  if (m < 1 || m > kInt4FoldMaxTokens || !valid(w)) {
    std::fprintf(stderr, "int4 gemv add: unsupported m=%d n=%d k=%d group_size=%d\n", m, w.n, w.k,
                 w.group_size);
    std::abort();
  }
  dispatch<int4_epilogue::Store<float, true>, kInt4FoldMaxTokens>(
      Int4Input{x}, w, m, int4_epilogue::Store<float, true>{residual, w.n, w.n}, stream, pdl);
  TANDEM_CUDA_CHECK_LAUNCH();
}

bool int4_swiglu_fuses(const Int4Matrix& w, int32_t m) {
  return valid(w) && w.group_size == kG128 && m >= 1 && m <= kGroups128MaxTokens && w.n % 32 == 0;
}

namespace {

void int4_gemv_swiglu(const Int4Input& x, const Int4Matrix& w, int32_t m, __nv_bfloat16* act,
                      cudaStream_t stream, bool pdl) {
  if (!int4_swiglu_fuses(w, m)) {
    std::fprintf(stderr, "int4 gemv swiglu: unsupported m=%d n=%d k=%d group_size=%d\n", m, w.n,
                 w.k, w.group_size);
    std::abort();
  }
  dispatch(x, w, m, int4_epilogue::SwiGlu{act, w.n / 2}, stream, pdl);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void int4_qkv_rope_gemv(const Int4Input& x, const Int4Matrix& w, int32_t m, const RopeKvTarget& out,
                        cudaStream_t stream, bool pdl) {
  if (!int4_qkv_rope_fuses(w, m, out.s)) {
    std::fprintf(stderr,
                 "int4 q|k|v rope gemv: unsupported m=%d n=%d k=%d group_size=%d head_dim=%d\n", m,
                 w.n, w.k, w.group_size, out.s.head_dim);
    std::abort();
  }
  dispatch(x, w, m, int4_epilogue::Rope{out}, stream, pdl);
  TANDEM_CUDA_CHECK_LAUNCH();
}

// A normed input: one token at most (each block reads its rows' fp32 residual whole), group size
// 128 (the paired epilogues' own condition).
void check_fold(const NormedRows& x, const Int4Matrix& w, int32_t m) {
  if (m > kInt4FoldMaxTokens || x.residual == nullptr || x.weight == nullptr ||
      w.group_size != kG128) {
    std::fprintf(stderr, "int4 gemv over NormedRows: unsupported m=%d group_size=%d\n", m,
                 w.group_size);
    std::abort();
  }
}

}  // namespace

void launch_int4_gemv_swiglu(const __nv_bfloat16* x, const Int4Matrix& w, int32_t m,
                             __nv_bfloat16* act, cudaStream_t stream, bool pdl) {
  int4_gemv_swiglu(Int4Input{x}, w, m, act, stream, pdl);
}

void launch_int4_gemv_swiglu(const NormedRows& x, const Int4Matrix& w, int32_t m,
                             __nv_bfloat16* act, cudaStream_t stream, bool pdl) {
  check_fold(x, w, m);
  int4_gemv_swiglu(Int4Input{nullptr, x}, w, m, act, stream, pdl);
}

bool int4_qkv_rope_fuses(const Int4Matrix& w, int32_t m, const RopeKvShape& s) {
  const int D = s.head_dim;
  return valid(w) && w.group_size == kG128 && m >= 1 && m <= kGroups128MaxTokens &&
         m == s.num_tokens && (D == 16 || D == 32 || D == 64 || D == 128) &&
         w.n == (s.num_heads + 2 * s.num_kv_heads) * D && device_facts().clusters;
}

void launch_int4_qkv_rope_gemv(const __nv_bfloat16* x, const Int4Matrix& w, int32_t m,
                               const RopeKvTarget& out, cudaStream_t stream, bool pdl) {
  int4_qkv_rope_gemv(Int4Input{x}, w, m, out, stream, pdl);
}

void launch_int4_qkv_rope_gemv(const NormedRows& x, const Int4Matrix& w, int32_t m,
                               const RopeKvTarget& out, cudaStream_t stream, bool pdl) {
  check_fold(x, w, m);
  int4_qkv_rope_gemv(Int4Input{nullptr, x}, w, m, out, stream, pdl);
}

void launch_int4_dequant(const Int4Matrix& w, __nv_bfloat16* out, cudaStream_t stream) {
  if (!valid(w)) {
    std::fprintf(stderr, "int4 dequant: unsupported n=%d k=%d group_size=%d\n", w.n, w.k,
                 w.group_size);
    std::abort();
  }
  const int64_t words = int64_t((w.n + 15) / 16) * 2 * w.k;
  const int threads = 256;
  int4_dequant_kernel<<<unsigned((words + threads - 1) / threads), threads, 0, stream>>>(w, out);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
