#include "model/quant_tensors.h"

#include <algorithm>
#include <map>
#include <set>

namespace tandem {

namespace {

using Kind = ExpectedTensor::Kind;

const std::vector<DType> kFloat = {DType::kF32, DType::kBF16, DType::kF16};
const std::vector<DType> kHalf = {DType::kF16, DType::kBF16};
const std::vector<DType> kInt32 = {DType::kI32};

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

int64_t gptq_groups(const QuantConfig& q, int64_t in_features) {
  return q.group_size == -1 ? 1 : ceil_div(in_features, q.group_size);
}

std::string stored_weight_name(const QuantConfig& q, const std::string& module) {
  return module +
         (q.format == QuantFormat::kAwq || q.format == QuantFormat::kGptq ? ".qweight" : ".weight");
}

std::vector<ExpectedTensor> quantized_linear_tensors(const QuantConfig& q,
                                                     const std::string& module,
                                                     int64_t out_features, int64_t in_features) {
  std::vector<ExpectedTensor> t;
  auto add = [&](const char* suffix, std::vector<int64_t> shape, std::vector<DType> dtypes,
                 std::vector<std::vector<int64_t>> other_shapes = {}) {
    t.push_back({module + suffix, std::move(shape), Kind::kQuantized, std::move(other_shapes),
                 std::move(dtypes), false, module});
  };
  const int64_t out = out_features;
  const int64_t in = in_features;
  switch (q.format) {
    case QuantFormat::kNone:
      break;
    case QuantFormat::kFp8:
      add(".weight", {out, in}, {DType::kF8E4M3});
      switch (q.fp8_scale) {
        case Fp8ScaleGranularity::kTensor:
          add(".weight_scale", {}, kFloat, {{1}});
          break;
        case Fp8ScaleGranularity::kChannel:
          add(".weight_scale", {out, 1}, kFloat, {{out}});
          break;
        case Fp8ScaleGranularity::kBlock:
          add(".weight_scale_inv", {ceil_div(out, q.block_out), ceil_div(in, q.block_in)}, kFloat);
          break;
      }
      if (q.fp8_activations == Fp8Activations::kStaticTensor)
        add(".input_scale", {}, kFloat, {{1}});
      break;
    case QuantFormat::kAwq:
      add(".qweight", {in, out / 8}, kInt32);
      add(".qzeros", {in / q.group_size, out / 8}, kInt32);
      add(".scales", {in / q.group_size, out}, kHalf);
      break;
    case QuantFormat::kGptq: {
      const int64_t groups = gptq_groups(q, in);
      add(".qweight", {in / 8, out}, kInt32);
      add(".qzeros", {groups, out / 8}, kInt32);
      add(".scales", {groups, out}, kHalf);
      add(".g_idx", {in}, kInt32);
      // AutoGPTQ always saves g_idx; without desc_act it is i / group_size and may be absent.
      t.back().optional = !q.desc_act;
      break;
    }
  }
  return t;
}

Status check_quant_fits(const QuantConfig& q, const std::string& module, int64_t out_features,
                        int64_t in_features, const std::string& source) {
  if (q.format != QuantFormat::kAwq && q.format != QuantFormat::kGptq) return Status::Ok();
  const std::string method = "quantization_config.quant_method = \"" + q.method + "\"";
  if (out_features % 8 != 0) {
    return make_error(ErrorCode::kUnsupported, source + ": " + method +
                                                   " packs 8 output features per int32, but " +
                                                   module + " has " + std::to_string(out_features));
  }
  if (q.format == QuantFormat::kGptq && in_features % 8 != 0) {
    return make_error(ErrorCode::kUnsupported, source + ": " + method +
                                                   " packs 8 input features per int32, but " +
                                                   module + " has " + std::to_string(in_features));
  }
  const bool grouped_in_order = q.format == QuantFormat::kAwq || !q.desc_act;
  if (grouped_in_order && q.group_size > 0 && in_features % q.group_size != 0) {
    return make_error(
        ErrorCode::kUnsupported,
        source + ": quantization_config.group_size = " + std::to_string(q.group_size) +
            " does not divide the " + std::to_string(in_features) + " input features of " + module);
  }
  return Status::Ok();
}

std::vector<std::pair<std::string, int64_t>> weight_bytes_by_format(const ModelConfig& config,
                                                                    const WeightStore& store) {
  std::set<std::string> quantized_modules;
  for (const LinearModule& l : layer_linears(config))
    if (config.quant.quantizes(l.module)) quantized_modules.insert(l.module);
  const std::string quant_label =
      config.quant.format == QuantFormat::kFp8 ? "fp8 e4m3"
      : config.quant.quantized() ? std::string(quant_format_name(config.quant.format)) + " int4"
                                 : "";
  std::map<std::string, int64_t> bytes;
  for (const auto& [name, t] : store.tensors()) {
    const size_t dot = name.rfind('.');
    const bool quantized = dot != std::string::npos &&
                           quantized_modules.count(name.substr(0, dot)) > 0 &&
                           name.substr(dot) != ".bias";
    std::string label = quantized ? quant_label : std::string(dtype_name(t.dtype));
    if (!quantized) std::transform(label.begin(), label.end(), label.begin(), ::tolower);
    bytes[label] += int64_t(t.nbytes);
  }
  std::vector<std::pair<std::string, int64_t>> out(bytes.begin(), bytes.end());
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

}  // namespace tandem
