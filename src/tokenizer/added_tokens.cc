#include "tokenizer/added_tokens.h"

#include <algorithm>

namespace tandem::tokenizer {
namespace {

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Word characters for single_word: ASCII alphanumerics, '_' and any non-ASCII byte (letters of
// other scripts); a coarse but conservative reading of HF's is_alphanumeric boundary check.
bool is_word_byte(char c) {
  auto u = uint8_t(c);
  return u >= 0x80 || (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') ||
         u == '_';
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  std::erase_if(tokens_, [](const AddedToken& t) { return t.content.empty(); });
  root_.fill(-1);
  nodes_.emplace_back();
  for (int32_t i = 0; i < int32_t(tokens_.size()); ++i) {
    int32_t node = 0;
    for (char c : tokens_[size_t(i)].content) {
      int32_t next = child(nodes_[size_t(node)], uint8_t(c));
      if (next < 0) {
        next = int32_t(nodes_.size());
        nodes_[size_t(node)].children.emplace_back(uint8_t(c), next);
        if (node == 0) root_[uint8_t(c)] = next;
        nodes_.emplace_back();
      }
      node = next;
    }
    if (nodes_[size_t(node)].token < 0) nodes_[size_t(node)].token = i;  // first of duplicates
  }
}

int32_t AddedTokenMatcher::child(const Node& node, uint8_t byte) const {
  for (const auto& [b, idx] : node.children) {
    if (b == byte) return idx;
  }
  return -1;
}

std::optional<AddedTokenMatch> AddedTokenMatcher::find(std::string_view text, size_t from) const {
  for (size_t pos = from; pos < text.size(); ++pos) {
    int32_t node = root_[uint8_t(text[pos])];
    if (node < 0) continue;
    int32_t best = -1;  // longest token starting at pos
    size_t best_end = pos;
    for (size_t i = pos + 1;; ++i) {
      if (nodes_[size_t(node)].token >= 0) {
        best = nodes_[size_t(node)].token;
        best_end = i;
      }
      if (i >= text.size()) break;
      node = child(nodes_[size_t(node)], uint8_t(text[i]));
      if (node < 0) break;
    }
    if (best < 0) continue;
    const AddedToken& t = tokens_[size_t(best)];
    size_t begin = pos, end = best_end;
    if (t.single_word) {
      bool inside = (begin > 0 && is_word_byte(text[begin - 1])) ||
                    (end < text.size() && is_word_byte(text[end]));
      if (inside) {
        pos = end - 1;  // like a skipped aho-corasick match: the scan resumes after it
        continue;
      }
    }
    if (t.lstrip) {
      while (begin > from && is_ascii_space(text[begin - 1])) --begin;
    }
    if (t.rstrip) {
      while (end < text.size() && is_ascii_space(text[end])) ++end;
    }
    return AddedTokenMatch{begin, end, t.id};
  }
  return std::nullopt;
}

}  // namespace tandem::tokenizer
