// Model directories: resolution of every tensor against the config, sharded checkpoints, and
// one test per way a directory can be broken, each naming the tensor, shard or file.
#include <doctest/doctest.h>

#include <algorithm>

#include "model/model_dir.h"
#include "model_test_util.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

void keep_all(std::vector<ExpectedTensor>&) {}

// Writes the small model's tensors into shards split at `split` (an index into the list), with
// an index file listing `weight_map` entries as given by `index_of`.
void write_sharded(const ScratchDir& dir, size_t split, bool duplicate_last = false) {
  const std::string config = small_llama_config_json();
  write_bytes(dir.file("config.json"), config);
  auto c = parse_model_config(config, "config.json");
  REQUIRE(c.ok());
  std::vector<ExpectedTensor> all = expected_tensors(*c);
  std::vector<ExpectedTensor> first(all.begin(), all.begin() + long(split));
  std::vector<ExpectedTensor> second(all.begin() + long(split), all.end());
  if (duplicate_last) second.push_back(first.back());
  write_tensors(dir.file("model-00001-of-00002.safetensors"), first);
  write_tensors(dir.file("model-00002-of-00002.safetensors"), second);
  std::string map;
  for (size_t i = 0; i < all.size(); ++i) {
    if (i > 0) map += ",";
    map += "\"" + all[i].name + "\": ";
    map +=
        i < split ? "\"model-00001-of-00002.safetensors\"" : "\"model-00002-of-00002.safetensors\"";
  }
  write_bytes(dir.file("model.safetensors.index.json"),
              R"({"metadata": {"total_size": 1}, "weight_map": {)" + map + "}}");
}

Error load_broken(const ScratchDir& dir) {
  auto m = load_model_dir(dir.path.string());
  REQUIRE_FALSE(m.ok());
  return m.error();
}

}  // namespace

TEST_CASE("a complete tied model resolves every tensor; lm_head is embed_tokens") {
  ScratchDir dir("complete");
  write_small_model(dir, keep_all);
  auto m = load_model_dir(dir.path.string());
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  CHECK(m->config.num_layers == 2);
  REQUIRE(m->tensors.layers.size() == 2);
  CHECK(m->tensors.lm_head == m->tensors.embed_tokens);
  CHECK(m->tensors.embed_tokens->shape == std::vector<int64_t>{32, 8});
  const LayerWeights& l1 = m->tensors.layers[1];
  CHECK(l1.k_proj->name == "model.layers.1.self_attn.k_proj.weight");
  CHECK(l1.k_proj->shape == std::vector<int64_t>{4, 8});  // 1 kv head x head_dim 4
  CHECK(l1.down_proj->shape == std::vector<int64_t>{8, 16});
  CHECK(l1.q_bias == nullptr);
  CHECK(l1.o_bias == nullptr);
  CHECK(m->tensors.final_norm->name == "model.norm.weight");
  CHECK(m->generation.eos_token_ids.empty());

  // The store moved into ModelDir; the resolved pointers still point into it.
  ModelDir moved = std::move(m.value());
  CHECK(moved.tensors.layers[0].q_proj ==
        moved.weights.find("model.layers.0.self_attn.q_proj.weight"));
}

TEST_CASE("generation_config eos ids join config's; sampling defaults are kept") {
  ScratchDir dir("generation");
  write_small_model(dir, keep_all);
  write_bytes(dir.file("generation_config.json"),
              R"({"eos_token_id": [2, 5], "temperature": 0.6, "top_p": 0.9})");
  auto m = load_model_dir(dir.path.string());
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  CHECK(m->config.eos_token_ids == std::vector<int32_t>{2, 5});
  CHECK(m->generation.temperature == doctest::Approx(0.6f));
}

TEST_CASE("rotary_emb.inv_freq buffers are ignored") {
  ScratchDir dir("inv-freq");
  write_small_model(dir, [](std::vector<ExpectedTensor>& t) {
    t.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", {2}, ExpectedTensor::Kind::kBias});
  });
  auto m = load_model_dir(dir.path.string());
  CHECK_MESSAGE(m.ok(), m.error().to_string());
}

TEST_CASE("broken: a missing tensor is named") {
  ScratchDir dir("missing");
  write_small_model(dir, [](std::vector<ExpectedTensor>& t) {
    std::erase_if(
        t, [](const ExpectedTensor& e) { return e.name == "model.layers.1.mlp.up_proj.weight"; });
  });
  Error e = load_broken(dir);
  CHECK(e.code == ErrorCode::kInvalidModel);
  CHECK(contains(e.message, "missing"));
  CHECK(contains(e.message, "model.layers.1.mlp.up_proj.weight"));
  CHECK(contains(e.message, dir.path.string()));
}

TEST_CASE("broken: an untied model without lm_head.weight") {
  ScratchDir dir("no-lm-head");
  write_small_model(
      dir, [](std::vector<ExpectedTensor>& t) { t.pop_back(); }, /*tied=*/false);
  Error e = load_broken(dir);
  CHECK(e.code == ErrorCode::kInvalidModel);
  CHECK(contains(e.message, "lm_head.weight"));
}

TEST_CASE("broken: an unexpected tensor is named with its file") {
  ScratchDir dir("unexpected");
  write_small_model(dir, [](std::vector<ExpectedTensor>& t) {
    t.push_back({"model.layers.0.self_attn.q_norm.weight", {4}, ExpectedTensor::Kind::kNorm});
  });
  Error e = load_broken(dir);
  CHECK(e.code == ErrorCode::kInvalidModel);
  CHECK(contains(e.message, "unexpected"));
  CHECK(contains(e.message, "model.layers.0.self_attn.q_norm.weight"));
  CHECK(contains(e.message, "model.safetensors"));
}

TEST_CASE("broken: a tensor of the wrong shape names tensor, both shapes and file") {
  ScratchDir dir("shape");
  write_small_model(dir, [](std::vector<ExpectedTensor>& t) {
    for (ExpectedTensor& e : t) {
      if (e.name == "model.layers.0.self_attn.v_proj.weight") e.shape = {8, 8};
    }
  });
  Error e = load_broken(dir);
  CHECK(e.code == ErrorCode::kInvalidModel);
  CHECK(contains(e.message, "model.layers.0.self_attn.v_proj.weight"));
  CHECK(contains(e.message, "[8, 8]"));
  CHECK(contains(e.message, "[4, 8]"));
  CHECK(contains(e.message, "model.safetensors"));
}

TEST_CASE("broken: only pytorch_model.bin is refused without unpickling") {
  ScratchDir dir("bin-only");
  write_bytes(dir.file("config.json"), small_llama_config_json());
  write_bytes(dir.file("pytorch_model.bin"), "PK\x03\x04 not really a zip");
  Error e = load_broken(dir);
  CHECK(e.code == ErrorCode::kUnsupported);
  CHECK(contains(e.message, "unpickle"));
  CHECK(contains(e.message, "safetensors"));
  CHECK(contains(e.message, dir.path.string()));
}

TEST_CASE("broken: no config.json") {
  ScratchDir dir("no-config");
  Error e = load_broken(dir);
  CHECK(e.code == ErrorCode::kNotFound);
  CHECK(contains(e.message, "config.json"));
}

TEST_CASE("broken: config.json problems carry its path") {
  ScratchDir dir("bad-config");
  write_small_model(dir, keep_all);
  write_bytes(dir.file("config.json"), R"({"architectures": ["GPT2LMHeadModel"]})");
  Error e = load_broken(dir);
  CHECK(e.code == ErrorCode::kUnsupported);
  CHECK(contains(e.message, dir.file("config.json")));
  CHECK(contains(e.message, "GPT2LMHeadModel"));
}

TEST_CASE("a sharded checkpoint with an index loads") {
  ScratchDir dir("sharded");
  write_sharded(dir, 5);
  auto m = load_model_dir(dir.path.string());
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  CHECK(m->tensors.layers[0].input_norm->file == dir.file("model-00001-of-00002.safetensors"));
  CHECK(m->tensors.final_norm->file == dir.file("model-00002-of-00002.safetensors"));
}

TEST_CASE("broken: a tensor present in two shards") {
  ScratchDir dir("duplicate");
  write_sharded(dir, 5, /*duplicate_last=*/true);
  Error e = load_broken(dir);
  CHECK(e.code == ErrorCode::kInvalidModel);
  CHECK(contains(e.message, "duplicate"));
  CHECK(contains(e.message, "model-00001-of-00002.safetensors"));
  CHECK(contains(e.message, "model-00002-of-00002.safetensors"));
}

TEST_CASE("broken: the index names a shard that does not exist") {
  ScratchDir dir("missing-shard");
  write_sharded(dir, 5);
  std::filesystem::remove(dir.file("model-00002-of-00002.safetensors"));
  Error e = load_broken(dir);
  CHECK(e.code == ErrorCode::kInvalidModel);
  CHECK(contains(e.message, "model-00002-of-00002.safetensors"));
  CHECK(contains(e.message, "model.safetensors.index.json"));
}

TEST_CASE("broken: the index names a tensor its shard does not hold") {
  ScratchDir dir("index-tensor");
  write_sharded(dir, 5);
  // Rewrite shard 1 without its first tensor; the index still points there.
  auto c = parse_model_config(small_llama_config_json(), "config.json");
  REQUIRE(c.ok());
  std::vector<ExpectedTensor> all = expected_tensors(*c);
  write_tensors(dir.file("model-00001-of-00002.safetensors"),
                std::vector<ExpectedTensor>(all.begin() + 1, all.begin() + 5));
  Error e = load_broken(dir);
  CHECK(e.code == ErrorCode::kInvalidModel);
  CHECK(contains(e.message, "model.embed_tokens.weight"));
  CHECK(contains(e.message, "model-00001-of-00002.safetensors"));
}

TEST_CASE("broken: a corrupt shard's error names the shard") {
  ScratchDir dir("corrupt-shard");
  write_sharded(dir, 5);
  write_bytes(dir.file("model-00002-of-00002.safetensors"), raw_safetensors("not json", ""));
  Error e = load_broken(dir);
  CHECK(e.code == ErrorCode::kInvalidModel);
  CHECK(contains(e.message, "model-00002-of-00002.safetensors"));
}

TEST_CASE("Llama attention_bias and mlp_bias expect and resolve every bias") {
  ScratchDir dir("llama-bias");
  std::string config = small_llama_config_json();
  config.insert(config.size() - 1, R"(, "attention_bias": true, "mlp_bias": true)");
  write_bytes(dir.file("config.json"), config);
  auto c = parse_model_config(config, "config.json");
  REQUIRE(c.ok());
  write_tensors(dir.file("model.safetensors"), expected_tensors(*c));
  auto m = load_model_dir(dir.path.string());
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  const LayerWeights& l = m->tensors.layers[0];
  CHECK(l.q_bias != nullptr);
  CHECK(l.o_bias->shape == std::vector<int64_t>{8});
  CHECK(l.gate_bias->shape == std::vector<int64_t>{16});
  CHECK(l.down_bias->shape == std::vector<int64_t>{8});
}
