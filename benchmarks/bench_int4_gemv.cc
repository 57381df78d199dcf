// Int4 GEMV bandwidth at Qwen2.5-7B's decode shapes, against the bf16 GEMV, cuBLASLt (1-8
// tokens), the bf16 tensor-core skinny GEMM (2-16 tokens, every variant) and a device copy.
//
//   bench_int4_gemv [--iters 200] [--group 128] [--int4-only | --bf16-only] [--m 1,5,20]
//
// Each case rotates over enough copies of the weights to be 4× the L2, as a forward streams
// each layer's weights once, and times `iters` launches captured in one CUDA graph (as the
// runner replays decode steps) and, apart, issued one by one on a stream. One JSON line per case:
// microseconds per launch and GB/s of the bytes the kernel must read (qweight + scales + zeros
// for int4; the bf16 weights for "bf16"; read + write for "copy").
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda_check.cuh"
#include "kernels/gemm.cuh"
#include "kernels/gemm_skinny.cuh"
#include "kernels/gemv.cuh"
#include "kernels/int4_linear.cuh"
#include "kernels/silu_mul.cuh"
#include "qwen7b_shapes.h"

using namespace tandem;

namespace {

using Shape = bench::LinearShape;
constexpr const auto& kShapes = bench::kQwen7bLinears;

template <typename T>
T* device_random(size_t count, uint32_t seed, std::function<T(std::mt19937&)> gen) {
  std::mt19937 rng(seed);
  std::vector<T> host(count);
  for (T& v : host) v = gen(rng);
  T* p = nullptr;
  TANDEM_CUDA_CHECK(cudaMalloc(&p, count * sizeof(T)));
  TANDEM_CUDA_CHECK(cudaMemcpy(p, host.data(), count * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

struct Timing {
  double graph_us = 0, stream_us = 0;
};

// `launch(i)` runs copy i % copies; `iters` of them in a graph, then on the stream.
Timing time_launches(int iters, const std::function<void(int, cudaStream_t)>& launch) {
  cudaStream_t stream;
  TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start, stop;
  TANDEM_CUDA_CHECK(cudaEventCreate(&start));
  TANDEM_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 20; ++i) launch(i, stream);  // warm up
  Timing t;
  cudaGraph_t graph;
  TANDEM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < iters; ++i) launch(i, stream);
  TANDEM_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  TANDEM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  TANDEM_CUDA_CHECK(cudaGraphLaunch(exec, stream));  // warm up
  TANDEM_CUDA_CHECK(cudaEventRecord(start, stream));
  TANDEM_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  TANDEM_CUDA_CHECK(cudaEventRecord(stop, stream));
  TANDEM_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  TANDEM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  t.graph_us = 1000.0 * ms / iters;
  TANDEM_CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < iters; ++i) launch(i, stream);
  TANDEM_CUDA_CHECK(cudaEventRecord(stop, stream));
  TANDEM_CUDA_CHECK(cudaEventSynchronize(stop));
  TANDEM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  t.stream_us = 1000.0 * ms / iters;
  TANDEM_CUDA_CHECK(cudaGraphExecDestroy(exec));
  TANDEM_CUDA_CHECK(cudaGraphDestroy(graph));
  TANDEM_CUDA_CHECK(cudaEventDestroy(start));
  TANDEM_CUDA_CHECK(cudaEventDestroy(stop));
  TANDEM_CUDA_CHECK(cudaStreamDestroy(stream));
  return t;
}

void print(nlohmann::json j, double bytes, const Timing& t) {
  j["bytes"] = bytes;
  j["graph_us"] = t.graph_us;
  j["stream_us"] = t.stream_us;
  j["graph_gbps"] = bytes / t.graph_us / 1e3;
  j["stream_gbps"] = bytes / t.stream_us / 1e3;
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 200, group = 128;
  bool int4_only = false;  // skip the bf16 comparisons and act-order (plan sweeps)
  bool bf16_only = false;  // skip the int4 kernels (the skinny GEMM sweep)
  std::vector<int> ms = {1, 2, 4, 5, 8, 16, 20, 32};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--iters" && i + 1 < argc) {
      iters = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--group" && i + 1 < argc) {
      group = std::atoi(argv[++i]);
    } else if (a == "--int4-only") {
      int4_only = true;
    } else if (a == "--bf16-only") {
      bf16_only = true;
    } else if (a == "--m" && i + 1 < argc) {
      ms.clear();
      for (const char* p = argv[++i]; *p != '\0';) {
        char* end = nullptr;
        const long v = std::strtol(p, &end, 10);
        if (end == p || v < 1 || v > kernels::kInt4GemvMaxTokens) {
          std::fprintf(stderr, "--m: token counts 1..%d, comma-separated\n",
                       kernels::kInt4GemvMaxTokens);
          return 2;
        }
        ms.push_back(int(v));
        p = *end == ',' ? end + 1 : end;
      }
    } else {
      std::fprintf(stderr,
                   "usage: bench_int4_gemv [--iters N] [--group G] [--int4-only | --bf16-only] "
                   "[--m 1,5,...]\n");
      return 2;
    }
  }
  int device = 0, l2 = 0;
  TANDEM_CUDA_CHECK(cudaGetDevice(&device));
  TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  const double rotate_bytes = 4.0 * l2;
  cudaDeviceProp prop;
  TANDEM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  std::fprintf(stderr, "%s, L2 %d MiB, %d SMs\n", prop.name, l2 >> 20, prop.multiProcessorCount);

  {  // the copy ceiling: 1 GiB device to device
    const size_t bytes = size_t(1) << 30;
    void *a, *b;
    TANDEM_CUDA_CHECK(cudaMalloc(&a, bytes));
    TANDEM_CUDA_CHECK(cudaMalloc(&b, bytes));
    TANDEM_CUDA_CHECK(cudaMemset(a, 1, bytes));
    const Timing t = time_launches(std::min(iters, 20), [&](int, cudaStream_t s) {
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
    });
    print({{"kernel", "copy"}}, 2.0 * double(bytes), t);
    TANDEM_CUDA_CHECK(cudaFree(a));
    TANDEM_CUDA_CHECK(cudaFree(b));
  }

  kernels::GemmContext gemm;
  for (const Shape& s : kShapes) {
    const int32_t g = group == -1 ? s.k : group;
    const size_t words = size_t((s.n + 15) / 16) * 2 * size_t(s.k);
    const size_t group_entries = size_t((s.n + 15) / 16) * size_t(s.k / g) * 16;
    const double bytes = double(words) * 4 + double(group_entries) * 3;
    const int copies = std::max(2, int(rotate_bytes / bytes) + 1);
    std::vector<kernels::Int4Matrix> mats;
    std::vector<void*> owned;
    for (int c = 0; c < copies; ++c) {
      kernels::Int4Matrix m;
      m.qweight = device_random<uint32_t>(words, 1 + c, [](std::mt19937& r) { return r(); });
      m.scales = reinterpret_cast<const __half*>(device_random<uint16_t>(
          group_entries, 100 + c, [](std::mt19937& r) { return uint16_t(0x1c00 + r() % 0x400); }));
      m.zeros = device_random<uint8_t>(group_entries, 200 + c,
                                       [](std::mt19937& r) { return uint8_t(r() % 16); });
      m.n = s.n;
      m.k = s.k;
      m.group_size = g;
      owned.push_back(const_cast<uint32_t*>(m.qweight));
      owned.push_back(const_cast<__half*>(m.scales));
      owned.push_back(const_cast<uint8_t*>(m.zeros));
      mats.push_back(m);
    }
    int32_t* perm = device_random<int32_t>(size_t(s.k), 7, [](std::mt19937&) { return 0; });
    {  // a real permutation
      std::vector<int32_t> p(size_t(s.k));
      for (int32_t i = 0; i < s.k; ++i) p[size_t(i)] = i;
      std::shuffle(p.begin(), p.end(), std::mt19937(9));
      TANDEM_CUDA_CHECK(cudaMemcpy(perm, p.data(), p.size() * 4, cudaMemcpyHostToDevice));
    }
    auto* x =
        device_random<uint16_t>(size_t(kernels::kInt4GemvMaxTokens) * s.k, 3,
                                [](std::mt19937& r) { return uint16_t(0x3c00 + r() % 0x7f); });
    float* y = nullptr;
    TANDEM_CUDA_CHECK(cudaMalloc(&y, size_t(kernels::kInt4GemvMaxTokens) * s.n * 4));
    const auto* xb = reinterpret_cast<const __nv_bfloat16*>(x);
    for (bool act_order : {false, true}) {
      if ((act_order && int4_only) || bf16_only) continue;
      for (int m : ms) {
        const Timing t = time_launches(iters, [&](int i, cudaStream_t stream) {
          kernels::Int4Matrix w = mats[size_t(i % copies)];
          w.perm = act_order ? perm : nullptr;
          kernels::launch_int4_gemv(xb, w, m, y, s.n, false, stream);
        });
        print({{"kernel", "int4_gemv"},
               {"shape", s.name},
               {"n", s.n},
               {"k", s.k},
               {"group_size", g},
               {"m", m},
               {"act_order", act_order},
               {"copies", copies}},
              bytes, t);
      }
    }
    for (void* p : owned) TANDEM_CUDA_CHECK(cudaFree(p));
    if (int4_only) {
      TANDEM_CUDA_CHECK(cudaFree(perm));
      TANDEM_CUDA_CHECK(cudaFree(x));
      TANDEM_CUDA_CHECK(cudaFree(y));
      continue;
    }
    // The bf16 GEMV on the same shape, for the ratio.
    const double bf16_bytes = double(s.n) * s.k * 2;
    const int bf16_copies = std::max(1, int(rotate_bytes / bf16_bytes) + 1);
    std::vector<__nv_bfloat16*> ws;
    for (int c = 0; c < bf16_copies; ++c) {
      ws.push_back(reinterpret_cast<__nv_bfloat16*>(
          device_random<uint16_t>(size_t(s.n) * s.k, 300 + c,
                                  [](std::mt19937& r) { return uint16_t(0x3c00 + r() % 0x7f); })));
    }
    // The GEMV where the runner takes it (1-2 tokens; SwiGLU-fused on gate|up), cuBLASLt at 1-16
    // (on gate|up also with the silu_mul launch the unfused path adds), and each skinny GEMM
    // variant at 2-16 tokens as far as it goes (SwiGLU-fused on gate|up).
    const bool gate_up = std::string(s.name) == "gate_up_proj";
    const int skinny = kernels::skinny_variants();
    for (const char* form : {"bf16_gemv", "bf16_cublaslt", "bf16_gemv_swiglu",
                             "bf16_cublaslt_silu_mul", "bf16_skinny"}) {
      const std::string f = form;
      if ((f == "bf16_gemv_swiglu" || f == "bf16_cublaslt_silu_mul") && !gate_up) continue;
      const bool gemv = f == "bf16_gemv" || f == "bf16_gemv_swiglu";
      const bool sk = f == "bf16_skinny";
      for (int variant = 0; variant < (sk ? skinny : 1); ++variant) {
        const int max_m = gemv ? kernels::kGemvMaxTokens
                          : sk ? kernels::skinny_variant_tokens(variant)
                               : kernels::kSkinnyMaxTokens;
        for (int m = sk ? 2 : 1; m <= max_m; ++m) {
          if (sk && m > 3 && m != 5 && m != 8 && m != 9 && m != 16 && m != 17 && m != 24 &&
              m != 32) {
            continue;
          }
          const Timing t = time_launches(iters, [&](int i, cudaStream_t stream) {
            const __nv_bfloat16* wi = ws[size_t(i % bf16_copies)];
            auto* yb = reinterpret_cast<__nv_bfloat16*>(y);
            auto* act = yb + size_t(kernels::kSkinnyMaxTokens) * s.n;  // past the gate|up rows
            if (f == "bf16_gemv") {
              kernels::launch_gemv(xb, wi, m, s.n, s.k, y, false, stream);
            } else if (f == "bf16_cublaslt") {
              gemm.run(xb, wi, m, s.n, s.k, y, false, stream);
            } else if (f == "bf16_gemv_swiglu") {
              kernels::launch_gemv_swiglu(xb, wi, m, s.n / 2, s.k, yb, stream);
            } else if (f == "bf16_cublaslt_silu_mul") {
              gemm.run(xb, wi, m, s.n, s.k, y, false, stream);
              kernels::launch_silu_mul(yb, m, s.n / 2, act, stream);
            } else if (gate_up) {
              kernels::launch_skinny_swiglu(xb, wi, m, s.n / 2, s.k, yb, stream, variant);
            } else {
              kernels::launch_skinny_gemm(xb, wi, m, s.n, s.k, y, false, stream, 0, variant);
            }
          });
          nlohmann::json j = {{"kernel", form}, {"shape", s.name}, {"n", s.n},
                              {"k", s.k},       {"m", m},          {"copies", bf16_copies}};
          if (sk) j["variant"] = kernels::skinny_variant_name(variant);
          print(j, bf16_bytes, t);
        }
      }
    }
    for (auto* p : ws) TANDEM_CUDA_CHECK(cudaFree(p));
    TANDEM_CUDA_CHECK(cudaFree(perm));
    TANDEM_CUDA_CHECK(cudaFree(x));
    TANDEM_CUDA_CHECK(cudaFree(y));
  }
  return 0;
}
