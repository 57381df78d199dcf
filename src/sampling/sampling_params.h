// Per-request sampling settings, with vLLM's names and meanings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/config.h"

namespace tandem {

struct SamplingParams {
  // Unset fields take the model's generation_config.json value, then vLLM's default.
  std::optional<float> temperature;         // 0 = greedy; default 1.0
  std::optional<float> top_p;               // (0, 1]; default 1.0
  std::optional<int32_t> top_k;             // -1 or 0 = off; default off
  std::optional<float> min_p;               // [0, 1]; default 0
  std::optional<float> repetition_penalty;  // > 0; default 1.0 (prompt + output tokens)
  float presence_penalty = 0.0f;            // [-2, 2]; output tokens only
  float frequency_penalty = 0.0f;           // [-2, 2]; output tokens only
  std::optional<uint64_t> seed;             // reproducible per request when set
  std::vector<std::string> stop;            // stop strings; not included in the output text
  std::vector<int32_t> stop_token_ids;      // stop ids; the id is included in token_ids
  bool ignore_eos = false;
  int32_t max_tokens = 16;
  int32_t min_tokens = 0;  // eos / stop ids / stop strings ignored before this
  bool skip_special_tokens = true;
};

// The settings after defaults are applied and values checked: what samplers read.
struct ResolvedSampling {
  float temperature = 1.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;  // 0 = off
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
  bool has_seed = false;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  std::vector<int32_t> eos_token_ids;  // from the model; empty when ignore_eos
  bool ignore_eos = false;
  int32_t max_tokens = 16;
  int32_t min_tokens = 0;
  bool skip_special_tokens = true;

  bool greedy() const { return temperature == 0.0f; }
};

// Applies generation_config defaults and validates ranges; errors name the parameter.
Result<ResolvedSampling> resolve_sampling(const SamplingParams& params,
                                          const GenerationDefaults& defaults,
                                          const std::vector<int32_t>& model_eos_ids);

}  // namespace tandem
