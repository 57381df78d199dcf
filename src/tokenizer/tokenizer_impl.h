// The parts of a loaded tokenizer, in pipeline order: added tokens -> normalizer -> pre-tokenizer
// -> BPE -> post-processor; decode is the ByteLevel decoder. Private to src/tokenizer/.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/regex_split.h"
#include "tokenizer/tokenizer.h"

namespace tandem::tokenizer {

// Lets string-keyed maps be searched with a string_view, without building a std::string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// Unicode normal forms a `normalizer` may ask for, applied in order.
enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };

// One stage of the pre-tokenizer: a regex split, or ByteLevel (optionally with a leading space
// and its own GPT-2 regex). ByteLevel's byte-to-character mapping itself is implicit: pieces
// stay raw bytes and the vocabulary is keyed by raw bytes.
struct PreTokenizerStep {
  std::optional<RegexSplit> split;
  bool add_prefix_space = false;
};

Result<TokenizerConfig> parse_tokenizer_config(std::string_view json_text);

// Everything a loaded tokenizer holds; Tokenizer::Impl is this.
struct Pipeline {
  TokenizerConfig config;
  std::vector<NormalForm> normalizer;
  std::vector<PreTokenizerStep> pre_tokenizer;
  std::optional<BpeModel> bpe;
  AddedTokenMatcher raw_added{{}};         // normalized == false: match the raw text
  AddedTokenMatcher normalized_added{{}};  // normalized == true: match after NFC etc.
  std::vector<int32_t> post_prefix;        // ids the post-processor puts before the text (bos)
  std::vector<int32_t> post_suffix;        // ... and after it (eos)
  bool has_template = false;               // tokenizer.json has a TemplateProcessing post-processor

  std::vector<std::string> id_bytes;  // [vocab_size] decoded bytes per id
  std::vector<uint8_t> id_special;    // [vocab_size] 1 for special added tokens
  TokenIdMap token_ids;               // tokenizer.json spelling -> id
  std::optional<int32_t> bos;
  std::optional<int32_t> eos;

  void encode_text(std::string_view text, std::vector<int32_t>& out) const;
  void encode_normalized(std::string_view text, std::vector<int32_t>& out) const;
};

Result<Pipeline> parse_tokenizer_json(std::string_view json_text);

}  // namespace tandem::tokenizer
