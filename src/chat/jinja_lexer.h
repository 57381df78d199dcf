// Template source -> token stream, with Jinja's whitespace control applied to the text between
// tags the way transformers configures it (trim_blocks=True, lstrip_blocks=True,
// keep_trailing_newline=False). Comments are dropped here.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace tandem::jinja {

enum class Tok {
  kText,        // literal template text, whitespace control already applied
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text holds the decoded value
  kInt,
  kFloat,
  kOp,  // text holds the operator: + - * / // % ** ~ == != < <= > >= = . , : | ( ) [ ] { }
  kEof,
};

struct Token {
  Tok type;
  std::string text;
  int line;
};

Result<std::vector<Token>> lex(std::string_view source);

}  // namespace tandem::jinja
