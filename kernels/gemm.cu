#include "gemm.cuh"

#include <cstdio>
#include <cstdlib>

#include "cublas_check.cuh"
#include "cuda_check.cuh"

namespace tandem::kernels {

GemmContext::GemmContext(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  TANDEM_CUBLAS_CHECK(cublasLtCreate(&handle_));
  TANDEM_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

GemmContext::~GemmContext() {
  for (auto& [key, p] : plans_) destroy_layouts(p.l);
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

GemmContext::Layouts GemmContext::make_layouts(int32_t m, int32_t n, int32_t k, bool out_f32,
                                               int32_t ldy) const {
  return tn_layouts(m, n, k, CUDA_R_16BF, out_f32 ? CUDA_R_32F : CUDA_R_16BF, ldy);
}

const cublasLtMatmulAlgo_t& GemmContext::searched(int32_t m_bucket, int32_t n, int32_t k,
                                                  bool out_f32) {
  const Key key{m_bucket, n, k, out_f32};
  auto it = algos_.find(key);
  if (it != algos_.end()) return it->second;
  Layouts l = make_layouts(m_bucket, n, k, out_f32, n);
  cublasLtMatmulPreference_t pref;
  TANDEM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  TANDEM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_, sizeof(workspace_bytes_)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  TANDEM_CUBLAS_CHECK(
      cublasLtMatmulAlgoGetHeuristic(handle_, l.op, l.a, l.b, l.c, l.c, pref, 1, &result, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  destroy_layouts(l);
  if (found == 0) {
    std::fprintf(stderr, "cuBLASLt: no algorithm for m=%d n=%d k=%d\n", m_bucket, n, k);
    std::abort();
  }
  return algos_.emplace(key, result.algo).first->second;
}

GemmContext::Plan& GemmContext::plan(int32_t m, int32_t n, int32_t k, bool out_f32, int32_t ldy) {
  const PlanKey key{m, n, k, out_f32, ldy};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan p;
  p.l = make_layouts(m, n, k, out_f32, ldy);
  p.algo = searched(bucket(m), n, k, out_f32);
  // Once per exact m. Cheap: a new m's plan, its layouts, this check and any search included,
  // took 3-37 us of host time (median 9 us, 185 of them in spec runs on the H100, NOTES.md v49).
  // (A 1,000-token prompt's last chunk of 232 rows, spanning 13.3 ms on the H200 against ~2 ms
  // for the 256-row chunks before it, had been put down to these checks; they cannot take it.)
  cublasLtMatmulHeuristicResult_t check{};
  if (cublasLtMatmulAlgoCheck(handle_, p.l.op, p.l.a, p.l.b, p.l.c, p.l.c, &p.algo, &check) !=
          CUBLAS_STATUS_SUCCESS ||
      check.workspaceSize > workspace_bytes_) {
    p.algo = searched(m, n, k, out_f32);  // the bucket's algorithm does not fit this m
  }
  return plans_.emplace(key, p).first->second;
}

void GemmContext::prepare(int32_t max_m, int32_t n, int32_t k, bool out_f32) {
  for (int32_t m = 1; m <= max_m; m = bucket(m) + 1) searched(bucket(m), n, k, out_f32);
}

void GemmContext::run(const __nv_bfloat16* x, const __nv_bfloat16* w, int32_t m, int32_t n,
                      int32_t k, void* y, bool out_f32, cudaStream_t stream, int32_t ldy) {
  if (m == 0) return;
  const Plan& p = plan(m, n, k, out_f32, ldy > 0 ? ldy : n);
  const float alpha = 1.0f, beta = 0.0f;
  TANDEM_CUBLAS_CHECK(cublasLtMatmul(handle_, p.l.op, &alpha, w, p.l.a, x, p.l.b, &beta, y, p.l.c,
                                     y, p.l.c, &p.algo, workspace_, workspace_bytes_, stream));
}

}  // namespace tandem::kernels
