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

#include "cublaslt_layouts.cuh"

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
           void* y,                                              // [m, ldy] out, bf16 or fp32
           bool out_f32, cudaStream_t stream, int32_t ldy = 0);  // 0: ldy = n

  size_t workspace_bytes() const { return workspace_bytes_; }

  // Runs the algorithm search for every row bucket up to max_m of one weight shape, so no
  // request pays for it later (the search costs milliseconds per shape; prompts end in chunks
  // of every length).
  void prepare(int32_t max_m, int32_t n, int32_t k, bool out_f32);

  // Rows are searched in buckets (multiples of 16 up to 256, of 64 above): an algorithm found
  // for the bucket serves every m in it, after cublasLtMatmulAlgoCheck accepts it for that m.
  static int32_t bucket(int32_t m) { return m <= 256 ? (m + 15) / 16 * 16 : (m + 63) / 64 * 64; }

 private:
  using Layouts = LtLayouts;
  using Plan = LtPlan;
  using Key = std::tuple<int32_t, int32_t, int32_t, bool>;               // m, n, k, fp32 output
  using PlanKey = std::tuple<int32_t, int32_t, int32_t, bool, int32_t>;  // Key and ldy
  Layouts make_layouts(int32_t m, int32_t n, int32_t k, bool out_f32, int32_t ldy) const;
  const cublasLtMatmulAlgo_t& searched(int32_t m_bucket, int32_t n, int32_t k, bool out_f32);
  Plan& plan(int32_t m, int32_t n, int32_t k, bool out_f32, int32_t ldy);  // per exact m

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<PlanKey, Plan> plans_;              // exact shapes
  std::map<Key, cublasLtMatmulAlgo_t> algos_;  // searched per row bucket
};

}  // namespace tandem::kernels
