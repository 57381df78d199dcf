// Walks the syntax tree and writes the rendered text. Scoping follows Jinja: a for body (and a
// macro call) gets its own scope, so `set` inside a loop is invisible after it, which is why
// templates use namespace(); `if` does not open a scope.
#pragma once

#include <ctime>
#include <string>
#include <unordered_map>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"

namespace tandem::jinja {

// The error raise_exception() produces: its message is the template author's, passed on as is.
struct RaisedError : TemplateError {
  using TemplateError::TemplateError;
};

class Interpreter {
 public:
  // now: the instant strftime_now() formats (local time, like Python's datetime.now()).
  explicit Interpreter(std::time_t now);

  // Renders body with `globals` (a dict: the template context) in scope. Throws TemplateError.
  std::string render(const Body& body, const Value& globals);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using Scope = std::unordered_map<std::string, Value>;

  Flow exec_body(const Body& body);
  Flow exec(const Stmt& s);
  Flow exec_for(const Stmt& s);
  Value eval(const Expr& e);
  Value eval_binary(const Expr& e);
  Value eval_call(const Expr& e);
  CallArgs eval_args(const Expr& e);
  Value call_macro(const Stmt& macro, CallArgs& args);
  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value v) { scopes_.back()[name] = std::move(v); }
  void install_globals();

  std::time_t now_;
  std::vector<Scope> scopes_;
  std::string* out_ = nullptr;
};

}  // namespace tandem::jinja
