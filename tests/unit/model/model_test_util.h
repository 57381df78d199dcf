// Helpers for model tests: scratch directories, raw safetensors bytes (for broken files), and
// a small valid model directory written from expected_tensors().
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/safetensors.h"
#include "model/weight_names.h"

namespace tandem::testing {

// A fresh directory removed at scope exit.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& name) {
    path = std::filesystem::temp_directory_path() /
           ("tandem-model-test-" + std::to_string(::getpid()) + "-" + name);
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// A safetensors file with a given header text and data section; `header_len` overrides the
// 8-byte length prefix when set (for corrupt-length cases).
inline std::string raw_safetensors(const std::string& header, const std::string& data,
                                   int64_t header_len = -1) {
  uint64_t n = header_len < 0 ? header.size() : uint64_t(header_len);
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return out + header + data;
}

// A Llama config small enough that whole model directories take kilobytes.
inline std::string small_llama_config_json(bool tied = true) {
  return R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 8, "intermediate_size": 16,
    "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
    "vocab_size": 32, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0, "tie_word_embeddings": )" +
         std::string(tied ? "true" : "false") + R"(, "torch_dtype": "float32",
    "bos_token_id": 1, "eos_token_id": 2})";
}

// Writes `tensors` (zeros, F32) into one safetensors file.
inline void write_tensors(const std::string& path, const std::vector<ExpectedTensor>& tensors) {
  std::vector<SafetensorsWriter::Entry> entries;
  size_t bytes = 0;
  for (const ExpectedTensor& t : tensors) {
    entries.push_back({t.name, DType::kF32, t.shape});
    size_t n = 4;
    for (int64_t d : t.shape) n *= size_t(d);
    bytes += n;
  }
  auto w = SafetensorsWriter::create(path, entries);
  REQUIRE_MESSAGE(w.ok(), w.error().to_string());
  std::vector<std::byte> zeros(bytes);
  REQUIRE(w->write(zeros).ok());
  REQUIRE(w->finish().ok());
}

// config.json + model.safetensors with exactly the tensors the config implies, after `edit`
// has changed the list.
template <typename Edit>
void write_small_model(const ScratchDir& dir, Edit edit, bool tied = true) {
  const std::string config = small_llama_config_json(tied);
  write_bytes(dir.file("config.json"), config);
  auto c = parse_model_config(config, "config.json");
  REQUIRE(c.ok());
  std::vector<ExpectedTensor> tensors = expected_tensors(*c);
  edit(tensors);
  write_tensors(dir.file("model.safetensors"), tensors);
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace tandem::testing
