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
  enum class Kind { kEmbedding, kLinear, kNorm, kBias };
  std::string name;
  std::vector<int64_t> shape;
  Kind kind;
};

// lm_head.weight is absent when tie_word_embeddings is set.
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& config);

// Non-parameter buffers some exporters save (rotary inverse frequencies); loaders skip them.
bool is_ignored_buffer(const std::string& name);

}  // namespace tandem
