#include "model/json_fields.h"

#include <limits>

namespace tandem::detail {

namespace {

Error field_error(const std::string& source, const char* field, const char* expected) {
  return make_error(ErrorCode::kInvalidModel,
                    source + ": field '" + field + "' must be " + expected);
}

}  // namespace

Result<nlohmann::json> parse_json_object(const std::string& text, const std::string& source) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return make_error(ErrorCode::kInvalidModel, source + ": not valid JSON");
  if (!j.is_object()) {
    return make_error(ErrorCode::kInvalidModel, source + ": top level must be a JSON object");
  }
  return j;
}

Result<std::optional<int64_t>> optional_int(const nlohmann::json& obj, const char* field,
                                            const std::string& source) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return std::optional<int64_t>();
  if (it->is_number_integer()) return std::optional<int64_t>(it->get<int64_t>());
  // Some exporters write 4096.0; accept integral floats, as Python's json round trip would.
  if (it->is_number_float()) {
    double d = it->get<double>();
    if (d == double(int64_t(d))) return std::optional<int64_t>(int64_t(d));
  }
  return field_error(source, field, "an integer");
}

Result<std::optional<double>> optional_number(const nlohmann::json& obj, const char* field,
                                              const std::string& source) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return std::optional<double>();
  if (it->is_number()) return std::optional<double>(it->get<double>());
  return field_error(source, field, "a number");
}

Result<std::optional<bool>> optional_bool(const nlohmann::json& obj, const char* field,
                                          const std::string& source) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return std::optional<bool>();
  if (it->is_boolean()) return std::optional<bool>(it->get<bool>());
  return field_error(source, field, "true or false");
}

Result<std::optional<std::string>> optional_string(const nlohmann::json& obj, const char* field,
                                                   const std::string& source) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  return field_error(source, field, "a string");
}

Result<int64_t> required_positive_int(const nlohmann::json& obj, const char* field,
                                      const std::string& source) {
  TANDEM_ASSIGN_OR_RETURN(std::optional<int64_t> v, optional_int(obj, field, source));
  if (!v) {
    return make_error(ErrorCode::kInvalidModel,
                      source + ": missing required field '" + field + "'");
  }
  if (*v <= 0) return field_error(source, field, "a positive integer");
  return *v;
}

Result<std::vector<int32_t>> token_id_list(const nlohmann::json& obj, const char* field,
                                           const std::string& source) {
  std::vector<int32_t> ids;
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return ids;
  auto push = [&](const nlohmann::json& v) -> bool {
    if (!v.is_number_integer()) return false;
    int64_t id = v.get<int64_t>();
    if (id < 0 || id > std::numeric_limits<int32_t>::max()) return false;
    ids.push_back(int32_t(id));
    return true;
  };
  if (it->is_array()) {
    for (const auto& v : *it) {
      if (!push(v)) return field_error(source, field, "a token id or a list of token ids");
    }
    return ids;
  }
  if (!push(*it)) return field_error(source, field, "a token id or a list of token ids");
  return ids;
}

}  // namespace tandem::detail
