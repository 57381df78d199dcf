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
                int32_t k, int32_t ldy, Out* __restrict__ y) {
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
        y[int64_t(t) * ldy + row] = v;
      } else {
        y[int64_t(t) * ldy + row] = __float2bfloat16(v);
      }
    }
  }
}

// Gate row r and up row r + width per warp; the epilogue rounds both to bf16 first, as the
// unfused path stores them, so the output equals launch_gemv + launch_silu_mul bit for bit.
template <int M>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_swiglu_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                       int32_t width, int32_t k, __nv_bfloat16* __restrict__ out) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (row >= width) return;
  const uint4* g4 = reinterpret_cast<const uint4*>(w + int64_t(row) * k);
  const uint4* u4 = reinterpret_cast<const uint4*>(w + (int64_t(row) + width) * k);
  const uint4* x4 = reinterpret_cast<const uint4*>(x);
  const int k8 = k / 8;
  float gacc[M], uacc[M];
#pragma unroll
  for (int t = 0; t < M; ++t) gacc[t] = uacc[t] = 0.0f;
  constexpr int kHalf = kUnroll / 2;  // two rows: the same bytes in flight as gemv_kernel
  int c = lane;
  for (; c + 32 * (kHalf - 1) < k8; c += 32 * kHalf) {
    uint4 gv[kHalf], uv[kHalf];
#pragma unroll
    for (int u = 0; u < kHalf; ++u) {
      gv[u] = __ldcs(g4 + c + 32 * u);
      uv[u] = __ldcs(u4 + c + 32 * u);
    }
#pragma unroll
    for (int u = 0; u < kHalf; ++u) {
#pragma unroll
      for (int t = 0; t < M; ++t) {
        const uint4 xv = __ldg(x4 + t * k8 + c + 32 * u);
        fma8(gacc[t], gv[u], xv);
        fma8(uacc[t], uv[u], xv);
      }
    }
  }
  for (; c < k8; c += 32) {
    const uint4 gv = __ldcs(g4 + c), uv = __ldcs(u4 + c);
#pragma unroll
    for (int t = 0; t < M; ++t) {
      const uint4 xv = __ldg(x4 + t * k8 + c);
      fma8(gacc[t], gv, xv);
      fma8(uacc[t], uv, xv);
    }
  }
#pragma unroll
  for (int t = 0; t < M; ++t) {
    float g = gacc[t], u = uacc[t];
    for (int o = 16; o > 0; o >>= 1) {
      g += __shfl_xor_sync(0xffffffffu, g, o);
      u += __shfl_xor_sync(0xffffffffu, u, o);
    }
    if (lane == 0) {
      const float gb = __bfloat162float(__float2bfloat16(g));
      const float ub = __bfloat162float(__float2bfloat16(u));
      out[int64_t(t) * width + row] = __float2bfloat16(gb / (1.0f + expf(-gb)) * ub);
    }
  }
}

template <typename Out>
void dispatch(const __nv_bfloat16* x, const __nv_bfloat16* w, int32_t m, int32_t n, int32_t k,
              int32_t ldy, Out* y, cudaStream_t stream) {
  const int blocks = (n + kWarps - 1) / kWarps;
  const int threads = kWarps * 32;
  static_assert(kGemvMaxTokens == 2, "one instantiation per token count");
  if (m == 1) {
    gemv_kernel<1, Out><<<blocks, threads, 0, stream>>>(x, w, n, k, ldy, y);
  } else {
    gemv_kernel<2, Out><<<blocks, threads, 0, stream>>>(x, w, n, k, ldy, y);
  }
}

}  // namespace

void launch_gemv(const __nv_bfloat16* x, const __nv_bfloat16* w, int32_t m, int32_t n, int32_t k,
                 void* y, bool out_f32, cudaStream_t stream, int32_t ldy) {
  if (m < 1 || m > kGemvMaxTokens || k % 8 != 0) {
    std::fprintf(stderr, "gemv: unsupported m=%d k=%d\n", m, k);
    std::abort();
  }
  if (ldy <= 0) ldy = n;
  if (out_f32) {
    dispatch(x, w, m, n, k, ldy, static_cast<float*>(y), stream);
  } else {
    dispatch(x, w, m, n, k, ldy, static_cast<__nv_bfloat16*>(y), stream);
  }
  TANDEM_CUDA_CHECK_LAUNCH();
}

void launch_gemv_swiglu(const __nv_bfloat16* x, const __nv_bfloat16* w, int32_t m, int32_t width,
                        int32_t k, __nv_bfloat16* out, cudaStream_t stream) {
  if (m < 1 || m > kGemvMaxTokens || k % 8 != 0) {
    std::fprintf(stderr, "gemv_swiglu: unsupported m=%d k=%d\n", m, k);
    std::abort();
  }
  const int blocks = (width + kWarps - 1) / kWarps;
  if (m == 1) {
    gemv_swiglu_kernel<1><<<blocks, kWarps * 32, 0, stream>>>(x, w, width, k, out);
  } else {
    gemv_swiglu_kernel<2><<<blocks, kWarps * 32, 0, stream>>>(x, w, width, k, out);
  }
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
