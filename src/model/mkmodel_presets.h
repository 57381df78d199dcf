// The model shapes mkmodel writes, and their config.json / generation_config.json as the
// published checkpoints spell them.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"

namespace tandem::mkmodel {

struct Preset {
  std::string name;
  ModelConfig config;
  uint64_t seed_salt = 0;             // so a draft and its target differ even with one --seed
  int64_t sliding_window = 0;         // Qwen2: written with use_sliding_window=false, as HF does
  int64_t max_window_layers = 0;      // Qwen2 only
  nlohmann::ordered_json generation;  // generation_config.json
};

const std::vector<Preset>& presets();
const Preset* find_preset(const std::string& name);

// config.json for a preset at a given weight dtype.
nlohmann::ordered_json config_json(const Preset& p, DType dtype);

}  // namespace tandem::mkmodel
