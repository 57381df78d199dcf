#include "rmsnorm.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "block_reduce.cuh"
#include "cuda_check.cuh"
#include "fp8_quant.cuh"
#include "pdl.cuh"

namespace tandem::kernels {
namespace {

constexpr int kMaxThreads = 1024;
// A row is latency-bound at decode sizes (one block per row): spread it over up to 1024 threads,
// 4-8 elements each, kept in registers between the two passes.

// The shared first pass: residual (+= delta) of this thread's kPerThread elements of the block's
// row into v (0 past the row), the norm's weights into wv, and the row's 1 / rms.
template <int kPerThread>
__device__ __forceinline__ float add_and_inv_rms(float* __restrict__ residual,
                                                 const __nv_bfloat16* __restrict__ delta,
                                                 const float* __restrict__ weight, int32_t width,
                                                 float eps, int64_t base, float* v, float* wv,
                                                 float* scratch) {
  float ss = 0.0f;
  // The weights load with the row, not after the reduction's barriers: one memory latency less
  // on a kernel that is all latency at decode sizes. They are loaded before the wait of an
  // overlapped launch (pdl.cuh; a no-op on a plain one), the row after it.
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int c = threadIdx.x + i * int(blockDim.x);
    wv[i] = c < width ? weight[c] : 0.0f;
  }
  pdl::allow_dependents();
  pdl::grid_dependency_wait();
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int c = threadIdx.x + i * int(blockDim.x);
    v[i] = 0.0f;
    if (c < width) {
      float x = residual[base + c];
      if (delta != nullptr) {
        x += __bfloat162float(pdl::load_input(delta + base + c));
        residual[base + c] = x;
      }
      v[i] = x;
      ss += x * x;
    }
  }
  ss = block_sum(ss, scratch);
  return rsqrtf(ss / float(width) + eps);
}

template <int kPerThread>
__global__ void __launch_bounds__(kMaxThreads)
    add_rmsnorm_kernel(float* __restrict__ residual, const __nv_bfloat16* __restrict__ delta,
                       const float* __restrict__ weight, int32_t width, float eps,
                       __nv_bfloat16* __restrict__ out) {
  __shared__ float scratch[32];
  const int64_t base = int64_t(blockIdx.x) * width;
  float v[kPerThread], wv[kPerThread];
  const float inv =
      add_and_inv_rms<kPerThread>(residual, delta, weight, width, eps, base, v, wv, scratch);
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int c = threadIdx.x + i * int(blockDim.x);
    if (c < width) out[base + c] = __float2bfloat16(v[i] * inv * wv[i]);
  }
}

// add_rmsnorm_kernel's row (the same bits in residual and out), then that bf16 output quantized
// as launch_fp8_quantize quantizes a row: amax over it, one scale, e4m3 of value / scale.
template <int kPerThread>
__global__ void __launch_bounds__(kMaxThreads)
    add_rmsnorm_fp8_kernel(float* __restrict__ residual, const __nv_bfloat16* __restrict__ delta,
                           const float* __restrict__ weight, int32_t width, float eps,
                           __nv_bfloat16* __restrict__ out, Fp8RowQuant quant) {
  __shared__ float scratch[32];
  const int64_t base = int64_t(blockIdx.x) * width;
  float v[kPerThread], wv[kPerThread];
  const float inv =
      add_and_inv_rms<kPerThread>(residual, delta, weight, width, eps, base, v, wv, scratch);
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int c = threadIdx.x + i * int(blockDim.x);
    const __nv_bfloat16 o = __float2bfloat16(v[i] * inv * wv[i]);
    v[i] = __bfloat162float(o);  // what launch_fp8_quantize would read back
    if (c < width) {
      out[base + c] = o;
      amax = fmaxf(amax, fabsf(v[i]));
    }
  }
  const float scale = quant.static_scale != nullptr
                          ? *quant.static_scale
                          : fp8::dynamic_scale(block_max(amax, scratch), quant.scale_ub);
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int c = threadIdx.x + i * int(blockDim.x);
    if (c < width) quant.xq[base + c] = fp8::quantize1(v[i], scale);
  }
  if (threadIdx.x == 0) quant.x_scale[blockIdx.x] = scale;
}

// One block a row, 4 elements a thread up to 4,096 features, 8 up to 8,192 (more is refused):
// launch(per_thread = 4 or 8 as std::integral_constant, threads).
template <typename Launch>
void launch_rows(const char* what, int32_t width, Launch&& launch) {
  if (width > kMaxThreads * 8) {
    std::fprintf(stderr, "%s: width %d over %d\n", what, width, kMaxThreads * 8);
    std::abort();
  }
  if (width <= kMaxThreads * 4) {
    const int threads = std::max(32, ((width + 3) / 4 + 31) / 32 * 32);
    launch(std::integral_constant<int, 4>{}, std::min(threads, kMaxThreads));
  } else {
    launch(std::integral_constant<int, 8>{}, kMaxThreads);
  }
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_add_rmsnorm_fp8(float* residual, const __nv_bfloat16* delta, const float* weight,
                            int32_t rows, int32_t width, float eps, __nv_bfloat16* out,
                            const Fp8RowQuant& quant, cudaStream_t stream, bool pdl) {
  if (rows == 0) return;
  launch_rows("add_rmsnorm_fp8", width, [&](auto per_thread, int threads) {
    pdl::launch(pdl, add_rmsnorm_fp8_kernel<decltype(per_thread)::value>, rows, threads, 0, stream,
                residual, delta, weight, width, eps, out, quant);
  });
}

void launch_add_rmsnorm(float* residual, const __nv_bfloat16* delta, const float* weight,
                        int32_t rows, int32_t width, float eps, __nv_bfloat16* out,
                        cudaStream_t stream, bool pdl) {
  if (rows == 0) return;
  launch_rows("add_rmsnorm", width, [&](auto per_thread, int threads) {
    pdl::launch(pdl, add_rmsnorm_kernel<decltype(per_thread)::value>, rows, threads, 0, stream,
                residual, delta, weight, width, eps, out);
  });
}

}  // namespace tandem::kernels
