#include "rope_kv.cuh"

#include "cuda_check.cuh"

namespace tandem::kernels {
namespace {

// One block per (token, q or k head), D/2 threads: thread i rotates dims i and i + D/2. The k
// head blocks also copy that head's V. At decode a block per token left 131 SMs idle.
__global__ void rope_kv_kernel(
    const __nv_bfloat16* __restrict__ qkv, const float* __restrict__ bias,
    const int32_t* __restrict__ positions, const int32_t* __restrict__ slots,
    const float* __restrict__ inv_freq, RopeKvShape s, __nv_bfloat16* __restrict__ q_out,
    __nv_bfloat16* __restrict__ k_cache, __nv_bfloat16* __restrict__ v_cache) {
  const int t = blockIdx.x, h = blockIdx.y, i = threadIdx.x;
  const int D = s.head_dim, half = D / 2;
  const int width = (s.num_heads + 2 * s.num_kv_heads) * D;
  const __nv_bfloat16* row = qkv + int64_t(t) * width;
  const int64_t slot = slots[t];
  const int64_t page = slot / s.page_size, off = slot % s.page_size;
  auto in = [&](int c) {
    const float x = __bfloat162float(row[c]);
    return bias != nullptr ? x + bias[c] : x;
  };
  auto kv_index = [&](int kh, int d) {
    return ((page * s.num_kv_heads + kh) * s.page_size + off) * D + d;
  };
  if (i >= half) return;
  float sn, cs;
  sincosf(float(positions[t]) * inv_freq[i], &sn, &cs);
  const int c = h * D + i;
  const float x1 = in(c), x2 = in(c + half);
  const float y1 = x1 * cs - x2 * sn, y2 = x2 * cs + x1 * sn;
  if (h < s.num_heads) {
    q_out[int64_t(t) * s.num_heads * D + c] = __float2bfloat16(y1);
    q_out[int64_t(t) * s.num_heads * D + c + half] = __float2bfloat16(y2);
    return;
  }
  const int kh = h - s.num_heads;
  k_cache[kv_index(kh, i)] = __float2bfloat16(y1);
  k_cache[kv_index(kh, i + half)] = __float2bfloat16(y2);
  const int v_col = (s.num_heads + s.num_kv_heads) * D + kh * D;
  v_cache[kv_index(kh, i)] = __float2bfloat16(in(v_col + i));
  v_cache[kv_index(kh, i + half)] = __float2bfloat16(in(v_col + i + half));
}

}  // namespace

void launch_rope_kv_write(const __nv_bfloat16* qkv, const float* bias, const int32_t* positions,
                          const int32_t* slots, const float* inv_freq, RopeKvShape shape,
                          __nv_bfloat16* q_out, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache,
                          cudaStream_t stream) {
  if (shape.num_tokens == 0) return;
  const dim3 grid(shape.num_tokens, shape.num_heads + shape.num_kv_heads);
  const int threads = (shape.head_dim / 2 + 31) / 32 * 32;
  rope_kv_kernel<<<grid, threads, 0, stream>>>(qkv, bias, positions, slots, inv_freq, shape, q_out,
                                               k_cache, v_cache);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
