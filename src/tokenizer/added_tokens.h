// Added/special tokens ("<|im_start|>") found in the text before any BPE: leftmost match first,
// longest on ties, with HF's lstrip/rstrip/single_word options.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::tokenizer {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;      // skipped by decode(skip_special_tokens)
  bool lstrip = false;       // the match swallows whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool single_word = false;  // only matches when not inside a word
  bool normalized = false;   // matched in the normalized text instead of the raw text
};

struct AddedTokenMatch {
  size_t begin;  // byte range in the searched text, including stripped whitespace
  size_t end;
  int32_t id;
};

class AddedTokenMatcher {
 public:
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);
  bool empty() const { return tokens_.empty(); }
  // Next match starting at or after `from`, not reaching back before `from`.
  std::optional<AddedTokenMatch> find(std::string_view text, size_t from) const;

 private:
  // A byte trie over the contents finds the longest token at a position in one walk; Llama 3
  // has 256 tokens all starting with "<|", which a list scan would try one by one.
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // (byte, node index)
    int32_t token = -1;                                 // index into tokens_ ending here
  };
  int32_t child(const Node& node, uint8_t byte) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;        // [0] is the root
  std::array<int32_t, 256> root_;  // [first byte] node index, -1 when no token starts with it
};

}  // namespace tandem::tokenizer
