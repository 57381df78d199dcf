// The arithmetic of one transformer layer on the CPU, fp32 everywhere except the weights, which
// are read in place (bf16/fp16/fp32) and widened to fp32 row by row. Activations are row-major
// [rows, features].
#pragma once

#include <cstdint>
#include <span>

#include "model/quant_linear.h"
#include "model/safetensors.h"
#include "runner/cpu/thread_pool.h"

namespace tandem {

// Widens row `row` of a 2-D weight (or all of a 1-D one, row 0) to fp32: out[cols].
void weight_row_to_f32(const TensorView& w, int64_t row, float* out);

// y[n, out] = x[n, in] · W[out, in]^T (+ bias[out]), fp32 accumulation. W is HF's Linear layout.
void linear(ThreadPool& pool, const float* x, int64_t n, const TensorView& w,
            const TensorView* bias, float* y);
// The same for a Linear stored in any format: `w` is its stored weight and `quant` how to read
// it. Quantized rows are dequantized to fp32 (model/dequant.h) and W8A8 fp8 inputs are rounded
// as the GPU's GEMM rounds them (fp8_activations.h); the dot products are the same as for a
// float weight, so a quantized model and its dequantized fp32 copy give identical bits when
// the activations are not quantized.
void linear(ThreadPool& pool, const float* x, int64_t n, const TensorView& w,
            const LinearQuant& quant, const TensorView* bias, float* y);

// HF LlamaRMSNorm / Qwen2RMSNorm: x * rsqrt(mean(x²) + eps) * weight, per row of [n, dim].
void rms_norm(const float* x, int64_t n, int64_t dim, const TensorView& weight, double eps,
              float* y);

// out[i] = silu(gate[i]) * up[i] over `count` elements.
void silu_mul(const float* gate, const float* up, int64_t count, float* out);

}  // namespace tandem
