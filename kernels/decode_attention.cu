#include "decode_attention.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "amax_bits.cuh"
#include "cuda_check.cuh"
#include "device_info.cuh"
#include "env_knob.h"
#include "mma_sm80.cuh"
#include "pdl.cuh"

namespace tandem::kernels {
namespace {

constexpr int kThreads = 128;  // one key per thread per tile; output dims d and d + 128
constexpr int kTile = kThreads;
constexpr int kG = kDecodeMaxGroup;
constexpr int kMaxD = 256;

// Reduces kG values per thread across the block (max or sum); every thread gets the results.
template <bool kMax>
__device__ __forceinline__ void block_reduce_group(float (&v)[kG], int G, float (*scratch)[kG]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int g = 0; g < kG; ++g) {
    if (g >= G) break;
    float x = v[g];
    for (int o = 16; o > 0; o >>= 1) {
      const float y = __shfl_xor_sync(0xffffffffu, x, o);
      x = kMax ? fmaxf(x, y) : x + y;
    }
    if (lane == 0) scratch[warp][g] = x;
  }
  __syncthreads();
#pragma unroll
  for (int g = 0; g < kG; ++g) {
    if (g >= G) break;
    float x = scratch[0][g];
    for (int w = 1; w < kThreads / 32; ++w) x = kMax ? fmaxf(x, scratch[w][g]) : x + scratch[w][g];
    v[g] = x;
  }
  __syncthreads();
}

// Partial layout per (token, head, split): [D] unnormalised output, then m, then l.
__global__ void __launch_bounds__(kThreads) decode_attention_kernel(
    const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,
    const __nv_bfloat16* __restrict__ v_cache, const int32_t* __restrict__ token_seq,
    const int32_t* __restrict__ positions, const int32_t* __restrict__ seq_page_start,
    const int32_t* __restrict__ page_ids, PagedAttentionShape s, float* __restrict__ partials) {
  __shared__ __align__(16) float q_s[kG][kMaxD];
  __shared__ float p_s[kG][kTile];
  __shared__ const __nv_bfloat16* v_row_s[kTile];
  __shared__ float scratch[kThreads / 32][kG];

  const int t = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z, splits = gridDim.z;
  const int D = s.head_dim, G = s.num_heads / s.num_kv_heads;
  const int num_keys = positions[t] + 1;
  const int chunk = (num_keys + splits - 1) / splits;
  const int begin = split * chunk, end = min(num_keys, begin + chunk);
  const int32_t* pages = page_ids + seq_page_start[token_seq[t]];
  const int64_t head_stride = int64_t(s.page_size) * D;

  for (int i = threadIdx.x; i < G * D; i += kThreads) {
    const int g = i / D, d = i % D;
    q_s[g][d] = __bfloat162float(q[(int64_t(t) * s.num_heads + kvh * G + g) * D + d]);
  }
  __syncthreads();

  float m[kG], l[kG], acc0[kG], acc1[kG];
#pragma unroll
  for (int g = 0; g < kG; ++g) m[g] = -INFINITY, l[g] = 0.0f, acc0[g] = 0.0f, acc1[g] = 0.0f;
  const int d0 = threadIdx.x, d1 = threadIdx.x + kThreads;

  for (int tile = begin; tile < end; tile += kTile) {
    const int key = tile + threadIdx.x;
    float score[kG];
#pragma unroll
    for (int g = 0; g < kG; ++g) score[g] = -INFINITY;
    if (key < end) {
      const int64_t page = pages[key / s.page_size];
      const int64_t base =
          (page * s.num_kv_heads + kvh) * head_stride + int64_t(key % s.page_size) * D;
      const uint4* k4 = reinterpret_cast<const uint4*>(k_cache + base);
      float dot[kG];
#pragma unroll
      for (int g = 0; g < kG; ++g) dot[g] = 0.0f;
#pragma unroll 4
      for (int c = 0; c < D / 8; ++c) {
        const uint4 raw = k4[c];
        const __nv_bfloat162* k2 = reinterpret_cast<const __nv_bfloat162*>(&raw);
        float kf[8];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 f = __bfloat1622float2(k2[j]);
          kf[2 * j] = f.x;
          kf[2 * j + 1] = f.y;
        }
#pragma unroll
        for (int g = 0; g < kG; ++g) {
          if (g >= G) break;
#pragma unroll
          for (int j = 0; j < 8; ++j) dot[g] += q_s[g][c * 8 + j] * kf[j];
        }
      }
#pragma unroll
      for (int g = 0; g < kG; ++g) score[g] = dot[g] * s.scale;
      v_row_s[threadIdx.x] = v_cache + base;
    }
    float tile_max[kG];
#pragma unroll
    for (int g = 0; g < kG; ++g) tile_max[g] = score[g];
    block_reduce_group<true>(tile_max, G, scratch);
    float p[kG], corr[kG];
#pragma unroll
    for (int g = 0; g < kG; ++g) {
      if (g >= G) break;
      const float m_new = fmaxf(m[g], tile_max[g]);
      p[g] = key < end ? __expf(score[g] - m_new) : 0.0f;
      p_s[g][threadIdx.x] = p[g];
      corr[g] = __expf(m[g] - m_new);  // m == -inf on the first tile: 0
      m[g] = m_new;
    }
    block_reduce_group<false>(p, G, scratch);  // its barriers publish p_s and v_row_s
    const int n = min(kTile, end - tile);
#pragma unroll
    for (int g = 0; g < kG; ++g) {
      if (g >= G) break;
      l[g] = l[g] * corr[g] + p[g];
      acc0[g] *= corr[g];
      acc1[g] *= corr[g];
    }
    for (int j = 0; j < n; ++j) {
      const __nv_bfloat16* vr = v_row_s[j];
      const float v0 = d0 < D ? __bfloat162float(vr[d0]) : 0.0f;
      const float v1 = d1 < D ? __bfloat162float(vr[d1]) : 0.0f;
#pragma unroll
      for (int g = 0; g < kG; ++g) {
        if (g >= G) break;
        acc0[g] += p_s[g][j] * v0;
        acc1[g] += p_s[g][j] * v1;
      }
    }
    __syncthreads();  // p_s / v_row_s are rewritten by the next tile
  }
#pragma unroll
  for (int g = 0; g < kG; ++g) {
    if (g >= G) break;
    const int h = kvh * G + g;
    float* part = partials + ((int64_t(t) * s.num_heads + h) * splits + split) * (D + 2);
    if (d0 < D) part[d0] = acc0[g];
    if (d1 < D) part[d1] = acc1[g];
    if (threadIdx.x == 0) {
      part[D] = m[g];
      part[D + 1] = l[g];
    }
  }
}

// The same partials on the tensor cores (head_dim % 16 == 0, <= 128). Each warp takes one slice
// of the keys: the group's query heads are the 16 rows of an mma tile (rows past the group are
// zero), keys go in tiles of 32 through shared memory, and scores, probabilities and the output
// stay in registers as in prefill_attention.cu. The scalar kernel above spends G x D FMAs per
// key on one thread, which made decode compute-bound (NOTES.md v4); here a key costs two mma
// columns. A block's warps take consecutive slices and merge their states in shared memory, so
// up to kDecodeMaxWarps slices need no merge launch (one launch at short contexts).
constexpr int kTcKeys = 32;
constexpr int kTcPad = 8;

template <int D>
union TcWarpSmem {
  struct {
    // Each tile's K and V rows arrive by cp.async.
    __nv_bfloat16 k[kTcKeys][D + kTcPad];
    __nv_bfloat16 v[kTcKeys][D + kTcPad];
  } tile;
  struct {
    float o[kG][D];  // unnormalised output of the warp's slice
    float m[kG], l[kG];
    // Warp 0's only: each warp's scale in the block's merge, and the block's m and l.
    float f[kDecodeMaxWarps][kG];
    float mb[kG], lb[kG];
  } state;
};

// Warps per block: up to kDecodeMaxWarps, fewer where the device's shared memory per block
// (sm_86/89: 99 KB) holds fewer warps' tiles.
template <int D>
int32_t tc_max_warps() {
  int device = 0, optin = 0;
  TANDEM_CUDA_CHECK(cudaGetDevice(&device));
  TANDEM_CUDA_CHECK(
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return std::clamp<int32_t>(optin / int32_t(sizeof(TcWarpSmem<D>)), 1, kDecodeMaxWarps);
}
int32_t tc_max_warps(int32_t head_dim) {
  return head_dim == 64 ? tc_max_warps<64>() : tc_max_warps<128>();
}
inline int32_t tc_splits(int32_t num_slices, int32_t max_warps) {
  return (num_slices + max_warps - 1) / max_warps;
}
inline int32_t tc_warps(int32_t num_slices, int32_t max_warps) {
  const int32_t splits = tc_splits(num_slices, max_warps);
  return (num_slices + splits - 1) / splits;
}

// cp_async16 where `pred`, as one predicated instruction: a branch around each copy split the
// early kernel's unrolled copy loops into a block a copy (more instructions, and 169 registers
// against 164 at head size 128).
__device__ __forceinline__ void cp_async16_if(bool pred, void* smem, const void* gmem,
                                              int src_bytes) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %3, 0;\n"
      "@p cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
      "}\n" ::"r"(smem_addr(smem)),
      "l"(gmem), "r"(src_bytes), "r"(int(pred)));
}

// kEarly (an overlapped launch, pdl.cuh): the kernel starts while q and this step's K/V are
// still being written. The step's metadata (copied before its first kernel) and the keys before
// the sequence's first query token (written by earlier forwards) need no wait, so the first
// tile's other K/V rows are in flight before it, and q and this step's rows ("fresh": one a
// sequence in a decode batch, up to a verify's k + 1) come after it. A plain launch reads
// everything in the order below the wait (see launch_tc for where the early start runs).
template <int D, bool kEarly>
__global__ void __launch_bounds__(32 * kDecodeMaxWarps) decode_attention_tc_kernel(
    const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,
    const __nv_bfloat16* __restrict__ v_cache, const int32_t* __restrict__ token_seq,
    const int32_t* __restrict__ positions, const int32_t* __restrict__ seq_page_start,
    const int32_t* __restrict__ page_ids, PagedAttentionShape s, float* __restrict__ partials,
    __nv_bfloat16* __restrict__ out, bool warp_merge, uint32_t* __restrict__ out_amax) {
  constexpr int D8 = D / 8, KC = D / 16, NT = D / 8, ST = kTcKeys / 8;
  constexpr int LPR = D8, RPI = 32 / LPR, NI = kTcKeys / RPI;  // K/V rows: lanes, rows, copies
  if constexpr (!kEarly) pdl::grid_dependency_wait();
  extern __shared__ __align__(128) unsigned char smem_raw[];
  TcWarpSmem<D>* warps_sm = reinterpret_cast<TcWarpSmem<D>*>(smem_raw);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, num_warps = blockDim.x >> 5;
  const int g = lane >> 2, tig = lane & 3;
  TcWarpSmem<D>& sm = warps_sm[warp];
  const int t = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z, splits = gridDim.z;
  const int G = s.num_heads / s.num_kv_heads;
  const int num_keys = positions[t] + 1;
  const int32_t seq = token_seq[t];
  // The first key this step writes: the tokens of a sequence are consecutive in the batch at
  // consecutive positions (ForwardBatch), so the run of lanes u = t - lane of the same sequence
  // counts them. More than 32 (a prefill-sized chunk) counts every key as fresh.
  int first_new = num_keys - 1;
  if constexpr (kEarly) {
    const int u = t - lane;
    const unsigned run = __ballot_sync(0xffffffffu, u >= 0 && token_seq[u] == seq);
    first_new = run == 0xffffffffu ? 0 : num_keys - (__ffs(~run) - 1);
  }
  const int slices = splits * num_warps, slice = split * num_warps + warp;
  const int chunk = (num_keys + slices - 1) / slices;
  const int begin = slice * chunk, end = min(num_keys, begin + chunk);
  const int32_t* pages = page_ids + seq_page_start[seq];

  // Tile kt's K and V rows: lane j looks up key kt + j's page once for both; then each copy
  // instruction covers RPI whole rows (LPR lanes of 16 bytes per row, the row shuffled from its
  // key's lane), so a warp reads 2-4 contiguous rows per instruction instead of 32 rows'
  // scattered 16-byte pieces. The copies go straight to shared memory (no registers held, so
  // more warps fit an SM). `fresh_r`: kEarly's first tile leaves rows r >= fresh_r out (this
  // step's keys, copied after the wait); kTcKeys for none. It runs in two places a matrix (the
  // first tile, then the next tile's inside the loop); at head size 128 six unrolled copies of it
  // made the early kernel's code twice the plain one's. Rows are indexed in whole rows of D
  // elements (a layer's cache holds far fewer than 2^31), so a copy costs one 32-bit shuffle and
  // one wide multiply-add on a per-lane base pointer. With 64-bit element offsets the address
  // arithmetic was a quarter of the kernel's instructions (ncu, Qwen2.5-7B batch 64 at 1k: 10.9M
  // instructions a layer with them, 8.2M without; the kernel 43.8 -> 42.9 us; NOTES.md v27). What
  // bounds the kernel there is the K/V stream itself (~3.2 TB/s): with the mma work left out it
  // still took 41.9 us.
  auto tile_row = [&](int kt) -> int {
    const int key = kt + lane;
    return key < end
               ? (pages[key / s.page_size] * s.num_kv_heads + kvh) * s.page_size + key % s.page_size
               : -1;
  };
  const int lane_col = (lane % LPR) * 8;
  auto copy_rows = [&](int my_row, __nv_bfloat16(*rows)[D + kTcPad], const __nv_bfloat16* cache,
                       int fresh_r) {
    const char* lane_cache = reinterpret_cast<const char*>(cache + lane_col);
#pragma unroll
    for (int i = 0; i < NI; ++i) {
      const int r = i * RPI + lane / LPR;
      const int row = __shfl_sync(0xffffffffu, my_row, r);
      const char* src = lane_cache + int64_t(max(row, 0)) * (D * 2);  // one wide multiply-add
      if constexpr (kEarly) {
        cp_async16_if(r < fresh_r || row < 0, &rows[r][lane_col], src, row >= 0 ? 16 : 0);
      } else {
        cp_async16(&rows[r][lane_col], src, row >= 0 ? 16 : 0);  // zeros past the end: 0 * V
      }
    }
  };
  uint32_t qa[KC][4];
  // kEarly: rows fresh_r on of the first tile are this step's keys, copied apart after the wait.
  const int fresh_r = kEarly ? first_new - begin : kTcKeys;
  const bool fresh_first = kEarly && begin < end && first_new < min(end, begin + kTcKeys);
  if constexpr (kEarly) {
    if (begin >= end) pdl::grid_dependency_wait();  // an empty slice still writes its state
  } else {
    // The query rows (the group's heads, G <= 8) as an mma A operand whose rows 8-15 are zero,
    // staged through the tile's shared memory: every load in flight before the first store, then
    // one ldmatrix a k-step. Only rows 0-7 of the scores and the output are kept
    // (mma_bf16_rows0_7).
    constexpr int QI = 8 * D8 / 32;
    uint4 qv[QI];
#pragma unroll
    for (int it = 0; it < QI; ++it) {
      const int r = (lane + 32 * it) / D8, c = ((lane + 32 * it) % D8) * 8;
      qv[it] = r < G ? pdl::load_input(reinterpret_cast<const uint4*>(
                           q + (int64_t(t) * s.num_heads + kvh * G + r) * D + c))
                     : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int it = 0; it < QI; ++it) {
      const int r = (lane + 32 * it) / D8, c = ((lane + 32 * it) % D8) * 8;
      *reinterpret_cast<uint4*>(&sm.tile.k[r][c]) = qv[it];
    }
    __syncwarp();
#pragma unroll
    for (int kc = 0; kc < KC; ++kc) {
      uint32_t r[2];
      ldmatrix_x2(r, &sm.tile.k[lane & 7][kc * 16 + ((lane >> 3) & 1) * 8]);
      qa[kc][0] = r[0];
      qa[kc][1] = 0u;
      qa[kc][2] = r[1];
      qa[kc][3] = 0u;
    }
  }
  // Row g is query head g of the group.
  float m = -INFINITY, l = 0.0f;
  float o[NT][2];
#pragma unroll
  for (int n = 0; n < NT; ++n) o[n][0] = o[n][1] = 0.0f;

  // The tiles stream through the warp's one K and one V buffer as a pipeline: tile kt + 32's K
  // rows are copied as soon as tile kt's scores have read the K buffer (during its softmax, V
  // wait and output mma), and its V rows as soon as the output has read the V buffer; the next
  // tile's page ids are looked up before the current tile's wait. So a warp with several tiles
  // has copies in flight the whole loop, not one tile's at a time.
  int my_row = tile_row(begin);
  {
    __syncwarp();  // the query rows' ldmatrix reads are done
    if (begin < end) {
      copy_rows(my_row, sm.tile.k, k_cache, fresh_r);
      cp_async_commit();
      copy_rows(my_row, sm.tile.v, v_cache, fresh_r);
      cp_async_commit();
    }
    if constexpr (kEarly) {
      if (begin < end) {
        pdl::grid_dependency_wait();
        // The query rows as above, loaded straight into the fragment registers (row g: k-steps'
        // features 2 tig, 2 tig + 1 and 8 more), since the tile's shared memory is taken.
        const __nv_bfloat16* qrow = q + (int64_t(t) * s.num_heads + kvh * G + g) * D + 2 * tig;
#pragma unroll
        for (int kc = 0; kc < KC; ++kc) {
          qa[kc][0] =
              g < G ? pdl::load_input(reinterpret_cast<const uint32_t*>(qrow + kc * 16)) : 0u;
          qa[kc][1] = 0u;
          qa[kc][2] =
              g < G ? pdl::load_input(reinterpret_cast<const uint32_t*>(qrow + kc * 16 + 8)) : 0u;
          qa[kc][3] = 0u;
        }
        if (fresh_first) {  // the copies left out above, then the whole tile
#pragma unroll
          for (int i = 0; i < NI; ++i) {
            const int r = i * RPI + lane / LPR;
            const int row = __shfl_sync(0xffffffffu, my_row, r);
            if (r >= fresh_r && row >= 0) {
              const int64_t at = int64_t(row) * D + lane_col;
              cp_async16(&sm.tile.k[r][lane_col], k_cache + at, 16);
              cp_async16(&sm.tile.v[r][lane_col], v_cache + at, 16);
            }
          }
          cp_async_commit();
          cp_async_wait<0>();
        }
      }
    }
  }

  // The successor (the o projection) may launch once every block is past its wait, not at
  // their start: the q|k|v GEMV before lets this kernel launch at its start (a grid of one
  // wave, gemv_warp::lead_trigger), and an o launched then too put its first weight loads
  // beside q|k|v's (7B batch 1 3.595-3.596 ms against 3.623-3.626 with the trigger at the
  // start; H200, NOTES.md v37).
  pdl::allow_dependents();
  for (int kt = begin; kt < end; kt += kTcKeys) {
    const bool more = kt + kTcKeys < end;
    if (more) my_row = tile_row(kt + kTcKeys);  // in flight during the K wait and the scores
    cp_async_wait<1>();  // K (the groups in flight: this tile's K, then its V)
    __syncwarp();
    float sc[ST][2];
#pragma unroll
    for (int j = 0; j < ST; ++j) sc[j][0] = sc[j][1] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < KC; ++kc) {
#pragma unroll
      for (int j = 0; j < ST; j += 2) {
        uint32_t b[4];
        ldmatrix_x4(
            b, &sm.tile.k[j * 8 + (lane & 7) + (lane >> 4) * 8][kc * 16 + ((lane >> 3) & 1) * 8]);
        mma_bf16_rows0_7(sc[j], qa[kc], b[0], b[1]);
        mma_bf16_rows0_7(sc[j + 1], qa[kc], b[2], b[3]);
      }
    }
    __syncwarp();  // every lane's K reads are done before the next tile's copies overwrite them
    if (more) copy_rows(my_row, sm.tile.k, k_cache, kTcKeys);
    cp_async_commit();  // possibly empty: the group count stays the same every tile
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < ST; ++j) {
      const int key = kt + j * 8 + tig * 2;
      sc[j][0] = key < end ? sc[j][0] * s.scale : -INFINITY;
      sc[j][1] = key + 1 < end ? sc[j][1] * s.scale : -INFINITY;
      mx = fmaxf(mx, fmaxf(sc[j][0], sc[j][1]));
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m, mx);      // key kt < end: finite
    const float corr = __expf(m - m_new);  // m == -inf on the first tile: 0
    m = m_new;
    l *= corr;
#pragma unroll
    for (int n = 0; n < NT; ++n) o[n][0] *= corr, o[n][1] *= corr;
    uint32_t pa[ST / 2][4];
#pragma unroll
    for (int j = 0; j < ST; ++j) {
      const float p0 = __expf(sc[j][0] - m_new), p1 = __expf(sc[j][1] - m_new);
      l += p0 + p1;
      pa[j / 2][(j & 1) * 2 + 0] = pack_bf16(p0, p1);
      pa[j / 2][(j & 1) * 2 + 1] = 0u;  // padding rows
    }
    cp_async_wait<1>();  // V (in flight after it: the next tile's K)
    __syncwarp();
#pragma unroll
    for (int c = 0; c < ST / 2; ++c) {
#pragma unroll
      for (int n = 0; n < NT; n += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans(
            b, &sm.tile.v[c * 16 + (lane & 7) + ((lane >> 3) & 1) * 8][n * 8 + (lane >> 4) * 8]);
        mma_bf16_rows0_7(o[n], pa[c], b[0], b[1]);
        mma_bf16_rows0_7(o[n + 1], pa[c], b[2], b[3]);
      }
    }
    __syncwarp();  // every lane's V reads are done before the next tile's copies overwrite them
    if (more) copy_rows(my_row, sm.tile.v, v_cache, kTcKeys);
    cp_async_commit();
  }
  cp_async_wait<0>();  // nothing is left in flight (the last tile's groups are empty)
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);

  // Head h's merged element d: the output itself, or (several splits) the block's partial.
  uint32_t most = 0u;  // the largest |output| this thread stored, as bits (out_amax)
  auto store_merged = [&](int h, int d, float ob, float mb, float lb) {
    if (splits == 1) {  // nothing left to merge: the output itself
      const __nv_bfloat16 v = __float2bfloat16(ob / lb);
      out[(int64_t(t) * s.num_heads + h) * D + d] = v;
      if (out_amax != nullptr) most = max(most, abs_bits(__bfloat162float(v)));
    } else {
      float* part = partials + ((int64_t(t) * s.num_heads + h) * splits + split) * (D + 2);
      part[d] = ob;
      if (d == 0) part[D] = mb, part[D + 1] = lb;
    }
  };
  // The block's merge: each warp's state into its shared memory (an empty slice leaves m =
  // -inf, l = 0, o = 0), then the block's threads combine them per (query head, dim).
  __syncwarp();  // the last V rows' ldmatrix reads are done
  if (g < G) {
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      sm.state.o[g][n * 8 + tig * 2] = o[n][0];
      sm.state.o[g][n * 8 + tig * 2 + 1] = o[n][1];
    }
    if (tig == 0) sm.state.m[g] = m, sm.state.l[g] = l;
  }
  __syncthreads();
  if (warp_merge) {
    // Warp w merges query heads w, w + num_warps, ...: lane v < num_warps takes warp v's scale
    // for the head, every lane then has them all by shuffle, and the lanes stride over the
    // head's D elements. No second barrier, and no chain of num_warps exps on G threads before
    // it. Every sum runs in the order of the form below, so the bits are the same. H100, knob
    // alternated (NOTES.md v53): 0.5B batch 1 0.5244-0.5260 -> 0.5125-0.5126 ms, batch 4
    // 0.6913 -> 0.6735, batch 16 0.7975 -> 0.7862; 7B batch 1 4.7894-4.7897 -> 4.7831-4.7854.
    // A first form, each warp taking runs of 32 elements and computing their head's scales for
    // each run, cost the 7B (G = 7 heads of 128: 3-4 runs a thread) 4.796 -> 4.810.
    static_assert(kDecodeMaxWarps <= 32, "a lane a warp's scale");
    for (int gi = warp; gi < G; gi += num_warps) {
      const float mw = lane < num_warps ? warps_sm[lane].state.m[gi] : -INFINITY;
      float mb = mw;
#pragma unroll
      for (int off = kDecodeMaxWarps / 2; off > 0; off >>= 1)
        mb = fmaxf(mb, __shfl_xor_sync(0xffffffffu, mb, off));
      mb = __shfl_sync(0xffffffffu, mb, 0);
      const float fw = lane < num_warps && mb != -INFINITY ? __expf(mw - mb) : 0.0f;
      float f[kDecodeMaxWarps];
      float lb = 0.0f;
#pragma unroll
      for (int w = 0; w < kDecodeMaxWarps; ++w) {
        f[w] = __shfl_sync(0xffffffffu, fw, w);
        if (w < num_warps) lb += warps_sm[w].state.l[gi] * f[w];
      }
      for (int d = lane; d < D; d += 32) {
        float ob = 0.0f;
#pragma unroll
        for (int w = 0; w < kDecodeMaxWarps; ++w)
          if (w < num_warps) ob += warps_sm[w].state.o[gi][d] * f[w];
        store_merged(kvh * G + gi, d, ob, mb, lb);
      }
    }
    if (out_amax != nullptr && splits == 1) {
      raise_amax(out_amax + t * kAmaxTokenWords, most, kvh * num_warps + warp);
    }
    return;
  }
  // The scales first, once a query head: every output element used to recompute all of them
  // (num_warps exps and m loads an element, 5-7 elements a thread at batch 1).
  auto& merged = warps_sm[0].state;
  if (threadIdx.x < G) {
    const int gi = threadIdx.x;
    float mb = -INFINITY;
#pragma unroll
    for (int w = 0; w < kDecodeMaxWarps; ++w)
      if (w < num_warps) mb = fmaxf(mb, warps_sm[w].state.m[gi]);
    float lb = 0.0f;
#pragma unroll
    for (int w = 0; w < kDecodeMaxWarps; ++w) {
      if (w < num_warps) {
        const float f = mb == -INFINITY ? 0.0f : __expf(warps_sm[w].state.m[gi] - mb);
        lb += warps_sm[w].state.l[gi] * f;
        merged.f[w][gi] = f;
      }
    }
    merged.mb[gi] = mb;
    merged.lb[gi] = lb;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
    const int gi = i / D, d = i % D;
    float ob = 0.0f;
#pragma unroll
    for (int w = 0; w < kDecodeMaxWarps; ++w)
      if (w < num_warps) ob += warps_sm[w].state.o[gi][d] * merged.f[w][gi];
    store_merged(kvh * G + gi, d, ob, merged.mb[gi], merged.lb[gi]);
  }
  if (out_amax != nullptr && splits == 1) {
    raise_amax(out_amax + t * kAmaxTokenWords, most, kvh * num_warps + warp);
  }
}

template <int D>
void launch_tc(const __nv_bfloat16* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
               const int32_t* token_seq, const int32_t* positions, const int32_t* seq_page_start,
               const int32_t* page_ids, PagedAttentionShape shape, int32_t num_slices,
               float* partials, __nv_bfloat16* out, cudaStream_t stream, bool pdl, bool warp_merge,
               uint32_t* out_amax) {
  const int max_warps = tc_max_warps<D>();
  const int warps = tc_warps(num_slices, max_warps);
  // A grid of at most one block an SM asks for max_warps' shared memory whatever its warps use:
  // blocks of up to 4 warps (up to 70 KB at head size 128: contexts up to 128 keys at batch 1)
  // cost Qwen2.5-7B ~10 us a layer (3.95 ms a step at 65-96 keys against 3.63 with the same
  // warps and 87 KB, 3.66 with 139 KB; the 0.5B 0.535 -> 0.525 ms in one lease, unchanged in
  // another; H200, NOTES.md v33). The extra memory is never touched. Not the L1 share (v34): 52 KB
  // at the 228 KB configuration the driver picks gave 3.88-3.91 ms, at a 132 KB one (carveout
  // attribute) 3.59-3.60, and 139 KB at 228 KB 3.57-3.58. The slow requests leave room for 3 or
  // more blocks on one SM; presumably a few early-launched blocks then share SMs (not traced).
  // Larger grids keep their own size, where more would cost blocks an SM.
  const int32_t splits = tc_splits(num_slices, max_warps);
  const int64_t blocks = int64_t(shape.num_tokens) * shape.num_kv_heads * splits;
  const int smem_warps = blocks <= multiprocessors() ? max_warps : warps;
  const int smem = smem_warps * int(sizeof(TcWarpSmem<D>));
  // Above 48 KB a kernel must opt in (8 warps at D = 128 take 136 KB).
  // The early start (an overlapped launch): Qwen2.5-0.5B batch 1 0.658 -> 0.634 ms (bf16, x2
  // alternated; H200, NOTES.md v20). At head size 128 its first form measured 8.2 -> 11.7 us
  // alone, with twice the plain kernel's code (the copy loop unrolled six times); with one copy
  // loop a matrix, AWQ 7B batch 1 2.010 -> 1.98-2.00 ms, FP8 7B 2.677 -> 2.670-2.676 (v21).
  auto* kernel = pdl ? decode_attention_tc_kernel<D, true> : decode_attention_tc_kernel<D, false>;
  TANDEM_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  pdl::launch(pdl, kernel, dim3(shape.num_tokens, shape.num_kv_heads, splits), 32 * warps, smem,
              stream, q, k_cache, v_cache, token_seq, positions, seq_page_start, page_ids, shape,
              partials, out, warp_merge, out_amax);
}

// One block per (token, head): merge the splits' states. Split 0 is never empty. Each split's
// scale is computed once (warp 0), not once an output dimension: Qwen2.5-7B batch 1 at a 4k
// context 3.860 -> 3.818 ms, the 0.5B 0.719-0.727 -> 0.690-0.692 (H200, NOTES.md v33).
__global__ void combine_kernel(const float* __restrict__ partials, int D, int num_heads, int splits,
                               __nv_bfloat16* __restrict__ out, uint32_t* __restrict__ out_amax) {
  __shared__ float scale_s[kDecodeMaxSplits];
  __shared__ float total_s;
  const int t = blockIdx.x, h = blockIdx.y;
  const float* base = partials + (int64_t(t) * num_heads + h) * splits * (D + 2);
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    float mx = -INFINITY;
    for (int i = lane; i < splits; i += 32) mx = fmaxf(mx, base[i * (D + 2) + D]);
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    for (int i = lane; i < splits; i += 32) scale_s[i] = __expf(base[i * (D + 2) + D] - mx);
    __syncwarp();
    if (lane == 0) {
      float total = 0.0f;
      for (int i = 0; i < splits; ++i) total += base[i * (D + 2) + D + 1] * scale_s[i];
      total_s = total;
    }
  }
  __syncthreads();
  uint32_t most = 0u;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.0f;
    for (int i = 0; i < splits; ++i) o += base[i * (D + 2) + d] * scale_s[i];
    const __nv_bfloat16 v = __float2bfloat16(o / total_s);
    out[(int64_t(t) * num_heads + h) * D + d] = v;
    if (out_amax != nullptr) most = max(most, abs_bits(__bfloat162float(v)));
  }
  if (out_amax != nullptr) {  // whole warps: D rounded up to 32
    raise_amax(out_amax + t * kAmaxTokenWords, most, h * (blockDim.x >> 5) + (threadIdx.x >> 5));
  }
}

}  // namespace

int32_t decode_attention_splits(int32_t head_dim, int32_t num_slices) {
  return decode_attention_tensor_cores(head_dim) ? tc_splits(num_slices, tc_max_warps(head_dim))
                                                 : num_slices;
}

bool decode_attention_warp_merge() {
  static const bool on = env_choice("TANDEM_ATTN_MERGE", {0, 1}, 1) == 1;
  return on;
}

int32_t decode_attention_block_slices(int32_t head_dim) {
  return decode_attention_tensor_cores(head_dim) ? tc_max_warps(head_dim) : 1;
}

void launch_decode_attention(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                             const __nv_bfloat16* v_cache, const int32_t* token_seq,
                             const int32_t* positions, const int32_t* seq_page_start,
                             const int32_t* page_ids, PagedAttentionShape shape, int32_t num_slices,
                             float* partials, __nv_bfloat16* out, cudaStream_t stream, bool pdl,
                             bool warp_merge, uint32_t* out_amax) {
  if (shape.num_tokens == 0) return;
  const bool tc = decode_attention_tensor_cores(shape.head_dim);
  if (shape.head_dim > kMaxD || shape.head_dim % 8 != 0 ||
      shape.num_heads % shape.num_kv_heads != 0 ||
      shape.num_heads / shape.num_kv_heads > kDecodeMaxGroup || num_slices < 1 ||
      num_slices > (tc ? kDecodeMaxSlices : kDecodeMaxSplits)) {
    std::fprintf(stderr, "decode_attention: unsupported head_dim %d / heads %d/%d / slices %d\n",
                 shape.head_dim, shape.num_heads, shape.num_kv_heads, num_slices);
    std::abort();
  }
  switch (shape.head_dim) {
    case 64:
      launch_tc<64>(q, k_cache, v_cache, token_seq, positions, seq_page_start, page_ids, shape,
                    num_slices, partials, out, stream, pdl, warp_merge, out_amax);
      break;
    case 128:
      launch_tc<128>(q, k_cache, v_cache, token_seq, positions, seq_page_start, page_ids, shape,
                     num_slices, partials, out, stream, pdl, warp_merge, out_amax);
      break;
    default:  // other head sizes: the scalar kernel, one block per slice
      decode_attention_kernel<<<dim3(shape.num_tokens, shape.num_kv_heads, num_slices), kThreads, 0,
                                stream>>>(q, k_cache, v_cache, token_seq, positions, seq_page_start,
                                          page_ids, shape, partials);
      TANDEM_CUDA_CHECK_LAUNCH();
  }
  // The tensor-core kernel writes the output itself when its blocks hold every slice.
  const int32_t splits = decode_attention_splits(shape.head_dim, num_slices);
  if (tc && splits == 1) return;
  const int threads = (shape.head_dim + 31) / 32 * 32;
  combine_kernel<<<dim3(shape.num_tokens, shape.num_heads), threads, 0, stream>>>(
      partials, shape.head_dim, shape.num_heads, splits, out, out_amax);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
