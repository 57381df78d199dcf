#include "model/config.h"

#include "model/json_fields.h"
#include "model/quant_tensors.h"
#include "model/weight_names.h"

namespace tandem {

using detail::optional_bool;
using detail::optional_int;
using detail::optional_number;
using detail::optional_string;
using detail::required_positive_int;
using detail::token_id_list;

namespace {

Error invalid(const std::string& source, const std::string& what) {
  return make_error(ErrorCode::kInvalidModel, source + ": " + what);
}

// rope_scaling (transformers 4) or rope_parameters (transformers 5, which also carries
// rope_theta). Only the default rope and Llama 3's frequency-dependent scaling are run.
Status parse_rope(const nlohmann::json& j, const std::string& source, ModelConfig& c) {
  for (const char* field : {"rope_scaling", "rope_parameters"}) {
    auto it = j.find(field);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_object())
      return invalid(source, std::string("field '") + field + "' must be an object");
    const nlohmann::json& rs = *it;
    const std::string where = std::string(field) + ".";
    TANDEM_ASSIGN_OR_RETURN(auto theta, optional_number(rs, "rope_theta", source));
    if (theta) c.rope_theta = *theta;
    TANDEM_ASSIGN_OR_RETURN(auto rope_type, optional_string(rs, "rope_type", source));
    if (!rope_type) {
      TANDEM_ASSIGN_OR_RETURN(auto legacy_type, optional_string(rs, "type", source));
      rope_type = legacy_type;
    }
    if (!rope_type || *rope_type == "default") continue;
    if (*rope_type != "llama3") {
      return make_error(ErrorCode::kUnsupported,
                        source + ": " + where + "rope_type '" + *rope_type +
                            "' is not supported (tandem runs the default rope and 'llama3')");
    }
    RopeScaling& s = c.rope_scaling;
    s.type = RopeScaling::Type::kLlama3;
    struct NumberField {
      const char* name;
      double* out;
    };
    for (NumberField f :
         {NumberField{"factor", &s.factor}, NumberField{"low_freq_factor", &s.low_freq_factor},
          NumberField{"high_freq_factor", &s.high_freq_factor}}) {
      TANDEM_ASSIGN_OR_RETURN(auto v, optional_number(rs, f.name, source));
      if (!v) return invalid(source, "missing required field '" + where + f.name + "'");
      if (!(*v > 0)) return invalid(source, "field '" + where + f.name + "' must be > 0");
      *f.out = *v;
    }
    if (s.high_freq_factor <= s.low_freq_factor) {
      return invalid(source, "field '" + where +
                                 "high_freq_factor' must exceed low_freq_factor (llama3 rope "
                                 "divides by their difference)");
    }
    TANDEM_ASSIGN_OR_RETURN(auto orig,
                            optional_int(rs, "original_max_position_embeddings", source));
    if (!orig || *orig <= 0) {
      return invalid(
          source, "missing or non-positive field '" + where + "original_max_position_embeddings'");
    }
    s.original_max_position_embeddings = *orig;
  }
  return Status::Ok();
}

}  // namespace

Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source) {
  TANDEM_ASSIGN_OR_RETURN(nlohmann::json j, detail::parse_json_object(json_text, source));
  ModelConfig c;

  auto arch_it = j.find("architectures");
  if (arch_it == j.end() || !arch_it->is_array() || arch_it->empty() ||
      !(*arch_it)[0].is_string()) {
    return invalid(source, "missing required field 'architectures' (a list of class names)");
  }
  c.architecture = (*arch_it)[0].get<std::string>();
  if (c.architecture == "Qwen2ForCausalLM") {
    c.arch = Arch::kQwen2;
  } else if (c.architecture == "LlamaForCausalLM") {
    c.arch = Arch::kLlama;
  } else {
    return make_error(ErrorCode::kUnsupported,
                      source + ": architecture '" + c.architecture +
                          "' is not supported (tandem runs Qwen2ForCausalLM, LlamaForCausalLM)");
  }

  TANDEM_ASSIGN_OR_RETURN(c.hidden_size, required_positive_int(j, "hidden_size", source));
  TANDEM_ASSIGN_OR_RETURN(c.intermediate_size,
                          required_positive_int(j, "intermediate_size", source));
  TANDEM_ASSIGN_OR_RETURN(c.num_layers, required_positive_int(j, "num_hidden_layers", source));
  TANDEM_ASSIGN_OR_RETURN(c.num_heads, required_positive_int(j, "num_attention_heads", source));
  TANDEM_ASSIGN_OR_RETURN(c.vocab_size, required_positive_int(j, "vocab_size", source));
  TANDEM_ASSIGN_OR_RETURN(c.max_position_embeddings,
                          required_positive_int(j, "max_position_embeddings", source));

  // transformers defaults num_key_value_heads to num_attention_heads (multi-head attention).
  TANDEM_ASSIGN_OR_RETURN(auto kv_heads, optional_int(j, "num_key_value_heads", source));
  c.num_kv_heads = kv_heads.value_or(c.num_heads);
  if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0) {
    return invalid(source, "field 'num_key_value_heads' (" + std::to_string(c.num_kv_heads) +
                               ") must divide num_attention_heads (" + std::to_string(c.num_heads) +
                               ")");
  }

  TANDEM_ASSIGN_OR_RETURN(auto head_dim, optional_int(j, "head_dim", source));
  if (head_dim && c.arch == Arch::kLlama) {
    if (*head_dim <= 0) return invalid(source, "field 'head_dim' must be a positive integer");
    c.head_dim = *head_dim;
  } else {
    // Qwen2's modeling code ignores head_dim and always splits hidden_size evenly.
    if (c.hidden_size % c.num_heads != 0) {
      return invalid(source, "field 'hidden_size' (" + std::to_string(c.hidden_size) +
                                 ") is not divisible by num_attention_heads (" +
                                 std::to_string(c.num_heads) + ") and 'head_dim' is absent");
    }
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim % 2 != 0) {
    return invalid(source, "head_dim " + std::to_string(c.head_dim) +
                               " is odd; rotary embeddings rotate pairs");
  }

  TANDEM_ASSIGN_OR_RETURN(auto eps, optional_number(j, "rms_norm_eps", source));
  c.rms_norm_eps = eps.value_or(1e-6);
  if (!(c.rms_norm_eps > 0)) return invalid(source, "field 'rms_norm_eps' must be > 0");
  TANDEM_ASSIGN_OR_RETURN(auto theta, optional_number(j, "rope_theta", source));
  c.rope_theta = theta.value_or(10000.0);
  TANDEM_TRY(parse_rope(j, source, c));
  if (!(c.rope_theta > 0)) return invalid(source, "field 'rope_theta' must be > 0");

  TANDEM_ASSIGN_OR_RETURN(auto tied, optional_bool(j, "tie_word_embeddings", source));
  c.tie_word_embeddings = tied.value_or(false);

  if (c.arch == Arch::kQwen2) {
    // Qwen2 always has q/k/v biases; sliding-window attention changes which tokens each layer
    // sees, and tandem's attention is full causal only.
    c.attention_bias = true;
    TANDEM_ASSIGN_OR_RETURN(auto sliding, optional_bool(j, "use_sliding_window", source));
    if (sliding.value_or(false)) {
      return make_error(ErrorCode::kUnsupported,
                        source +
                            ": field 'use_sliding_window' is true; tandem runs full "
                            "causal attention only");
    }
  } else {
    TANDEM_ASSIGN_OR_RETURN(auto attn_bias, optional_bool(j, "attention_bias", source));
    c.attention_bias = attn_bias.value_or(false);
    TANDEM_ASSIGN_OR_RETURN(auto mlp_bias, optional_bool(j, "mlp_bias", source));
    c.mlp_bias = mlp_bias.value_or(false);
  }

  // transformers 5 writes "dtype"; 4.x writes "torch_dtype".
  for (const char* field : {"torch_dtype", "dtype"}) {
    TANDEM_ASSIGN_OR_RETURN(auto name, optional_string(j, field, source));
    if (!name) continue;
    std::optional<DType> t = dtype_from_torch(*name);
    if (!t) {
      return make_error(ErrorCode::kUnsupported, source + ": field '" + field + "' value '" +
                                                     *name + "' is not a supported dtype");
    }
    c.dtype = *t;
  }

  if (auto qc = j.find("quantization_config"); qc != j.end() && !qc->is_null()) {
    TANDEM_ASSIGN_OR_RETURN(c.quant, parse_quant_config(*qc, source));
    for (const LinearModule& l : layer_linears(c)) {
      if (c.quant.quantizes(l.module))
        TANDEM_TRY(check_quant_fits(c.quant, l.module, l.out_features, l.in_features, source));
    }
  }

  TANDEM_ASSIGN_OR_RETURN(auto bos, optional_int(j, "bos_token_id", source));
  if (bos) {
    if (*bos < 0 || *bos >= c.vocab_size) {
      return invalid(source, "field 'bos_token_id' is outside the vocabulary");
    }
    c.bos_token_id = int32_t(*bos);
  }
  TANDEM_ASSIGN_OR_RETURN(c.eos_token_ids, token_id_list(j, "eos_token_id", source));
  for (int32_t id : c.eos_token_ids) {
    if (id >= c.vocab_size) {
      return invalid(source, "field 'eos_token_id' value " + std::to_string(id) +
                                 " is outside the vocabulary");
    }
  }
  return c;
}

Result<GenerationDefaults> parse_generation_config(const std::string& json_text,
                                                   const std::string& source) {
  TANDEM_ASSIGN_OR_RETURN(nlohmann::json j, detail::parse_json_object(json_text, source));
  GenerationDefaults g;
  TANDEM_ASSIGN_OR_RETURN(g.eos_token_ids, token_id_list(j, "eos_token_id", source));
  TANDEM_ASSIGN_OR_RETURN(auto bos, optional_int(j, "bos_token_id", source));
  if (bos) {
    if (*bos < 0 || *bos > INT32_MAX)
      return invalid(source, "field 'bos_token_id' is out of range");
    g.bos_token_id = int32_t(*bos);
  }

  struct FloatField {
    const char* name;
    std::optional<float>* out;
  };
  for (FloatField f :
       {FloatField{"temperature", &g.temperature}, FloatField{"top_p", &g.top_p},
        FloatField{"min_p", &g.min_p}, FloatField{"repetition_penalty", &g.repetition_penalty}}) {
    TANDEM_ASSIGN_OR_RETURN(auto v, optional_number(j, f.name, source));
    if (!v) continue;
    if (*v < 0) return invalid(source, std::string("field '") + f.name + "' must be >= 0");
    *f.out = float(*v);
  }
  if (g.top_p && *g.top_p > 1.0f) return invalid(source, "field 'top_p' must be in [0, 1]");
  if (g.min_p && *g.min_p > 1.0f) return invalid(source, "field 'min_p' must be in [0, 1]");

  struct IntField {
    const char* name;
    std::optional<int32_t>* out;
  };
  for (IntField f : {IntField{"top_k", &g.top_k}, IntField{"max_new_tokens", &g.max_new_tokens}}) {
    TANDEM_ASSIGN_OR_RETURN(auto v, optional_int(j, f.name, source));
    if (!v) continue;
    if (*v < 0 || *v > INT32_MAX) {
      return invalid(source, std::string("field '") + f.name + "' must be a non-negative int32");
    }
    *f.out = int32_t(*v);
  }
  return g;
}

}  // namespace tandem
