#include "rope_kv.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "cuda_check.cuh"
#include "pdl.cuh"

namespace tandem::kernels {
namespace {

// One block per token: the token's D/2 angles once into shared memory, then a thread per 4
// consecutive dim pairs of one head (q, k or v; two 8-byte loads). Before, a block per (token,
// head) of D/2 threads ran a 2,048-token 7B prompt at 42.6 us a layer (ncu, H200): 65,536 blocks
// of 64 threads, each a chain of 2-byte loads, a sincosf and stores, the same angles 32 times a
// token.
constexpr int kMaxRopeHalf = 128;  // head_dim <= 256
// An overlapped launch (pdl.cuh) computes the angles (from the step's metadata) before its wait
// and lets the decode attention after it start at once: that kernel's early form (one query a
// sequence, the runner's rule) reads the keys before this step's own, which this kernel does not
// write.
__global__ void rope_kv_token_kernel(const __nv_bfloat16* __restrict__ qkv, RopeKvTarget a) {
  __shared__ float sn_s[kMaxRopeHalf], cs_s[kMaxRopeHalf];
  pdl::allow_dependents();
  const int t = blockIdx.x;
  const RopeKvShape& s = a.s;
  const int D = s.head_dim, half = D / 2, quads = half / 4;
  for (int i = threadIdx.x; i < half; i += blockDim.x) rope_angle(a, t, i, &sn_s[i], &cs_s[i]);
  __syncthreads();
  pdl::grid_dependency_wait();
  const int heads = s.num_heads + 2 * s.num_kv_heads;
  const __nv_bfloat16* row = qkv + int64_t(t) * heads * D;
  for (int item = threadIdx.x; item < heads * quads; item += blockDim.x) {
    const int h = item / quads, i = (item % quads) * 4;
    const uint2 lo = pdl::load_input(reinterpret_cast<const uint2*>(row + h * D + i));
    const uint2 hi = pdl::load_input(reinterpret_cast<const uint2*>(row + h * D + i + half));
    const __nv_bfloat16* x1 = reinterpret_cast<const __nv_bfloat16*>(&lo);
    const __nv_bfloat16* x2 = reinterpret_cast<const __nv_bfloat16*>(&hi);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      rope_store_pair_at(a, t, h, i + j, __bfloat162float(x1[j]), __bfloat162float(x2[j]),
                         sn_s[i + j], cs_s[i + j]);
    }
  }
}

}  // namespace

void launch_rope_kv_write(const __nv_bfloat16* qkv, const float* bias, const int32_t* positions,
                          const int32_t* slots, const float* inv_freq, RopeKvShape shape,
                          __nv_bfloat16* q_out, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache,
                          cudaStream_t stream, bool pdl) {
  if (shape.num_tokens == 0) return;
  // The CUDA runner refuses other head sizes at its creation (cuda_runner.cc).
  if (shape.head_dim % 8 != 0 || shape.head_dim / 2 > kMaxRopeHalf) {
    std::fprintf(stderr, "rope_kv: unsupported head_dim %d\n", shape.head_dim);
    std::abort();
  }
  const RopeKvTarget target{bias, positions, slots, inv_freq, shape, q_out, k_cache, v_cache};
  const int items = (shape.num_heads + 2 * shape.num_kv_heads) * (shape.head_dim / 8);
  const int threads = std::min(1024, (items + 31) / 32 * 32);
  pdl::launch(pdl, rope_kv_token_kernel, shape.num_tokens, threads, 0, stream, qkv, target);
}

}  // namespace tandem::kernels
