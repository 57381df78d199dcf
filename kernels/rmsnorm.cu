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
//
// Which of the row's features a thread holds (its kPerThread slots): with kVec (width % 4 == 0,
// every model's hidden size) runs of four adjacent ones, every blockDim.x-th run, so the fp32
// residual and weights move as 16-byte accesses and the bf16 delta and output as 8-byte ones;
// otherwise every blockDim.x-th feature, one scalar access each. The runs cut the instructions of
// even a one-row norm's latency chain: a 7B norm 4.19 -> 2.89 us at one row and 30.4 -> 21.7 us
// at 2,048 (ncu, H200, NOTES.md v32).
template <bool kVec>
__device__ __forceinline__ int feature_of(int slot) {
  if constexpr (kVec) return 4 * (int(threadIdx.x) + (slot / 4) * int(blockDim.x)) + slot % 4;
  return int(threadIdx.x) + slot * int(blockDim.x);
}

__device__ __forceinline__ float4 bf16x4_to_float4(uint2 v) {
  const auto lo = *reinterpret_cast<const __nv_bfloat162*>(&v.x);
  const auto hi = *reinterpret_cast<const __nv_bfloat162*>(&v.y);
  return make_float4(__low2float(lo), __high2float(lo), __low2float(hi), __high2float(hi));
}

// A run's four normalised outputs, bf16(x · inv · g), packed low feature first.
__device__ __forceinline__ uint2 normed_run(const float* x, const float* g, float inv) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(x[0] * inv * g[0], x[1] * inv * g[1]);
  const __nv_bfloat162 hi = __floats2bfloat162_rn(x[2] * inv * g[2], x[3] * inv * g[3]);
  return make_uint2(*reinterpret_cast<const uint32_t*>(&lo),
                    *reinterpret_cast<const uint32_t*>(&hi));
}

// The shared first pass: residual (+= delta) of this thread's kPerThread elements of the block's
// row into v (0 past the row), the norm's weights into wv, and the row's 1 / rms.
template <int kPerThread, bool kVec>
__device__ __forceinline__ float add_and_inv_rms(float* __restrict__ residual,
                                                 const __nv_bfloat16* __restrict__ delta,
                                                 const float* __restrict__ weight, int32_t width,
                                                 float eps, int64_t base, float* v, float* wv,
                                                 float* scratch) {
  float ss = 0.0f;
  // The weights load with the row, not after the reduction's barriers: one memory latency less
  // on a kernel that is all latency at decode sizes. They are loaded before the wait of an
  // overlapped launch (pdl.cuh; a no-op on a plain one), the row after it.
  if constexpr (kVec) {
#pragma unroll
    for (int j = 0; j < kPerThread / 4; ++j) {
      const int c = feature_of<true>(4 * j);
      const float4 w4 = c < width ? *reinterpret_cast<const float4*>(weight + c)
                                  : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      wv[4 * j] = w4.x, wv[4 * j + 1] = w4.y, wv[4 * j + 2] = w4.z, wv[4 * j + 3] = w4.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int c = feature_of<false>(i);
      wv[i] = c < width ? weight[c] : 0.0f;
    }
  }
  pdl::allow_dependents();
  pdl::grid_dependency_wait();
  if constexpr (kVec) {
#pragma unroll
    for (int j = 0; j < kPerThread / 4; ++j) {
      const int c = feature_of<true>(4 * j);
      float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (c < width) {  // the whole run: width % 4 == 0
        float4* r4 = reinterpret_cast<float4*>(residual + base + c);
        x = *r4;
        if (delta != nullptr) {
          const float4 d =
              bf16x4_to_float4(pdl::load_input(reinterpret_cast<const uint2*>(delta + base + c)));
          x.x += d.x, x.y += d.y, x.z += d.z, x.w += d.w;
          *r4 = x;
        }
      }
      v[4 * j] = x.x, v[4 * j + 1] = x.y, v[4 * j + 2] = x.z, v[4 * j + 3] = x.w;
    }
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) ss += v[i] * v[i];
  } else {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int c = feature_of<false>(i);
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
  }
  ss = block_sum(ss, scratch);
  return rsqrtf(ss / float(width) + eps);
}

template <int kPerThread, bool kVec>
__global__ void __launch_bounds__(kMaxThreads)
    add_rmsnorm_kernel(float* __restrict__ residual, const __nv_bfloat16* __restrict__ delta,
                       const float* __restrict__ weight, int32_t width, float eps,
                       __nv_bfloat16* __restrict__ out) {
  __shared__ float scratch[32];
  const int64_t base = int64_t(blockIdx.x) * width;
  float v[kPerThread], wv[kPerThread];
  const float inv =
      add_and_inv_rms<kPerThread, kVec>(residual, delta, weight, width, eps, base, v, wv, scratch);
  if constexpr (kVec) {
#pragma unroll
    for (int j = 0; j < kPerThread / 4; ++j) {
      const int c = feature_of<true>(4 * j);
      if (c < width)
        *reinterpret_cast<uint2*>(out + base + c) = normed_run(v + 4 * j, wv + 4 * j, inv);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int c = feature_of<false>(i);
      if (c < width) out[base + c] = __float2bfloat16(v[i] * inv * wv[i]);
    }
  }
}

// add_rmsnorm_kernel's row (the same bits in residual and out), then that bf16 output quantized
// as launch_fp8_quantize quantizes a row: amax over it, one scale, e4m3 of value / scale.
template <int kPerThread, bool kVec>
__global__ void __launch_bounds__(kMaxThreads)
    add_rmsnorm_fp8_kernel(float* __restrict__ residual, const __nv_bfloat16* __restrict__ delta,
                           const float* __restrict__ weight, int32_t width, float eps,
                           __nv_bfloat16* __restrict__ out, Fp8RowQuant quant) {
  __shared__ float scratch[32];
  const int64_t base = int64_t(blockIdx.x) * width;
  float v[kPerThread], wv[kPerThread];
  const float inv =
      add_and_inv_rms<kPerThread, kVec>(residual, delta, weight, width, eps, base, v, wv, scratch);
  float amax = 0.0f;
  if constexpr (kVec) {  // a run's four outputs as one 8-byte store, its four e4m3 as one 4-byte
#pragma unroll
    for (int j = 0; j < kPerThread / 4; ++j) {
      const int c = feature_of<true>(4 * j);
      float* x = v + 4 * j;
      const uint2 packed = normed_run(x, wv + 4 * j, inv);
      const float4 back = bf16x4_to_float4(packed);  // what launch_fp8_quantize would read back
      x[0] = back.x, x[1] = back.y, x[2] = back.z, x[3] = back.w;
      if (c >= width) continue;
      *reinterpret_cast<uint2*>(out + base + c) = packed;
      amax = fmaxf(fmaxf(amax, fmaxf(fabsf(x[0]), fabsf(x[1]))), fmaxf(fabsf(x[2]), fabsf(x[3])));
    }
  } else {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int c = feature_of<false>(i);
      const __nv_bfloat16 o = __float2bfloat16(v[i] * inv * wv[i]);
      v[i] = __bfloat162float(o);  // what launch_fp8_quantize would read back
      if (c < width) {
        out[base + c] = o;
        amax = fmaxf(amax, fabsf(v[i]));
      }
    }
  }
  const float scale = quant.static_scale != nullptr
                          ? *quant.static_scale
                          : fp8::dynamic_scale(block_max(amax, scratch), quant.scale_ub);
  if constexpr (kVec) {
#pragma unroll
    for (int j = 0; j < kPerThread / 4; ++j) {
      const int c = feature_of<true>(4 * j);
      if (c >= width) continue;
      const float* x = v + 4 * j;
      // quantize1's conversion, two values an instruction: the same bytes.
      const uint32_t q01 = fp8::float2_to_e4m3x2(__fdiv_rn(x[0], scale), __fdiv_rn(x[1], scale));
      const uint32_t q23 = fp8::float2_to_e4m3x2(__fdiv_rn(x[2], scale), __fdiv_rn(x[3], scale));
      *reinterpret_cast<uint32_t*>(quant.xq + base + c) = (q01 & 0xffffu) | (q23 << 16);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int c = feature_of<false>(i);
      if (c < width) quant.xq[base + c] = fp8::quantize1(v[i], scale);
    }
  }
  if (threadIdx.x == 0) quant.x_scale[blockIdx.x] = scale;
}

// One block a row, 4 elements a thread up to 4,096 features, 8 up to 8,192 (more is refused):
// launch(per_thread = 4 or 8, vec = width % 4 == 0, as std::integral_constant / bool_constant,
// threads).
template <typename Launch>
void launch_rows(const char* what, int32_t width, Launch&& launch) {
  if (width > kMaxThreads * 8) {
    std::fprintf(stderr, "%s: width %d over %d\n", what, width, kMaxThreads * 8);
    std::abort();
  }
  const auto with_layout = [&](auto per_thread, int threads) {
    if (width % 4 == 0) {
      launch(per_thread, std::true_type{}, threads);
    } else {
      launch(per_thread, std::false_type{}, threads);
    }
  };
  if (width <= kMaxThreads * 4) {
    const int threads = std::max(32, ((width + 3) / 4 + 31) / 32 * 32);
    with_layout(std::integral_constant<int, 4>{}, std::min(threads, kMaxThreads));
  } else {
    with_layout(std::integral_constant<int, 8>{}, kMaxThreads);
  }
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_add_rmsnorm_fp8(float* residual, const __nv_bfloat16* delta, const float* weight,
                            int32_t rows, int32_t width, float eps, __nv_bfloat16* out,
                            const Fp8RowQuant& quant, cudaStream_t stream, bool pdl) {
  if (rows == 0) return;
  launch_rows("add_rmsnorm_fp8", width, [&](auto per_thread, auto vec, int threads) {
    pdl::launch(pdl, add_rmsnorm_fp8_kernel<decltype(per_thread)::value, decltype(vec)::value>,
                rows, threads, 0, stream, residual, delta, weight, width, eps, out, quant);
  });
}

void launch_add_rmsnorm(float* residual, const __nv_bfloat16* delta, const float* weight,
                        int32_t rows, int32_t width, float eps, __nv_bfloat16* out,
                        cudaStream_t stream, bool pdl) {
  if (rows == 0) return;
  launch_rows("add_rmsnorm", width, [&](auto per_thread, auto vec, int threads) {
    pdl::launch(pdl, add_rmsnorm_kernel<decltype(per_thread)::value, decltype(vec)::value>, rows,
                threads, 0, stream, residual, delta, weight, width, eps, out);
  });
}

}  // namespace tandem::kernels
