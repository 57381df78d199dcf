#include "decode_attention.cuh"

#include <cstdio>
#include <cstdlib>

#include "cuda_check.cuh"

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

void launch_decode_attention(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                             const __nv_bfloat16* v_cache, const int32_t* token_seq,
                             const int32_t* positions, const int32_t* seq_page_start,
                             const int32_t* page_ids, PagedAttentionShape shape, int32_t num_splits,
                             float* partials, __nv_bfloat16* out, cudaStream_t stream) {
  if (shape.num_tokens == 0) return;
  if (shape.head_dim > kMaxD || shape.head_dim % 8 != 0 ||
      shape.num_heads % shape.num_kv_heads != 0 ||
      shape.num_heads / shape.num_kv_heads > kDecodeMaxGroup || num_splits < 1 ||
      num_splits > kDecodeMaxSplits) {
    std::fprintf(stderr, "decode_attention: unsupported head_dim %d / heads %d/%d / splits %d\n",
                 shape.head_dim, shape.num_heads, shape.num_kv_heads, num_splits);
    std::abort();
  }
  decode_attention_kernel<<<dim3(shape.num_tokens, shape.num_kv_heads, num_splits), kThreads, 0,
                            stream>>>(q, k_cache, v_cache, token_seq, positions, seq_page_start,
                                      page_ids, shape, partials);
  TANDEM_CUDA_CHECK_LAUNCH();
  const int threads = (shape.head_dim + 31) / 32 * 32;
  combine_kernel<<<dim3(shape.num_tokens, shape.num_heads), threads, 0, stream>>>(
      partials, shape.head_dim, shape.num_heads, num_splits, out);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
