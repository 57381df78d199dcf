#include "model/mkmodel_presets.h"

namespace tandem::mkmodel {

namespace {

using json = nlohmann::ordered_json;

// Qwen2.5 instruct: config.json says eos 151645 (<|im_end|>); generation_config.json adds
// 151643 (<|endoftext|>) and the recommended sampling.
Preset qwen(std::string name, int64_t hidden, int64_t inter, int64_t layers, int64_t heads,
            int64_t kv_heads, int64_t vocab, bool tied, int64_t max_window_layers, uint64_t salt) {
  Preset p;
  p.name = std::move(name);
  ModelConfig& c = p.config;
  c.arch = Arch::kQwen2;
  c.architecture = "Qwen2ForCausalLM";
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = hidden / heads;
  c.vocab_size = vocab;
  c.max_position_embeddings = 32768;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1000000.0;
  c.tie_word_embeddings = tied;
  c.attention_bias = true;
  c.bos_token_id = 151643;
  c.eos_token_ids = {151645};
  p.seed_salt = salt;
  p.sliding_window = 131072;
  p.max_window_layers = max_window_layers;
  p.generation = {{"bos_token_id", 151643},
                  {"do_sample", true},
                  {"eos_token_id", {151645, 151643}},
                  {"pad_token_id", 151643},
                  {"repetition_penalty", 1.05},
                  {"temperature", 0.7},
                  {"top_k", 20},
                  {"top_p", 0.8}};
  return p;
}

// Llama 3.x instruct: eos is <|end_of_text|>, <|eom_id|>, <|eot_id|> in both files.
Preset llama(std::string name, int64_t hidden, int64_t inter, int64_t layers, int64_t heads,
             int64_t kv_heads, int64_t head_dim, bool tied, double rope_factor, uint64_t salt) {
  Preset p;
  p.name = std::move(name);
  ModelConfig& c = p.config;
  c.arch = Arch::kLlama;
  c.architecture = "LlamaForCausalLM";
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.vocab_size = 128256;
  c.max_position_embeddings = 131072;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500000.0;
  c.rope_scaling.type = RopeScaling::Type::kLlama3;
  c.rope_scaling.factor = rope_factor;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 8192;
  c.tie_word_embeddings = tied;
  c.bos_token_id = 128000;
  c.eos_token_ids = {128001, 128008, 128009};
  p.seed_salt = salt;
  p.generation = {{"bos_token_id", 128000},
                  {"do_sample", true},
                  {"eos_token_id", {128001, 128008, 128009}},
                  {"temperature", 0.6},
                  {"top_p", 0.9}};
  return p;
}

std::vector<Preset> make_presets() {
  std::vector<Preset> v;
  v.push_back(qwen("qwen2.5-7b", 3584, 18944, 28, 28, 4, 152064, false, 28, 1));
  v.push_back(qwen("qwen2.5-0.5b", 896, 4864, 24, 14, 2, 151936, true, 21, 2));
  v.push_back(llama("llama-3.1-8b", 4096, 14336, 32, 32, 8, 128, false, 8.0, 3));
  v.push_back(llama("llama-3.2-1b", 2048, 8192, 16, 32, 8, 64, true, 32.0, 4));
  // Test models: real vocabularies (the real tokenizers work), toy widths.
  v.push_back(qwen("tiny-qwen", 64, 128, 2, 4, 2, 151936, true, 2, 5));
  v.push_back(qwen("tiny-qwen-draft", 32, 64, 1, 2, 1, 151936, true, 1, 6));
  v.push_back(llama("tiny-llama", 64, 128, 2, 4, 1, 16, false, 8.0, 7));
  // The smallest widths every quantized GPU layout holds (128 x 128 fp8 blocks, int4 groups of
  // 128): the CUDA runner's per-format tests.
  v.push_back(qwen("small-qwen", 256, 512, 2, 4, 2, 151936, true, 2, 8));
  return v;
}

}  // namespace

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = make_presets();
  return all;
}

const Preset* find_preset(const std::string& name) {
  for (const Preset& p : presets()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

nlohmann::ordered_json config_json(const Preset& p, DType dtype) {
  const ModelConfig& c = p.config;
  const std::string torch_dtype = dtype == DType::kF32   ? "float32"
                                  : dtype == DType::kF16 ? "float16"
                                                         : "bfloat16";
  json eos = c.eos_token_ids.size() == 1 ? json(c.eos_token_ids[0]) : json(c.eos_token_ids);
  json j;
  j["architectures"] = {c.architecture};
  if (c.arch == Arch::kLlama) {
    j["attention_bias"] = c.attention_bias;
    j["attention_dropout"] = 0.0;
    j["bos_token_id"] = *c.bos_token_id;
    j["eos_token_id"] = eos;
    j["head_dim"] = c.head_dim;
    j["hidden_act"] = "silu";
    j["hidden_size"] = c.hidden_size;
    j["initializer_range"] = 0.02;
    j["intermediate_size"] = c.intermediate_size;
    j["max_position_embeddings"] = c.max_position_embeddings;
    j["mlp_bias"] = c.mlp_bias;
    j["model_type"] = "llama";
    j["num_attention_heads"] = c.num_heads;
    j["num_hidden_layers"] = c.num_layers;
    j["num_key_value_heads"] = c.num_kv_heads;
    j["pretraining_tp"] = 1;
    j["rms_norm_eps"] = c.rms_norm_eps;
    j["rope_scaling"] = {
        {"factor", c.rope_scaling.factor},
        {"high_freq_factor", c.rope_scaling.high_freq_factor},
        {"low_freq_factor", c.rope_scaling.low_freq_factor},
        {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings},
        {"rope_type", "llama3"}};
    j["rope_theta"] = c.rope_theta;
    j["tie_word_embeddings"] = c.tie_word_embeddings;
    j["torch_dtype"] = torch_dtype;
    j["transformers_version"] = "4.45.0";
    j["use_cache"] = true;
    j["vocab_size"] = c.vocab_size;
  } else {
    j["attention_dropout"] = 0.0;
    j["bos_token_id"] = *c.bos_token_id;
    j["eos_token_id"] = eos;
    j["hidden_act"] = "silu";
    j["hidden_size"] = c.hidden_size;
    j["initializer_range"] = 0.02;
    j["intermediate_size"] = c.intermediate_size;
    j["max_position_embeddings"] = c.max_position_embeddings;
    j["max_window_layers"] = p.max_window_layers;
    j["model_type"] = "qwen2";
    j["num_attention_heads"] = c.num_heads;
    j["num_hidden_layers"] = c.num_layers;
    j["num_key_value_heads"] = c.num_kv_heads;
    j["rms_norm_eps"] = c.rms_norm_eps;
    j["rope_scaling"] = nullptr;
    j["rope_theta"] = c.rope_theta;
    j["sliding_window"] = p.sliding_window;
    j["tie_word_embeddings"] = c.tie_word_embeddings;
    j["torch_dtype"] = torch_dtype;
    j["transformers_version"] = "4.43.1";
    j["use_cache"] = true;
    j["use_sliding_window"] = false;
    j["vocab_size"] = c.vocab_size;
  }
  return j;
}

}  // namespace tandem::mkmodel
