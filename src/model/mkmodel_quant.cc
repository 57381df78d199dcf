#include "model/mkmodel_quant.h"

#include <cstring>
#include <numeric>

#include "core/dtype.h"
#include "model/quant_pack.h"
#include "model/quant_tensors.h"
#include "model/weight_names.h"

namespace tandem::mkmodel {

namespace {

using ojson = nlohmann::ordered_json;

// Static activation scale of mkmodel's fp8 checkpoints: inputs up to ±4 are representable
// (RMS-normed hidden states of random models stay below that).
constexpr float kStaticInputScale = 4.0f / kFp8E4M3Max;

template <typename T>
std::vector<std::byte> bytes_of(const std::vector<T>& v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// The largest of 128, 64, 32 dividing every Linear's input features; 0 if none does.
int64_t group_size_for(const ModelConfig& c) {
  for (int64_t g : {128, 64, 32}) {
    bool fits = true;
    for (const LinearModule& l : layer_linears(c)) fits = fits && l.in_features % g == 0;
    if (fits) return g;
  }
  return 0;
}

uint64_t next_random(uint64_t& state) {  // splitmix64
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// GPTQ act-order quantizes input features in a permuted order and numbers the groups in that
// order: feature perm[k] belongs to group k / group_size.
std::vector<int32_t> act_order_groups(int64_t in, int64_t group_size, uint64_t key) {
  std::vector<int64_t> perm(static_cast<size_t>(in));
  std::iota(perm.begin(), perm.end(), 0);
  uint64_t state = key;
  for (int64_t i = in - 1; i > 0; --i)
    std::swap(perm[size_t(i)], perm[size_t(next_random(state) % uint64_t(i + 1))]);
  std::vector<int32_t> group_of(static_cast<size_t>(in));
  for (int64_t k = 0; k < in; ++k) group_of[size_t(perm[size_t(k)])] = int32_t(k / group_size);
  return group_of;
}

}  // namespace

std::vector<std::string> quantization_names() {
  return {"fp8", "fp8-channel", "fp8-block", "awq", "gptq", "gptq-desc-act"};
}

Result<QuantChoice> quantization_choice(const std::string& name, const ModelConfig& model) {
  ojson j;
  const int64_t group = group_size_for(model);
  const bool int4 = name == "awq" || name == "gptq" || name == "gptq-desc-act";
  if (int4 && group == 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "mkmodel --quantization " + name +
                          ": no group size of 128, 64, 32 divides every Linear's input features");
  }
  if (name == "fp8") {
    j = {{"quant_method", "fp8"},
         {"activation_scheme", "static"},
         {"fmt", "e4m3"},
         {"ignored_layers", {"lm_head"}}};
  } else if (name == "fp8-block") {
    j = {{"quant_method", "fp8"},
         {"activation_scheme", "dynamic"},
         {"fmt", "e4m3"},
         {"weight_block_size", {128, 128}}};
  } else if (name == "fp8-channel") {
    const ojson weights = {{"num_bits", 8},     {"type", "float"},  {"strategy", "channel"},
                           {"symmetric", true}, {"dynamic", false}, {"group_size", nullptr}};
    const ojson inputs = {{"num_bits", 8},
                          {"type", "float"},
                          {"strategy", "token"},
                          {"symmetric", true},
                          {"dynamic", true}};
    j = {{"quant_method", "compressed-tensors"},
         {"format", "float-quantized"},
         {"quantization_status", "compressed"},
         {"config_groups",
          {{"group_0",
            {{"targets", {"Linear"}},
             {"weights", weights},
             {"input_activations", inputs},
             {"output_activations", nullptr}}}}},
         {"ignore", {"lm_head"}},
         {"kv_cache_scheme", nullptr}};
  } else if (name == "awq") {
    j = {{"quant_method", "awq"}, {"bits", 4},         {"group_size", group},
         {"zero_point", true},    {"version", "gemm"}, {"modules_to_not_convert", nullptr}};
  } else if (name == "gptq" || name == "gptq-desc-act") {
    j = {{"quant_method", "gptq"},
         {"bits", 4},
         {"group_size", group},
         {"desc_act", name == "gptq-desc-act"},
         {"sym", false},
         {"checkpoint_format", "gptq"},
         {"true_sequential", true},
         {"damp_percent", 0.01}};
  } else {
    std::string all;
    for (const std::string& n : quantization_names()) all += (all.empty() ? "" : ", ") + n;
    return make_error(ErrorCode::kInvalidArgument,
                      "mkmodel: unknown --quantization '" + name + "' (choices: " + all + ")");
  }
  TANDEM_ASSIGN_OR_RETURN(QuantConfig q,
                          parse_quant_config(nlohmann::json::parse(j.dump()), "mkmodel"));
  return QuantChoice{std::move(q), std::move(j)};
}

std::map<std::string, std::vector<std::byte>> quantize_linear(const QuantConfig& q,
                                                              const std::string& module,
                                                              int64_t out, int64_t in,
                                                              const std::vector<float>& w,
                                                              uint64_t key) {
  std::map<std::string, std::vector<std::byte>> t;
  switch (q.format) {
    case QuantFormat::kNone:
      break;
    case QuantFormat::kFp8: {
      std::vector<uint8_t> qw(size_t(out * in));  // [out, in] e4m3
      std::vector<float> scales;                  // [1] | [out] | [blocks_out, blocks_in]
      if (q.fp8_scale == Fp8ScaleGranularity::kTensor) scales.resize(1);
      if (q.fp8_scale == Fp8ScaleGranularity::kChannel) scales.resize(size_t(out));
      if (q.fp8_scale == Fp8ScaleGranularity::kBlock) {
        scales.resize(
            size_t(((out + q.block_out - 1) / q.block_out) * ((in + q.block_in - 1) / q.block_in)));
      }
      quantize_fp8(w.data(), out, in, q.fp8_scale, q.block_out, q.block_in, qw.data(),
                   scales.data());
      t[module + ".weight"] = bytes_of(qw);
      t[module + (q.fp8_scale == Fp8ScaleGranularity::kBlock ? ".weight_scale_inv"
                                                             : ".weight_scale")] = bytes_of(scales);
      if (q.fp8_activations == Fp8Activations::kStaticTensor)
        t[module + ".input_scale"] = bytes_of(std::vector<float>{kStaticInputScale});
      break;
    }
    case QuantFormat::kAwq: {
      const int64_t groups = in / q.group_size;
      std::vector<int32_t> group_of(static_cast<size_t>(in));
      for (int64_t i = 0; i < in; ++i) group_of[size_t(i)] = int32_t(i / q.group_size);
      const Int4Groups g = quantize_int4(w.data(), out, in, group_of, groups, false, 0);
      std::vector<uint8_t> q_in_out(size_t(in * out));  // [in, out]: AWQ's row order
      for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i) q_in_out[size_t(i * out + o)] = g.q[size_t(o * in + i)];
      t[module + ".qweight"] = bytes_of(pack_awq(q_in_out.data(), in, out));
      t[module + ".qzeros"] = bytes_of(pack_awq(g.zeros.data(), groups, out));
      t[module + ".scales"] = bytes_of(g.scales);
      break;
    }
    case QuantFormat::kGptq: {
      const int64_t groups = gptq_groups(q, in);
      std::vector<int32_t> group_of(static_cast<size_t>(in));
      for (int64_t i = 0; i < in; ++i)
        group_of[size_t(i)] = q.group_size == -1 ? 0 : int32_t(i / q.group_size);
      if (q.desc_act && q.group_size != -1) group_of = act_order_groups(in, q.group_size, key);
      // v1 cannot store a zero point of 0 (it would be written as −1 and read back as 16).
      const Int4Groups g = quantize_int4(w.data(), out, in, group_of, groups, q.sym, q.zero_offset);
      t[module + ".qweight"] = bytes_of(pack_gptq_qweight(g.q.data(), out, in));
      t[module + ".qzeros"] = bytes_of(pack_gptq_zeros(g.zeros.data(), groups, out, q.zero_offset));
      t[module + ".scales"] = bytes_of(g.scales);
      t[module + ".g_idx"] = bytes_of(group_of);
      break;
    }
  }
  return t;
}

}  // namespace tandem::mkmodel
