// tokenizer_config.json: the transformers-side settings (special token names, add_bos/add_eos,
// chat template, context length).
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer_impl.h"

namespace tandem::tokenizer {
namespace {

using nlohmann::json;

Error config_error(std::string message) {
  return make_error(ErrorCode::kTokenizer, "tokenizer_config.json: " + std::move(message));
}

// A special token is a string or an AddedToken object {"content": ...}; null means none.
Result<std::optional<std::string>> token_name(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return std::optional<std::string>((*it)["content"].get<std::string>());
  }
  return config_error(std::string(key) + " is neither a string nor {\"content\": ...}");
}

Result<TokenizerConfig> parse_config(std::string_view json_text) {
  TokenizerConfig config;
  if (json_text.empty()) return config;
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return config_error("not a JSON object");
  TANDEM_ASSIGN_OR_RETURN(config.bos_token, token_name(j, "bos_token"));
  TANDEM_ASSIGN_OR_RETURN(config.eos_token, token_name(j, "eos_token"));
  TANDEM_ASSIGN_OR_RETURN(config.pad_token, token_name(j, "pad_token"));
  for (auto [key, dst] : {std::pair{"add_bos_token", &config.add_bos_token},
                          std::pair{"add_eos_token", &config.add_eos_token}}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_boolean()) return config_error(std::string(key) + " is not a boolean");
    *dst = it->get<bool>();
  }
  if (auto it = j.find("chat_template"); it != j.end() && !it->is_null()) {
    if (it->is_string()) {
      config.chat_template = it->get<std::string>();
    } else if (it->is_array()) {
      for (const json& t : *it) {
        if (t.is_object() && t.value("name", std::string()) == "default" &&
            t.contains("template") && t["template"].is_string()) {
          config.chat_template = t["template"].get<std::string>();
        }
      }
    } else {
      return config_error("chat_template is neither a string nor a list of {name, template}");
    }
  }
  if (auto it = j.find("model_max_length"); it != j.end() && it->is_number()) {
    // transformers writes 1e30 ("VERY_LARGE_INTEGER") for "no limit": that is unknown here.
    double v = it->get<double>();
    if (it->is_number_integer() && v > 0 && v < 9.0e18) {
      config.model_max_length = it->get<int64_t>();
    } else if (std::isfinite(v) && v > 0 && v < 9.0e18) {
      config.model_max_length = int64_t(v);
    }
  }
  return config;
}

}  // namespace

Result<TokenizerConfig> parse_tokenizer_config(std::string_view json_text) {
  try {
    return parse_config(json_text);
  } catch (const nlohmann::json::exception& e) {
    return config_error(std::string("unexpected field type: ") + e.what());
  }
}

}  // namespace tandem::tokenizer
