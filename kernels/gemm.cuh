// GEMM through cuBLASLt for prefill-sized batches: y[m, n] = x[m, k] * w[n, k]^T, bf16 inputs,
// fp32 accumulation, bf16 or fp32 output. The algorithm is chosen once per shape and cached;
// the workspace is fixed, so calls can be captured in CUDA graphs.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

namespace tandem::kernels {

class GemmContext {
 public:
  explicit GemmContext(size_t workspace_bytes = 32u << 20);
  ~GemmContext();
  GemmContext(const GemmContext&) = delete;
  GemmContext& operator=(const GemmContext&) = delete;

  void run(const __nv_bfloat16* x,  // [m, k] in
           const __nv_bfloat16* w,  // [n, k] in
           int32_t m, int32_t n, int32_t k,
           void* y,  // [m, n] out, bf16 or fp32
           bool out_f32, cudaStream_t stream);

  size_t workspace_bytes() const { return workspace_bytes_; }

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  const Plan& plan(int32_t m, int32_t n, int32_t k, bool out_f32);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<std::tuple<int32_t, int32_t, int32_t, bool>, Plan> plans_;
};

}  // namespace tandem::kernels
