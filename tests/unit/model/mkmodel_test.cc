// mkmodel: the presets have the published models' shapes, the weights are deterministic and
// HF-like, and every written directory loads back through load_model_dir.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "model/mkmodel.h"
#include "model/mkmodel_presets.h"
#include "model/model_dir.h"
#include "model/random_weights.h"
#include "model_test_util.h"
#include "test_paths.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

float element(const TensorView& t, int64_t i) {
  uint16_t bits;
  std::memcpy(&bits, t.data + 2 * i, 2);
  return bf16_to_f32(bits);
}

int64_t parameter_count(const std::string& preset) {
  const mkmodel::Preset* p = mkmodel::find_preset(preset);
  REQUIRE(p != nullptr);
  // Through config.json, as a loader sees it.
  auto c = parse_model_config(mkmodel::config_json(*p, DType::kBF16).dump(), preset);
  REQUIRE_MESSAGE(c.ok(), c.error().to_string());
  int64_t n = 0;
  for (const ExpectedTensor& t : expected_tensors(*c)) {
    int64_t k = 1;
    for (int64_t d : t.shape) k *= d;
    n += k;
  }
  return n;
}

}  // namespace

TEST_CASE("presets include the real models and the tiny test models") {
  std::vector<std::string> names = mkmodel_presets();
  for (const char* want : {"qwen2.5-7b", "qwen2.5-0.5b", "llama-3.1-8b", "llama-3.2-1b",
                           "tiny-qwen", "tiny-qwen-draft", "tiny-llama"}) {
    CHECK_MESSAGE(std::find(names.begin(), names.end(), want) != names.end(), want);
  }
}

TEST_CASE("real presets have the published parameter counts") {
  // Model cards: Qwen2.5-7B 7.61B, Qwen2.5-0.5B 0.49B, Llama-3.1-8B 8.03B, Llama-3.2-1B 1.24B.
  CHECK(parameter_count("qwen2.5-7b") == 7615616512);
  CHECK(parameter_count("qwen2.5-0.5b") == 494032768);
  CHECK(parameter_count("llama-3.1-8b") == 8030261248);
  CHECK(parameter_count("llama-3.2-1b") == 1235814400);
}

TEST_CASE("llama-3.1-8b config.json parses back to the published shape") {
  const mkmodel::Preset* p = mkmodel::find_preset("llama-3.1-8b");
  REQUIRE(p != nullptr);
  auto c = parse_model_config(mkmodel::config_json(*p, DType::kBF16).dump(), "config.json");
  REQUIRE(c.ok());
  CHECK(c->rope_scaling.type == RopeScaling::Type::kLlama3);
  CHECK(c->rope_scaling.factor == 8.0);
  CHECK(c->rope_scaling.original_max_position_embeddings == 8192);
  CHECK(c->max_position_embeddings == 131072);
  CHECK(c->rope_theta == 500000.0);
  CHECK(c->eos_token_ids == std::vector<int32_t>{128001, 128008, 128009});
  CHECK(c->bos_token_id == 128000);
  CHECK_FALSE(c->tie_word_embeddings);
}

TEST_CASE("tiny-qwen round trip: loads, tokenizer copied, HF-like deterministic weights") {
  ScratchDir dir("tiny-qwen");
  MkModelOptions o;
  o.preset = "tiny-qwen";
  o.out_dir = dir.path.string();
  o.seed = 11;
  o.tokenizer_dir = qwen_tokenizer_dir();
  Status st = make_model(o);
  REQUIRE_MESSAGE(st.ok(), st.error().to_string());
  CHECK(std::filesystem::exists(dir.file("tokenizer.json")));
  CHECK(std::filesystem::exists(dir.file("tokenizer_config.json")));
  CHECK(std::filesystem::exists(dir.file("model.safetensors")));
  CHECK_FALSE(std::filesystem::exists(dir.file("model.safetensors.index.json")));

  auto m = load_model_dir(o.out_dir);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  const ModelConfig& c = m->config;
  CHECK(c.arch == Arch::kQwen2);
  CHECK(c.vocab_size == 151936);
  CHECK(c.hidden_size == 64);
  CHECK(c.num_layers == 2);
  CHECK(c.num_heads == 4);
  CHECK(c.num_kv_heads == 2);
  CHECK(c.intermediate_size == 128);
  CHECK(c.tie_word_embeddings);
  CHECK(c.eos_token_ids == std::vector<int32_t>{151645, 151643});
  CHECK(m->generation.top_k == 20);
  CHECK(m->tensors.lm_head == m->tensors.embed_tokens);
  CHECK(m->tensors.layers[1].k_bias->shape == std::vector<int64_t>{32});

  // Norms are ones, matrices N(0, 0.02) (bf16 of the reference value), biases nonzero.
  REQUIRE(m->tensors.embed_tokens->dtype == DType::kBF16);
  const TensorView& norm = *m->tensors.layers[0].input_norm;
  for (int64_t i = 0; i < norm.numel(); ++i) REQUIRE(element(norm, i) == 1.0f);
  const TensorView& emb = *m->tensors.embed_tokens;
  const uint64_t key = mkmodel::tensor_key(11, mkmodel::find_preset("tiny-qwen")->seed_salt,
                                           "model.embed_tokens.weight");
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < emb.numel(); ++i) {
    float v = element(emb, i);
    if (i % 4099 == 0) {
      REQUIRE(v == bf16_to_f32(f32_to_bf16(
                       mkmodel::weight_value(key, mkmodel::Init::kNormal, uint64_t(i)))));
    }
    sum += v;
    sq += double(v) * v;
  }
  const double mean = sum / double(emb.numel());
  const double stddev = std::sqrt(sq / double(emb.numel()) - mean * mean);
  CHECK(std::abs(mean) < 1e-4);
  CHECK(stddev == doctest::Approx(0.02).epsilon(0.01));
  const TensorView& bias = *m->tensors.layers[0].q_bias;
  bool any_nonzero = false;
  for (int64_t i = 0; i < bias.numel(); ++i) any_nonzero |= element(bias, i) != 0.0f;
  CHECK(any_nonzero);
}

TEST_CASE("same seed, same bytes; another seed or the draft preset, other bytes") {
  ScratchDir a("seed-a"), b("seed-b"), c("seed-c"), d("draft");
  auto make = [](const ScratchDir& dir, const char* preset, uint64_t seed) {
    MkModelOptions o;
    o.preset = preset;
    o.out_dir = dir.path.string();
    o.seed = seed;
    Status st = make_model(o);
    REQUIRE_MESSAGE(st.ok(), st.error().to_string());
    return slurp(dir.file("model.safetensors"));
  };
  const std::string first = make(a, "tiny-qwen", 1);
  CHECK(first == make(b, "tiny-qwen", 1));
  CHECK(first != make(c, "tiny-qwen", 2));
  ScratchDir e("draft-load");
  make(d, "tiny-qwen-draft", 1);
  auto draft = load_model_dir(d.path.string());
  REQUIRE_MESSAGE(draft.ok(), draft.error().to_string());
  CHECK(draft->config.vocab_size == 151936);
  CHECK(draft->config.hidden_size != 64);
}

TEST_CASE("tiny-llama round trip: untied lm_head, llama3 rope, Llama 3.1 eos") {
  ScratchDir dir("tiny-llama");
  MkModelOptions o;
  o.preset = "tiny-llama";
  o.out_dir = dir.path.string();
  o.tokenizer_dir = llama_tokenizer_dir();
  Status st = make_model(o);
  REQUIRE_MESSAGE(st.ok(), st.error().to_string());
  auto m = load_model_dir(o.out_dir);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  CHECK(m->config.arch == Arch::kLlama);
  CHECK(m->config.vocab_size == 128256);
  CHECK(m->config.num_kv_heads == 1);
  CHECK(m->config.rope_scaling.type == RopeScaling::Type::kLlama3);
  CHECK(m->config.eos_token_ids == std::vector<int32_t>{128001, 128008, 128009});
  CHECK(m->config.bos_token_id == 128000);
  CHECK(m->tensors.lm_head != m->tensors.embed_tokens);
  CHECK(m->tensors.lm_head->name == "lm_head.weight");
  CHECK(m->tensors.layers[0].q_bias == nullptr);
  CHECK(std::filesystem::exists(dir.file("tokenizer.json")));
}

TEST_CASE("sharding: small max_shard_bytes gives shards, an index, and the same tensors") {
  ScratchDir dir("sharding");
  MkModelOptions o;
  o.preset = "tiny-llama";
  o.out_dir = dir.path.string();
  o.max_shard_bytes = 100 * 1024;
  o.dtype = DType::kF32;
  Status st = make_model(o);
  REQUIRE_MESSAGE(st.ok(), st.error().to_string());
  CHECK_FALSE(std::filesystem::exists(dir.file("model.safetensors")));
  auto index = nlohmann::json::parse(slurp(dir.file("model.safetensors.index.json")));
  std::set<std::string> shards;
  for (const auto& [name, file] : index["weight_map"].items())
    shards.insert(file.get<std::string>());
  CHECK(shards.size() >= 3);
  CHECK(shards.count("model-00001-of-" +
                     std::string(5 - std::to_string(shards.size()).size(), '0') +
                     std::to_string(shards.size()) + ".safetensors"));
  for (const std::string& s : shards) {
    auto store = WeightStore::open_file(dir.file(s));
    REQUIRE_MESSAGE(store.ok(), store.error().to_string());
    // Only a single tensor larger than the limit may exceed it.
    if (store->tensors().size() > 1) CHECK(store->total_bytes() <= 100 * 1024);
  }
  auto m = load_model_dir(o.out_dir);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  CHECK(m->config.dtype == DType::kF32);
  CHECK(index["metadata"]["total_size"].get<size_t>() == m->weights.total_bytes());
  // F32 stores the reference value exactly.
  const TensorView& up = *m->tensors.layers[1].up_proj;
  float v;
  std::memcpy(&v, up.data + 4 * 77, 4);
  const uint64_t key = mkmodel::tensor_key(0, mkmodel::find_preset("tiny-llama")->seed_salt,
                                           "model.layers.1.mlp.up_proj.weight");
  CHECK(v == mkmodel::weight_value(key, mkmodel::Init::kNormal, 77));

  // Rewriting as one file replaces the shards instead of mixing them in.
  o.max_shard_bytes = int64_t{1} << 30;
  REQUIRE(make_model(o).ok());
  CHECK_FALSE(std::filesystem::exists(dir.file("model.safetensors.index.json")));
  CHECK(load_model_dir(o.out_dir).ok());
}

TEST_CASE("mkmodel option errors") {
  ScratchDir dir("options");
  MkModelOptions o;
  o.out_dir = dir.path.string();
  o.preset = "gpt-5";
  Status st = make_model(o);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code == ErrorCode::kInvalidArgument);
  CHECK(contains(st.error().message, "gpt-5"));
  CHECK(contains(st.error().message, "tiny-qwen"));

  o.preset = "tiny-qwen";
  o.tokenizer_dir = dir.file("nowhere");
  st = make_model(o);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code == ErrorCode::kNotFound);
  CHECK(contains(st.error().message, "tokenizer.json"));
}
