// The tensors a config implies, in Hugging Face's names and shapes ([out, in] for Linear), in
// the order transformers saves them. The loader checks a directory against this list and
// mkmodel writes exactly this list, so the two cannot drift apart.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace tandem {

struct ExpectedTensor {
  enum class Kind {
    kEmbedding,
    kLinear,
    kNorm,
    kBias,
    kQuantized,  // part of a quantized Linear (weight, qweight, scales, zeros, g_idx, ...)
  };
  std::string name;
  std::vector<int64_t> shape;  // what mkmodel writes
  Kind kind;
  // Also accepted by the loader: a scale stored as [] or [1], a channel scale as [out] or
  // [out, 1] (exporters differ).
  std::vector<std::vector<int64_t>> other_shapes = {};
  std::vector<DType> dtypes = {};  // accepted dtypes; empty: any (the runner checks floats)
  bool optional = false;           // GPTQ g_idx without desc_act
  std::string module = {};         // kQuantized: its Linear ("model.layers.0.mlp.up_proj")
};

// lm_head.weight is absent when tie_word_embeddings is set. Linears that config.quant
// quantizes are listed as their stored tensors (model/quant_tensors.h).
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& config);

// Every Linear of the decoder layers: "model.layers.N.self_attn.q_proj" etc. (lm_head is never
// quantized and not listed).
struct LinearModule {
  std::string module;
  int64_t out_features;
  int64_t in_features;
};
std::vector<LinearModule> layer_linears(const ModelConfig& config);

// Non-parameter buffers some exporters save (rotary inverse frequencies); loaders skip them.
bool is_ignored_buffer(const std::string& name);

}  // namespace tandem
