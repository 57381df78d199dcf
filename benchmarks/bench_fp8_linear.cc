// FP8 Linear kernels on Qwen2.5-7B's projection shapes (n × k: qkv 4608 × 3584, o_proj
// 3584 × 3584, gate|up 37888 × 3584, down 3584 × 18944), one JSON object per line on stdout:
//   W8A8 and W8A16 GEMV at m = 1, 2, 4: GB/s of weight bytes (the copy ceiling is ~4.2 TB/s);
//   Fp8GemmContext at m = 2048: TFLOP/s per scaling mode (channel: the mode prepare() picked
//   and the unit-scales fallback; block), beside the bf16 GemmContext on the same shape;
//   activation quantization at m = 2048.
//
//   bench_fp8_linear [--iters 50] [--gemv-only]
//
// --gemv-only: the decode GEMVs alone (for sweeps of their environment knobs, fp8_linear.cu).
//
// Decode weights rotate through enough copies to exceed the L2 (50 MB) several times over, so
// every launch streams its weights from HBM as in a real step.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda_check.cuh"
#include "kernels/fp8_linear.cuh"
#include "kernels/gemm.cuh"
#include "qwen7b_shapes.h"

using namespace tandem;

namespace {

using Shape = bench::LinearShape;
constexpr const auto& kShapes = bench::kQwen7bLinears;

constexpr size_t kRotationBytes = size_t(512) << 20;
constexpr int32_t kPrefillTokens = 2048;

template <typename T>
T* device_alloc(size_t count, int fill) {
  T* p = nullptr;
  TANDEM_CUDA_CHECK(cudaMalloc(&p, count * sizeof(T)));
  TANDEM_CUDA_CHECK(cudaMemset(p, fill, count * sizeof(T)));
  return p;
}

// Small finite e4m3 codes (0x30 = 0.5, 0x38 = 1) and positive scales: values never matter to the
// timing, but NaN or overflow could slow nothing down either way; keep them ordinary.
struct Weights {
  std::vector<uint8_t*> copies;  // each [n, k]
  float* scale = nullptr;        // [n] (channel), or [ceil(n/128), ceil(k/128)] (block)
  Weights(const Shape& s, int count) {
    for (int i = 0; i < count; ++i)
      copies.push_back(device_alloc<uint8_t>(size_t(s.n) * s.k, 0x30));
    const size_t scales = size_t(s.n) + size_t((s.n + 127) / 128) * ((s.k + 127) / 128);
    scale = device_alloc<float>(scales, 0);
    std::vector<float> ones(scales, 1.0f / 64);
    TANDEM_CUDA_CHECK(
        cudaMemcpy(scale, ones.data(), scales * sizeof(float), cudaMemcpyHostToDevice));
  }
  ~Weights() {
    for (auto* p : copies) cudaFree(p);
    cudaFree(scale);
  }
  kernels::Fp8Matrix matrix(const Shape& s, int copy, bool block) const {
    kernels::Fp8Matrix m;
    m.weight = copies[size_t(copy) % copies.size()];
    m.scale = scale;
    m.block = block;
    m.n = s.n;
    m.k = s.k;
    return m;
  }
};

// Mean milliseconds per call over `iters` back-to-back calls (after 3 warm-up calls).
template <typename F>
double time_ms(int iters, F&& call) {
  for (int i = 0; i < 3; ++i) call(i);
  cudaEvent_t start, stop;
  TANDEM_CUDA_CHECK(cudaEventCreate(&start));
  TANDEM_CUDA_CHECK(cudaEventCreate(&stop));
  TANDEM_CUDA_CHECK(cudaEventRecord(start));
  for (int i = 0; i < iters; ++i) call(i);
  TANDEM_CUDA_CHECK(cudaEventRecord(stop));
  TANDEM_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  TANDEM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return double(ms) / iters;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 50;
  bool gemv_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--gemv-only") == 0) {
      gemv_only = true;
    } else {
      std::fprintf(stderr, "usage: bench_fp8_linear [--iters N] [--gemv-only]\n");
      return 2;
    }
  }
  cudaDeviceProp prop{};
  TANDEM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("{\"bench\":\"fp8_linear\",\"gpu\":\"%s\",\"sms\":%d,\"l2_mb\":%.0f}\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize / 1048576.0);

  const int32_t max_k = 18944;
  auto* x16 = device_alloc<__nv_bfloat16>(size_t(kPrefillTokens) * max_k, 0);
  {
    std::vector<uint16_t> ones(size_t(kPrefillTokens) * max_k, 0x3f80);  // bf16 1.0
    TANDEM_CUDA_CHECK(cudaMemcpy(x16, ones.data(), ones.size() * 2, cudaMemcpyHostToDevice));
  }
  auto* xq = device_alloc<uint8_t>(size_t(kPrefillTokens) * max_k, 0x38);
  auto* xs = device_alloc<float>(size_t(kPrefillTokens) * ((max_k + 127) / 128), 0);
  kernels::launch_fp8_quantize(x16, kPrefillTokens, max_k, kernels::kFp8Block, nullptr, 0.0f, xq,
                               xs, nullptr);
  auto* y = device_alloc<float>(size_t(kPrefillTokens) * 37888, 0);
  auto* w16 = device_alloc<__nv_bfloat16>(size_t(37888) * 3584, 0);
  kernels::Fp8GemmContext fp8_gemm;
  kernels::GemmContext bf16_gemm;

  for (const Shape& s : kShapes) {
    const size_t bytes = size_t(s.n) * s.k;
    const int copies = int((kRotationBytes + bytes - 1) / bytes);
    Weights w(s, copies);
    for (bool block : {false, true}) {
      const int32_t group = block ? kernels::kFp8Block : s.k;
      for (int32_t m : {1, 2, 4, 5, 8}) {
        const double a8 = time_ms(iters, [&](int i) {
          kernels::launch_fp8_gemv(xq, xs, group, w.matrix(s, i, block), m, y, s.n, false, nullptr);
        });
        const double a16 = time_ms(iters, [&](int i) {
          kernels::launch_fp8_gemv_a16(x16, w.matrix(s, i, block), m, y, s.n, false, nullptr);
        });
        for (auto [kind, ms] : {std::pair{"w8a8", a8}, std::pair{"w8a16", a16}}) {
          std::printf(
              "{\"op\":\"fp8_gemv\",\"kind\":\"%s\",\"shape\":\"%s\",\"n\":%d,\"k\":%d,"
              "\"block\":%s,\"m\":%d,\"us\":%.2f,\"weight_gb_per_s\":%.1f}\n",
              kind, s.name, s.n, s.k, block ? "true" : "false", m, ms * 1e3,
              double(bytes) / (ms * 1e-3) / 1e9);
        }
      }
    }
    std::fflush(stdout);
    if (gemv_only) continue;
    const double flop = 2.0 * kPrefillTokens * double(s.n) * s.k;
    struct Variant {
      const char* name;
      bool block, unit_scales;
    };
    for (Variant v : {Variant{"channel", false, false}, Variant{"channel_unit_scales", false, true},
                      Variant{"block", true, false}}) {
      if (!fp8_gemm.supports(s.n, s.k, v.block)) {
        std::printf(
            "{\"op\":\"fp8_gemm\",\"variant\":\"%s\",\"shape\":\"%s\",\"supported\":false}\n",
            v.name, s.name);
        continue;
      }
      fp8_gemm.prefer_unit_scales(v.unit_scales);
      fp8_gemm.prepare(kPrefillTokens, s.n, s.k, v.block, false);
      const int32_t group = v.block ? kernels::kFp8Block : s.k;
      // x_scale per token (channel) or per 128-feature group (block), as run() expects.
      kernels::launch_fp8_quantize(x16, kPrefillTokens, s.k, group, nullptr, 0.0f, xq, xs, nullptr);
      const double ms = time_ms(iters, [&](int i) {
        fp8_gemm.run(xq, xs, w.matrix(s, i, v.block), kPrefillTokens, y, s.n, false, nullptr);
      });
      std::printf(
          "{\"op\":\"fp8_gemm\",\"variant\":\"%s\",\"mode\":\"%s\",\"shape\":\"%s\",\"n\":%d,"
          "\"k\":%d,\"m\":%d,\"us\":%.1f,\"tflop_per_s\":%.1f}\n",
          v.name, fp8_gemm.mode(s.n, s.k, v.block, false), s.name, s.n, s.k, kPrefillTokens,
          ms * 1e3, flop / (ms * 1e-3) / 1e12);
    }
    fp8_gemm.prefer_unit_scales(false);
    const double bf16_ms = time_ms(
        iters, [&](int) { bf16_gemm.run(x16, w16, kPrefillTokens, s.n, s.k, y, false, nullptr); });
    std::printf(
        "{\"op\":\"bf16_gemm\",\"shape\":\"%s\",\"n\":%d,\"k\":%d,\"m\":%d,\"us\":%.1f,"
        "\"tflop_per_s\":%.1f}\n",
        s.name, s.n, s.k, kPrefillTokens, bf16_ms * 1e3, flop / (bf16_ms * 1e-3) / 1e12);
    for (bool block : {false, true}) {
      const int32_t group = block ? kernels::kFp8Block : s.k;
      const double ms = time_ms(iters, [&](int) {
        kernels::launch_fp8_quantize(x16, kPrefillTokens, s.k, group, nullptr, 0.0f, xq, xs,
                                     nullptr);
      });
      const double moved = double(kPrefillTokens) * s.k * 3;  // bf16 in, e4m3 out
      std::printf(
          "{\"op\":\"fp8_quantize\",\"shape\":\"%s\",\"k\":%d,\"m\":%d,\"group\":%d,\"us\":%.1f,"
          "\"gb_per_s\":%.1f}\n",
          s.name, s.k, kPrefillTokens, group, ms * 1e3, moved / (ms * 1e-3) / 1e9);
    }
    std::fflush(stdout);
  }
  TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
  cudaFree(x16);
  cudaFree(xq);
  cudaFree(xs);
  cudaFree(y);
  cudaFree(w16);
  return 0;
}
