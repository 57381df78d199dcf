#include "tokenizer/added_tokens.h"

#include <utf8proc.h>

#include <algorithm>

namespace tandem::tokenizer {
namespace {

size_t utf8_length(int32_t cp) {
  return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

// The code point that ends just before `end` / starts at `begin` (text is valid UTF-8).
int32_t code_point_before(std::string_view text, size_t end) {
  size_t begin = end - 1;
  while (begin > 0 && (uint8_t(text[begin]) & 0xC0) == 0x80) --begin;
  utf8proc_int32_t cp = -1;
  utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + begin),
                   utf8proc_ssize_t(end - begin), &cp);
  return cp;
}

int32_t code_point_at(std::string_view text, size_t begin) {
  utf8proc_int32_t cp = -1;
  utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + begin),
                   utf8proc_ssize_t(text.size() - begin), &cp);
  return cp;
}

// Rust's char::is_whitespace (Unicode White_Space), which HF's lstrip/rstrip use.
bool is_whitespace(int32_t cp) {
  if ((cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85) return true;
  if (cp < 0x80) return false;
  auto cat = utf8proc_category(cp);
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

// single_word's notion of a word character: alphanumeric (letters and numbers) or '_'.
bool is_word_char(int32_t cp) {
  if (cp == '_') return true;
  auto cat = utf8proc_category(cp);
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
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
      bool inside = (begin > 0 && is_word_char(code_point_before(text, begin))) ||
                    (end < text.size() && is_word_char(code_point_at(text, end)));
      if (inside) {
        pos = end - 1;  // like a skipped aho-corasick match: the scan resumes after it
        continue;
      }
    }
    if (t.lstrip) {
      while (begin > from) {
        int32_t cp = code_point_before(text, begin);
        if (!is_whitespace(cp)) break;
        begin -= utf8_length(cp);
      }
    }
    if (t.rstrip) {
      while (end < text.size()) {
        int32_t cp = code_point_at(text, end);
        if (!is_whitespace(cp)) break;
        end += utf8_length(cp);
      }
    }
    return AddedTokenMatch{begin, end, t.id};
  }
  return std::nullopt;
}

}  // namespace tandem::tokenizer
