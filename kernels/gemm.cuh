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

// Operands an algorithm search may time its candidates on (GemmContext::prepare): x [max_m, k],
// w [n, k] and y [max_m, n] (bf16, or fp32 for an fp32 output) of the shape being prepared.
// Their contents are overwritten (y) or only read; any values do.
struct GemmTuneOperands {
  const __nv_bfloat16* x = nullptr;
  const __nv_bfloat16* w = nullptr;
  void* y = nullptr;
  cudaStream_t stream = nullptr;
};

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
  // of every length). With `tune`, buckets of kTuneMinRows rows or more take the fastest of
  // cuBLASLt's first kTuneCandidates offers, timed on those operands, where it beats the first
  // offer by kTuneMargin (TANDEM_GEMM_TUNE=0: the first offer always).
  void prepare(int32_t max_m, int32_t n, int32_t k, bool out_f32,
               const GemmTuneOperands* tune = nullptr);

  // Measured on the H200 (bench_gemm_algos, NOTES.md v25): at 2,048 rows the first offer ran a
  // 7B layer's o at 71.7 us and down at 356.9 against 66.6 and 333.1 for other offers.
  static constexpr int32_t kTuneMinRows = 64;
  static constexpr int kTuneCandidates = 8;
  static constexpr float kTuneMargin = 0.03f;  // the first offer unless 3% slower: timing noise
                                               // must not change the algorithm (and the bits)

  // Rows are searched in buckets (multiples of 16 up to 256, of 64 above): an algorithm found
  // for the bucket serves every m in it, after cublasLtMatmulAlgoCheck accepts it for that m.
  static int32_t bucket(int32_t m) { return m <= 256 ? (m + 15) / 16 * 16 : (m + 63) / 64 * 64; }

 private:
  using Layouts = LtLayouts;
  using Plan = LtPlan;
  using Key = std::tuple<int32_t, int32_t, int32_t, bool>;               // m, n, k, fp32 output
  using PlanKey = std::tuple<int32_t, int32_t, int32_t, bool, int32_t>;  // Key and ldy
  Layouts make_layouts(int32_t m, int32_t n, int32_t k, bool out_f32, int32_t ldy) const;
  const cublasLtMatmulAlgo_t& searched(int32_t m_bucket, int32_t n, int32_t k, bool out_f32,
                                       const GemmTuneOperands* tune = nullptr, int32_t max_m = 0);
  // The index among `offers` of the fastest on `tune` at m rows (0 unless it beats offer 0 by
  // kTuneMargin).
  int fastest(const cublasLtMatmulHeuristicResult_t* offers, int count, int32_t m, int32_t n,
              int32_t k, bool out_f32, const GemmTuneOperands& tune);
  Plan& plan(int32_t m, int32_t n, int32_t k, bool out_f32, int32_t ldy);  // per exact m

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<PlanKey, Plan> plans_;              // exact shapes
  std::map<Key, cublasLtMatmulAlgo_t> algos_;  // searched per row bucket
};

}  // namespace tandem::kernels
