#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "amax_bits.cuh"
#include "block_reduce.cuh"
#include "cuda_check.cuh"
#include "device_info.cuh"
#include "env_knob.h"
#include "fp8_gemv_mma.cuh"
#include "fp8_linear.cuh"
#include "fp8_quant.cuh"
#include "pdl.cuh"
#include "silu_mul.cuh"

namespace tandem::kernels {
namespace {

using fp8::amax8;
using fp8::bf16_bits_to_float;
using fp8::dynamic_scale;
using fp8::quantize8;

// e4m3 → fp16 is exact (fp16 holds every e4m3 value, subnormals included), fp16 → fp32 too;
// cvt.rn.f16x2.e4m3x2 converts two at once. The low byte is .x.
__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t two_bytes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(two_bytes), __NV_E4M3);
  return __half22float2(__half2(h));
}

// Four e4m3 bytes of a word, low byte first.
__device__ __forceinline__ void e4m3x4_to_float(uint32_t w, float* f) {
  const float2 lo = e4m3x2_to_float2(w & 0xffffu);
  const float2 hi = e4m3x2_to_float2(w >> 16);
  f[0] = lo.x;
  f[1] = lo.y;
  f[2] = hi.x;
  f[3] = hi.y;
}

// ---- activation quantization --------------------------------------------------------------

constexpr int kQuantThreads = 256;

// One scale over a token's whole row (per-token dynamic or static). At decode sizes a row's
// quantization is split over blocks of `slice` 16-byte chunks (blockIdx.x), so the divisions
// of a long row run on several SMs; each block takes the whole row's amax itself, with all its
// loads in flight (kLoads), and re-reads its slice from L1. Measured alone (H200, 7B, NOTES.md
// v21): down's input (18,944 features) 9.0 -> 7.4 us against one block looping one chunk at a
// time; o's (3,584, one block either way) 3.6 -> 4.5 us with 16 loads a thread where two do
// (not measured with two yet). Prefill-sized inputs keep one block a row (slice = the row):
// their rows would not stay in L2 for the other blocks' reads.
constexpr int kQuantSlice = 2 * kQuantThreads;

// kLoads: 16-byte loads a thread in flight for the amax; 2 where a row fits in them (up to 4,096
// features: o's input), 16 otherwise (one round trip up to 32,768).
template <int kLoads>
__global__ void __launch_bounds__(kQuantThreads)
    quantize_rows_kernel(const __nv_bfloat16* __restrict__ x, int32_t k, int32_t groups,
                         const float* __restrict__ static_scale, float scale_ub,
                         uint8_t* __restrict__ xq, float* __restrict__ x_scale, int32_t slice) {
  __shared__ float scratch[32];
  pdl::allow_dependents();  // both no-ops on a plain launch
  pdl::grid_dependency_wait();
  const int64_t t = blockIdx.y;
  const uint4* x8 = reinterpret_cast<const uint4*>(x + t * k);
  const int k8 = k / 8;
  float scale;
  if (static_scale != nullptr) {
    scale = *static_scale;
  } else {
    float a = 0.0f;
    for (int c0 = threadIdx.x; c0 < k8; c0 += kQuantThreads * kLoads) {
      uint4 v[kLoads];
#pragma unroll
      for (int j = 0; j < kLoads; ++j) {
        const int c = c0 + j * kQuantThreads;
        v[j] = c < k8 ? pdl::load_input(x8 + c) : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (int j = 0; j < kLoads; ++j) a = fmaxf(a, amax8(v[j]));
    }
    scale = dynamic_scale(block_max(a, scratch), scale_ub);
  }
  uint2* q8 = reinterpret_cast<uint2*>(xq + t * k);
  const int end = min(k8, int(blockIdx.x + 1) * slice);
  for (int c = blockIdx.x * slice + threadIdx.x; c < end; c += kQuantThreads) {
    q8[c] = quantize8(pdl::load_input(x8 + c), scale);
  }
  if (blockIdx.x == 0) {
    for (int g = threadIdx.x; g < groups; g += kQuantThreads) x_scale[t * groups + g] = scale;
  }
}

// 128-feature groups (block fp8): 16 threads per group, 8 features each; a block covers 16
// groups of one token.
constexpr int kGroupThreads = kFp8Block / 8;
constexpr int kGroupsPerBlock = kQuantThreads / kGroupThreads;

__global__ void __launch_bounds__(kQuantThreads)
    quantize_groups_kernel(const __nv_bfloat16* __restrict__ x, int32_t k, int32_t groups,
                           const float* __restrict__ static_scale, uint8_t* __restrict__ xq,
                           float* __restrict__ x_scale) {
  pdl::allow_dependents();
  pdl::grid_dependency_wait();
  const int64_t t = blockIdx.y;
  const int g = blockIdx.x * kGroupsPerBlock + threadIdx.x / kGroupThreads;
  const int c = g * kGroupThreads + threadIdx.x % kGroupThreads;  // 8-feature chunk
  const bool in = g < groups && c < k / 8;
  const uint4 v = in ? pdl::load_input(reinterpret_cast<const uint4*>(x + t * k) + c)
                     : make_uint4(0u, 0u, 0u, 0u);
  float scale;
  if (static_scale != nullptr) {
    scale = *static_scale;
  } else {
    float a = amax8(v);
#pragma unroll
    for (int o = kGroupThreads / 2; o > 0; o >>= 1)
      a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
    scale = dynamic_scale(a, 0.0f);
  }
  if (!in) return;
  reinterpret_cast<uint2*>(xq + t * k)[c] = quantize8(v, scale);
  if (threadIdx.x % kGroupThreads == 0) x_scale[t * groups + g] = scale;
}

// Per-token scales from an amax its producer already took (launch_fp8_gemv_swiglu's act_amax):
// no pass over the row before the divisions, so a thread converts one 8-feature chunk right
// after the wait, and a long row (down's 18,944 features) spreads over many small blocks.
// Block (0, 0) also zeroes `clear` (every token's kAmaxSpread slots) for a later producer.
constexpr int kAmaxQuantThreads = 128;

__global__ void __launch_bounds__(kAmaxQuantThreads)
    quantize_amax_kernel(const __nv_bfloat16* __restrict__ x, int32_t k,
                         const uint32_t* __restrict__ amax, float scale_ub,
                         uint8_t* __restrict__ xq, float* __restrict__ x_scale,
                         uint32_t* __restrict__ clear) {
  pdl::allow_dependents();
  pdl::grid_dependency_wait();
  const int64_t t = blockIdx.y;
  const int c = blockIdx.x * kAmaxQuantThreads + threadIdx.x;
  // Token t's slots, a lane each (kAmaxSpread == 32), every warp reducing them for itself.
  static_assert(kAmaxSpread == 32, "a lane a slot");
  const uint32_t slot =
      pdl::load_input(amax + t * kAmaxTokenWords + (threadIdx.x & 31) * kAmaxStride);
  const float scale =
      dynamic_scale(__uint_as_float(__reduce_max_sync(0xffffffffu, slot)), scale_ub);
  if (c < k / 8) {
    const uint4 v = pdl::load_input(reinterpret_cast<const uint4*>(x + t * k) + c);
    reinterpret_cast<uint2*>(xq + t * k)[c] = quantize8(v, scale);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) x_scale[t] = scale;
  if (clear != nullptr && blockIdx.x == 0 && t == 0) {
    for (int i = threadIdx.x; i < kFp8GemvMaxTokens * kAmaxSpread; i += kAmaxQuantThreads) {
      clear[(i / kAmaxSpread) * kAmaxTokenWords + (i % kAmaxSpread) * kAmaxStride] = 0u;
    }
  }
}

// ---- decode GEMV ---------------------------------------------------------------------------

constexpr int kGemvWarps = 4;
constexpr int kUnroll = 2;  // 16-byte weight loads in flight per lane and row, from 3 tokens

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Token t's activations for one 16-feature chunk: loaded raw, then four features (word j of
// the weight chunk) at a time as fp32.
struct E4m3Activations {
  const uint8_t* x;  // [m, k] e4m3
  int32_t k;
  using Raw = uint4;
  __device__ __forceinline__ Raw load(int t, int c) const {
    return pdl::load_input(reinterpret_cast<const uint4*>(x + int64_t(t) * k) + c);
  }
  __device__ __forceinline__ static void features(const Raw& v, int j, float* f) {
    e4m3x4_to_float(word(v, j), f);
  }
};

struct Bf16Activations {
  const __nv_bfloat16* x;  // [m, k]
  int32_t k;
  struct Raw {
    uint4 lo, hi;
  };
  __device__ __forceinline__ Raw load(int t, int c) const {
    const uint4* x8 = reinterpret_cast<const uint4*>(x + int64_t(t) * k);
    return Raw{pdl::load_input(x8 + 2 * c), pdl::load_input(x8 + 2 * c + 1)};
  }
  __device__ __forceinline__ static void features(const Raw& v, int j, float* f) {
    const uint4& half = j < 2 ? v.lo : v.hi;
    const uint32_t a = word(half, 2 * (j & 1)), b = word(half, 2 * (j & 1) + 1);
    f[0] = bf16_bits_to_float(a & 0xffffu);
    f[1] = bf16_bits_to_float(a >> 16);
    f[2] = bf16_bits_to_float(b & 0xffffu);
    f[3] = bf16_bits_to_float(b >> 16);
  }
};

struct GemvArgs {
  const float* x_scale;  // [m, groups], or null (W8A16)
  int32_t group;         // activation features per x_scale entry
  int32_t groups;
  Fp8Matrix w;
};

// Which rows a warp computes and where its R finished sums (token t, row r: scaled, fp32) go.
// `unit` numbers the warps of the grid; row() is -1 past the end, and a warp whose row 0 is
// past the end has nothing to do.
template <typename Out>
struct StoreRows {
  static constexpr bool kPairs = false;
  Out* y;  // row t starts at y + t * ldy
  int32_t ldy;
  int32_t n;
  int32_t units(int R) const { return (n + R - 1) / R; }
  __device__ int row(int unit, int R, int r) const {
    const int v = unit * R + r;
    return v < n ? v : -1;
  }
  struct Ahead {};  // nothing to load before the loop
  template <int M, int R>
  __device__ Ahead load_ahead(int, int) const {
    return {};
  }
  template <int M, int R>
  __device__ void finish(int unit, const float (&v)[M][R], int lane, const Ahead&) const {
#pragma unroll
    for (int t = 0; t < M; ++t)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int row = unit * R + r;
        if (lane != t * R + r || row >= n) continue;
        put(t, row, v[t][r]);
      }
  }
  // The tensor-core GEMV (fp8_gemv_mma.cuh): tiles of 16 consecutive rows.
  int32_t tiles() const {
    return (n + fp8_mma::kTileRows - 1) / fp8_mma::kTileRows;
  }
  __device__ int tile_row(int tile, int r) const {
    const int v = tile * fp8_mma::kTileRows + r;
    return v < n ? v : -1;
  }
  __device__ void store_tile(int tile, int g, int t, float lo, float hi) const {
    const int row = tile * fp8_mma::kTileRows + g;
    if (row < n) put(t, row, lo);
    if (row + 8 < n) put(t, row + 8, hi);
  }
  __device__ void put(int t, int row, float v) const {
    if constexpr (sizeof(Out) == 4) {
      y[int64_t(t) * ldy + row] = v;
    } else {
      y[int64_t(t) * ldy + row] = __float2bfloat16_rn(v);
    }
  }
};

// A paired epilogue's tiles for the tensor-core GEMV: tile rows g and g + 8 are pair j's two rows
// (j = 8 · tile + g), so one lane holds both sums of a pair.
struct PairTiles {
  int32_t count;  // pairs
  int32_t tiles() const { return (count + 7) / 8; }
  // Pair j of tile row r (-1 past the end); r >= 8 is the pair's second row.
  __device__ int pair(int tile, int r) const {
    const int j = tile * 8 + (r & 7);
    return j < count ? j : -1;
  }
};

__device__ __forceinline__ float bf16_rounded(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}

// W = gate | up ([2 * width, k]): a warp's rows are R / 2 pairs (gate row j, up row width + j),
// act[t, j] = silu(gate) · up of the bf16-rounded sums, as the GEMV (bf16 out) and then
// launch_silu_mul compute it.
struct SwiGluRows {
  static constexpr bool kPairs = true;
  __nv_bfloat16* act;  // [m, width] out
  int32_t width;
  // [m][kAmaxTokenWords] max |act[t, :]| as fp32 bits (amax_bits.cuh), or null. The CUDA-core
  // form only (finish).
  uint32_t* amax = nullptr;
  int32_t units(int R) const { return (width + R / 2 - 1) / (R / 2); }
  __device__ int row(int unit, int R, int r) const {
    const int j = unit * (R / 2) + r / 2;
    return j < width ? (r % 2 == 0 ? j : width + j) : -1;
  }
  struct Ahead {};  // nothing to load before the loop
  template <int M, int R>
  __device__ Ahead load_ahead(int, int) const {
    return {};
  }
  template <int M, int R>
  __device__ void finish(int unit, const float (&v)[M][R], int lane, const Ahead&) const {
    uint32_t mine[M];  // |act| this lane stored for token t, as bits (0: none)
#pragma unroll
    for (int t = 0; t < M; ++t) {
      mine[t] = 0u;
#pragma unroll
      for (int p = 0; p < R / 2; ++p) {
        const int j = unit * (R / 2) + p;
        if (lane != t * (R / 2) + p || j >= width) continue;
        mine[t] = abs_bits(put(t, j, v[t][2 * p], v[t][2 * p + 1]));
      }
    }
    if (amax == nullptr) return;
#pragma unroll
    for (int t = 0; t < M; ++t) {  // every lane is here: a warp exits whole before its loop
      raise_amax(amax + t * kAmaxTokenWords, mine[t], unit);
    }
  }
  int32_t tiles() const {
    return PairTiles{width}.tiles();
  }
  __device__ int tile_row(int tile, int r) const {
    const int j = PairTiles{width}.pair(tile, r);
    return j < 0 ? -1 : r < 8 ? j : width + j;
  }
  __device__ void store_tile(int tile, int g, int t, float gate, float up) const {
    const int j = PairTiles{width}.pair(tile, g);
    if (j >= 0) put(t, j, gate, up);
  }
  // Stores act[t, j] and returns it (as stored, widened).
  __device__ float put(int t, int j, float gate, float up) const {
    const __nv_bfloat16 a = __float2bfloat16(silu_times(bf16_rounded(gate), bf16_rounded(up)));
    act[int64_t(t) * width + j] = a;
    return __bfloat162float(a);
  }
};

// W = q | k | v ([(H + 2 KVH) * D, k]): a warp's rows are R / 2 pairs (dims i and i + D/2 of one
// head), rotated and stored by rope_store_pair from the bf16-rounded sums, as the GEMV (bf16 out)
// and then launch_rope_kv_write compute it.
struct RopeRows {
  static constexpr bool kPairs = true;
  RopeKvTarget target;
  __device__ __host__ int32_t pairs() const {
    return (target.s.num_heads + 2 * target.s.num_kv_heads) * (target.s.head_dim / 2);
  }
  int32_t units(int R) const { return (pairs() + R / 2 - 1) / (R / 2); }
  __device__ int row(int unit, int R, int r) const {
    const int j = unit * (R / 2) + r / 2, half = target.s.head_dim / 2;
    if (j >= pairs()) return -1;
    return (j / half) * target.s.head_dim + j % half + (r % 2) * half;
  }
  // Lane t (R / 2) + p stores token t's pair p: its bias, angle inputs and slot are loaded before
  // the loop, not after the reduction, where they ended the warp's chain.
  struct Ahead {
    RopePair pair;
  };
  template <int M, int R>
  __device__ Ahead load_ahead(int unit, int lane) const {
    const int t = lane / (R / 2), j = unit * (R / 2) + lane % (R / 2), half = target.s.head_dim / 2;
    Ahead ahead;
    if (t < M && j < pairs()) ahead.pair = rope_pair_loads(target, t, j / half, j % half);
    return ahead;
  }
  template <int M, int R>
  __device__ void finish(int unit, const float (&v)[M][R], int lane, Ahead ahead) const {
    const int half = target.s.head_dim / 2;
#pragma unroll
    for (int t = 0; t < M; ++t)
#pragma unroll
      for (int p = 0; p < R / 2; ++p) {
        const int j = unit * (R / 2) + p;
        if (lane != t * (R / 2) + p || j >= pairs()) continue;
        rope_pair_angle(target, j / half, ahead.pair);
        rope_store_pair_with(target, t, j / half, j % half, bf16_rounded(v[t][2 * p]),
                             bf16_rounded(v[t][2 * p + 1]), ahead.pair);
      }
  }
  int32_t tiles() const {
    return PairTiles{pairs()}.tiles();
  }
  __device__ int tile_row(int tile, int r) const {
    const int j = PairTiles{pairs()}.pair(tile, r), half = target.s.head_dim / 2;
    return j < 0 ? -1 : (j / half) * target.s.head_dim + j % half + (r < 8 ? 0 : half);
  }
  __device__ void store_tile(int tile, int g, int t, float x1, float x2) const {
    const int j = PairTiles{pairs()}.pair(tile, g), half = target.s.head_dim / 2;
    if (j >= 0) rope_store_pair(target, t, j / half, j % half, bf16_rounded(x1), bf16_rounded(x2));
  }
};

// Warp-per-R-rows: each lane converts a 16-feature chunk of every token once and uses it for R
// weight rows, so m tokens cost m / R activation conversions per weight byte. Segmented: the
// scales change along k (128 × 128 weight blocks or 128-feature activation groups), so each
// chunk's partial sum (inside one 128 block, as 16 | 128) is scaled before it is added.
// U: 16-byte weight loads in flight per lane and row. A row's sum runs over the same chunks in
// the same order whatever R, U or the epilogue, so every form gives the same bits.
// kPdl (an overlapped launch, pdl.cuh): the first loads are made before the wait.
template <int M, int R, int U, bool kSegmented, bool kPdl, typename X, typename Epilogue>
__global__ void __launch_bounds__(kGemvWarps * 32)
    fp8_gemv_kernel(X x, GemvArgs a, Epilogue epilogue) {
  constexpr bool kPipelined = M == 1;  // two batches of registers, few at one token
  const int lane = threadIdx.x & 31;
  const int unit = blockIdx.x * kGemvWarps + (threadIdx.x >> 5);
  const Fp8Matrix& w = a.w;
  int rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r) rows[r] = epilogue.row(unit, R, r);
  if (rows[0] < 0) return;  // (an exit counts as the trigger)
#pragma unroll
  for (int r = 0; r < R; ++r) rows[r] = rows[r] < 0 ? rows[0] : rows[r];  // loaded, never stored
  const int k16 = w.k / 16;
  const int block_cols = (w.k + kFp8Block - 1) / kFp8Block;
  const uint4* wr[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    wr[r] = reinterpret_cast<const uint4*>(w.weight + int64_t(rows[r]) * w.k);
  float acc[M][R];
#pragma unroll
  for (int t = 0; t < M; ++t)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[t][r] = 0.0f;

  // One batch: U chunks of each row's weights and (pipelined) of every token's activations;
  // unpipelined, a chunk's activations are loaded where they are used (fewer registers at
  // several tokens).
  struct Batch {
    uint4 w[U][R];
    typename X::Raw x[kPipelined ? U : 1][M];
  };
  auto load_weights = [&](int c0, Batch& b) {
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r)
        b.w[u][r] = c0 + 32 * u < k16 ? __ldcs(wr[r] + c0 + 32 * u) : make_uint4(0u, 0u, 0u, 0u);
  };
  auto load_activations = [&](int c0, Batch& b) {  // pipelined only
    if constexpr (kPipelined) {
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int t = 0; t < M; ++t)
          if (c0 + 32 * u < k16) b.x[u][t] = x.load(t, c0 + 32 * u);
    }
  };
  auto accumulate = [&](int c0, const Batch& b) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + 32 * u;
      if (c >= k16) break;
      float part[M][R];
#pragma unroll
      for (int t = 0; t < M; ++t)
#pragma unroll
        for (int r = 0; r < R; ++r) part[t][r] = 0.0f;
      typename X::Raw xr[M];
#pragma unroll
      for (int t = 0; t < M; ++t) {
        if constexpr (kPipelined) {
          xr[t] = b.x[u][t];
        } else {
          xr[t] = x.load(t, c);
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float xf[M][4], wf[R][4];
#pragma unroll
        for (int t = 0; t < M; ++t) X::features(xr[t], j, xf[t]);
#pragma unroll
        for (int r = 0; r < R; ++r) e4m3x4_to_float(word(b.w[u][r], j), wf[r]);
#pragma unroll
        for (int t = 0; t < M; ++t)
#pragma unroll
          for (int r = 0; r < R; ++r)
#pragma unroll
            for (int e = 0; e < 4; ++e) part[t][r] = fmaf(xf[t][e], wf[r][e], part[t][r]);
      }
      if constexpr (kSegmented) {
        const int feature = c * 16;
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const float ws =
              w.block ? __ldg(w.scale + (rows[r] / kFp8Block) * block_cols + feature / kFp8Block)
                      : __ldg(w.scale + rows[r]);
#pragma unroll
          for (int t = 0; t < M; ++t) {
            const float xs =
                a.x_scale ? pdl::load_input(a.x_scale + t * a.groups + feature / a.group) : 1.0f;
            acc[t][r] = fmaf(part[t][r], xs * ws, acc[t][r]);
          }
        }
      } else {
#pragma unroll
        for (int t = 0; t < M; ++t)
#pragma unroll
          for (int r = 0; r < R; ++r) acc[t][r] += part[t][r];
      }
    }
  };
  // What the epilogue reads besides the sums, loaded with the first weights (the weights' scales,
  // the epilogue's own inputs) or right after the wait (the activations' scales), not after the
  // reduction, where those loads ended the warp's chain.
  float ws[R];
#pragma unroll
  for (int r = 0; r < R; ++r) ws[r] = kSegmented ? 0.0f : __ldg(w.scale + rows[r]);
  const auto ahead = epilogue.template load_ahead<M, R>(unit, lane);
  Batch cur;
  load_weights(lane, cur);
  if constexpr (kPdl) pdl::grid_dependency_wait();  // the activations come from the predecessor
  float xs[M];
#pragma unroll
  for (int t = 0; t < M; ++t)
    xs[t] = !kSegmented && a.x_scale ? pdl::load_input(a.x_scale + t * a.groups) : 1.0f;
  load_activations(lane, cur);
  if constexpr (kPipelined) {
    // The next batch's loads are issued before this batch's math, so a warp always has loads in
    // flight: per 16 weight bytes the loop does many conversions and FMAs, and without this the
    // loads waited for them (and the activations for the weights) every batch.
    for (int c0 = lane; c0 < k16; c0 += 32 * U) {
      Batch next;
      if (c0 + 32 * U < k16) {
        load_weights(c0 + 32 * U, next);
        load_activations(c0 + 32 * U, next);
      }
      accumulate(c0, cur);
      cur = next;
    }
  } else {
    for (int c0 = lane; c0 < k16; c0 += 32 * U) {
      if (c0 != lane) load_weights(c0, cur);
      accumulate(c0, cur);
    }
  }
  // The successor may launch once every block is past its loop, not at its start: this grid
  // holds many waves of small blocks, and a successor launched early let the kernel after it
  // launch too, whose blocks then sat on the SMs this grid's later waves needed (FP8 7B batch 1
  // 2.99 ms against 2.69 with this trigger, 2.77 without overlap; H200, NOTES.md v21).
  if constexpr (kPdl) pdl::allow_dependents();
  float v[M][R];
#pragma unroll
  for (int t = 0; t < M; ++t)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      v[t][r] = warp_sum(acc[t][r]);
      if constexpr (!kSegmented) v[t][r] = v[t][r] * (xs[t] * ws[r]);
    }
  epilogue.template finish<M, R>(unit, v, lane, ahead);
}

// go(segmented, pdl) with both flags as std::bool_constant, for a kernel's template arguments.
template <typename Go>
void with_flags(bool segmented, bool pdl, Go&& go) {
  using T = std::true_type;
  using F = std::false_type;
  if (segmented) {
    pdl ? go(T{}, T{}) : go(T{}, F{});
  } else {
    pdl ? go(F{}, T{}) : go(F{}, F{});
  }
}

template <int M, int R, int U, typename X, typename Epilogue>
void launch_rows_u(X x, const GemvArgs& a, const Epilogue& e, bool segmented, bool pdl,
                   cudaStream_t stream) {
  static_assert(M * R <= 32, "one lane stores each (token, row)");
  const int blocks = (e.units(R) + kGemvWarps - 1) / kGemvWarps;
  auto go = [&](auto seg, auto overlap) {
    pdl::launch(
        overlap.value,
        fp8_gemv_kernel<M, R, U, decltype(seg)::value, decltype(overlap)::value, X, Epilogue>,
        blocks, kGemvWarps * 32, 0, stream, x, a, e);
  };
  with_flags(segmented, pdl, go);
}

// TANDEM_FP8_UNROLL=1|2|4|8 forces the loads in flight at 1-2 tokens, for sweeps. Unset: 0 (the
// rules in launch_rows).
int forced_unroll() {
  static const int u = env_choice("TANDEM_FP8_UNROLL", {1, 2, 4, 8}, 0);
  return u;
}

template <int M, int R, typename X, typename Epilogue>
void launch_rows(X x, const GemvArgs& a, const Epilogue& e, bool segmented, bool pdl,
                 cudaStream_t stream) {
  if constexpr (M <= 2) {
    // Four loads in flight a lane instead of two where it measured faster (H200, 7B shapes,
    // NOTES.md v13): at two tokens, Linears of few rows (q|k|v, o, down: 85.3 -> 80.7 us a
    // layer; FP8 7B batch 2 3.26 -> 3.14 ms), and block-scaled long rows (down_proj, k =
    // 18,944: 31.4 -> 27.0 us at one token). Elsewhere two were as fast or faster (gate|up,
    // channel-scaled rows at one token), and eight were slower everywhere.
    // The paired forms at one token hold two rows a warp: one load a row keeps the warp's two.
    const bool four = (M == 2 && a.w.n <= 8192) || (segmented && a.w.k >= 8192);
    const int rule = Epilogue::kPairs && M == 1 && !four ? 1 : four ? 4 : kUnroll;
    const int u = forced_unroll() != 0 ? forced_unroll() : rule;
    if (u == 8) return launch_rows_u<M, R, 8, X>(x, a, e, segmented, pdl, stream);
    if (u == 4) return launch_rows_u<M, R, 4, X>(x, a, e, segmented, pdl, stream);
    if (u == 1) return launch_rows_u<M, R, 1, X>(x, a, e, segmented, pdl, stream);
  }
  launch_rows_u<M, R, kUnroll, X>(x, a, e, segmented, pdl, stream);
}

// Rows per warp by token count: one row at m = 1 (the most warps in flight), more as the
// activation conversions per weight byte grow with m. The paired epilogues take pairs: one at
// m <= 3, two from 4.
template <int M, bool kPaired>
constexpr int rows_per_warp() {
  if constexpr (kPaired) return M <= 3 ? 2 : 4;
  return M == 1 ? 1 : M <= 3 ? 2 : 4;
}

// ---- the tensor-core GEMV (fp8_gemv_mma.cuh): where it runs, and its launch ----

// Where the tensor-core GEMV runs (W8A8 with whole 128-feature segments, on an FP8 tensor-core
// device): from two tokens, and at one token for segmented scales (block fp8 or per-group
// activations). At one token with one scale a row the CUDA-core GEMV (pipelined) is as fast or
// faster: Qwen2.5-7B's Linears alone, CUDA-core / best tensor-core form, q|k|v 7.6 / 8.2 us, o
// 6.5 / 6.7, gate|up 38.1 / 38.3, down 20.0 / 20.0; block-scaled 9.3 / 8.4, 7.9 / 7.1,
// 48.1 / 37.1, 31.3 / 21.3; at 4 tokens gate|up 53.9 / 39.1 (H200, NOTES.md v23).
// TANDEM_FP8_MMA=0 keeps the CUDA-core GEMV everywhere, 1 takes the tensor cores wherever they
// fit (A/B runs and sweeps).
bool mma_takes_w8a8(int32_t k, int32_t m, bool segmented) {
  static const int forced = env_choice("TANDEM_FP8_MMA", {0, 1}, -1);
  if (forced == 0 || k % fp8_mma::kSegment != 0 || !has_fp8_tensor_cores()) return false;
  return forced == 1 || m >= 2 || segmented;
}

bool mma_takes(const GemvArgs& a, int32_t m, bool segmented) {
  return a.x_scale != nullptr && mma_takes_w8a8(a.w.k, m, segmented);
}

template <int kParts, int kUnroll, typename Epilogue>
void launch_mma_u(const fp8_mma::Args& args, const Epilogue& e, bool segmented, bool pdl,
                  cudaStream_t stream) {
  auto go = [&](auto seg, auto overlap) {
    pdl::launch(overlap.value,
                fp8_mma::gemv_kernel<kParts, kUnroll, decltype(seg)::value,
                                     decltype(overlap)::value, Epilogue>,
                e.tiles(), kParts * 32, 0, stream, args, e);
  };
  with_flags(segmented, pdl, go);
}

// Warps a tile: 8 where 4-warp tiles would leave SMs short of blocks (fewer than two tiles an
// SM: the 7B's o and down, 224 tiles; o 6.7 us against 7.3 with 4, down 19.8 against 22.3), else
// 4 (q|k|v 8.1 against 9.3, gate|up 38.5 against 39.1). Segments a batch: 2 with one scale a row,
// 1 for segmented scales, whose per-segment scale loads take the registers (block-scaled gate|up
// 37.6 us at one against 41.1 at two; H200, two tokens, NOTES.md v23).
// TANDEM_FP8_MMA_PARTS=4|8 and TANDEM_FP8_MMA_UNROLL=1|2 force either, for sweeps.
template <typename Epilogue>
void launch_mma(const E4m3Activations& x, const GemvArgs& a, const Epilogue& e, int32_t m,
                bool segmented, bool pdl, cudaStream_t stream) {
  static const int forced_parts = env_choice("TANDEM_FP8_MMA_PARTS", {4, 8}, 0);
  static const int forced_segments = env_choice("TANDEM_FP8_MMA_UNROLL", {1, 2}, 0);
  const int parts = forced_parts != 0 ? forced_parts : e.tiles() < 2 * multiprocessors() ? 8 : 4;
  const int unroll = forced_segments != 0 ? forced_segments : segmented ? 1 : 2;
  const fp8_mma::Args args{x.x, a.x_scale, a.groups, m, a.w};
  if (parts == 4) {
    unroll == 1 ? launch_mma_u<4, 1>(args, e, segmented, pdl, stream)
                : launch_mma_u<4, 2>(args, e, segmented, pdl, stream);
  } else {
    unroll == 1 ? launch_mma_u<8, 1>(args, e, segmented, pdl, stream)
                : launch_mma_u<8, 2>(args, e, segmented, pdl, stream);
  }
  TANDEM_CUDA_CHECK_LAUNCH();
}

template <typename X, typename Epilogue, int M = 1>
void dispatch_gemv(X x, const GemvArgs& a, const Epilogue& e, int32_t m, bool segmented, bool pdl,
                   cudaStream_t stream) {
  if constexpr (M == 1 && std::is_same_v<X, E4m3Activations>) {
    if (mma_takes(a, m, segmented)) return launch_mma(x, a, e, m, segmented, pdl, stream);
  }
  if constexpr (M < kFp8GemvMaxTokens) {
    if (m != M) return dispatch_gemv<X, Epilogue, M + 1>(x, a, e, m, segmented, pdl, stream);
  }
  launch_rows<M, rows_per_warp<M, Epilogue::kPairs>()>(x, a, e, segmented, pdl, stream);
  TANDEM_CUDA_CHECK_LAUNCH();
}

template <typename X>
void gemv(X x, const GemvArgs& a, int32_t m, bool segmented, void* y, int32_t ldy, bool out_f32,
          bool pdl, cudaStream_t stream) {
  if (out_f32) {
    const StoreRows<float> e{static_cast<float*>(y), ldy, a.w.n};
    dispatch_gemv(x, a, e, m, segmented, pdl, stream);
  } else {
    const StoreRows<__nv_bfloat16> e{static_cast<__nv_bfloat16*>(y), ldy, a.w.n};
    dispatch_gemv(x, a, e, m, segmented, pdl, stream);
  }
}

[[noreturn]] void refuse(const char* what, int32_t m, int32_t k, int32_t group) {
  std::fprintf(stderr, "%s: unsupported m=%d k=%d group=%d\n", what, m, k, group);
  std::abort();
}

// ---- dequantization ------------------------------------------------------------------------

__global__ void dequant_kernel(Fp8Matrix w, __nv_bfloat16* __restrict__ out) {
  const int k16 = w.k / 16;
  const int block_cols = (w.k + kFp8Block - 1) / kFp8Block;
  const int64_t chunks = int64_t(w.n) * k16;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < chunks;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int row = int(i / k16), c = int(i % k16);
    const float s =
        w.block ? w.scale[(row / kFp8Block) * block_cols + c * 16 / kFp8Block] : w.scale[row];
    const uint4 v = __ldcs(reinterpret_cast<const uint4*>(w.weight) + i);
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    uint32_t packed[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float f[4];
      e4m3x4_to_float(words[j], f);
      // One fp32 product rounded once to bf16: dequant_rows × f32_to_bf16 on the host.
#pragma unroll
      for (int e = 0; e < 4; e += 2) {
        const __nv_bfloat162 b = __floats2bfloat162_rn(f[e] * s, f[e + 1] * s);
        packed[2 * j + e / 2] = *reinterpret_cast<const uint32_t*>(&b);
      }
    }
    uint4* dst = reinterpret_cast<uint4*>(out) + 2 * i;
    dst[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    dst[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
  }
}

}  // namespace

void launch_fp8_quantize(const __nv_bfloat16* x, int32_t m, int32_t k, int32_t group,
                         const float* static_scale, float scale_ub, uint8_t* xq, float* x_scale,
                         cudaStream_t stream, bool pdl) {
  if (m == 0) return;
  if (k % 16 != 0 || group <= 0 || (group < k && group != kFp8Block)) {
    refuse("fp8_quantize", m, k, group);
  }
  const int32_t groups = (k + group - 1) / group;
  if (group >= k || static_scale != nullptr) {
    const int32_t slice = m <= kFp8GemvMaxTokens ? kQuantSlice : k / 8;
    const dim3 grid((k / 8 + slice - 1) / slice, m);
    auto* kernel = k / 8 <= 2 * kQuantThreads ? quantize_rows_kernel<2> : quantize_rows_kernel<16>;
    pdl::launch(pdl, kernel, grid, kQuantThreads, 0, stream, x, k, groups, static_scale, scale_ub,
                xq, x_scale, slice);
  } else {
    // fp8_activations.cc applies no upper bound to per-token-group scales.
    const dim3 grid((groups + kGroupsPerBlock - 1) / kGroupsPerBlock, m);
    pdl::launch(pdl, quantize_groups_kernel, grid, kQuantThreads, 0, stream, x, k, groups,
                static_cast<const float*>(nullptr), xq, x_scale);
  }
  TANDEM_CUDA_CHECK_LAUNCH();
}

// The W8A8 decode GEMV's arguments after the checks every form shares.
GemvArgs w8a8_args(const char* what, const float* x_scale, int32_t group, const Fp8Matrix& w,
                   int32_t m) {
  if (m < 1 || m > kFp8GemvMaxTokens || w.k % 16 != 0 || group <= 0 ||
      (group < w.k && group != kFp8Block)) {
    refuse(what, m, w.k, group);
  }
  return GemvArgs{x_scale, group, (w.k + group - 1) / group, w};
}

void launch_fp8_gemv(const uint8_t* xq, const float* x_scale, int32_t group, const Fp8Matrix& w,
                     int32_t m, void* y, int32_t ldy, bool out_f32, cudaStream_t stream, bool pdl) {
  const GemvArgs a = w8a8_args("fp8_gemv", x_scale, group, w, m);
  gemv(E4m3Activations{xq, w.k}, a, m, w.block || group < w.k, y, ldy, out_f32, pdl, stream);
}

void launch_fp8_gemv_swiglu(const uint8_t* xq, const float* x_scale, int32_t group,
                            const Fp8Matrix& w, int32_t m, __nv_bfloat16* act, cudaStream_t stream,
                            bool pdl, uint32_t* act_amax) {
  const GemvArgs a = w8a8_args("fp8_gemv_swiglu", x_scale, group, w, m);
  if (w.n % 2 != 0) refuse("fp8_gemv_swiglu: odd rows", m, w.k, group);
  if (act_amax != nullptr && !fp8_swiglu_gives_amax(w, m, group)) {
    refuse("fp8_gemv_swiglu: act_amax", m, w.k, group);
  }
  dispatch_gemv(E4m3Activations{xq, w.k}, a, SwiGluRows{act, w.n / 2, act_amax}, m,
                w.block || group < w.k, pdl, stream);
}

bool fp8_swiglu_gives_amax(const Fp8Matrix& w, int32_t m, int32_t group) {
  return m >= 1 && m <= kFp8GemvMaxTokens && group > 0 &&
         !mma_takes_w8a8(w.k, m, w.block || group < w.k);
}

void launch_fp8_quantize_amax(const __nv_bfloat16* x, int32_t m, int32_t k, const uint32_t* amax,
                              float scale_ub, uint8_t* xq, float* x_scale, uint32_t* clear,
                              cudaStream_t stream, bool pdl) {
  if (m == 0) return;
  if (m > kFp8GemvMaxTokens || k % 16 != 0) refuse("fp8_quantize_amax", m, k, k);
  const dim3 grid((k / 8 + kAmaxQuantThreads - 1) / kAmaxQuantThreads, m);
  pdl::launch(pdl, quantize_amax_kernel, grid, kAmaxQuantThreads, 0, stream, x, k, amax, scale_ub,
              xq, x_scale, clear);
  TANDEM_CUDA_CHECK_LAUNCH();
}

bool fp8_qkv_rope_fuses(const Fp8Matrix& w, int32_t m, const RopeKvShape& s) {
  return m >= 1 && m <= kFp8GemvMaxTokens && s.num_tokens == m && s.head_dim % 2 == 0 &&
         w.n == (s.num_heads + 2 * s.num_kv_heads) * s.head_dim;
}

void launch_fp8_qkv_rope_gemv(const uint8_t* xq, const float* x_scale, int32_t group,
                              const Fp8Matrix& w, int32_t m, const RopeKvTarget& out,
                              cudaStream_t stream, bool pdl) {
  const GemvArgs a = w8a8_args("fp8_qkv_rope_gemv", x_scale, group, w, m);
  if (!fp8_qkv_rope_fuses(w, m, out.s)) refuse("fp8_qkv_rope_gemv: shape", m, w.k, group);
  dispatch_gemv(E4m3Activations{xq, w.k}, a, RopeRows{out}, m, w.block || group < w.k, pdl, stream);
}

void launch_fp8_gemv_a16(const __nv_bfloat16* x, const Fp8Matrix& w, int32_t m, void* y,
                         int32_t ldy, bool out_f32, cudaStream_t stream) {
  if (m < 1 || m > kFp8GemvMaxTokens || w.k % 16 != 0) refuse("fp8_gemv_a16", m, w.k, 0);
  const GemvArgs a{nullptr, w.k, 1, w};
  gemv(Bf16Activations{x, w.k}, a, m, w.block, y, ldy, out_f32, /*pdl=*/false, stream);
}

void launch_fp8_dequant(const Fp8Matrix& w, __nv_bfloat16* out, cudaStream_t stream) {
  if (w.k % 16 != 0) refuse("fp8_dequant", 0, w.k, 0);
  const int64_t chunks = int64_t(w.n) * (w.k / 16);
  if (chunks == 0) return;
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((chunks + threads - 1) / threads, 132 * 16);
  dequant_kernel<<<int(blocks), threads, 0, stream>>>(w, out);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
