#include "model/weight_names.h"

#include "model/quant_tensors.h"

namespace tandem {

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& c) {
  using Kind = ExpectedTensor::Kind;
  const int64_t q_out = c.num_heads * c.head_dim;
  const int64_t kv_out = c.num_kv_heads * c.head_dim;
  const int64_t h = c.hidden_size;
  const int64_t inter = c.intermediate_size;
  const bool o_bias = c.arch == Arch::kLlama && c.attention_bias;

  std::vector<ExpectedTensor> out;
  // A Linear as stored: [out, in] floats, or the tensors of its quantized format.
  auto linear = [&](const std::string& module, int64_t out_features, int64_t in_features) {
    if (!c.quant.quantizes(module)) {
      out.push_back({module + ".weight", {out_features, in_features}, Kind::kLinear});
      return;
    }
    for (ExpectedTensor& t : quantized_linear_tensors(c.quant, module, out_features, in_features))
      out.push_back(std::move(t));
  };
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, h}, Kind::kEmbedding});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    out.push_back({p + "input_layernorm.weight", {h}, Kind::kNorm});
    linear(p + "self_attn.q_proj", q_out, h);
    if (c.attention_bias) out.push_back({p + "self_attn.q_proj.bias", {q_out}, Kind::kBias});
    linear(p + "self_attn.k_proj", kv_out, h);
    if (c.attention_bias) out.push_back({p + "self_attn.k_proj.bias", {kv_out}, Kind::kBias});
    linear(p + "self_attn.v_proj", kv_out, h);
    if (c.attention_bias) out.push_back({p + "self_attn.v_proj.bias", {kv_out}, Kind::kBias});
    linear(p + "self_attn.o_proj", h, q_out);
    if (o_bias) out.push_back({p + "self_attn.o_proj.bias", {h}, Kind::kBias});
    out.push_back({p + "post_attention_layernorm.weight", {h}, Kind::kNorm});
    linear(p + "mlp.gate_proj", inter, h);
    if (c.mlp_bias) out.push_back({p + "mlp.gate_proj.bias", {inter}, Kind::kBias});
    linear(p + "mlp.up_proj", inter, h);
    if (c.mlp_bias) out.push_back({p + "mlp.up_proj.bias", {inter}, Kind::kBias});
    linear(p + "mlp.down_proj", h, inter);
    if (c.mlp_bias) out.push_back({p + "mlp.down_proj.bias", {h}, Kind::kBias});
  }
  out.push_back({"model.norm.weight", {h}, Kind::kNorm});
  if (!c.tie_word_embeddings) {
    out.push_back({"lm_head.weight", {c.vocab_size, h}, Kind::kLinear});
  }
  return out;
}

std::vector<LinearModule> layer_linears(const ModelConfig& c) {
  const int64_t q_out = c.num_heads * c.head_dim;
  const int64_t kv_out = c.num_kv_heads * c.head_dim;
  const int64_t h = c.hidden_size;
  const int64_t inter = c.intermediate_size;
  std::vector<LinearModule> out;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    out.push_back({p + "self_attn.q_proj", q_out, h});
    out.push_back({p + "self_attn.k_proj", kv_out, h});
    out.push_back({p + "self_attn.v_proj", kv_out, h});
    out.push_back({p + "self_attn.o_proj", h, q_out});
    out.push_back({p + "mlp.gate_proj", inter, h});
    out.push_back({p + "mlp.up_proj", inter, h});
    out.push_back({p + "mlp.down_proj", h, inter});
  }
  return out;
}

bool is_ignored_buffer(const std::string& name) {
  static const std::string kSuffix = "rotary_emb.inv_freq";
  return name.size() >= kSuffix.size() &&
         name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
}

}  // namespace tandem
