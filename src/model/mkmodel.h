// Random-weight Hugging Face model directories with the exact shapes of real models: for tests,
// benchmarks and machines without internet. Weights are a pure function of (seed, preset,
// tensor name, element index), so two runs with one seed write identical bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "model/pattern_model.h"

namespace tandem {

struct MkModelOptions {
  std::string preset;   // one of mkmodel_presets()
  std::string out_dir;  // created if missing; earlier model*.safetensors in it are replaced
  uint64_t seed = 0;
  // Copies tokenizer.json, tokenizer_config.json and any other tokenizer files found
  // (special_tokens_map.json, vocab.json, merges.txt, ...). Empty: no tokenizer files.
  std::string tokenizer_dir;
  // Shards of at most this many bytes (a single larger tensor gets a shard of its own), with
  // model.safetensors.index.json when there is more than one.
  int64_t max_shard_bytes = int64_t{2} << 30;
  DType dtype = DType::kBF16;  // kBF16, kF16 or kF32
  // Set: a pattern model (model/pattern_model.h) with an untied lm_head, for speculative
  // decoding benchmarks with a known acceptance; pattern.json in the directory records it.
  std::optional<mkmodel::PatternOptions> pattern;
  // Empty: float weights. Otherwise one of fp8, fp8-channel, fp8-block, awq, gptq,
  // gptq-desc-act (model/mkmodel_quant.h): the decoder Linears are written in that format,
  // embeddings, norms, biases and lm_head in `dtype`.
  std::string quantization;
};

// Writes config.json, generation_config.json, the safetensors shards and the tokenizer files.
// Streams tensor by tensor: memory use is a few tens of MB whatever the model size.
Status make_model(const MkModelOptions& options);

// Names accepted by MkModelOptions::preset: qwen2.5-7b, qwen2.5-0.5b, llama-3.1-8b,
// llama-3.2-1b, and the test models tiny-qwen, tiny-qwen-draft, tiny-llama, small-qwen.
std::vector<std::string> mkmodel_presets();

}  // namespace tandem
