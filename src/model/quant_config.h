// config.json's quantization_config, as the published checkpoints spell it (vLLM/llm-compressor,
// FBGEMM, AutoAWQ, AutoGPTQ/GPTQModel), reduced to what decides how a Linear is stored and
// computed. Anything that would change the layout or the precision and is not listed here is a
// kUnsupported error naming the field and its value: tandem never runs a different precision
// than the checkpoint declares. docs/quantization.md is the user-facing description.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/error.h"

namespace tandem {

enum class QuantFormat {
  kNone,  // plain float weights
  kFp8,   // F8_E4M3 weight [out, in] × fp32 scale (tensor, channel or block granularity)
  kAwq,   // AutoAWQ GEMM: 4-bit, qweight [in, out/8], interleaved nibbles, zero points
  kGptq,  // AutoGPTQ: 4-bit, qweight [in/8, out], g_idx, v1 (zero − 1) or v2 zeros
};

// Where an FP8 weight's scale varies.
enum class Fp8ScaleGranularity {
  kTensor,   // weight_scale [] or [1]
  kChannel,  // weight_scale [out, 1] or [out]: one per output feature
  kBlock,    // weight_scale_inv [ceil(out / block_out), ceil(in / block_in)]
};

// How an FP8 GEMM's activations are quantized (W8A8) or not (W8A16).
enum class Fp8Activations {
  kNone,                  // weight-only: activations stay in the compute precision
  kStaticTensor,          // input_scale [] / [1] from the checkpoint
  kDynamicPerToken,       // scale = max|x_row| / 448 per token (clamped by activation_scale_ub)
  kDynamicPerTokenGroup,  // block fp8: one scale per token and per block_in input features
};

struct QuantConfig {
  QuantFormat format = QuantFormat::kNone;
  std::string method;  // quant_method as written ("fp8", "compressed-tensors", "fbgemm_fp8",
                       // "awq", "gptq"), or "fp8 (--quantization)" for load-time quantization

  // FP8.
  Fp8ScaleGranularity fp8_scale = Fp8ScaleGranularity::kTensor;
  int64_t block_out = 0;  // kBlock: weight_block_size [block_out, block_in]
  int64_t block_in = 0;
  Fp8Activations fp8_activations = Fp8Activations::kNone;
  double activation_scale_ub = 0;  // fbgemm_fp8: upper bound of max|x_row|; 0 = none

  // AWQ / GPTQ (4-bit).
  int32_t bits = 0;
  int64_t group_size = 0;   // input features per scale/zero group; -1 (GPTQ) = one group
  bool sym = false;         // GPTQ: every zero point is 8 (checked at load)
  bool desc_act = false;    // GPTQ: g_idx [in] maps input features to groups (act-order)
  int32_t zero_offset = 0;  // GPTQ v1 stores zero − 1: the stored value + zero_offset is the zero

  // Modules (e.g. "model.layers.0.mlp.down_proj") left unquantized: exact names, "re:<regex>"
  // (compressed-tensors), or substrings (AutoAWQ / FBGEMM modules_to_not_convert).
  std::vector<std::string> skip_exact;
  std::vector<std::string> skip_regex;
  std::vector<std::string> skip_substring;

  bool quantized() const { return format != QuantFormat::kNone; }
  // Whether the Linear named `module` (no ".weight") is stored quantized.
  bool quantizes(const std::string& module) const;
  // "fp8 e4m3 (compressed-tensors, channel scales, dynamic per-token activations)", for
  // messages and `tandem status`.
  std::string describe() const;
};

// Parses config.json's "quantization_config" object; `source` names the file in messages.
Result<QuantConfig> parse_quant_config(const nlohmann::json& qc, const std::string& source);

// --quantization: "" (as stored) or "fp8" (per-channel FP8 weights and dynamic per-token FP8
// activations, quantized at load). Errors name the flag (`flag`) and value.
Result<QuantConfig> load_time_quantization(const std::string& value, const QuantConfig& stored,
                                           const std::string& flag);

// "fp8", "awq", "gptq" or "none": the name the CUDA runner's refusal and status use.
const char* quant_format_name(QuantFormat f);

}  // namespace tandem
