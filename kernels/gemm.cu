#include "gemm.cuh"

#include <cstdio>
#include <cstdlib>

#include "cuda_check.cuh"

#define TANDEM_CUBLAS_CHECK(call)                                                            \
  do {                                                                                       \
    cublasStatus_t st_ = (call);                                                             \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                                      \
      std::fprintf(stderr, "%s:%d: cuBLASLt error %d in %s\n", __FILE__, __LINE__, int(st_), \
                   #call);                                                                   \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

namespace tandem::kernels {

GemmContext::GemmContext(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  TANDEM_CUBLAS_CHECK(cublasLtCreate(&handle_));
  TANDEM_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

GemmContext::~GemmContext() {
  for (auto& [key, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.op);
  }
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

// Row-major y[m, n] is column-major y^T[n, m] = w[n, k] (column-major w^T with ld k, transposed)
// times x^T (column-major [k, m], ld k).
const GemmContext::Plan& GemmContext::plan(int32_t m, int32_t n, int32_t k, bool out_f32) {
  const auto key = std::make_tuple(m, n, k, out_f32);
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan p;
  TANDEM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  TANDEM_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  TANDEM_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  TANDEM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, k, n, k));
  TANDEM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, k, m, k));
  TANDEM_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&p.c, out_f32 ? CUDA_R_32F : CUDA_R_16BF, n, m, n));
  cublasLtMatmulPreference_t pref;
  TANDEM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  TANDEM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_, sizeof(workspace_bytes_)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  TANDEM_CUBLAS_CHECK(
      cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.c, p.c, pref, 1, &result, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  if (found == 0) {
    std::fprintf(stderr, "cuBLASLt: no algorithm for m=%d n=%d k=%d\n", m, n, k);
    std::abort();
  }
  p.algo = result.algo;
  return plans_.emplace(key, p).first->second;
}

void GemmContext::run(const __nv_bfloat16* x, const __nv_bfloat16* w, int32_t m, int32_t n,
                      int32_t k, void* y, bool out_f32, cudaStream_t stream) {
  if (m == 0) return;
  const Plan& p = plan(m, n, k, out_f32);
  const float alpha = 1.0f, beta = 0.0f;
  TANDEM_CUBLAS_CHECK(cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c,
                                     &p.algo, workspace_, workspace_bytes_, stream));
}

}  // namespace tandem::kernels
