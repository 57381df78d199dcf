// A GEMV input given as the RMS-normalised residual stream: each block computes
// x = bf16(residual · rsqrt(mean(residual²) + eps) · weight) for itself in shared memory, so
// the norm kernel, its launch and its [m, k] round trip fold into the GEMV that consumes it
// (the bf16 GEMVs of small models, gemv.cuh; the int4 GEMV at one token, int4_linear.cuh).
// The rounding is launch_add_rmsnorm's; its sum of squares runs in another order.
#pragma once

namespace tandem::kernels {

struct NormedRows {
  const float* residual;  // [m, k] fp32
  const float* weight;    // [k] fp32
  float eps;
};

}  // namespace tandem::kernels
