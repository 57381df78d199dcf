// The cuBLASLt algorithms its heuristic offers for the bf16 GEMMs of a layer, each timed: how far
// the first one (what GemmContext runs) is from the best of them. One JSON object per line:
//   {"model", "shape", "m", "n", "k", "algos", "first_us", "best_us", "best_index", ...}
//
//   bench_gemm_algos [--rows 64,2048] [--iters 30] [--candidates 16]
//
// Shapes: Qwen2.5-7B's and Llama-3.1-8B's q|k|v, o, gate|up, down and lm_head (fp32 logits), as the
// CUDA runner stacks them. Weights rotate through enough copies to exceed the L2 several times
// over, so each launch streams its weights from HBM as in a real step.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cublas_check.cuh"
#include "kernels/cublaslt_layouts.cuh"
#include "kernels/cuda_check.cuh"

namespace {

struct Shape {
  const char* model;
  const char* name;
  int32_t n, k;
  bool out_f32;
};

constexpr Shape kShapes[] = {
    {"qwen2.5-7b", "qkv", 4608, 3584, false},      {"qwen2.5-7b", "o", 3584, 3584, false},
    {"qwen2.5-7b", "gate_up", 37888, 3584, false}, {"qwen2.5-7b", "down", 3584, 18944, false},
    {"qwen2.5-7b", "lm_head", 152064, 3584, true}, {"llama-3.1-8b", "qkv", 6144, 4096, false},
    {"llama-3.1-8b", "o", 4096, 4096, false},      {"llama-3.1-8b", "gate_up", 28672, 4096, false},
    {"llama-3.1-8b", "down", 4096, 14336, false},
};

constexpr size_t kRotationBytes = size_t(512) << 20;
constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // as GemmContext's default

std::vector<int32_t> parse_rows(const char* s) {
  std::vector<int32_t> rows;
  for (const char* p = s; *p != '\0';) {
    rows.push_back(int32_t(std::strtol(p, const_cast<char**>(&p), 10)));
    if (*p == ',') ++p;
  }
  return rows;
}

// Mean µs of one launch of `algo`, over `iters` launches rotating the weight copies.
float time_algo(cublasLtHandle_t h, const tandem::kernels::LtLayouts& l,
                const cublasLtMatmulAlgo_t& algo, const std::vector<void*>& w, const void* x,
                void* y, void* workspace, int iters, cudaStream_t stream) {
  const float alpha = 1.0f, beta = 0.0f;
  auto launch = [&](int i) {
    return cublasLtMatmul(h, l.op, &alpha, w[size_t(i) % w.size()], l.a, x, l.b, &beta, y, l.c, y,
                          l.c, &algo, workspace, kWorkspaceBytes, stream);
  };
  for (int i = 0; i < 3; ++i) {
    if (launch(i) != CUBLAS_STATUS_SUCCESS) return -1.0f;
  }
  cudaEvent_t a, b;
  TANDEM_CUDA_CHECK(cudaEventCreate(&a));
  TANDEM_CUDA_CHECK(cudaEventCreate(&b));
  TANDEM_CUDA_CHECK(cudaEventRecord(a, stream));
  for (int i = 0; i < iters; ++i) TANDEM_CUBLAS_CHECK(launch(i));
  TANDEM_CUDA_CHECK(cudaEventRecord(b, stream));
  TANDEM_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0.0f;
  TANDEM_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms * 1000.0f / float(iters);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int32_t> rows = {64, 2048};
  int iters = 30, candidates = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--rows") {
      rows = parse_rows(argv[i + 1]);
    } else if (flag == "--iters") {
      iters = std::atoi(argv[i + 1]);
    } else if (flag == "--candidates") {
      candidates = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  cublasLtHandle_t h;
  TANDEM_CUBLAS_CHECK(cublasLtCreate(&h));
  cudaStream_t stream;
  TANDEM_CUDA_CHECK(cudaStreamCreate(&stream));
  void* workspace = nullptr;
  TANDEM_CUDA_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));
  for (const Shape& s : kShapes) {
    const size_t w_bytes = size_t(s.n) * size_t(s.k) * sizeof(__nv_bfloat16);
    std::vector<void*> w(std::max<size_t>(2, kRotationBytes / w_bytes + 1));
    for (void*& p : w) {
      TANDEM_CUDA_CHECK(cudaMalloc(&p, w_bytes));
      TANDEM_CUDA_CHECK(cudaMemset(p, 0x3c, w_bytes));  // bf16 0x3c3c ~ 0.0115 each
    }
    for (int32_t m : rows) {
      const size_t y_bytes = size_t(m) * size_t(s.n) * (s.out_f32 ? 4 : 2);
      void *x = nullptr, *y = nullptr;
      TANDEM_CUDA_CHECK(cudaMalloc(&x, size_t(m) * size_t(s.k) * sizeof(__nv_bfloat16)));
      TANDEM_CUDA_CHECK(cudaMemset(x, 0x3c, size_t(m) * size_t(s.k) * sizeof(__nv_bfloat16)));
      TANDEM_CUDA_CHECK(cudaMalloc(&y, y_bytes));
      tandem::kernels::LtLayouts l = tandem::kernels::tn_layouts(
          m, s.n, s.k, CUDA_R_16BF, s.out_f32 ? CUDA_R_32F : CUDA_R_16BF, s.n);
      cublasLtMatmulPreference_t pref;
      TANDEM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
      TANDEM_CUBLAS_CHECK(
          cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                               &kWorkspaceBytes, sizeof(kWorkspaceBytes)));
      std::vector<cublasLtMatmulHeuristicResult_t> found(static_cast<size_t>(candidates));
      int count = 0;
      TANDEM_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(h, l.op, l.a, l.b, l.c, l.c, pref,
                                                         candidates, found.data(), &count));
      std::string times;
      float first = -1.0f, best = 1e30f;
      int best_index = -1;
      for (int i = 0; i < count; ++i) {
        const float us = time_algo(h, l, found[size_t(i)].algo, w, x, y, workspace, iters, stream);
        times += (i ? ", " : "") + std::to_string(us);
        if (i == 0) first = us;
        if (us > 0.0f && us < best) {
          best = us;
          best_index = i;
        }
      }
      const double bytes = double(w_bytes) + double(y_bytes) + double(m) * s.k * 2.0;
      const double flop = 2.0 * m * double(s.n) * s.k;
      std::printf(
          "{\"model\": \"%s\", \"shape\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"algos\": %d, "
          "\"first_us\": %.2f, \"best_us\": %.2f, \"best_index\": %d, \"first_tbps\": %.3f, "
          "\"best_tbps\": %.3f, \"first_tflops\": %.1f, \"best_tflops\": %.1f, \"us\": [%s]}\n",
          s.model, s.name, m, s.n, s.k, count, first, best, best_index, bytes / first / 1e6,
          bytes / best / 1e6, flop / first / 1e6, flop / best / 1e6, times.c_str());
      std::fflush(stdout);
      cublasLtMatmulPreferenceDestroy(pref);
      tandem::kernels::destroy_layouts(l);
      cudaFree(x);
      cudaFree(y);
    }
    for (void* p : w) cudaFree(p);
  }
  cudaFree(workspace);
  cudaStreamDestroy(stream);
  cublasLtDestroy(h);
  return 0;
}
