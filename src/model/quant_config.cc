#include "model/quant_config.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>

namespace tandem {

namespace {

using json = nlohmann::json;

// Messages name the field the way a person finds it in config.json:
// "config.json: quantization_config.bits = 3 is not supported (supported: 4)".
std::string field_path(const std::string& field) {
  return "quantization_config." + field;
}

Error unsupported(const std::string& source, const std::string& field, const json& value,
                  const std::string& supported) {
  return make_error(ErrorCode::kUnsupported, source + ": " + field_path(field) + " = " +
                                                 value.dump() + " is not supported (" + supported +
                                                 ")");
}

Error invalid(const std::string& source, const std::string& field, const std::string& what) {
  return make_error(ErrorCode::kInvalidModel, source + ": " + field_path(field) + " " + what);
}

// Present and not null.
const json* find(const json& obj, const char* field) {
  auto it = obj.find(field);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

Result<std::optional<int64_t>> int_field(const json& obj, const std::string& prefix,
                                         const char* field, const std::string& source) {
  const json* v = find(obj, field);
  if (v == nullptr) return std::optional<int64_t>();
  if (!v->is_number_integer()) return invalid(source, prefix + field, "must be an integer");
  return std::optional<int64_t>(v->get<int64_t>());
}

Result<std::optional<bool>> bool_field(const json& obj, const std::string& prefix,
                                       const char* field, const std::string& source) {
  const json* v = find(obj, field);
  if (v == nullptr) return std::optional<bool>();
  if (!v->is_boolean()) return invalid(source, prefix + field, "must be true or false");
  return std::optional<bool>(v->get<bool>());
}

Result<std::optional<std::string>> string_field(const json& obj, const std::string& prefix,
                                                const char* field, const std::string& source) {
  const json* v = find(obj, field);
  if (v == nullptr) return std::optional<std::string>();
  if (!v->is_string()) return invalid(source, prefix + field, "must be a string");
  return std::optional<std::string>(v->get<std::string>());
}

Result<std::vector<std::string>> string_list(const json& obj, const char* field,
                                             const std::string& source) {
  std::vector<std::string> out;
  const json* v = find(obj, field);
  if (v == nullptr) return out;
  if (!v->is_array()) return invalid(source, field, "must be a list of module names");
  for (const json& e : *v) {
    if (!e.is_string()) return invalid(source, field, "must be a list of module names");
    out.push_back(e.get<std::string>());
  }
  return out;
}

// A field whose only accepted state is absent/null/false/empty (it would change the layout or
// the precision of something tandem runs as stored).
Status refuse_if_set(const json& obj, const std::string& prefix, const char* field,
                     const std::string& source, const std::string& why) {
  const json* v = find(obj, field);
  if (v == nullptr || (v->is_boolean() && !v->get<bool>()) || (v->is_object() && v->empty()) ||
      (v->is_array() && v->empty())) {
    return Status::Ok();
  }
  return unsupported(source, prefix + field, *v, why);
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

Status parse_fp8(const json& qc, const std::string& source, QuantConfig& q) {
  TANDEM_ASSIGN_OR_RETURN(auto fmt, string_field(qc, "", "fmt", source));
  if (fmt && *fmt != "e4m3") return unsupported(source, "fmt", *fmt, "supported: \"e4m3\"");
  TANDEM_ASSIGN_OR_RETURN(auto scheme, string_field(qc, "", "activation_scheme", source));
  const std::string activation = scheme.value_or("dynamic");
  if (activation != "static" && activation != "dynamic") {
    return unsupported(source, "activation_scheme", activation,
                       "supported: \"static\", \"dynamic\"");
  }
  q.fp8_activations =
      activation == "static" ? Fp8Activations::kStaticTensor : Fp8Activations::kDynamicPerToken;
  if (const json* block = find(qc, "weight_block_size")) {
    if (!block->is_array() || block->size() != 2 || !(*block)[0].is_number_integer() ||
        !(*block)[1].is_number_integer() || (*block)[0].get<int64_t>() <= 0 ||
        (*block)[1].get<int64_t>() <= 0) {
      return invalid(source, "weight_block_size", "must be two positive integers [out, in]");
    }
    if (activation == "static") {
      return unsupported(source, "activation_scheme", activation,
                         "block-scaled fp8 (weight_block_size) quantizes activations "
                         "dynamically: supported: \"dynamic\"");
    }
    q.fp8_scale = Fp8ScaleGranularity::kBlock;
    q.block_out = (*block)[0].get<int64_t>();
    q.block_in = (*block)[1].get<int64_t>();
    // DeepSeek-style block fp8 scales activations per token and per block_in features.
    q.fp8_activations = Fp8Activations::kDynamicPerTokenGroup;
  }
  for (const char* kv : {"kv_cache_scheme", "kv_cache_quant_algo"})
    TANDEM_TRY(refuse_if_set(qc, "", kv, source, "tandem keeps the KV cache in fp32/bf16"));
  TANDEM_ASSIGN_OR_RETURN(q.skip_exact, string_list(qc, "ignored_layers", source));
  return Status::Ok();
}

Status parse_fbgemm_fp8(const json& qc, const std::string& source, QuantConfig& q) {
  q.fp8_scale = Fp8ScaleGranularity::kChannel;
  q.fp8_activations = Fp8Activations::kDynamicPerToken;
  if (const json* ub = find(qc, "activation_scale_ub")) {
    if (!ub->is_number() || !(ub->get<double>() > 0)) {
      return invalid(source, "activation_scale_ub", "must be a positive number");
    }
    q.activation_scale_ub = ub->get<double>();
  }
  // transformers' FbgemmFp8 integration matches these as substrings of the module name.
  TANDEM_ASSIGN_OR_RETURN(q.skip_substring, string_list(qc, "modules_to_not_convert", source));
  return Status::Ok();
}

// The FP8 schemes of compressed-tensors (llm-compressor): one config group targeting every
// Linear, 8-bit float weights with tensor or channel scales.
Status parse_compressed_tensors(const json& qc, const std::string& source, QuantConfig& q) {
  TANDEM_ASSIGN_OR_RETURN(auto format, string_field(qc, "", "format", source));
  if (format && *format != "float-quantized" && *format != "naive-quantized") {
    return unsupported(source, "format", *format,
                       "supported: \"float-quantized\", \"naive-quantized\" (fp8)");
  }
  TANDEM_TRY(refuse_if_set(qc, "", "sparsity_config", source, "tandem runs dense weights"));
  TANDEM_TRY(
      refuse_if_set(qc, "", "kv_cache_scheme", source, "tandem keeps the KV cache in fp32/bf16"));
  const json* groups = find(qc, "config_groups");
  if (groups == nullptr || !groups->is_object() || groups->empty()) {
    return invalid(source, "config_groups", "must be an object with one quantization scheme");
  }
  if (groups->size() != 1) {
    return unsupported(source, "config_groups", json(groups->size()),
                       "one scheme for every Linear is supported, this has several");
  }
  const std::string name = groups->begin().key();
  const json& g = groups->begin().value();
  const std::string gp = "config_groups." + name + ".";
  if (!g.is_object()) return invalid(source, gp.substr(0, gp.size() - 1), "must be an object");
  const json* targets = find(g, "targets");
  if (targets == nullptr || *targets != json::array({"Linear"})) {
    return unsupported(source, gp + "targets", targets ? *targets : json(),
                       "supported: [\"Linear\"]");
  }
  const json* w = find(g, "weights");
  if (w == nullptr || !w->is_object()) return invalid(source, gp + "weights", "must be an object");
  const std::string wp = gp + "weights.";
  TANDEM_ASSIGN_OR_RETURN(auto bits, int_field(*w, wp, "num_bits", source));
  if (bits != 8)
    return unsupported(source, wp + "num_bits", bits ? json(*bits) : json(), "supported: 8");
  TANDEM_ASSIGN_OR_RETURN(auto type, string_field(*w, wp, "type", source));
  if (type != "float") {
    return unsupported(source, wp + "type", type ? json(*type) : json(),
                       "supported: \"float\" (fp8 e4m3)");
  }
  TANDEM_ASSIGN_OR_RETURN(auto strategy, string_field(*w, wp, "strategy", source));
  if (strategy == "tensor") {
    q.fp8_scale = Fp8ScaleGranularity::kTensor;
  } else if (strategy == "channel") {
    q.fp8_scale = Fp8ScaleGranularity::kChannel;
  } else {
    return unsupported(source, wp + "strategy", strategy ? json(*strategy) : json(),
                       "supported: \"tensor\", \"channel\"");
  }
  TANDEM_ASSIGN_OR_RETURN(auto symmetric, bool_field(*w, wp, "symmetric", source));
  if (symmetric == false) return unsupported(source, wp + "symmetric", false, "supported: true");
  TANDEM_TRY(refuse_if_set(*w, wp, "dynamic", source, "weights have stored scales"));
  TANDEM_TRY(refuse_if_set(*w, wp, "actorder", source, "fp8 weights have no act-order"));

  q.fp8_activations = Fp8Activations::kNone;
  if (const json* a = find(g, "input_activations")) {
    const std::string ap = gp + "input_activations.";
    if (!a->is_object()) return invalid(source, ap + "", "must be an object or null");
    TANDEM_ASSIGN_OR_RETURN(auto abits, int_field(*a, ap, "num_bits", source));
    if (abits != 8) {
      return unsupported(source, ap + "num_bits", abits ? json(*abits) : json(), "supported: 8");
    }
    TANDEM_ASSIGN_OR_RETURN(auto atype, string_field(*a, ap, "type", source));
    if (atype != "float") {
      return unsupported(source, ap + "type", atype ? json(*atype) : json(),
                         "supported: \"float\" (fp8 e4m3)");
    }
    TANDEM_ASSIGN_OR_RETURN(auto astrategy, string_field(*a, ap, "strategy", source));
    TANDEM_ASSIGN_OR_RETURN(auto dynamic, bool_field(*a, ap, "dynamic", source));
    if (astrategy == "tensor" && !dynamic.value_or(false)) {
      q.fp8_activations = Fp8Activations::kStaticTensor;
    } else if (astrategy == "token" || astrategy == "tensor") {
      // Dynamic scales are computed at run time, not stored; tandem always takes them per token
      // (a per-tensor dynamic scale would make a sequence's result depend on its batch).
      if (!dynamic.value_or(false)) {
        return unsupported(source, ap + "dynamic", false,
                           "per-token activation scales are dynamic: supported: true");
      }
      q.fp8_activations = Fp8Activations::kDynamicPerToken;
    } else {
      return unsupported(source, ap + "strategy", astrategy ? json(*astrategy) : json(),
                         "supported: \"tensor\" (static), \"token\" (dynamic)");
    }
  }
  TANDEM_TRY(refuse_if_set(g, gp, "output_activations", source,
                           "tandem quantizes weights and inputs only"));
  TANDEM_ASSIGN_OR_RETURN(std::vector<std::string> ignore, string_list(qc, "ignore", source));
  for (std::string& s : ignore) {
    if (s.rfind("re:", 0) == 0) {
      std::string re = s.substr(3);
      try {
        std::regex check(re);
      } catch (const std::regex_error&) {
        return invalid(source, "ignore", "entry '" + s + "' is not a valid regular expression");
      }
      q.skip_regex.push_back(std::move(re));
    } else {
      q.skip_exact.push_back(std::move(s));
    }
  }
  return Status::Ok();
}

Status parse_awq(const json& qc, const std::string& source, QuantConfig& q) {
  TANDEM_ASSIGN_OR_RETURN(auto bits, int_field(qc, "", "bits", source));
  if (bits != 4) return unsupported(source, "bits", bits ? json(*bits) : json(), "supported: 4");
  q.bits = 4;
  TANDEM_ASSIGN_OR_RETURN(auto group, int_field(qc, "", "group_size", source));
  if (group != 32 && group != 64 && group != 128) {
    return unsupported(source, "group_size", group ? json(*group) : json(),
                       "supported: 32, 64, 128");
  }
  q.group_size = *group;
  TANDEM_ASSIGN_OR_RETURN(auto zero_point, bool_field(qc, "", "zero_point", source));
  if (zero_point != true) {
    return unsupported(source, "zero_point", zero_point ? json(*zero_point) : json(),
                       "supported: true");
  }
  TANDEM_ASSIGN_OR_RETURN(auto version, string_field(qc, "", "version", source));
  // GEMV, exllama and marlin checkpoints pack the nibbles differently.
  if (lower(version.value_or("gemm")) != "gemm") {
    return unsupported(source, "version", *version, "supported: \"gemm\"");
  }
  TANDEM_ASSIGN_OR_RETURN(q.skip_substring, string_list(qc, "modules_to_not_convert", source));
  return Status::Ok();
}

// The seven projections of a decoder layer, as GPTQ's modules_in_block_to_quantize names them.
constexpr const char* kBlockLinears[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                         "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                         "mlp.down_proj"};

Status parse_gptq(const json& qc, const std::string& source, QuantConfig& q) {
  TANDEM_ASSIGN_OR_RETURN(auto bits, int_field(qc, "", "bits", source));
  if (bits != 4) return unsupported(source, "bits", bits ? json(*bits) : json(), "supported: 4");
  q.bits = 4;
  TANDEM_ASSIGN_OR_RETURN(auto group, int_field(qc, "", "group_size", source));
  if (group != 32 && group != 64 && group != 128 && group != -1) {
    return unsupported(source, "group_size", group ? json(*group) : json(),
                       "supported: 32, 64, 128, -1");
  }
  q.group_size = *group;
  TANDEM_ASSIGN_OR_RETURN(auto desc_act, bool_field(qc, "", "desc_act", source));
  q.desc_act = desc_act.value_or(false);
  TANDEM_ASSIGN_OR_RETURN(auto sym, bool_field(qc, "", "sym", source));
  q.sym = sym.value_or(true);
  TANDEM_ASSIGN_OR_RETURN(auto format, string_field(qc, "", "checkpoint_format", source));
  if (!format || *format == "gptq") {
    q.zero_offset = 1;
  } else if (*format == "gptq_v2") {
    q.zero_offset = 0;
  } else {
    return unsupported(source, "checkpoint_format", *format,
                       "supported: \"gptq\" (v1), \"gptq_v2\"");
  }
  TANDEM_TRY(refuse_if_set(qc, "", "is_marlin_format", source,
                           "marlin checkpoints repack qweight: supported: false"));
  TANDEM_TRY(refuse_if_set(qc, "", "lm_head", source, "tandem keeps lm_head unquantized"));
  TANDEM_TRY(refuse_if_set(qc, "", "dynamic", source,
                           "per-module overrides are not supported: every Linear is one format"));
  if (const json* blocks = find(qc, "modules_in_block_to_quantize")) {
    std::vector<std::string> listed;
    for (const json& group_list : blocks->is_array() ? *blocks : json::array()) {
      for (const json& n : group_list.is_array() ? group_list : json::array({group_list}))
        if (n.is_string()) listed.push_back(n.get<std::string>());
    }
    for (const char* linear : kBlockLinears) {
      if (std::find(listed.begin(), listed.end(), linear) == listed.end()) {
        return unsupported(
            source, "modules_in_block_to_quantize", *blocks,
            std::string("it leaves ") + linear + " unquantized; supported: all seven projections");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

bool QuantConfig::quantizes(const std::string& module) const {
  if (format == QuantFormat::kNone) return false;
  for (const std::string& s : skip_exact)
    if (module == s) return false;
  for (const std::string& s : skip_substring)
    if (module.find(s) != std::string::npos) return false;
  for (const std::string& s : skip_regex) {
    // compressed-tensors matches with Python's re.match: anchored at the start only.
    if (std::regex_search(module, std::regex(s), std::regex_constants::match_continuous))
      return false;
  }
  return true;
}

const char* quant_format_name(QuantFormat f) {
  switch (f) {
    case QuantFormat::kNone:
      return "none";
    case QuantFormat::kFp8:
      return "fp8";
    case QuantFormat::kAwq:
      return "awq";
    case QuantFormat::kGptq:
      return "gptq";
  }
  return "?";
}

std::string QuantConfig::describe() const {
  switch (format) {
    case QuantFormat::kNone:
      return "none";
    case QuantFormat::kFp8: {
      const char* scale = fp8_scale == Fp8ScaleGranularity::kTensor    ? "tensor"
                          : fp8_scale == Fp8ScaleGranularity::kChannel ? "channel"
                                                                       : "block";
      const char* act = fp8_activations == Fp8Activations::kNone ? "weight-only"
                        : fp8_activations == Fp8Activations::kStaticTensor
                            ? "static activation scales"
                        : fp8_activations == Fp8Activations::kDynamicPerToken
                            ? "dynamic per-token activation scales"
                            : "dynamic per-token-group activation scales";
      return "fp8 e4m3 (" + method + ", " + scale + " weight scales, " + act + ")";
    }
    case QuantFormat::kAwq:
      return "awq int4 (group " + std::to_string(group_size) + ", zero points)";
    case QuantFormat::kGptq:
      return "gptq int4 (group " + std::to_string(group_size) + (sym ? ", sym" : ", asym") +
             (desc_act ? ", desc_act" : "") + (zero_offset ? ", v1 zeros" : ", v2 zeros") + ")";
  }
  return "?";
}

Result<QuantConfig> parse_quant_config(const json& qc, const std::string& source) {
  if (!qc.is_object()) {
    return make_error(ErrorCode::kInvalidModel, source + ": quantization_config must be an object");
  }
  QuantConfig q;
  TANDEM_ASSIGN_OR_RETURN(auto method, string_field(qc, "", "quant_method", source));
  if (!method) return invalid(source, "quant_method", "is missing");
  q.method = *method;
  if (*method == "fp8") {
    q.format = QuantFormat::kFp8;
    TANDEM_TRY(parse_fp8(qc, source, q));
  } else if (*method == "fbgemm_fp8") {
    q.format = QuantFormat::kFp8;
    TANDEM_TRY(parse_fbgemm_fp8(qc, source, q));
  } else if (*method == "compressed-tensors") {
    q.format = QuantFormat::kFp8;
    TANDEM_TRY(parse_compressed_tensors(qc, source, q));
  } else if (*method == "awq") {
    q.format = QuantFormat::kAwq;
    TANDEM_TRY(parse_awq(qc, source, q));
  } else if (*method == "gptq") {
    q.format = QuantFormat::kGptq;
    TANDEM_TRY(parse_gptq(qc, source, q));
  } else {
    return unsupported(source, "quant_method", *method,
                       "supported: \"fp8\", \"compressed-tensors\", \"fbgemm_fp8\", \"awq\", "
                       "\"gptq\"");
  }
  return q;
}

Result<QuantConfig> load_time_quantization(const std::string& value, const QuantConfig& stored,
                                           const std::string& flag) {
  if (value.empty()) return stored;
  if (value != "fp8") {
    return make_error(ErrorCode::kUnsupported,
                      flag + " '" + value + "' is not supported (supported: fp8)");
  }
  // An fp8 checkpoint already is what was asked for; anything else would be quantized twice.
  if (stored.format == QuantFormat::kFp8) return stored;
  if (stored.quantized()) {
    return make_error(ErrorCode::kInvalidArgument,
                      flag + " fp8: the checkpoint is already quantized (" + stored.describe() +
                          "); load-time fp8 quantizes float checkpoints only");
  }
  QuantConfig q;
  q.format = QuantFormat::kFp8;
  q.method = "fp8 (" + flag + ")";
  q.fp8_scale = Fp8ScaleGranularity::kChannel;
  q.fp8_activations = Fp8Activations::kDynamicPerToken;
  return q;
}

}  // namespace tandem
