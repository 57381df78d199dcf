// What an FP8 W8A8 GEMM sees of its input: each activation rounded to e4m3 at its scale and
// scaled back (x' = e4m3(x / s) × s). The CPU oracle applies this before its fp32 dot products so
// it computes what the GPU's W8A8 GEMM computes, up to summation order; weight-only formats
// (Fp8Activations::kNone, AWQ, GPTQ) leave activations alone.
//
// Scales: static = the checkpoint's input_scale; dynamic per token = max|x_row| / 448 (at most
// activation_scale_ub / 448 with fbgemm_fp8, at least 1 / (448 × 512) as vLLM clamps);
// per token group = the same over each block_in features of a row (block fp8). Dynamic scales
// are always per token, never per tensor, so a sequence's result does not depend on its batch.
#pragma once

#include <cstdint>

#include "model/quant_linear.h"

namespace tandem {

// x[n, in] → out[n, in]; out may be x.
void fp8_fake_quantize_activations(const LinearQuant& q, const float* x, int64_t n, int64_t in,
                                   float* out);

}  // namespace tandem
