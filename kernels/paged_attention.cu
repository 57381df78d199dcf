#include "paged_attention.cuh"

#include "block_reduce.cuh"
#include "cuda_check.cuh"

namespace tandem::kernels {
namespace {

constexpr int kThreads = 128;  // one key per thread per tile; output dims d and d + 128
constexpr int kTile = kThreads;
constexpr int kMaxDim = 256;

// One block per (query token, query head). Scores: thread j of a tile computes key j's dot
// product with 16-byte loads of its K row. Values: thread d accumulates output dim d over the
// tile's keys (coalesced V rows).
__global__ void __launch_bounds__(kThreads) paged_attention_kernel(
    const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,
    const __nv_bfloat16* __restrict__ v_cache, const int32_t* __restrict__ token_seq,
    const int32_t* __restrict__ positions, const int32_t* __restrict__ seq_page_start,
    const int32_t* __restrict__ page_ids, PagedAttentionShape s, __nv_bfloat16* __restrict__ out) {
  __shared__ __align__(16) float q_s[kMaxDim];
  __shared__ float p_s[kTile];
  __shared__ const __nv_bfloat16* v_row_s[kTile];
  __shared__ float scratch[32];

  const int t = blockIdx.x, h = blockIdx.y;
  const int D = s.head_dim;
  const int kvh = h / (s.num_heads / s.num_kv_heads);
  const int num_keys = positions[t] + 1;
  const int32_t* pages = page_ids + seq_page_start[token_seq[t]];
  const int64_t head_stride = int64_t(s.page_size) * D;  // one head's rows within a page

  for (int d = threadIdx.x; d < D; d += kThreads)
    q_s[d] = __bfloat162float(q[(int64_t(t) * s.num_heads + h) * D + d]);
  __syncthreads();

  float m = -INFINITY, l = 0.0f;
  float acc0 = 0.0f, acc1 = 0.0f;
  const int d0 = threadIdx.x, d1 = threadIdx.x + kThreads;

  for (int tile = 0; tile < num_keys; tile += kTile) {
    const int key = tile + threadIdx.x;
    float score = -INFINITY;
    if (key < num_keys) {
      const int64_t page = pages[key / s.page_size];
      const int64_t base =
          (page * s.num_kv_heads + kvh) * head_stride + int64_t(key % s.page_size) * D;
      const uint4* k4 = reinterpret_cast<const uint4*>(k_cache + base);
      float dot = 0.0f;
#pragma unroll 4
      for (int c = 0; c < D / 8; ++c) {
        const uint4 raw = k4[c];
        const __nv_bfloat162* k2 = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 kf = __bfloat1622float2(k2[j]);
          dot += q_s[c * 8 + 2 * j] * kf.x + q_s[c * 8 + 2 * j + 1] * kf.y;
        }
      }
      score = dot * s.scale;
      v_row_s[threadIdx.x] = v_cache + base;
    }
    const float tile_max = block_max(score, scratch);
    const float m_new = fmaxf(m, tile_max);
    const float p = key < num_keys ? __expf(score - m_new) : 0.0f;
    p_s[threadIdx.x] = p;
    const float tile_sum = block_sum(p, scratch);  // its barriers also publish p_s, v_row_s
    const float corr = __expf(m - m_new);          // m == -inf on the first tile: 0
    l = l * corr + tile_sum;
    acc0 *= corr;
    acc1 *= corr;
    m = m_new;
    const int n = min(kTile, num_keys - tile);
#pragma unroll 8
    for (int j = 0; j < n; ++j) {
      const float pj = p_s[j];
      const __nv_bfloat16* vr = v_row_s[j];
      if (d0 < D) acc0 += pj * __bfloat162float(vr[d0]);
      if (d1 < D) acc1 += pj * __bfloat162float(vr[d1]);
    }
    __syncthreads();  // p_s / v_row_s are rewritten by the next tile
  }
  const float inv = 1.0f / l;
  __nv_bfloat16* o = out + (int64_t(t) * s.num_heads + h) * D;
  if (d0 < D) o[d0] = __float2bfloat16(acc0 * inv);
  if (d1 < D) o[d1] = __float2bfloat16(acc1 * inv);
}

}  // namespace

void launch_paged_attention(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                            const __nv_bfloat16* v_cache, const int32_t* token_seq,
                            const int32_t* positions, const int32_t* seq_page_start,
                            const int32_t* page_ids, PagedAttentionShape shape, __nv_bfloat16* out,
                            cudaStream_t stream) {
  if (shape.num_tokens == 0) return;
  if (shape.head_dim > kMaxDim || shape.head_dim % 8 != 0 ||
      shape.num_heads % shape.num_kv_heads != 0) {
    std::fprintf(stderr, "paged_attention: unsupported head_dim %d / heads %d/%d\n", shape.head_dim,
                 shape.num_heads, shape.num_kv_heads);
    std::abort();
  }
  paged_attention_kernel<<<dim3(shape.num_tokens, shape.num_heads), kThreads, 0, stream>>>(
      q, k_cache, v_cache, token_seq, positions, seq_page_start, page_ids, shape, out);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
