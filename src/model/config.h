// What config.json and generation_config.json say, for the architectures tandem runs.
// Parsing validates once; every consumer can trust these fields afterwards.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "model/quant_config.h"

namespace tandem {

enum class Arch { kQwen2, kLlama };

struct RopeScaling {
  enum class Type { kNone, kLlama3 } type = Type::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string architecture;  // "Qwen2ForCausalLM", "LlamaForCausalLM"
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;    // hidden_size / num_heads unless config.json says otherwise
  int64_t vocab_size = 0;  // rows of embed_tokens / lm_head (may exceed the tokenizer's)
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v bias (Qwen2 always; Llama when attention_bias)
  bool mlp_bias = false;
  DType dtype = DType::kBF16;  // torch_dtype
  QuantConfig quant;           // quantization_config; format kNone for float checkpoints
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;
};

// Sampling defaults a model ships (generation_config.json); applied when a request leaves a
// parameter unset, as vLLM does.
struct GenerationDefaults {
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int32_t> top_k;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  std::optional<int32_t> max_new_tokens;
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;
};

// `source` names the file in error messages.
Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source);
Result<GenerationDefaults> parse_generation_config(const std::string& json_text,
                                                   const std::string& source);

}  // namespace tandem
