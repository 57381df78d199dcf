// Typed reads of config.json-style fields: each failure is an Error naming the field and the
// file, so a broken model directory says exactly what to fix.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"

namespace tandem::detail {

// Parses `text` as one JSON object; `source` names the file in the message.
Result<nlohmann::json> parse_json_object(const std::string& text, const std::string& source);

// Absent or null fields give nullopt; a present field of the wrong type is kInvalidModel.
Result<std::optional<int64_t>> optional_int(const nlohmann::json& obj, const char* field,
                                            const std::string& source);
Result<std::optional<double>> optional_number(const nlohmann::json& obj, const char* field,
                                              const std::string& source);
Result<std::optional<bool>> optional_bool(const nlohmann::json& obj, const char* field,
                                          const std::string& source);
Result<std::optional<std::string>> optional_string(const nlohmann::json& obj, const char* field,
                                                   const std::string& source);
// A field that must be present, an integer, and > 0.
Result<int64_t> required_positive_int(const nlohmann::json& obj, const char* field,
                                      const std::string& source);
// eos_token_id: an integer, a list of integers, or absent/null (empty list).
Result<std::vector<int32_t>> token_id_list(const nlohmann::json& obj, const char* field,
                                           const std::string& source);

}  // namespace tandem::detail
