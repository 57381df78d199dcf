#include "rope_kv.cuh"

#include "cuda_check.cuh"

namespace tandem::kernels {
namespace {

// One block per (token, q or k head), D/2 threads: thread i rotates dims i and i + D/2. The k
// head blocks also copy that head's V. At decode a block per token left 131 SMs idle.
__global__ void rope_kv_kernel(const __nv_bfloat16* __restrict__ qkv, RopeKvTarget a) {
  const int t = blockIdx.x, h = blockIdx.y, i = threadIdx.x;
  const RopeKvShape& s = a.s;
  const int D = s.head_dim, half = D / 2;
  if (i >= half) return;
  const __nv_bfloat16* row = qkv + int64_t(t) * (s.num_heads + 2 * s.num_kv_heads) * D;
  auto in = [&](int c) { return __bfloat162float(row[c]); };
  rope_store_pair(a, t, h, i, in(h * D + i), in(h * D + i + half));
  if (h < s.num_heads) return;
  const int vh = h + s.num_kv_heads;  // this k head's v head
  rope_store_pair(a, t, vh, i, in(vh * D + i), in(vh * D + i + half));
}

}  // namespace

void launch_rope_kv_write(const __nv_bfloat16* qkv, const float* bias, const int32_t* positions,
                          const int32_t* slots, const float* inv_freq, RopeKvShape shape,
                          __nv_bfloat16* q_out, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache,
                          cudaStream_t stream) {
  if (shape.num_tokens == 0) return;
  const dim3 grid(shape.num_tokens, shape.num_heads + shape.num_kv_heads);
  const int threads = (shape.head_dim / 2 + 31) / 32 * 32;
  rope_kv_kernel<<<grid, threads, 0, stream>>>(
      qkv, RopeKvTarget{bias, positions, slots, inv_freq, shape, q_out, k_cache, v_cache});
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
