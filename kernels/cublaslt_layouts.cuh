// The descriptors of one cuBLASLt matmul in the orientation both GEMM contexts use (gemm.cuh,
// fp8_linear.cuh): row-major y[m, n] = x[m, k] · w[n, k]^T is column-major y^T[n, m] = w^T
// transposed (column-major [k, n], ld k) times x^T (column-major [k, m], ld k); fp32 compute.
#pragma once

#include <cublasLt.h>

#include <cstdint>

#include "cublas_check.cuh"

namespace tandem::kernels {

struct LtLayouts {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
};

// Layouts with the algorithm chosen for them.
struct LtPlan {
  LtLayouts l;
  cublasLtMatmulAlgo_t algo{};
};

// w and x of `in_type`, y of `out_type` with row stride ldy.
inline LtLayouts tn_layouts(int32_t m, int32_t n, int32_t k, cudaDataType_t in_type,
                            cudaDataType_t out_type, int32_t ldy) {
  LtLayouts l;
  TANDEM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&l.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  TANDEM_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(l.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  TANDEM_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(l.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  TANDEM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l.a, in_type, k, n, k));
  TANDEM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l.b, in_type, k, m, k));
  TANDEM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l.c, out_type, n, m, ldy));
  return l;
}

inline void destroy_layouts(LtLayouts& l) {
  cublasLtMatrixLayoutDestroy(l.a);
  cublasLtMatrixLayoutDestroy(l.b);
  cublasLtMatrixLayoutDestroy(l.c);
  cublasLtMatmulDescDestroy(l.op);
}

}  // namespace tandem::kernels
