// The model's weights on one GPU, in the layout the kernels want: q|k|v and gate|up fused into
// one matrix each (one GEMM instead of three / two), norms and biases in fp32, float matrices
// bf16, quantized ones repacked for their kernels (device_linear.h, model/device_quant_layout.h).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/config.h"
#include "model/model_dir.h"
#include "runner/cuda/device_buffer.h"
#include "runner/cuda/device_linear.h"

namespace tandem {

struct DeviceLayer {
  DeviceLinear qkv;             // [(H + 2*KVH) * D, hidden]
  DeviceBuffer qkv_bias;        // [(H + 2*KVH) * D] fp32, or empty
  DeviceLinear o;               // [hidden, H * D]
  DeviceLinear gate_up;         // [2 * intermediate, hidden]
  DeviceLinear down;            // [hidden, intermediate]
  DeviceBuffer input_norm;      // [hidden] fp32
  DeviceBuffer post_attn_norm;  // [hidden] fp32
};

struct DeviceWeights {
  DeviceBuffer embed;        // [vocab, hidden] bf16
  DeviceBuffer lm_head_own;  // [vocab, hidden] bf16; empty when tied to embed
  DeviceBuffer final_norm;   // [hidden] fp32
  std::vector<DeviceLayer> layers;
  // Device bytes by how they are held: "bf16", "f32", "awq int4", "gptq int4", "fp8 e4m3".
  std::vector<std::pair<std::string, int64_t>> bytes_by_format;

  const __nv_bfloat16* lm_head() const {
    return lm_head_own.bytes() > 0 ? lm_head_own.as<__nv_bfloat16>() : embed.as<__nv_bfloat16>();
  }
};

// Uploads through a pinned staging buffer, converting fp16/fp32 tensors to bf16 on the way, and
// prints a progress bar to stderr when `progress` is set. Quantized Linears are repacked on the
// host first; a checkpoint the layouts cannot hold is a kUnsupported error naming the field.
Result<DeviceWeights> upload_weights(const ModelConfig& config, const ModelWeights& weights,
                                     bool progress);

}  // namespace tandem
