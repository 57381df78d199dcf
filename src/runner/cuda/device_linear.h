// A decoder Linear on one GPU in the form its checkpoint stores it, or several Linears stacked
// along the output features (q|k|v, gate|up) so one launch computes them. Stacked Linears that
// cannot share one matrix (different formats, GPTQ act-order permutations or static fp8 input
// scales) stay separate parts writing their own columns of the one output.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "model/quant_config.h"
#include "runner/cuda/device_buffer.h"

namespace tandem {

namespace kernels {
class GemmContext;
class Fp8GemmContext;
struct Fp8Matrix;
struct Int4Matrix;
}  // namespace kernels

struct DeviceLinearPart {
  QuantFormat format = QuantFormat::kNone;
  Fp8Activations fp8_activations = Fp8Activations::kNone;
  float activation_scale_ub = 0;  // fp8 dynamic: amax cap; 0 = none
  int32_t row0 = 0;               // first output feature of the stacked matrix it produces
  int32_t rows = 0;
  int32_t group_size = 0;    // int4
  bool fp8_block = false;    // fp8: 128 x 128 weight blocks
  DeviceBuffer weight;       // bf16 [rows, k] | int4 qweight u32 [rows, k / 8] | fp8 u8 [rows, k]
  DeviceBuffer scales;       // int4 fp16 [rows, k / group_size] | fp8 f32 [rows] or blocks
  DeviceBuffer zeros;        // int4 u8 [rows, k / group_size]
  DeviceBuffer perm;         // int4 i32 [k], or empty
  DeviceBuffer input_scale;  // fp8 static activations: f32 [1]
};

struct DeviceLinear {
  int32_t n = 0;  // output features of all parts together
  int32_t k = 0;
  std::vector<DeviceLinearPart> parts;

  const __nv_bfloat16* bf16() const {  // the matrix of a plain single-part Linear, else null
    return parts.size() == 1 && parts[0].format == QuantFormat::kNone
               ? parts[0].weight.as<__nv_bfloat16>()
               : nullptr;
  }
};

// What running quantized Linears needs besides the weights, sized for one runner.
struct LinearScratch {
  DeviceBuffer xq;       // [max_tokens, max_k] u8: fp8 activations
  DeviceBuffer x_scale;  // [max_tokens, ceil(max_k / 128)] f32
  DeviceBuffer dequant;  // [max part rows, max_k] bf16: a prefill-sized GEMM's weights
  kernels::GemmContext* gemm = nullptr;
  kernels::Fp8GemmContext* fp8_gemm = nullptr;  // null when no part is W8A8
};

// The most rows m that keep every part of `w` off a path costing several decode steps: an int4
// part past kernels::kInt4GemvMaxTokens dequantizes its whole matrix to bf16 for cuBLASLt (the
// AWQ 7B's 36-row verify pass 11.6 ms against ~4.7 at 32 rows, H200, NOTES.md v18). Float and
// FP8 parts pass to GEMMs that read each weight once: no limit.
int32_t linear_decode_rows_limit(const DeviceLinear& w);

// The matrix of `w` when it is one AWQ/GPTQ part, for the int4 kernels with fused epilogues
// (kernels/int4_linear.cuh); else false.
bool single_int4_matrix(const DeviceLinear& w, kernels::Int4Matrix* out);

// The matrix of `w` when it is one W8A8 FP8 part, and its activations' group (features a scale),
// for the FP8 GEMVs with fused epilogues (kernels/fp8_linear.cuh); else false.
bool single_w8a8_matrix(const DeviceLinear& w, kernels::Fp8Matrix* out, int32_t* group);

// Such a Linear's input x [m, k] quantized into scratch.xq / scratch.x_scale, as run_linear
// quantizes it. pdl: may overlap the launch before it (kernels/pdl.cuh).
void quantize_linear_input(const DeviceLinear& w, const __nv_bfloat16* x, int32_t m,
                           const LinearScratch& scratch, cudaStream_t stream, bool pdl);

// y[m, n] = x[m, k] · W^T, bf16 or fp32 out; every part picks the decode kernel or the GEMM by m.
// pdl: a part's decode kernels may overlap the launch before them (kernels/pdl.cuh; the bf16
// GEMV at one token); the GEMMs ignore it.
void run_linear(const DeviceLinear& w, const __nv_bfloat16* x, int32_t m, void* y, bool out_f32,
                const LinearScratch& scratch, cudaStream_t stream, bool pdl = false);

// The quantization of `w`'s input when it is one W8A8 part with one activation scale a token
// (dynamic per token, or static), which an RMSNorm can produce with its output
// (kernels::launch_add_rmsnorm_fp8); else false.
struct TokenFp8Input {
  const float* static_scale = nullptr;  // device scalar, or null (dynamic)
  float scale_ub = 0;
};
bool token_fp8_input(const DeviceLinear& w, TokenFp8Input* input);

// run_linear for such a Linear whose input is already in scratch.xq / scratch.x_scale (one
// scale a token): the quantize launch skipped.
void run_linear_prequantized(const DeviceLinear& w, int32_t m, void* y, bool out_f32,
                             const LinearScratch& scratch, cudaStream_t stream, bool pdl = false);

// The algorithm searches of every GEMM shape `w` can reach with up to max_m rows, and the sizes
// its parts need from LinearScratch (rows x k of a dequantized part; whether W8A8 runs).
void prepare_linear(const DeviceLinear& w, int32_t max_m, bool out_f32,
                    const LinearScratch& scratch);
int64_t dequant_scratch_elements(const DeviceLinear& w);
bool needs_fp8_gemm(const DeviceLinear& w);

}  // namespace tandem
