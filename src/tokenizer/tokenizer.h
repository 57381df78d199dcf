// Byte-level BPE tokenizer read from a Hugging Face tokenizer.json (+ tokenizer_config.json),
// giving exactly the ids HF `tokenizers` gives for Qwen2/Qwen2.5/Qwen3 and Llama 3.x.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace tandem {

// What tokenizer_config.json says that matters at run time.
struct TokenizerConfig {
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> pad_token;
  bool add_bos_token = false;  // prepend bos when encoding with special tokens
  bool add_eos_token = false;
  std::string chat_template;     // empty when the model ships none
  int64_t model_max_length = 0;  // 0 = unknown
};

class Tokenizer {
 public:
  // Reads DIR/tokenizer.json and, when present, DIR/tokenizer_config.json.
  static Result<Tokenizer> load(const std::string& model_dir);
  static Result<Tokenizer> from_json(std::string_view tokenizer_json,
                                     std::string_view tokenizer_config_json);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // add_special_tokens: apply add_bos/add_eos (the post-processor). Literal special-token strings
  // in the text ("<|im_start|>") are always matched as their tokens, as HF does.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  // Raw bytes a token stands for (after the ByteLevel mapping is undone); special/added tokens
  // give their content. Empty for ids outside the vocabulary.
  std::string_view token_bytes(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  bool is_special(int32_t id) const;

  // Number of ids the tokenizer can produce (max id + 1), including added tokens. Model
  // embedding rows past this are padding and never sampled.
  int32_t vocab_size() const;
  const TokenizerConfig& config() const;
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;

 private:
  Tokenizer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Streaming decode: push ids one at a time, get the text that became final. Never emits a
// broken UTF-8 sequence: bytes of an incomplete character wait for the next token.
class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens);
  std::string push(int32_t id);
  // What is left at the end of the stream (an incomplete sequence becomes U+FFFD, as HF does).
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;  // bytes of a UTF-8 character not yet complete
};

}  // namespace tandem
