#include "model/weight_names.h"

namespace tandem {

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& c) {
  using Kind = ExpectedTensor::Kind;
  const int64_t q_out = c.num_heads * c.head_dim;
  const int64_t kv_out = c.num_kv_heads * c.head_dim;
  const int64_t h = c.hidden_size;
  const int64_t inter = c.intermediate_size;
  const bool o_bias = c.arch == Arch::kLlama && c.attention_bias;

  std::vector<ExpectedTensor> out;
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, h}, Kind::kEmbedding});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    out.push_back({p + "input_layernorm.weight", {h}, Kind::kNorm});
    out.push_back({p + "self_attn.q_proj.weight", {q_out, h}, Kind::kLinear});
    if (c.attention_bias) out.push_back({p + "self_attn.q_proj.bias", {q_out}, Kind::kBias});
    out.push_back({p + "self_attn.k_proj.weight", {kv_out, h}, Kind::kLinear});
    if (c.attention_bias) out.push_back({p + "self_attn.k_proj.bias", {kv_out}, Kind::kBias});
    out.push_back({p + "self_attn.v_proj.weight", {kv_out, h}, Kind::kLinear});
    if (c.attention_bias) out.push_back({p + "self_attn.v_proj.bias", {kv_out}, Kind::kBias});
    out.push_back({p + "self_attn.o_proj.weight", {h, q_out}, Kind::kLinear});
    if (o_bias) out.push_back({p + "self_attn.o_proj.bias", {h}, Kind::kBias});
    out.push_back({p + "post_attention_layernorm.weight", {h}, Kind::kNorm});
    out.push_back({p + "mlp.gate_proj.weight", {inter, h}, Kind::kLinear});
    if (c.mlp_bias) out.push_back({p + "mlp.gate_proj.bias", {inter}, Kind::kBias});
    out.push_back({p + "mlp.up_proj.weight", {inter, h}, Kind::kLinear});
    if (c.mlp_bias) out.push_back({p + "mlp.up_proj.bias", {inter}, Kind::kBias});
    out.push_back({p + "mlp.down_proj.weight", {h, inter}, Kind::kLinear});
    if (c.mlp_bias) out.push_back({p + "mlp.down_proj.bias", {h}, Kind::kBias});
  }
  out.push_back({"model.norm.weight", {h}, Kind::kNorm});
  if (!c.tie_word_embeddings) {
    out.push_back({"lm_head.weight", {c.vocab_size, h}, Kind::kLinear});
  }
  return out;
}

bool is_ignored_buffer(const std::string& name) {
  static const std::string kSuffix = "rotary_emb.inv_freq";
  return name.size() >= kSuffix.size() &&
         name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
}

}  // namespace tandem
