// Loading quantized checkpoints: tensors checked against the format (names, shapes, dtypes),
// the values shapes cannot check (g_idx, sym zero points), the CUDA runner's refusal, and the
// weight bytes per format that `tandem status` shows.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>

#include "model/model_dir.h"
#include "model/quant_tensors.h"
#include "model/weight_names.h"
#include "runner/runner.h"
#include "unit/model/model_test_util.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

std::string config_with(const std::string& quantization_config) {
  nlohmann::json j = {{"architectures", {"LlamaForCausalLM"}},
                      {"hidden_size", 64},
                      {"intermediate_size", 128},
                      {"num_hidden_layers", 1},
                      {"num_attention_heads", 4},
                      {"num_key_value_heads", 2},
                      {"vocab_size", 32},
                      {"max_position_embeddings", 64},
                      {"torch_dtype", "float16"}};
  j["quantization_config"] = nlohmann::json::parse(quantization_config);
  return j.dump();
}

using Entry = SafetensorsWriter::Entry;

// Writes config.json and every tensor the config implies, in its format's first dtype (floats
// as F32); `edit` may change the entries and `value` gives each int32 tensor's words (0 unless
// set).
void write_model(const ScratchDir& dir, const std::string& config,
                 const std::function<void(std::vector<Entry>&)>& edit,
                 const std::function<int32_t(const std::string& name, int64_t i)>& value) {
  write_bytes(dir.file("config.json"), config);
  auto c = parse_model_config(config, "config.json");
  REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.error().to_string()));
  std::vector<Entry> entries;
  for (const ExpectedTensor& t : expected_tensors(*c))
    entries.push_back({t.name, t.dtypes.empty() ? DType::kF32 : t.dtypes[0], t.shape});
  edit(entries);
  std::vector<std::vector<std::byte>> data;
  for (const Entry& e : entries) {
    int64_t n = 1;
    for (int64_t d : e.shape) n *= d;
    std::vector<std::byte> bytes(size_t(n) * dtype_size(e.dtype));
    if (e.dtype == DType::kI32) {
      for (int64_t i = 0; i < n; ++i) {
        const int32_t v = value(e.name, i);
        std::memcpy(bytes.data() + i * 4, &v, 4);
      }
    }
    data.push_back(std::move(bytes));
  }
  auto w = SafetensorsWriter::create(dir.file("model.safetensors"), entries);
  REQUIRE(w.ok());
  for (const auto& bytes : data) REQUIRE(w->write(bytes).ok());
  REQUIRE(w->finish().ok());
}

auto no_edit = [](std::vector<Entry>&) {};
auto zeros = [](const std::string&, int64_t) { return int32_t(0); };

const char* kGptq = R"({"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": %s,
                        "sym": %s})";

std::string gptq(bool desc_act, bool sym) {
  char buf[256];
  std::snprintf(buf, sizeof buf, kGptq, desc_act ? "true" : "false", sym ? "true" : "false");
  return config_with(buf);
}

// g_idx in order for 32-feature groups.
int32_t in_order(const std::string& name, int64_t i) {
  return name.ends_with(".g_idx") ? int32_t(i / 32) : 0;
}

}  // namespace

TEST_CASE("a gptq checkpoint resolves every projection with its scales, zeros and g_idx") {
  ScratchDir dir("gptq-ok");
  write_model(dir, gptq(true, false), no_edit, in_order);
  auto m = load_model_dir(dir.path.string());
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.error().to_string()));
  const LayerWeights& l = m->tensors.layers[0];
  CHECK(l.down_proj->name == "model.layers.0.mlp.down_proj.qweight");
  CHECK(l.quant.down_proj.format == QuantFormat::kGptq);
  CHECK(l.quant.down_proj.in_features == 128);
  CHECK(l.quant.down_proj.out_features == 64);
  CHECK(l.quant.down_proj.scale->name == "model.layers.0.mlp.down_proj.scales");
  CHECK(l.quant.down_proj.zeros->name == "model.layers.0.mlp.down_proj.qzeros");
  CHECK(l.quant.down_proj.g_idx->name == "model.layers.0.mlp.down_proj.g_idx");
  CHECK(l.quant.q_proj.zero_offset == 1);
  CHECK(m->tensors.lm_head->name == "lm_head.weight");  // never quantized: stays as stored
  CHECK(m->tensors.lm_head->dtype == DType::kF32);
}

TEST_CASE("gptq without desc_act: g_idx may be absent and, if present, must be in order") {
  ScratchDir dir("gptq-no-gidx");
  write_model(
      dir, gptq(false, false),
      [](std::vector<Entry>& e) {
        std::erase_if(e, [](const Entry& x) { return x.name.ends_with(".g_idx"); });
      },
      zeros);
  auto m = load_model_dir(dir.path.string());
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.error().to_string()));
  CHECK(m->tensors.layers[0].quant.up_proj.g_idx == nullptr);

  ScratchDir shuffled("gptq-shuffled-gidx");
  write_model(shuffled, gptq(false, false), no_edit, [](const std::string& name, int64_t i) {
    return name.ends_with(".g_idx") ? int32_t((i + 1) % 2) : 0;
  });
  auto bad = load_model_dir(shuffled.path.string());
  REQUIRE(!bad.ok());
  CHECK(bad.error().message.find("tensor 'model.layers.0.self_attn.q_proj.g_idx': entry 0 is "
                                 "group 1 but quantization_config.desc_act is false") !=
        std::string::npos);
}

TEST_CASE("gptq desc_act: g_idx is required and its groups must exist") {
  ScratchDir missing("gptq-missing-gidx");
  write_model(
      missing, gptq(true, false),
      [](std::vector<Entry>& e) {
        std::erase_if(e,
                      [](const Entry& x) { return x.name == "model.layers.0.mlp.up_proj.g_idx"; });
      },
      in_order);
  auto m = load_model_dir(missing.path.string());
  REQUIRE(!m.ok());
  CHECK(m.error().message.find("missing tensors (1): model.layers.0.mlp.up_proj.g_idx") !=
        std::string::npos);

  ScratchDir range("gptq-gidx-range");
  write_model(range, gptq(true, false), no_edit, [](const std::string& name, int64_t i) {
    return name.ends_with(".g_idx") ? int32_t(i == 5 ? 9 : 0) : 0;
  });
  auto r = load_model_dir(range.path.string());
  REQUIRE(!r.ok());
  CHECK(r.error().message.find("entry 5 is group 9, outside [0, 2)") != std::string::npos);
}

TEST_CASE("gptq sym: every zero point must be 8 (v1 stores 7)") {
  ScratchDir sevens("gptq-sym");
  write_model(sevens, gptq(false, true), no_edit, [](const std::string& name, int64_t i) {
    return name.ends_with(".qzeros") ? int32_t(0x77777777) : in_order(name, i);
  });
  auto ok = load_model_dir(sevens.path.string());
  CHECK_MESSAGE(ok.ok(), (ok.ok() ? "" : ok.error().to_string()));
  ScratchDir zero("gptq-sym-zero");
  write_model(zero, gptq(false, true), no_edit, in_order);
  auto bad = load_model_dir(zero.path.string());
  REQUIRE(!bad.ok());
  CHECK(bad.error().message.find("zero point 1 in a checkpoint with quantization_config.sym = "
                                 "true") != std::string::npos);
}

TEST_CASE("awq: a qweight of the wrong dtype or a missing qzeros is refused by name") {
  const std::string awq =
      config_with(R"({"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": true})");
  ScratchDir dtype("awq-dtype");
  write_model(
      dtype, awq,
      [](std::vector<Entry>& e) {
        for (Entry& x : e)
          if (x.name == "model.layers.0.self_attn.k_proj.qweight") x.dtype = DType::kF32;
      },
      zeros);
  auto m = load_model_dir(dtype.path.string());
  REQUIRE(!m.ok());
  CHECK(m.error().message.find("wrong dtypes: 'model.layers.0.self_attn.k_proj.qweight' in ") !=
        std::string::npos);
  CHECK(m.error().message.find("is F32, quantization_config implies I32") != std::string::npos);

  ScratchDir plain("awq-plain-weights");
  // A float checkpoint whose config claims awq: the float weights are unexpected, the packed
  // tensors missing.
  write_model(
      plain, awq,
      [](std::vector<Entry>& e) {
        for (Entry& x : e)
          if (x.name == "model.layers.0.mlp.up_proj.qzeros")
            x.name = "model.layers.0.mlp.up_proj.weight";
      },
      zeros);
  auto p = load_model_dir(plain.path.string());
  REQUIRE(!p.ok());
  CHECK(p.error().message.find("missing tensors (1): model.layers.0.mlp.up_proj.qzeros") !=
        std::string::npos);
}

TEST_CASE("fp8: scales may be [] or [1] per tensor, [out] or [out, 1] per channel; not others") {
  const std::string tensor =
      config_with(R"({"quant_method": "fp8", "activation_scheme": "static"})");
  ScratchDir one("fp8-scale-1");
  write_model(
      one, tensor,
      [](std::vector<Entry>& e) {
        for (Entry& x : e)
          if (x.name.ends_with("_scale")) x.shape = {1};
      },
      zeros);
  auto m = load_model_dir(one.path.string());
  CHECK_MESSAGE(m.ok(), (m.ok() ? "" : m.error().to_string()));
  ScratchDir two("fp8-scale-2");
  write_model(
      two, tensor,
      [](std::vector<Entry>& e) {
        for (Entry& x : e)
          if (x.name == "model.layers.0.mlp.gate_proj.weight_scale") x.shape = {2};
      },
      zeros);
  auto bad = load_model_dir(two.path.string());
  REQUIRE(!bad.ok());
  CHECK(bad.error().message.find("'model.layers.0.mlp.gate_proj.weight_scale' in ") !=
        std::string::npos);
  CHECK(bad.error().message.find("has shape [2], config.json implies []") != std::string::npos);
}

TEST_CASE(
    "the CUDA runner admits quantized checkpoints; it refuses Llama biases it does not apply") {
  auto awq = parse_model_config(
      config_with(R"({"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": true})"),
      "config.json");
  REQUIRE(awq.ok());
  RunnerOptions opts;
  opts.device = "cuda:0";
  CHECK(cuda_runner_supports(*awq, opts).ok());
  ModelConfig plain = *awq;
  plain.quant = QuantConfig{};
  opts.quantization = "fp8";
  CHECK(cuda_runner_supports(plain, opts).ok());
  opts.quantization = "int8";
  Status bad = cuda_runner_supports(plain, opts);
  REQUIRE(!bad.ok());
  CHECK(bad.error().message.find("--quantization") != std::string::npos);
  opts.quantization = "";
  plain.arch = Arch::kLlama;
  plain.attention_bias = true;
  Status bias = cuda_runner_supports(plain, opts);
  REQUIRE(!bias.ok());
  CHECK(bias.error().code == ErrorCode::kUnsupported);
  CHECK(bias.error().message.starts_with("config.json: attention_bias = true"));
  plain.attention_bias = false;
  plain.mlp_bias = true;
  CHECK(cuda_runner_supports(plain, opts).error().message.starts_with("config.json: mlp_bias"));
}

TEST_CASE("weight bytes by format: the quantized Linears' tensors under their format") {
  ScratchDir dir("gptq-bytes");
  write_model(dir, gptq(true, false), no_edit, in_order);
  auto m = load_model_dir(dir.path.string());
  REQUIRE(m.ok());
  const auto by_format = weight_bytes_by_format(m->config, m->weights);
  // Per layer: qweight in/8×out + qzeros groups×out/8 (I32) + scales groups×out (F16) + g_idx.
  int64_t gptq_bytes = 0;
  for (const LinearModule& l : layer_linears(m->config)) {
    const int64_t groups = l.in_features / 32;
    gptq_bytes += (l.in_features / 8 * l.out_features + groups * l.out_features / 8) * 4 +
                  groups * l.out_features * 2 + l.in_features * 4;
  }
  REQUIRE(by_format.size() == 2);
  CHECK(by_format[0].first == "gptq int4");
  CHECK(by_format[0].second == gptq_bytes);
  CHECK(by_format[1].first == "f32");  // embeddings and norms as written
  CHECK(by_format[0].second + by_format[1].second == int64_t(m->weights.total_bytes()));
}
