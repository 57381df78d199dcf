// A Hugging Face model directory as transformers reads it: config.json, generation_config.json,
// safetensors weights, tokenizer files. load_model_dir validates everything a runner relies on.
#pragma once

#include <string>
#include <vector>

#include "core/error.h"
#include "model/config.h"
#include "model/quant_linear.h"
#include "model/safetensors.h"

namespace tandem {

// Per-layer weights, pointing into the WeightStore. Shapes are HF's ([out, in] for Linear).
// A quantized projection's pointer is its stored weight (F8_E4M3 `weight` [out, in], or the
// packed I32 `qweight`, model/quant_tensors.h); `quant` says how to read it.
struct LayerWeights {
  const TensorView* input_norm;      // [hidden]
  const TensorView* q_proj;          // [num_heads * head_dim, hidden]
  const TensorView* k_proj;          // [num_kv_heads * head_dim, hidden]
  const TensorView* v_proj;          // [num_kv_heads * head_dim, hidden]
  const TensorView* q_bias;          // [num_heads * head_dim] or null
  const TensorView* k_bias;          // [num_kv_heads * head_dim] or null
  const TensorView* v_bias;          // [num_kv_heads * head_dim] or null
  const TensorView* o_proj;          // [hidden, num_heads * head_dim]
  const TensorView* post_attn_norm;  // [hidden]
  const TensorView* gate_proj;       // [intermediate, hidden]
  const TensorView* up_proj;         // [intermediate, hidden]
  const TensorView* down_proj;       // [hidden, intermediate]
  // Llama only: attention_bias also gives o_proj a bias, mlp_bias gives the MLP biases.
  // Null otherwise; a runner that does not apply them must refuse a model that has them.
  const TensorView* o_bias = nullptr;     // [hidden] or null
  const TensorView* gate_bias = nullptr;  // [intermediate] or null
  const TensorView* up_bias = nullptr;    // [intermediate] or null
  const TensorView* down_bias = nullptr;  // [hidden] or null
  LayerQuant quant;                       // format kNone everywhere for a float checkpoint
};

struct ModelWeights {
  const TensorView* embed_tokens;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  const TensorView* final_norm;  // [hidden]
  const TensorView* lm_head;     // [vocab, hidden]; == embed_tokens when tied
};

struct ModelDir {
  std::string path;
  ModelConfig config;
  GenerationDefaults generation;  // empty when generation_config.json is absent
  WeightStore weights;
  ModelWeights tensors;  // resolved, shape-checked against config
};

// Refuses .bin / pickle checkpoints with a message (never unpickles). Missing, unexpected or
// mis-shaped tensors are errors naming the tensor and file. The eos ids of
// generation_config.json are appended to config.eos_token_ids (as transformers stops on
// either), so consumers need only config.eos_token_ids.
Result<ModelDir> load_model_dir(const std::string& path);

// Resolve and shape-check the weights against a config; used by load_model_dir and by tests
// that build weights in memory.
Result<ModelWeights> resolve_weights(const ModelConfig& config, const WeightStore& store);

}  // namespace tandem
