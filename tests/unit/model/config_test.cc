// config.json / generation_config.json parsing: the real checkpoints' files, and each way a
// file can be unsupported or broken, with the field named in the message.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model_test_util.h"

using namespace tandem;
using tandem::testing::contains;

namespace {

// Qwen/Qwen2.5-7B-Instruct config.json, verbatim.
const char* kQwen25_7B = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 3584,
  "initializer_range": 0.02, "intermediate_size": 18944, "max_position_embeddings": 32768,
  "max_window_layers": 28, "model_type": "qwen2", "num_attention_heads": 28,
  "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 152064})";

// meta-llama/Llama-3.2-1B-Instruct config.json, verbatim.
const char* kLlama32_1B = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "head_dim": 64,
  "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
  "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
  "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})";

std::string replace(std::string s, const std::string& from, const std::string& to) {
  size_t at = s.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, from);
  return s.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("Qwen2.5-7B config: biases on, untied, GQA, rope_theta") {
  auto c = parse_model_config(kQwen25_7B, "config.json");
  REQUIRE_MESSAGE(c.ok(), c.error().to_string());
  CHECK(c->arch == Arch::kQwen2);
  CHECK(c->hidden_size == 3584);
  CHECK(c->intermediate_size == 18944);
  CHECK(c->num_layers == 28);
  CHECK(c->num_heads == 28);
  CHECK(c->num_kv_heads == 4);
  CHECK(c->head_dim == 128);
  CHECK(c->vocab_size == 152064);
  CHECK(c->max_position_embeddings == 32768);
  CHECK(c->rope_theta == 1000000.0);
  CHECK(c->rms_norm_eps == 1e-6);
  CHECK(c->attention_bias);
  CHECK_FALSE(c->tie_word_embeddings);
  CHECK(c->rope_scaling.type == RopeScaling::Type::kNone);
  CHECK(c->dtype == DType::kBF16);
  CHECK(c->bos_token_id == 151643);
  CHECK(c->eos_token_ids == std::vector<int32_t>{151645});
}

TEST_CASE("Llama-3.2-1B config: explicit head_dim, llama3 rope scaling, eos list, tied") {
  auto c = parse_model_config(kLlama32_1B, "config.json");
  REQUIRE_MESSAGE(c.ok(), c.error().to_string());
  CHECK(c->arch == Arch::kLlama);
  CHECK(c->head_dim == 64);
  CHECK(c->num_kv_heads == 8);
  CHECK(c->tie_word_embeddings);
  CHECK_FALSE(c->attention_bias);
  CHECK_FALSE(c->mlp_bias);
  CHECK(c->rms_norm_eps == 1e-5);
  CHECK(c->rope_theta == 500000.0);
  CHECK(c->rope_scaling.type == RopeScaling::Type::kLlama3);
  CHECK(c->rope_scaling.factor == 32.0);
  CHECK(c->rope_scaling.low_freq_factor == 1.0);
  CHECK(c->rope_scaling.high_freq_factor == 4.0);
  CHECK(c->rope_scaling.original_max_position_embeddings == 8192);
  CHECK(c->eos_token_ids == std::vector<int32_t>{128001, 128008, 128009});
}

TEST_CASE("Llama: head_dim defaults to hidden/heads; attention_bias and mlp_bias are read") {
  std::string j = replace(kLlama32_1B, R"("head_dim": 64,)", "");
  j = replace(j, R"("attention_bias": false)", R"("attention_bias": true)");
  j = replace(j, R"("mlp_bias": false)", R"("mlp_bias": true)");
  auto c = parse_model_config(j, "config.json");
  REQUIRE_MESSAGE(c.ok(), c.error().to_string());
  CHECK(c->head_dim == 2048 / 32);
  CHECK(c->attention_bias);
  CHECK(c->mlp_bias);
}

TEST_CASE("legacy rope_scaling 'type' key and transformers 5 rope_parameters are read") {
  std::string legacy = replace(kLlama32_1B, R"("rope_type": "llama3")", R"("type": "llama3")");
  auto c = parse_model_config(legacy, "config.json");
  REQUIRE_MESSAGE(c.ok(), c.error().to_string());
  CHECK(c->rope_scaling.type == RopeScaling::Type::kLlama3);

  std::string v5 =
      replace(kQwen25_7B, R"("rope_theta": 1000000.0,)",
              R"("rope_parameters": {"rope_theta": 250000.0, "rope_type": "default"},)");
  auto q = parse_model_config(v5, "config.json");
  REQUIRE_MESSAGE(q.ok(), q.error().to_string());
  CHECK(q->rope_theta == 250000.0);
  CHECK(q->rope_scaling.type == RopeScaling::Type::kNone);
}

TEST_CASE("use_sliding_window: true is unsupported and names the field") {
  std::string j =
      replace(kQwen25_7B, R"("use_sliding_window": false)", R"("use_sliding_window": true)");
  auto c = parse_model_config(j, "/m/config.json");
  REQUIRE_FALSE(c.ok());
  CHECK(c.error().code == ErrorCode::kUnsupported);
  CHECK(contains(c.error().message, "use_sliding_window"));
  CHECK(contains(c.error().message, "/m/config.json"));
}

TEST_CASE("an unknown architecture is unsupported and named") {
  std::string j = replace(kQwen25_7B, "Qwen2ForCausalLM", "MistralForCausalLM");
  auto c = parse_model_config(j, "config.json");
  REQUIRE_FALSE(c.ok());
  CHECK(c.error().code == ErrorCode::kUnsupported);
  CHECK(contains(c.error().message, "MistralForCausalLM"));
}

TEST_CASE("a rope_scaling type other than llama3 is unsupported and named") {
  std::string j = replace(kLlama32_1B, R"("rope_type": "llama3")", R"("rope_type": "yarn")");
  auto c = parse_model_config(j, "config.json");
  REQUIRE_FALSE(c.ok());
  CHECK(c.error().code == ErrorCode::kUnsupported);
  CHECK(contains(c.error().message, "yarn"));
  CHECK(contains(c.error().message, "rope_scaling"));
}

TEST_CASE("llama3 rope scaling without its factors is invalid and names the field") {
  std::string j = replace(kLlama32_1B, R"("low_freq_factor": 1.0,)", "");
  auto c = parse_model_config(j, "config.json");
  REQUIRE_FALSE(c.ok());
  CHECK(c.error().code == ErrorCode::kInvalidModel);
  CHECK(contains(c.error().message, "low_freq_factor"));
}

TEST_CASE("a missing required field is kInvalidModel naming the field and the file") {
  for (const char* field :
       {"architectures", "hidden_size", "intermediate_size", "num_hidden_layers",
        "num_attention_heads", "vocab_size", "max_position_embeddings"}) {
    CAPTURE(field);
    nlohmann::json j = nlohmann::json::parse(kQwen25_7B);
    REQUIRE(j.erase(field) == 1);
    auto c = parse_model_config(j.dump(), "/models/q/config.json");
    REQUIRE_FALSE(c.ok());
    CHECK(c.error().code == ErrorCode::kInvalidModel);
    CHECK_MESSAGE(contains(c.error().message, field), c.error().message);
    CHECK(contains(c.error().message, "/models/q/config.json"));
  }
}

TEST_CASE("optional fields take transformers' defaults") {
  nlohmann::json j = nlohmann::json::parse(kLlama32_1B);
  for (const char* field : {"num_key_value_heads", "rms_norm_eps", "rope_theta", "rope_scaling",
                            "tie_word_embeddings", "torch_dtype", "eos_token_id"}) {
    j.erase(field);
  }
  auto c = parse_model_config(j.dump(), "config.json");
  REQUIRE_MESSAGE(c.ok(), c.error().to_string());
  CHECK(c->num_kv_heads == 32);
  CHECK(c->rope_theta == 10000.0);
  CHECK(c->rope_scaling.type == RopeScaling::Type::kNone);
  CHECK_FALSE(c->tie_word_embeddings);
  CHECK(c->eos_token_ids.empty());
}

TEST_CASE("wrong field types, inconsistent heads and garbage are kInvalidModel") {
  auto bad_type = parse_model_config(
      replace(kQwen25_7B, "\"hidden_size\": 3584", "\"hidden_size\": \"big\""), "config.json");
  REQUIRE_FALSE(bad_type.ok());
  CHECK(contains(bad_type.error().message, "hidden_size"));

  auto heads = parse_model_config(
      replace(kQwen25_7B, "\"num_key_value_heads\": 4", "\"num_key_value_heads\": 5"),
      "config.json");
  REQUIRE_FALSE(heads.ok());
  CHECK(heads.error().code == ErrorCode::kInvalidModel);
  CHECK(contains(heads.error().message, "num_key_value_heads"));

  auto garbage = parse_model_config("{not json", "config.json");
  REQUIRE_FALSE(garbage.ok());
  CHECK(garbage.error().code == ErrorCode::kInvalidModel);

  auto eos = parse_model_config(
      replace(kQwen25_7B, "\"eos_token_id\": 151645", "\"eos_token_id\": [151645, \"x\"]"),
      "config.json");
  REQUIRE_FALSE(eos.ok());
  CHECK(contains(eos.error().message, "eos_token_id"));
}

TEST_CASE("generation_config: eos list or int, sampling defaults, bos") {
  // Qwen/Qwen2.5-7B-Instruct generation_config.json, verbatim.
  auto g = parse_generation_config(R"({"bos_token_id": 151643, "pad_token_id": 151643,
      "do_sample": true, "eos_token_id": [151645, 151643], "repetition_penalty": 1.05,
      "temperature": 0.7, "top_p": 0.8, "top_k": 20, "transformers_version": "4.37.0"})",
                                   "generation_config.json");
  REQUIRE_MESSAGE(g.ok(), g.error().to_string());
  CHECK(g->eos_token_ids == std::vector<int32_t>{151645, 151643});
  CHECK(g->bos_token_id == 151643);
  CHECK(g->temperature == doctest::Approx(0.7f));
  CHECK(g->top_p == doctest::Approx(0.8f));
  CHECK(g->top_k == 20);
  CHECK(g->repetition_penalty == doctest::Approx(1.05f));
  CHECK_FALSE(g->min_p.has_value());
  CHECK_FALSE(g->max_new_tokens.has_value());

  auto single = parse_generation_config(
      R"({"eos_token_id": 2, "max_new_tokens": 256, "min_p": 0.05})", "generation_config.json");
  REQUIRE(single.ok());
  CHECK(single->eos_token_ids == std::vector<int32_t>{2});
  CHECK(single->max_new_tokens == 256);
  CHECK(single->min_p == doctest::Approx(0.05f));

  auto bad = parse_generation_config(R"({"top_p": 3})", "/m/generation_config.json");
  REQUIRE_FALSE(bad.ok());
  CHECK(contains(bad.error().message, "top_p"));
  CHECK(contains(bad.error().message, "/m/generation_config.json"));
}
