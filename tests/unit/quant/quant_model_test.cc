// Whole models: mkmodel writes tiny-qwen in each quantized format; the CPU runner's greedy
// tokens and logits are compared with the same model dequantized by reference_quant.h into a
// plain F32 checkpoint. Weight-only formats must match bit for bit (same dot products over the
// same fp32 weights); W8A8 fp8 formats round activations too, so they are close but not equal.
// Load-time fp8 is checked against a compressed-tensors checkpoint quantized here.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/dtype.h"
#include "engine/engine.h"
#include "model/mkmodel.h"
#include "model/model_dir.h"
#include "model/weight_names.h"
#include "reference_quant.h"
#include "test_paths.h"
#include "unit/model/model_test_util.h"
#include "unit/runner/runner_driver.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

const std::vector<int32_t> kPrompt = {1000, 2001, 3002, 4003, 5004, 6005, 7006, 8007, 9008};
constexpr int32_t kNewTokens = 6;

std::string make(const ScratchDir& dir, const std::string& quantization,
                 const std::string& preset = "tiny-qwen") {
  MkModelOptions o;
  o.preset = preset;
  o.out_dir = dir.path.string();
  o.seed = 9;
  o.quantization = quantization;
  Status st = make_model(o);
  REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.error().to_string()));
  return o.out_dir;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

template <typename T>
std::vector<T> values(const TensorView& t) {
  REQUIRE(t.nbytes % sizeof(T) == 0);
  std::vector<T> v(t.nbytes / sizeof(T));
  std::memcpy(v.data(), t.data, t.nbytes);
  return v;
}

std::vector<float> widened(const TensorView& t) {
  std::vector<float> out;
  if (t.dtype == DType::kF32) return values<float>(t);
  for (uint16_t b : values<uint16_t>(t))
    out.push_back(t.dtype == DType::kBF16 ? bf16_to_f32(b) : f16_to_f32(b));
  return out;
}

struct Tensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
};

template <typename T>
Tensor tensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
              const std::vector<T>& v) {
  Tensor t{name, dtype, std::move(shape), std::vector<std::byte>(v.size() * sizeof(T))};
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

void write_checkpoint(const std::string& dir, const nlohmann::json& config,
                      const std::vector<Tensor>& tensors) {
  std::filesystem::create_directories(dir);
  write_bytes(dir + "/config.json", config.dump(2));
  std::vector<SafetensorsWriter::Entry> entries;
  for (const Tensor& t : tensors) entries.push_back({t.name, t.dtype, t.shape});
  auto w = SafetensorsWriter::create(dir + "/model.safetensors", entries);
  REQUIRE(w.ok());
  for (const Tensor& t : tensors) REQUIRE(w->write(t.bytes).ok());
  REQUIRE(w->finish().ok());
}

// The [out, in] weight `module` stands for, by the reference (never src/model/dequant.cc).
std::vector<double> reference_weight(const ModelDir& m, const std::string& module, int64_t out,
                                     int64_t in) {
  const QuantConfig& q = m.config.quant;
  auto get = [&](const std::string& suffix) {
    const TensorView* t = m.weights.find(module + suffix);
    REQUIRE_MESSAGE(t != nullptr, (module + suffix));
    return t;
  };
  std::vector<double> w(size_t(out * in));
  switch (q.format) {
    case QuantFormat::kFp8: {
      const auto codes = values<uint8_t>(*get(".weight"));
      const bool block = q.fp8_scale == Fp8ScaleGranularity::kBlock;
      const auto scales = widened(*get(block ? ".weight_scale_inv" : ".weight_scale"));
      const int64_t block_cols = block ? (in + q.block_in - 1) / q.block_in : 0;
      for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i) {
          const float s = q.fp8_scale == Fp8ScaleGranularity::kTensor ? scales[0]
                          : q.fp8_scale == Fp8ScaleGranularity::kChannel
                              ? scales[size_t(o)]
                              : scales[size_t((o / q.block_out) * block_cols + i / q.block_in)];
          w[size_t(o * in + i)] = ref::e4m3_value(codes[size_t(o * in + i)]) * double(s);
        }
      return w;
    }
    case QuantFormat::kAwq:
      return ref::awq_dequantize(values<int32_t>(*get(".qweight")),
                                 values<int32_t>(*get(".qzeros")), widened(*get(".scales")), in,
                                 out, q.group_size);
    case QuantFormat::kGptq: {
      std::vector<int32_t> g_idx(static_cast<size_t>(in));
      for (int64_t i = 0; i < in; ++i)
        g_idx[size_t(i)] = q.group_size == -1 ? 0 : int32_t(i / q.group_size);
      if (const TensorView* t = m.weights.find(module + ".g_idx"); t && q.desc_act)
        g_idx = values<int32_t>(*t);
      return ref::gptq_dequantize(values<int32_t>(*get(".qweight")),
                                  values<int32_t>(*get(".qzeros")), widened(*get(".scales")), g_idx,
                                  in, out, q.zero_offset == 1);
    }
    case QuantFormat::kNone:
      break;
  }
  FAIL("not quantized: " << module);
  return w;
}

// The quantized model at `dir` as a plain F32 checkpoint at `out`.
std::string write_dequantized(const std::string& dir, const std::string& out) {
  auto m = load_model_dir(dir);
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.error().to_string()));
  nlohmann::json config = read_json(dir + "/config.json");
  config.erase("quantization_config");
  config["torch_dtype"] = "float32";
  ModelConfig plain = m->config;
  plain.quant = QuantConfig{};
  std::map<std::string, std::pair<int64_t, int64_t>> linears;
  for (const LinearModule& l : layer_linears(plain))
    linears[l.module + ".weight"] = {l.out_features, l.in_features};
  std::vector<Tensor> tensors;
  for (const ExpectedTensor& e : expected_tensors(plain)) {
    auto it = linears.find(e.name);
    const std::string module = e.name.substr(0, e.name.rfind('.'));
    if (it != linears.end() && m->config.quant.quantizes(module)) {
      std::vector<float> w;
      for (double v : reference_weight(*m, module, it->second.first, it->second.second))
        w.push_back(float(v));
      tensors.push_back(tensor(e.name, DType::kF32, e.shape, w));
    } else {
      const TensorView* t = m->weights.find(e.name);
      REQUIRE_MESSAGE(t != nullptr, e.name);
      tensors.push_back(tensor(e.name, DType::kF32, e.shape, widened(*t)));
    }
  }
  write_checkpoint(out, config, tensors);
  return out;
}

struct Run {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // first step, last prompt position
};

Run greedy(const std::string& dir, const std::string& quantization = "") {
  auto m = load_model_dir(dir);
  REQUIRE_MESSAGE(m.ok(), (m.ok() ? "" : m.error().to_string()));
  RunnerDriver d(*m, 16, 64, 2, quantization);
  Run r;
  r.tokens = d.greedy(kPrompt, 4, kNewTokens, &r.logits);
  return r;
}

}  // namespace

TEST_CASE("weight-only formats: greedy tokens and logits equal the dequantized reference's") {
  for (const std::string q : {"awq", "gptq", "gptq-desc-act"}) {
    CAPTURE(q);
    ScratchDir dir("whole-" + q);
    ScratchDir ref_dir("whole-ref-" + q);
    const std::string model = make(dir, q);
    const Run quantized = greedy(model);
    const Run reference = greedy(write_dequantized(model, ref_dir.path.string()));
    CHECK(quantized.tokens == reference.tokens);
    CHECK(quantized.logits == reference.logits);  // bit for bit
  }
}

TEST_CASE("fp8 weight-only (compressed-tensors, input_activations null) equals its reference") {
  ScratchDir dir("whole-fp8-w8a16");
  ScratchDir ref_dir("whole-ref-fp8-w8a16");
  const std::string model = make(dir, "fp8-channel");
  nlohmann::json config = read_json(model + "/config.json");
  config["quantization_config"]["config_groups"]["group_0"]["input_activations"] = nullptr;
  write_bytes(model + "/config.json", config.dump(2));
  const Run quantized = greedy(model);
  const Run reference = greedy(write_dequantized(model, ref_dir.path.string()));
  CHECK(quantized.tokens == reference.tokens);
  CHECK(quantized.logits == reference.logits);
}

TEST_CASE("W8A8 fp8 formats: close to the dequantized reference, activations visibly rounded") {
  for (const std::string q : {"fp8", "fp8-channel", "fp8-block"}) {
    CAPTURE(q);
    ScratchDir dir("whole-" + q);
    ScratchDir ref_dir("whole-ref-" + q);
    const std::string model = make(dir, q);
    const Run quantized = greedy(model);
    const Run reference = greedy(write_dequantized(model, ref_dir.path.string()));
    const double err = relative_error(quantized.logits, reference.logits);
    MESSAGE(q, ": relative logits error ", err);
    CHECK(err > 0);     // the activations went through e4m3
    CHECK(err < 0.05);  // ... and nothing else changed
  }
}

TEST_CASE("--quantization fp8 equals a compressed-tensors channel checkpoint quantized here") {
  ScratchDir dir("whole-bf16");
  ScratchDir ct_dir("whole-ct-fp8");
  const std::string model = make(dir, "");
  auto m = load_model_dir(model);
  REQUIRE(m.ok());
  nlohmann::json config = read_json(model + "/config.json");
  config["quantization_config"] = nlohmann::json::parse(R"({"quant_method": "compressed-tensors",
    "format": "float-quantized", "config_groups": {"group_0": {"targets": ["Linear"],
    "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true},
    "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                          "dynamic": true}}}, "ignore": ["lm_head"]})");
  std::map<std::string, std::pair<int64_t, int64_t>> linears;
  for (const LinearModule& l : layer_linears(m->config))
    linears[l.module + ".weight"] = {l.out_features, l.in_features};
  std::vector<Tensor> tensors;
  for (const ExpectedTensor& e : expected_tensors(m->config)) {
    const TensorView* t = m->weights.find(e.name);
    auto it = linears.find(e.name);
    if (it == linears.end()) {
      tensors.push_back(tensor(e.name, t->dtype, e.shape, values<std::byte>(*t)));
      continue;
    }
    // Per output channel: scale = max|w| / 448, code = nearest e4m3 of w / scale (fp32 divide).
    const auto [out, in] = it->second;
    const std::vector<float> w = widened(*t);
    std::vector<uint8_t> codes(w.size());
    std::vector<float> scales(static_cast<size_t>(out));
    for (int64_t o = 0; o < out; ++o) {
      float amax = 0;
      for (int64_t i = 0; i < in; ++i) amax = std::max(amax, std::fabs(w[size_t(o * in + i)]));
      scales[size_t(o)] = amax / 448.0f;
      for (int64_t i = 0; i < in; ++i)
        codes[size_t(o * in + i)] = ref::e4m3_nearest(w[size_t(o * in + i)] / scales[size_t(o)]);
    }
    tensors.push_back(tensor(e.name, DType::kF8E4M3, e.shape, codes));
    tensors.push_back(tensor(e.name + "_scale", DType::kF32, {out, 1}, scales));
  }
  write_checkpoint(ct_dir.path.string(), config, tensors);

  const Run load_time = greedy(model, "fp8");
  const Run published = greedy(ct_dir.path.string());
  const Run bf16 = greedy(model);
  CHECK(load_time.tokens == published.tokens);
  CHECK(load_time.logits == published.logits);
  CHECK(load_time.logits != bf16.logits);  // it did quantize
}

TEST_CASE("engine: an fp8-at-load target with a gptq draft; status shows each model's formats") {
  ScratchDir target("engine-target");
  ScratchDir draft("engine-draft");
  MkModelOptions o;
  o.preset = "tiny-qwen";
  o.out_dir = target.path.string();
  o.tokenizer_dir = qwen_tokenizer_dir();
  REQUIRE(make_model(o).ok());
  o.preset = "tiny-qwen-draft";
  o.out_dir = draft.path.string();
  o.quantization = "gptq";
  REQUIRE(make_model(o).ok());
  EngineOptions eo;
  eo.model_dir = target.path.string();
  eo.draft_dir = draft.path.string();
  eo.quantization = "fp8";
  eo.kv_pages = 64;
  eo.threads = 1;
  auto engine = Engine::create(eo);
  REQUIRE_MESSAGE(engine.ok(), (engine.ok() ? "" : engine.error().to_string()));
  std::string target_detail, draft_detail;
  for (const DeviceMemory& d : (*engine)->status().memory)
    for (const MemoryPart& p : d.parts) {
      if (p.name == "weights (target)") target_detail = p.detail;
      if (p.name == "weights (draft)") draft_detail = p.detail;
    }
  CHECK(target_detail.find("fp8 e4m3 (quantized at load)") != std::string::npos);
  CHECK(draft_detail.find("gptq int4") != std::string::npos);
  CHECK(draft_detail.find("fp8") == std::string::npos);  // the draft is not re-quantized

  eo.draft_quantization = "fp8";  // a gptq draft cannot be quantized again
  auto refused = Engine::create(eo);
  REQUIRE(!refused.ok());
  CHECK(
      refused.error().message.starts_with("--draft-quantization fp8: the checkpoint is "
                                          "already quantized (gptq int4"));
}

TEST_CASE("mkmodel writes each format's tensors and quantization_config as its exporter does") {
  const std::string down = "model.layers.0.mlp.down_proj";  // [64, 128] in tiny-qwen
  struct Want {
    std::string name;
    std::vector<std::pair<std::string, DType>> tensors;  // suffix, dtype
    std::string method;
  };
  for (const Want& w : std::vector<Want>{
           {"fp8",
            {{".weight", DType::kF8E4M3},
             {".weight_scale", DType::kF32},
             {".input_scale", DType::kF32}},
            "fp8"},
           {"fp8-channel",
            {{".weight", DType::kF8E4M3}, {".weight_scale", DType::kF32}},
            "compressed-tensors"},
           {"fp8-block", {{".weight", DType::kF8E4M3}, {".weight_scale_inv", DType::kF32}}, "fp8"},
           {"awq",
            {{".qweight", DType::kI32}, {".qzeros", DType::kI32}, {".scales", DType::kF16}},
            "awq"},
           {"gptq",
            {{".qweight", DType::kI32},
             {".qzeros", DType::kI32},
             {".scales", DType::kF16},
             {".g_idx", DType::kI32}},
            "gptq"}}) {
    CAPTURE(w.name);
    ScratchDir dir("mkmodel-" + w.name);
    make(dir, w.name);
    const nlohmann::json config = read_json(dir.file("config.json"));
    CHECK(config["quantization_config"]["quant_method"] == w.method);
    auto m = load_model_dir(dir.path.string());
    REQUIRE(m.ok());
    for (const auto& [suffix, dtype] : w.tensors) {
      const TensorView* t = m->weights.find(down + suffix);
      REQUIRE_MESSAGE(t != nullptr, (down + suffix));
      CHECK(t->dtype == dtype);
    }
    const bool has_float_weight = m->weights.find(down + ".weight") != nullptr;
    CHECK(has_float_weight == w.name.starts_with("fp8"));  // int4 formats store no float weight
    CHECK(m->weights.find("model.embed_tokens.weight")->dtype == DType::kBF16);
  }
}

TEST_CASE("mkmodel: group size 64 for tiny-qwen's 64 inputs; gptq-desc-act permutes g_idx") {
  ScratchDir dir("mkmodel-desc-act");
  make(dir, "gptq-desc-act");
  const nlohmann::json qc = read_json(dir.file("config.json"))["quantization_config"];
  CHECK(qc["group_size"] == 64);
  CHECK(qc["desc_act"] == true);
  CHECK(qc["checkpoint_format"] == "gptq");
  auto m = load_model_dir(dir.path.string());
  REQUIRE(m.ok());
  // down_proj: 128 inputs in 2 groups of 64, not in order.
  const auto g_idx = values<int32_t>(*m->weights.find("model.layers.0.mlp.down_proj.g_idx"));
  REQUIRE(g_idx.size() == 128);
  int in_order = 0, group0 = 0;
  for (size_t i = 0; i < g_idx.size(); ++i) {
    in_order += g_idx[i] == int32_t(i / 64);
    group0 += g_idx[i] == 0;
  }
  CHECK(in_order < 128);
  CHECK(group0 == 64);  // every group holds group_size features
}
