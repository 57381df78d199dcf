// Tokens -> syntax tree. Everything outside the subset the chat templates use is a kTemplate
// error naming the construct and the line, at parse time, so a template either renders exactly or
// is refused when the model loads.
#pragma once

#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"
#include "core/error.h"

namespace tandem::jinja {

Result<Body> parse(const std::vector<Token>& tokens);

// Filters and tests the interpreter implements; the parser refuses others.
bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);

}  // namespace tandem::jinja
