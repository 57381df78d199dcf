#include "decode_attention.cuh"

#include <cstdio>
#include <cstdlib>

#include "cuda_check.cuh"
#include "mma_sm80.cuh"

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
  // The query rows (first 16), then each tile's K rows, then its V rows: each is read into
  // registers (ldmatrix) before the next is stored.
  __nv_bfloat16 tile[kTcKeys][D + kTcPad];
  struct {
    float o[kG][D];  // unnormalised output of the warp's slice
    float m[kG], l[kG];
  } state;
};

inline int32_t tc_splits(int32_t num_slices) {
  return (num_slices + kDecodeMaxWarps - 1) / kDecodeMaxWarps;
}
inline int32_t tc_warps(int32_t num_slices) {
  const int32_t splits = tc_splits(num_slices);
  return (num_slices + splits - 1) / splits;
}

template <int D>
__global__ void __launch_bounds__(32 * kDecodeMaxWarps)
    decode_attention_tc_kernel(const __nv_bfloat16* __restrict__ q,
                               const __nv_bfloat16* __restrict__ k_cache,
                               const __nv_bfloat16* __restrict__ v_cache,
                               const int32_t* __restrict__ token_seq,
                               const int32_t* __restrict__ positions,
                               const int32_t* __restrict__ seq_page_start,
                               const int32_t* __restrict__ page_ids, PagedAttentionShape s,
                               float* __restrict__ partials, __nv_bfloat16* __restrict__ out) {
  constexpr int D8 = D / 8, KC = D / 16, NT = D / 8, ST = kTcKeys / 8;
  constexpr int LPR = D8, RPI = 32 / LPR, NI = kTcKeys / RPI;  // K/V rows: lanes, rows, loads
  extern __shared__ __align__(128) unsigned char smem_raw[];
  TcWarpSmem<D>* warps_sm = reinterpret_cast<TcWarpSmem<D>*>(smem_raw);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, num_warps = blockDim.x >> 5;
  const int g = lane >> 2, tig = lane & 3;
  TcWarpSmem<D>& sm = warps_sm[warp];
  const int t = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z, splits = gridDim.z;
  const int G = s.num_heads / s.num_kv_heads;
  const int num_keys = positions[t] + 1;
  const int slices = splits * num_warps, slice = split * num_warps + warp;
  const int chunk = (num_keys + slices - 1) / slices;
  const int begin = slice * chunk, end = min(num_keys, begin + chunk);
  const int32_t* pages = page_ids + seq_page_start[token_seq[t]];

  // Every load in flight before the first store: a loop of load-store pairs waits on memory
  // once per iteration.
  constexpr int QI = 16 * D8 / 32;
  uint4 qv[QI];
#pragma unroll
  for (int it = 0; it < QI; ++it) {
    const int r = (lane + 32 * it) / D8, c = ((lane + 32 * it) % D8) * 8;
    qv[it] =
        r < G
            ? *reinterpret_cast<const uint4*>(q + (int64_t(t) * s.num_heads + kvh * G + r) * D + c)
            : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int it = 0; it < QI; ++it) {
    const int r = (lane + 32 * it) / D8, c = ((lane + 32 * it) % D8) * 8;
    *reinterpret_cast<uint4*>(&sm.tile[r][c]) = qv[it];
  }
  __syncwarp();
  uint32_t qa[KC][4];
#pragma unroll
  for (int kc = 0; kc < KC; ++kc) {
    ldmatrix_x4(qa[kc], &sm.tile[lane & 15][kc * 16 + (lane >> 4) * 8]);
  }
  // Row g is query head g of the group; row g + 8 is padding (G <= 8) and never written.
  float m = -INFINITY, l = 0.0f;
  float o[NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

  for (int kt = begin; kt < end; kt += kTcKeys) {
    // Lane j looks up key kt + j's page; then each load instruction covers RPI whole rows
    // (LPR lanes of 16 bytes per row, the row's offset shuffled from its key's lane), so a warp
    // reads 2-4 contiguous rows per instruction instead of 32 rows' scattered 16-byte pieces.
    // Every K and V load is in flight before the first store; V is stored after the scores, so
    // its latency hides behind them.
    const int key = kt + lane;
    const int64_t my_row =
        key < end ? ((int64_t(pages[key / s.page_size]) * s.num_kv_heads + kvh) * s.page_size +
                     key % s.page_size) *
                        D
                  : -1;
    uint4 kv[NI], vv[NI];
#pragma unroll
    for (int i = 0; i < NI; ++i) {
      const int64_t row = __shfl_sync(0xffffffffu, my_row, i * RPI + lane / LPR);
      const int64_t at = row + (lane % LPR) * 8;
      // zeros past the end: 0 * V, not NaN
      kv[i] = row >= 0 ? *reinterpret_cast<const uint4*>(k_cache + at) : make_uint4(0, 0, 0, 0);
      vv[i] = row >= 0 ? *reinterpret_cast<const uint4*>(v_cache + at) : make_uint4(0, 0, 0, 0);
    }
    __syncwarp();  // the previous ldmatrix reads (query or V rows) are done
#pragma unroll
    for (int i = 0; i < NI; ++i) {
      *reinterpret_cast<uint4*>(&sm.tile[i * RPI + lane / LPR][(lane % LPR) * 8]) = kv[i];
    }
    __syncwarp();
    float sc[ST][4];
#pragma unroll
    for (int j = 0; j < ST; ++j) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < KC; ++kc) {
#pragma unroll
      for (int j = 0; j < ST; j += 2) {
        uint32_t b[4];
        ldmatrix_x4(
            b, &sm.tile[j * 8 + (lane & 7) + (lane >> 4) * 8][kc * 16 + ((lane >> 3) & 1) * 8]);
        mma_bf16(sc[j], qa[kc], b[0], b[1]);
        mma_bf16(sc[j + 1], qa[kc], b[2], b[3]);
      }
    }
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
    __syncwarp();  // the K rows' ldmatrix reads are done
#pragma unroll
    for (int i = 0; i < NI; ++i) {
      *reinterpret_cast<uint4*>(&sm.tile[i * RPI + lane / LPR][(lane % LPR) * 8]) = vv[i];
    }
    __syncwarp();
    uint32_t pa[ST / 2][4];
#pragma unroll
    for (int j = 0; j < ST; ++j) {
      const float p0 = __expf(sc[j][0] - m_new), p1 = __expf(sc[j][1] - m_new);
      l += p0 + p1;
      pa[j / 2][(j & 1) * 2 + 0] = pack_bf16(p0, p1);
      pa[j / 2][(j & 1) * 2 + 1] = 0u;  // padding rows
    }
#pragma unroll
    for (int c = 0; c < ST / 2; ++c) {
#pragma unroll
      for (int n = 0; n < NT; n += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans(
            b, &sm.tile[c * 16 + (lane & 7) + ((lane >> 3) & 1) * 8][n * 8 + (lane >> 4) * 8]);
        mma_bf16(o[n], pa[c], b[0], b[1]);
        mma_bf16(o[n + 1], pa[c], b[2], b[3]);
      }
    }
  }
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);

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
  for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
    const int gi = i / D, d = i % D;
    float mb = -INFINITY;
    for (int w = 0; w < num_warps; ++w) mb = fmaxf(mb, warps_sm[w].state.m[gi]);
    float lb = 0.0f, ob = 0.0f;
    for (int w = 0; w < num_warps; ++w) {
      const float f = mb == -INFINITY ? 0.0f : __expf(warps_sm[w].state.m[gi] - mb);
      lb += warps_sm[w].state.l[gi] * f;
      ob += warps_sm[w].state.o[gi][d] * f;
    }
    const int h = kvh * G + gi;
    if (splits == 1) {  // nothing left to merge: the output itself
      out[(int64_t(t) * s.num_heads + h) * D + d] = __float2bfloat16(ob / lb);
    } else {
      float* part = partials + ((int64_t(t) * s.num_heads + h) * splits + split) * (D + 2);
      part[d] = ob;
      if (d == 0) part[D] = mb, part[D + 1] = lb;
    }
  }
}

template <int D>
void launch_tc(const __nv_bfloat16* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
               const int32_t* token_seq, const int32_t* positions, const int32_t* seq_page_start,
               const int32_t* page_ids, PagedAttentionShape shape, int32_t num_slices,
               float* partials, __nv_bfloat16* out, cudaStream_t stream) {
  const int warps = tc_warps(num_slices);
  const int smem = warps * int(sizeof(TcWarpSmem<D>));
  // Above 48 KB a kernel must opt in (8 warps at D = 128 take 68 KB; sm_80+ allow 99 KB).
  TANDEM_CUDA_CHECK(cudaFuncSetAttribute(decode_attention_tc_kernel<D>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  decode_attention_tc_kernel<D><<<dim3(shape.num_tokens, shape.num_kv_heads, tc_splits(num_slices)),
                                  32 * warps, smem, stream>>>(
      q, k_cache, v_cache, token_seq, positions, seq_page_start, page_ids, shape, partials, out);
  TANDEM_CUDA_CHECK_LAUNCH();
}

// One block per (token, head): merge the splits' states. Split 0 is never empty.
__global__ void combine_kernel(const float* __restrict__ partials, int D, int num_heads, int splits,
                               __nv_bfloat16* __restrict__ out) {
  const int t = blockIdx.x, h = blockIdx.y;
  const float* base = partials + (int64_t(t) * num_heads + h) * splits * (D + 2);
  float mx = -INFINITY;
  for (int i = 0; i < splits; ++i) mx = fmaxf(mx, base[i * (D + 2) + D]);
  float total = 0.0f;
  for (int i = 0; i < splits; ++i) {
    const float* part = base + i * (D + 2);
    total += part[D + 1] * __expf(part[D] - mx);
  }
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.0f;
    for (int i = 0; i < splits; ++i) {
      const float* part = base + i * (D + 2);
      o += part[d] * __expf(part[D] - mx);
    }
    out[(int64_t(t) * num_heads + h) * D + d] = __float2bfloat16(o / total);
  }
}

}  // namespace

int32_t decode_attention_splits(int32_t head_dim, int32_t num_slices) {
  return decode_attention_tensor_cores(head_dim) ? tc_splits(num_slices) : num_slices;
}

void launch_decode_attention(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                             const __nv_bfloat16* v_cache, const int32_t* token_seq,
                             const int32_t* positions, const int32_t* seq_page_start,
                             const int32_t* page_ids, PagedAttentionShape shape, int32_t num_slices,
                             float* partials, __nv_bfloat16* out, cudaStream_t stream) {
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
                    num_slices, partials, out, stream);
      break;
    case 128:
      launch_tc<128>(q, k_cache, v_cache, token_seq, positions, seq_page_start, page_ids, shape,
                     num_slices, partials, out, stream);
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
      partials, shape.head_dim, shape.num_heads, splits, out);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
