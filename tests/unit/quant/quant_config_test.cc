// quantization_config: each published spelling parses to the format it stores, and each
// unsupported or malformed field is a startup error naming the field and its value.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "model/config.h"

using namespace tandem;

namespace {

// A Llama whose Linears fit every group size: inputs 128 and 256, outputs multiples of 8.
Result<ModelConfig> parse_with(const std::string& quantization_config, int hidden = 128) {
  nlohmann::json j = {{"architectures", {"LlamaForCausalLM"}},
                      {"hidden_size", hidden},
                      {"intermediate_size", 2 * hidden},
                      {"num_hidden_layers", 2},
                      {"num_attention_heads", 4},
                      {"num_key_value_heads", 2},
                      {"vocab_size", 64},
                      {"max_position_embeddings", 128},
                      {"torch_dtype", "float16"}};
  j["quantization_config"] = nlohmann::json::parse(quantization_config);
  return parse_model_config(j.dump(), "config.json");
}

QuantConfig ok(const std::string& qc) {
  auto c = parse_with(qc);
  REQUIRE_MESSAGE(c.ok(), (c.ok() ? "" : c.error().to_string()));
  return c->quant;
}

// The error of a config that must not load.
Error err(const std::string& qc, int hidden = 128) {
  auto c = parse_with(qc, hidden);
  REQUIRE(!c.ok());
  return c.error();
}

}  // namespace

TEST_CASE("no quantization_config (or null): a float checkpoint") {
  auto c = parse_with("null");
  REQUIRE(c.ok());
  CHECK(!c->quant.quantized());
  CHECK(!c->quant.quantizes("model.layers.0.mlp.up_proj"));
}

TEST_CASE("fp8 (AutoFP8 / vLLM): per-tensor scales, static or dynamic, or block scales") {
  QuantConfig q = ok(R"({"quant_method": "fp8", "activation_scheme": "static",
                         "ignored_layers": ["model.layers.1.mlp.down_proj"]})");
  CHECK(q.format == QuantFormat::kFp8);
  CHECK(q.fp8_scale == Fp8ScaleGranularity::kTensor);
  CHECK(q.fp8_activations == Fp8Activations::kStaticTensor);
  CHECK(q.quantizes("model.layers.0.mlp.down_proj"));
  CHECK(!q.quantizes("model.layers.1.mlp.down_proj"));
  q = ok(R"({"quant_method": "fp8"})");
  CHECK(q.fp8_activations == Fp8Activations::kDynamicPerToken);  // vLLM's default is dynamic
  q = ok(R"({"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
             "weight_block_size": [128, 64]})");
  CHECK(q.fp8_scale == Fp8ScaleGranularity::kBlock);
  CHECK(q.block_out == 128);
  CHECK(q.block_in == 64);
  CHECK(q.fp8_activations == Fp8Activations::kDynamicPerTokenGroup);
}

TEST_CASE("compressed-tensors fp8: channel/tensor weights, token/tensor/no activations, ignore") {
  QuantConfig q = ok(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"],
      "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true,
                  "dynamic": false},
      "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                            "dynamic": true}}},
    "ignore": ["lm_head", "re:.*layers\\.1\\..*_proj$"]})");
  CHECK(q.format == QuantFormat::kFp8);
  CHECK(q.fp8_scale == Fp8ScaleGranularity::kChannel);
  CHECK(q.fp8_activations == Fp8Activations::kDynamicPerToken);
  CHECK(q.quantizes("model.layers.0.self_attn.q_proj"));
  CHECK(!q.quantizes("model.layers.1.self_attn.q_proj"));  // the regex
  CHECK(!q.quantizes("lm_head"));
  q = ok(R"({"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": ["Linear"],
    "weights": {"num_bits": 8, "type": "float", "strategy": "tensor"},
    "input_activations": {"num_bits": 8, "type": "float", "strategy": "tensor",
                          "dynamic": false}}}})");
  CHECK(q.fp8_scale == Fp8ScaleGranularity::kTensor);
  CHECK(q.fp8_activations == Fp8Activations::kStaticTensor);
  q = ok(R"({"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": ["Linear"],
    "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
    "input_activations": null}}})");
  CHECK(q.fp8_activations == Fp8Activations::kNone);  // W8A16
}

TEST_CASE("fbgemm_fp8: channel scales, dynamic per-token activations under the upper bound") {
  QuantConfig q = ok(R"({"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0,
                         "modules_to_not_convert": ["down_proj"]})");
  CHECK(q.fp8_scale == Fp8ScaleGranularity::kChannel);
  CHECK(q.fp8_activations == Fp8Activations::kDynamicPerToken);
  CHECK(q.activation_scale_ub == 1200.0);
  CHECK(!q.quantizes("model.layers.0.mlp.down_proj"));  // substring match, as transformers
  CHECK(q.quantizes("model.layers.0.mlp.up_proj"));
}

TEST_CASE("awq and gptq: group size, zero points, act-order, v1/v2 zeros") {
  QuantConfig q = ok(R"({"quant_method": "awq", "bits": 4, "group_size": 128,
                         "zero_point": true, "version": "GEMM",
                         "modules_to_not_convert": ["o_proj"]})");
  CHECK(q.format == QuantFormat::kAwq);
  CHECK(q.group_size == 128);
  CHECK(!q.quantizes("model.layers.0.self_attn.o_proj"));
  q = ok(R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": true,
             "sym": false, "true_sequential": true, "use_exllama": true})");
  CHECK(q.format == QuantFormat::kGptq);
  CHECK(q.desc_act);
  CHECK(!q.sym);
  CHECK(q.zero_offset == 1);  // no checkpoint_format: v1
  q = ok(R"({"quant_method": "gptq", "bits": 4, "group_size": -1, "checkpoint_format":
             "gptq_v2", "modules_in_block_to_quantize": [["self_attn.q_proj", "self_attn.k_proj",
             "self_attn.v_proj"], ["self_attn.o_proj"], ["mlp.gate_proj", "mlp.up_proj"],
             ["mlp.down_proj"]]})");
  CHECK(q.group_size == -1);
  CHECK(q.sym);  // GPTQ's default
  CHECK(q.zero_offset == 0);
}

TEST_CASE("unsupported quantization fields are errors naming the field and value") {
  auto msg = [](const std::string& qc) { return err(qc).message; };
  CHECK(msg(R"({"quant_method": "awq", "bits": 3, "group_size": 128, "zero_point": true})") ==
        "config.json: quantization_config.bits = 3 is not supported (supported: 4)");
  CHECK(err(R"({"quant_method": "awq", "bits": 3, "group_size": 128})").code ==
        ErrorCode::kUnsupported);
  CHECK(msg(R"({"quant_method": "gptq", "bits": 8, "group_size": 128})") ==
        "config.json: quantization_config.bits = 8 is not supported (supported: 4)");
  CHECK(msg(R"({"quant_method": "awq", "bits": 4, "group_size": 256, "zero_point": true})") ==
        "config.json: quantization_config.group_size = 256 is not supported (supported: 32, 64, "
        "128)");
  CHECK(msg(R"({"quant_method": "gptq", "bits": 4, "group_size": 16})") ==
        "config.json: quantization_config.group_size = 16 is not supported (supported: 32, 64, "
        "128, -1)");
  CHECK(msg(R"({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": true,
                "version": "gemv"})") ==
        "config.json: quantization_config.version = \"gemv\" is not supported (supported: "
        "\"gemm\")");
  CHECK(msg(R"({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": false})") ==
        "config.json: quantization_config.zero_point = false is not supported (supported: true)");
  CHECK(msg(R"({"quant_method": "gptq", "bits": 4, "group_size": 128,
                "checkpoint_format": "marlin"})") ==
        "config.json: quantization_config.checkpoint_format = \"marlin\" is not supported "
        "(supported: \"gptq\" (v1), \"gptq_v2\")");
  CHECK(msg(R"({"quant_method": "gptq", "bits": 4, "group_size": 128,
                "is_marlin_format": true})") ==
        "config.json: quantization_config.is_marlin_format = true is not supported (marlin "
        "checkpoints repack qweight: supported: false)");
  CHECK(msg(R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "lm_head": true})") ==
        "config.json: quantization_config.lm_head = true is not supported (tandem keeps lm_head "
        "unquantized)");
  CHECK(msg(R"({"quant_method": "gptq", "bits": 4, "group_size": 128,
                "dynamic": {"-:.*down_proj": {}}})")
            .starts_with("config.json: quantization_config.dynamic = {\"-:.*down_proj\":{}} is "
                         "not supported"));
  CHECK(msg(R"({"quant_method": "gptq", "bits": 4, "group_size": 128,
                "modules_in_block_to_quantize": [["self_attn.q_proj"]]})")
            .find("it leaves self_attn.k_proj unquantized") != std::string::npos);
  CHECK(msg(R"({"quant_method": "hqq"})") ==
        "config.json: quantization_config.quant_method = \"hqq\" is not supported (supported: "
        "\"fp8\", \"compressed-tensors\", \"fbgemm_fp8\", \"awq\", \"gptq\")");
  CHECK(msg(R"({"quant_method": "fp8", "fmt": "e5m2"})") ==
        "config.json: quantization_config.fmt = \"e5m2\" is not supported (supported: \"e4m3\")");
  CHECK(msg(R"({"quant_method": "fp8", "activation_scheme": "static",
                "weight_block_size": [128, 128]})")
            .starts_with("config.json: quantization_config.activation_scheme = \"static\" is "
                         "not supported (block-scaled fp8"));
  CHECK(msg(R"({"quant_method": "fp8", "kv_cache_scheme": {"num_bits": 8}})")
            .starts_with("config.json: quantization_config.kv_cache_scheme = {\"num_bits\":8} "
                         "is not supported"));
}

TEST_CASE("unsupported compressed-tensors schemes name the field inside config_groups") {
  auto ct = [](const std::string& weights, const std::string& extra = "") {
    return err(R"({"quant_method": "compressed-tensors", "config_groups": {"group_0":
      {"targets": ["Linear"], "weights": )" +
               weights + extra + "}}}")
        .message;
  };
  CHECK(ct(R"({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128})") ==
        "config.json: quantization_config.config_groups.group_0.weights.num_bits = 4 is not "
        "supported (supported: 8)");
  CHECK(ct(R"({"num_bits": 8, "type": "int", "strategy": "channel"})") ==
        "config.json: quantization_config.config_groups.group_0.weights.type = \"int\" is not "
        "supported (supported: \"float\" (fp8 e4m3))");
  CHECK(ct(R"({"num_bits": 8, "type": "float", "strategy": "block"})") ==
        "config.json: quantization_config.config_groups.group_0.weights.strategy = \"block\" is "
        "not supported (supported: \"tensor\", \"channel\")");
  CHECK(ct(R"({"num_bits": 8, "type": "float", "strategy": "channel"})",
           R"(, "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                                      "dynamic": false})") ==
        "config.json: quantization_config.config_groups.group_0.input_activations.dynamic = "
        "false is not supported (per-token activation scales are dynamic: supported: true)");
  CHECK(err(R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
                "config_groups": {}})")
            .message ==
        "config.json: quantization_config.format = \"pack-quantized\" is not "
        "supported (supported: \"float-quantized\", \"naive-quantized\" (fp8))");
  const std::string w8 = R"({"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float",
                             "strategy": "channel"}})";
  CHECK(err(R"({"quant_method": "compressed-tensors", "config_groups": {"a": )" + w8 +
            R"(, "b": )" + w8 + "}}")
            .message ==
        "config.json: quantization_config.config_groups = 2 is not supported "
        "(one scheme for every Linear is supported, this has several)");
  CHECK(err(R"({"quant_method": "compressed-tensors", "config_groups": {"a": {"targets":
                ["re:.*mlp.*"], "weights": {"num_bits": 8, "type": "float"}}}})")
            .message ==
        "config.json: quantization_config.config_groups.a.targets = "
        "[\"re:.*mlp.*\"] is not supported (supported: [\"Linear\"])");
}

TEST_CASE("malformed quantization fields are kInvalidModel naming the field") {
  Error e = err(R"({"quant_method": "awq", "bits": "4"})");
  CHECK(e.code == ErrorCode::kInvalidModel);
  CHECK(e.message == "config.json: quantization_config.bits must be an integer");
  CHECK(err(R"({"bits": 4})").message ==
        "config.json: quantization_config.quant_method is missing");
  CHECK(err(R"([1, 2])").message == "config.json: quantization_config must be an object");
  CHECK(err(R"({"quant_method": "fp8", "weight_block_size": [128]})").message ==
        "config.json: quantization_config.weight_block_size must be two positive integers "
        "[out, in]");
  CHECK(err(R"({"quant_method": "compressed-tensors", "config_groups": {"a": {"targets":
                ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "tensor"}}},
                "ignore": ["re:("]})")
            .message ==
        "config.json: quantization_config.ignore entry 're:(' is not a valid "
        "regular expression");
}

TEST_CASE("a group size that does not divide a Linear's inputs is refused at config time") {
  // hidden 64: q/k/v/gate/up take 64 inputs, which group 128 does not divide.
  Error e = err(R"({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": true})", 64);
  CHECK(e.code == ErrorCode::kUnsupported);
  CHECK(e.message ==
        "config.json: quantization_config.group_size = 128 does not divide the 64 "
        "input features of model.layers.0.self_attn.q_proj");
}

TEST_CASE("--quantization fp8: float checkpoints only; other values are errors") {
  QuantConfig none;
  auto q = load_time_quantization("fp8", none, "--quantization");
  REQUIRE(q.ok());
  CHECK(q->format == QuantFormat::kFp8);
  CHECK(q->fp8_scale == Fp8ScaleGranularity::kChannel);
  CHECK(q->fp8_activations == Fp8Activations::kDynamicPerToken);
  CHECK(!load_time_quantization("", none, "--quantization")->quantized());
  auto bad = load_time_quantization("int8", none, "--quantization");
  REQUIRE(!bad.ok());
  CHECK(bad.error().message == "--quantization 'int8' is not supported (supported: fp8)");
  QuantConfig awq = ok(R"({"quant_method": "awq", "bits": 4, "group_size": 128,
                           "zero_point": true})");
  auto twice = load_time_quantization("fp8", awq, "--quantization");
  REQUIRE(!twice.ok());
  CHECK(twice.error().code == ErrorCode::kInvalidArgument);
  CHECK(
      twice.error().message.starts_with("--quantization fp8: the checkpoint is already "
                                        "quantized (awq int4 (group 128, zero points))"));
  QuantConfig fp8 = ok(R"({"quant_method": "fp8", "activation_scheme": "static"})");
  CHECK(load_time_quantization("fp8", fp8, "--quantization")->fp8_activations ==
        Fp8Activations::kStaticTensor);  // already fp8: run as stored
}
