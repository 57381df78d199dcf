#include "model/model_dir.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/check.h"
#include "model/quant_tensors.h"
#include "model/weight_names.h"

namespace tandem {

namespace fs = std::filesystem;

namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// "a, b, c and 7 more": enough to act on without a 300-line message for an empty file.
std::string name_list(const std::vector<std::string>& names) {
  constexpr size_t kShown = 12;
  std::string s;
  for (size_t i = 0; i < names.size() && i < kShown; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > kShown) s += " and " + std::to_string(names.size() - kShown) + " more";
  return s;
}

Result<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::kIo, path.string() + ": cannot read");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Result<ModelWeights> resolve_weights(const ModelConfig& config, const WeightStore& store) {
  std::vector<std::string> missing;
  std::vector<std::string> wrong_shape;
  std::vector<std::string> wrong_dtype;
  std::set<std::string> expected_names;
  for (const ExpectedTensor& e : expected_tensors(config)) {
    expected_names.insert(e.name);
    const TensorView* t = store.find(e.name);
    if (t == nullptr) {
      if (!e.optional) missing.push_back(e.name);
    } else if (t->shape != e.shape && std::find(e.other_shapes.begin(), e.other_shapes.end(),
                                                t->shape) == e.other_shapes.end()) {
      wrong_shape.push_back("'" + e.name + "' in " + t->file + " has shape " +
                            shape_string(t->shape) + ", config.json implies " +
                            shape_string(e.shape));
    } else if (!e.dtypes.empty() &&
               std::find(e.dtypes.begin(), e.dtypes.end(), t->dtype) == e.dtypes.end()) {
      std::string allowed;
      for (DType d : e.dtypes)
        allowed += (allowed.empty() ? "" : " or ") + std::string(dtype_name(d));
      wrong_dtype.push_back("'" + e.name + "' in " + t->file + " is " +
                            std::string(dtype_name(t->dtype)) + ", quantization_config implies " +
                            allowed);
    }
  }
  std::vector<std::string> unexpected;
  for (const auto& [name, t] : store.tensors()) {
    if (expected_names.count(name) || is_ignored_buffer(name)) continue;
    // A tied checkpoint may still carry lm_head.weight; transformers ties it and so do we.
    if (config.tie_word_embeddings && name == "lm_head.weight") continue;
    unexpected.push_back("'" + name + "' (" + t.file + ")");
  }
  if (!missing.empty() || !wrong_shape.empty() || !wrong_dtype.empty() || !unexpected.empty()) {
    std::string msg = "weights do not match config.json (" + config.architecture + "):";
    if (!missing.empty()) {
      msg +=
          " missing tensors (" + std::to_string(missing.size()) + "): " + name_list(missing) + ";";
    }
    if (!wrong_shape.empty()) msg += " wrong shapes: " + name_list(wrong_shape) + ";";
    if (!wrong_dtype.empty()) msg += " wrong dtypes: " + name_list(wrong_dtype) + ";";
    if (!unexpected.empty()) {
      msg += " unexpected tensors (" + std::to_string(unexpected.size()) +
             "): " + name_list(unexpected) + ";";
    }
    msg.pop_back();
    return make_error(ErrorCode::kInvalidModel, msg);
  }

  auto get = [&](const std::string& name) {
    const TensorView* t = store.find(name);
    TANDEM_CHECK(t != nullptr, "%s vanished after the presence check", name.c_str());
    return t;
  };
  auto get_if = [&](bool present, const std::string& name) {
    return present ? get(name) : nullptr;
  };
  const bool o_bias = config.arch == Arch::kLlama && config.attention_bias;
  ModelWeights w;
  w.embed_tokens = get("model.embed_tokens.weight");
  for (int64_t i = 0; i < config.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights l{};
    l.input_norm = get(p + "input_layernorm.weight");
    // The stored weight of a projection and, when quantized, the rest of its tensors.
    auto linear = [&](const char* name, int64_t out_features, int64_t in_features,
                      const TensorView*& weight, LinearQuant& quant) -> Status {
      const std::string module = p + name;
      if (!config.quant.quantizes(module)) {
        weight = get(module + ".weight");
        quant = LinearQuant{};
        quant.out_features = out_features;
        quant.in_features = in_features;
        return Status::Ok();
      }
      weight = get(stored_weight_name(config.quant, module));
      TANDEM_ASSIGN_OR_RETURN(
          quant, resolve_linear_quant(config.quant, store, module, out_features, in_features));
      return Status::Ok();
    };
    const int64_t q_out = config.num_heads * config.head_dim;
    const int64_t kv_out = config.num_kv_heads * config.head_dim;
    const int64_t h = config.hidden_size;
    const int64_t inter = config.intermediate_size;
    LayerQuant& lq = l.quant;
    TANDEM_TRY(linear("self_attn.q_proj", q_out, h, l.q_proj, lq.q_proj));
    TANDEM_TRY(linear("self_attn.k_proj", kv_out, h, l.k_proj, lq.k_proj));
    TANDEM_TRY(linear("self_attn.v_proj", kv_out, h, l.v_proj, lq.v_proj));
    TANDEM_TRY(linear("self_attn.o_proj", h, q_out, l.o_proj, lq.o_proj));
    TANDEM_TRY(linear("mlp.gate_proj", inter, h, l.gate_proj, lq.gate_proj));
    TANDEM_TRY(linear("mlp.up_proj", inter, h, l.up_proj, lq.up_proj));
    TANDEM_TRY(linear("mlp.down_proj", h, inter, l.down_proj, lq.down_proj));
    l.q_bias = get_if(config.attention_bias, p + "self_attn.q_proj.bias");
    l.k_bias = get_if(config.attention_bias, p + "self_attn.k_proj.bias");
    l.v_bias = get_if(config.attention_bias, p + "self_attn.v_proj.bias");
    l.o_bias = get_if(o_bias, p + "self_attn.o_proj.bias");
    l.post_attn_norm = get(p + "post_attention_layernorm.weight");
    l.gate_bias = get_if(config.mlp_bias, p + "mlp.gate_proj.bias");
    l.up_bias = get_if(config.mlp_bias, p + "mlp.up_proj.bias");
    l.down_bias = get_if(config.mlp_bias, p + "mlp.down_proj.bias");
    w.layers.push_back(l);
  }
  w.final_norm = get("model.norm.weight");
  w.lm_head = config.tie_word_embeddings ? w.embed_tokens : get("lm_head.weight");
  return w;
}

Result<ModelDir> load_model_dir(const std::string& path) {
  const fs::path dir(path);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return make_error(ErrorCode::kNotFound, path + ": model directory does not exist");
  }
  const fs::path config_path = dir / "config.json";
  if (!fs::exists(config_path, ec)) {
    return make_error(ErrorCode::kNotFound, config_path.string() +
                                                ": missing (every Hugging "
                                                "Face model directory has one)");
  }
  TANDEM_ASSIGN_OR_RETURN(std::string config_text, read_file(config_path));
  TANDEM_ASSIGN_OR_RETURN(ModelConfig config,
                          parse_model_config(config_text, config_path.string()));

  GenerationDefaults generation;
  const fs::path gen_path = dir / "generation_config.json";
  if (fs::exists(gen_path, ec)) {
    TANDEM_ASSIGN_OR_RETURN(std::string gen_text, read_file(gen_path));
    TANDEM_ASSIGN_OR_RETURN(generation, parse_generation_config(gen_text, gen_path.string()));
    for (int32_t id : generation.eos_token_ids) {
      if (id >= config.vocab_size) {
        return make_error(ErrorCode::kInvalidModel,
                          gen_path.string() + ": field 'eos_token_id' value " + std::to_string(id) +
                              " is outside the vocabulary");
      }
      if (std::find(config.eos_token_ids.begin(), config.eos_token_ids.end(), id) ==
          config.eos_token_ids.end()) {
        config.eos_token_ids.push_back(id);
      }
    }
  }

  TANDEM_ASSIGN_OR_RETURN(WeightStore weights, WeightStore::open(path));
  Result<ModelWeights> resolved = resolve_weights(config, weights);
  if (!resolved.ok()) {
    Error e = std::move(resolved).take_error();
    e.message = path + ": " + e.message;
    return e;
  }
  ModelDir m{path, std::move(config), std::move(generation), std::move(weights),
             std::move(resolved).value()};
  return m;
}

}  // namespace tandem
