#include "gemv.cuh"

#include "cuda_check.cuh"

namespace tandem::kernels {
namespace {

constexpr int kWarps = 8;
constexpr int kUnroll = 4;  // 16-byte weight loads in flight per lane

__device__ __forceinline__ void fma8(float& acc, const uint4& w, const uint4& x) {
  const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 wf = __bfloat1622float2(w2[j]);
    const float2 xf = __bfloat1622float2(x2[j]);
    acc = fmaf(wf.x, xf.x, acc);
    acc = fmaf(wf.y, xf.y, acc);
  }
}

template <int M, typename Out>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w, int32_t n,
                int32_t k, Out* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (row >= n) return;
  const uint4* w4 = reinterpret_cast<const uint4*>(w + int64_t(row) * k);
  const uint4* x4 = reinterpret_cast<const uint4*>(x);
  const int k8 = k / 8;
  float acc[M];
#pragma unroll
  for (int t = 0; t < M; ++t) acc[t] = 0.0f;
  int c = lane;
  for (; c + 32 * (kUnroll - 1) < k8; c += 32 * kUnroll) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = __ldcs(w4 + c + 32 * u);  // streamed once
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int t = 0; t < M; ++t) fma8(acc[t], wv[u], __ldg(x4 + t * k8 + c + 32 * u));
    }
  }
  for (; c < k8; c += 32) {
    const uint4 wv = __ldcs(w4 + c);
#pragma unroll
    for (int t = 0; t < M; ++t) fma8(acc[t], wv, __ldg(x4 + t * k8 + c));
  }
#pragma unroll
  for (int t = 0; t < M; ++t) {
    float v = acc[t];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) {
      if constexpr (sizeof(Out) == 4) {
        y[int64_t(t) * n + row] = v;
      } else {
        y[int64_t(t) * n + row] = __float2bfloat16(v);
      }
    }
  }
}

template <typename Out>
void dispatch(const __nv_bfloat16* x, const __nv_bfloat16* w, int32_t m, int32_t n, int32_t k,
              Out* y, cudaStream_t stream) {
  const int blocks = (n + kWarps - 1) / kWarps;
  const int threads = kWarps * 32;
  static_assert(kGemvMaxTokens == 2, "one instantiation per token count");
  if (m == 1) {
    gemv_kernel<1, Out><<<blocks, threads, 0, stream>>>(x, w, n, k, y);
  } else {
    gemv_kernel<2, Out><<<blocks, threads, 0, stream>>>(x, w, n, k, y);
  }
}

}  // namespace

void launch_gemv(const __nv_bfloat16* x, const __nv_bfloat16* w, int32_t m, int32_t n, int32_t k,
                 void* y, bool out_f32, cudaStream_t stream) {
  if (m < 1 || m > kGemvMaxTokens || k % 8 != 0) {
    std::fprintf(stderr, "gemv: unsupported m=%d k=%d\n", m, k);
    std::abort();
  }
  if (out_f32) {
    dispatch(x, w, m, n, k, static_cast<float*>(y), stream);
  } else {
    dispatch(x, w, m, n, k, static_cast<__nv_bfloat16*>(y), stream);
  }
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
