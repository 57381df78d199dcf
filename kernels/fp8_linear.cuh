// FP8 E4M3 Linears (fp8, compressed-tensors and fbgemm_fp8 checkpoints, and --quantization fp8):
//   w[r, i] = e4m3(weight[r, i]) × scale[r]                        (channel; tensor broadcast)
//   w[r, i] = e4m3(weight[r, i]) × scale[r / 128, i / 128]         (128 × 128 blocks)
// W8A8: activations are quantized to e4m3 first, exactly as src/runner/cpu/fp8_activations.cc
// defines it (scale = max(amax / 448, 1 / (448 · 512)), amax clamped by an upper bound when one
// is given; or a static scale; q = e4m3(x / scale), round to nearest even, saturating), and
//   y[t, r] = Σ_i e4m3(xq[t, i]) × x_scale[t, i / group] × e4m3(weight[r, i]) × wscale(r, i)
// accumulated in fp32. W8A16 keeps bf16 activations.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "amax_slots.h"
#include "rope_kv.cuh"

namespace tandem::kernels {

constexpr int32_t kFp8Block = 128;  // block fp8: weight blocks and activation groups

struct Fp8Matrix {
  const uint8_t* weight = nullptr;  // [n, k] e4m3
  const float* scale = nullptr;     // [n], or [ceil(n / 128), ceil(k / 128)] when block
  bool block = false;
  int32_t n = 0;
  int32_t k = 0;  // k % 16 == 0
};

// x_scale [m, ceil(k / group)]: group = k for per-token (or static) scales, kFp8Block for block
// fp8's per-token-group scales. static_scale (a device scalar) wins when set; scale_ub > 0
// clamps amax (fbgemm_fp8's activation_scale_ub).
void launch_fp8_quantize(const __nv_bfloat16* x,  // [m, k] in
                         int32_t m, int32_t k, int32_t group, const float* static_scale,
                         float scale_ub,
                         uint8_t* xq,     // [m, k] out
                         float* x_scale,  // [m, ceil(k / group)] out
                         cudaStream_t stream,
                         bool pdl = false);  // may overlap the launch before (pdl.cuh, sm_90+)

// Up to a k = 7 speculative verify of one sequence: at 5 rows the cuBLASLt FP8 GEMM took
// 5.6 ms a Qwen2.5-7B verify on the H200 against 3.3 ms for a decode step.
constexpr int32_t kFp8GemvMaxTokens = 8;

// W8A8 decode: 1 <= m <= kFp8GemvMaxTokens; `group` as in launch_fp8_quantize. y row t starts
// at y + t * ldy, bf16 or fp32.
// pdl: may overlap the launch before (pdl.cuh, sm_90+; its first weight loads before the wait).
void launch_fp8_gemv(const uint8_t* xq, const float* x_scale, int32_t group, const Fp8Matrix& w,
                     int32_t m, void* y, int32_t ldy, bool out_f32, cudaStream_t stream,
                     bool pdl = false);

// The same GEMV for W = gate | up ([2 * width, k]) with the SwiGLU in its epilogue:
// act[t, j] = silu(gate) · up, the same bits as launch_fp8_gemv (bf16 out) then launch_silu_mul.
// act_amax (optional, [m][kAmaxTokenWords] fp32 bits, zero on entry): each token's max |act| is
// raised into its slots (amax_bits.cuh), for launch_fp8_quantize_amax; only where
// fp8_swiglu_gives_amax holds (the CUDA-core form, not the tensor-core one).
void launch_fp8_gemv_swiglu(const uint8_t* xq, const float* x_scale, int32_t group,
                            const Fp8Matrix& w, int32_t m,
                            __nv_bfloat16* act,  // [m, width] out
                            cudaStream_t stream, bool pdl = false, uint32_t* act_amax = nullptr);
bool fp8_swiglu_gives_amax(const Fp8Matrix& w, int32_t m, int32_t group);
// launch_fp8_quantize's per-token dynamic form (group = k) from amax [m][kAmaxTokenWords] (fp32
// bits, each row's max |x| spread over its slots, as launch_fp8_gemv_swiglu leaves it): the same
// bits, without the pass over each row for its amax first. m <= kFp8GemvMaxTokens. clear
// (optional, [kFp8GemvMaxTokens][kAmaxTokenWords]): every token's slots zeroed after the wait,
// for a later producer (the runner rotates its slots by layer).
void launch_fp8_quantize_amax(const __nv_bfloat16* x,  // [m, k] in
                              int32_t m, int32_t k, const uint32_t* amax, float scale_ub,
                              uint8_t* xq,     // [m, k] out
                              float* x_scale,  // [m] out
                              uint32_t* clear, cudaStream_t stream, bool pdl = false);

// The same GEMV for W = q | k | v with RoPE and the K/V page write in its epilogue: the same bits
// as launch_fp8_gemv (bf16 out) then launch_rope_kv_write. fp8_qkv_rope_fuses: whether the shape
// takes it (m tokens, an even head size, W's rows the heads').
bool fp8_qkv_rope_fuses(const Fp8Matrix& w, int32_t m, const RopeKvShape& s);
void launch_fp8_qkv_rope_gemv(const uint8_t* xq, const float* x_scale, int32_t group,
                              const Fp8Matrix& w, int32_t m, const RopeKvTarget& out,
                              cudaStream_t stream, bool pdl = false);

// W8A16 decode: bf16 activations, 1 <= m <= kFp8GemvMaxTokens.
void launch_fp8_gemv_a16(const __nv_bfloat16* x, const Fp8Matrix& w, int32_t m, void* y,
                         int32_t ldy, bool out_f32, cudaStream_t stream);

// W8A16 prefill: the matrix as bf16 [n, k] for a bf16 cuBLASLt GEMM.
void launch_fp8_dequant(const Fp8Matrix& w, __nv_bfloat16* out, cudaStream_t stream);

// W8A8 prefill through cuBLASLt's FP8 tensor-core path (sm_89+): channel scales as outer
// vectors (weight rows × tokens), or, where cuBLASLt has no such kernel, an unscaled FP8 GEMM into
// fp32 scratch and an epilogue applying both; block fp8 as 128 × 128 weight blocks × 1 × 128
// token groups (scale layouts in gemm_fp8.cu). Algorithms are searched once per row bucket and
// shape, like GemmContext.
class Fp8GemmContext {
 public:
  explicit Fp8GemmContext(size_t workspace_bytes = 32u << 20);
  ~Fp8GemmContext();
  Fp8GemmContext(const Fp8GemmContext&) = delete;
  Fp8GemmContext& operator=(const Fp8GemmContext&) = delete;

  // Whether this device and cuBLASLt run the shape's scaling mode with that output type; false
  // names no error, the caller refuses the model at load with one. Block fp8 also needs
  // k % 128 == 0 here (partial k blocks are untested against cuBLASLt).
  bool supports(int32_t n, int32_t k, bool block, bool out_f32 = false);
  // Searches every row bucket up to max_m, picks the shape's mode and sizes the scratch; run()
  // allocates nothing and aborts on a shape or m it was not prepared for.
  void prepare(int32_t max_m, int32_t n, int32_t k, bool block, bool out_f32);
  // Channel scales want x_scale per token (group = k); block fp8 x_scale [m, ceil(k / 128)], and
  // xq must have ceil(m / 16) * 16 rows (the last partial 16 runs padded; extra rows are ignored).
  void run(const uint8_t* xq, const float* x_scale, const Fp8Matrix& w, int32_t m, void* y,
           int32_t ldy, bool out_f32, cudaStream_t stream);
  size_t workspace_bytes() const { return workspace_bytes_; }
  // The mode prepare() chose for a shape ("unprepared" before): outer-vector scales, the
  // unit-scales fallback with its epilogue, or block scales. For logs and tests.
  const char* mode(int32_t n, int32_t k, bool block, bool out_f32) const;
  // Tests and benchmarks: channel shapes prepared after this take the unit-scales fallback even
  // where outer-vector scales are available, so both paths are exercised on one device.
  void prefer_unit_scales(bool on);

 private:
  // Implementation state (layouts and algorithms per shape) is the implementer's choice.
  struct Impl;
  Impl* impl_ = nullptr;
  size_t workspace_bytes_ = 0;
};

}  // namespace tandem::kernels
