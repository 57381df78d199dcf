// mkmodel --quantization: random checkpoints in each published quantized format, with the
// config.json quantization_config those exporters write. The float weights are the ones the
// unquantized model of the same preset and seed has; each Linear is quantized round-to-nearest.
//
//   fp8            quant_method "fp8" (AutoFP8 / vLLM): per-tensor weight_scale, static
//                  per-tensor input_scale
//   fp8-channel    "compressed-tensors" (llm-compressor FP8-dynamic): per-channel weight_scale,
//                  dynamic per-token activations
//   fp8-block      "fp8" with weight_block_size [128, 128] (DeepSeek/Qwen3 FP8): weight_scale_inv
//   awq            "awq" GEMM, 4-bit, zero points
//   gptq           "gptq" v1, 4-bit, asymmetric, groups in order (g_idx = i / group_size)
//   gptq-desc-act  the same with act-order: a permuted g_idx
// AWQ/GPTQ use group_size 128, or 64 / 32 when a Linear's input features are not a multiple
// of 128 (the tiny test presets).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/config.h"

namespace tandem::mkmodel {

struct QuantChoice {
  QuantConfig config;           // as parse_quant_config reads `json`
  nlohmann::ordered_json json;  // config.json's quantization_config
};

std::vector<std::string> quantization_names();
// `name` is one of quantization_names(); `model` gives the Linear shapes (group size).
Result<QuantChoice> quantization_choice(const std::string& name, const ModelConfig& model);

// The stored tensors of one quantized Linear (full names → little-endian bytes, in the dtypes
// quantized_linear_tensors lists) from its float weight w[out, in]; `key` seeds the act-order
// permutation of gptq-desc-act.
std::map<std::string, std::vector<std::byte>> quantize_linear(const QuantConfig& q,
                                                              const std::string& module,
                                                              int64_t out, int64_t in,
                                                              const std::vector<float>& w,
                                                              uint64_t key);

}  // namespace tandem::mkmodel
