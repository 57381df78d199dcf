// The model's weights on one GPU, in the layout the kernels want: q|k|v and gate|up fused into
// one matrix each (one GEMM instead of three / two), norms and biases in fp32, matrices bf16.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "model/config.h"
#include "model/model_dir.h"
#include "runner/cuda/device_buffer.h"

namespace tandem {

struct DeviceLayer {
  DeviceBuffer qkv;             // [(H + 2*KVH) * D, hidden] bf16
  DeviceBuffer qkv_bias;        // [(H + 2*KVH) * D] fp32, or empty
  DeviceBuffer o;               // [hidden, H * D] bf16
  DeviceBuffer gate_up;         // [2 * intermediate, hidden] bf16
  DeviceBuffer down;            // [hidden, intermediate] bf16
  DeviceBuffer input_norm;      // [hidden] fp32
  DeviceBuffer post_attn_norm;  // [hidden] fp32
};

struct DeviceWeights {
  DeviceBuffer embed;        // [vocab, hidden] bf16
  DeviceBuffer lm_head_own;  // [vocab, hidden] bf16; empty when tied to embed
  DeviceBuffer final_norm;   // [hidden] fp32
  std::vector<DeviceLayer> layers;
  int64_t bytes = 0;

  const __nv_bfloat16* lm_head() const {
    return lm_head_own.bytes() > 0 ? lm_head_own.as<__nv_bfloat16>() : embed.as<__nv_bfloat16>();
  }
};

// Uploads through a pinned staging buffer, converting fp16/fp32 tensors to bf16 on the way, and
// prints a progress bar to stderr when `progress` is set.
Result<DeviceWeights> upload_weights(const ModelConfig& config, const ModelWeights& weights,
                                     bool progress);

}  // namespace tandem
