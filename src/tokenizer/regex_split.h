// The `Split` pre-tokenizer: a PCRE2 (UTF + UCP, JIT-compiled) pattern cutting text into pieces.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace tandem::tokenizer {

enum class SplitBehavior {
  kIsolated,  // every match and every gap between matches is a piece
  kRemoved,   // matches are dropped, gaps are pieces
};

class RegexSplit {
 public:
  // `pattern` is the tokenizer.json regex; `invert` swaps the roles of matches and gaps.
  static Result<RegexSplit> compile(const std::string& pattern, SplitBehavior behavior,
                                    bool invert);
  RegexSplit(RegexSplit&&) noexcept;
  RegexSplit& operator=(RegexSplit&&) noexcept;
  ~RegexSplit();

  // Appends [begin, end) byte ranges of `text`'s pieces (offset by `base`) to `out`.
  void split(std::string_view text, size_t base, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  RegexSplit();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::tokenizer
