// Values of the Jinja subset: Python's data model as far as chat templates see it. Lists, dicts
// and namespaces are shared by reference (like Python objects), so `set ns.x = ...` inside a loop
// is seen after it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tandem::jinja {

// A render or evaluation failure with a message for the template author. It never leaves
// src/chat: ChatTemplate turns it into a kTemplate Error. Evaluation is deeply recursive, and an
// exception keeps every expression node free of error plumbing.
struct TemplateError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] void fail(const std::string& message);

struct Value;
using List = std::vector<Value>;
// Insertion-ordered, string keys (JSON objects, namespace attributes, dict literals).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value value);
};
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  const Value* kwarg(std::string_view name) const;
};
using Function = std::function<Value(CallArgs&)>;

enum class Kind {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,
  kDict,
  kNamespace,
  kFunction
};

struct Value {
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;  // string value; for kUndefined the name that was missing (for messages)
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;  // kDict and kNamespace
  std::shared_ptr<Function> fn;
  bool tuple = false;  // a kList that Python would hold as a tuple: printed "(a, b)"

  static Value undefined(std::string name = "") {
    Value v;
    v.s = std::move(name);
    return v;
  }
  static Value none() { return with_kind(Kind::kNone); }
  static Value boolean(bool x) {
    Value v = with_kind(Kind::kBool);
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v = with_kind(Kind::kInt);
    v.i = x;
    return v;
  }
  static Value real(double x) {
    Value v = with_kind(Kind::kFloat);
    v.f = x;
    return v;
  }
  static Value string(std::string x) {
    Value v = with_kind(Kind::kString);
    v.s = std::move(x);
    return v;
  }
  static Value make_list(List items = {}) {
    Value v = with_kind(Kind::kList);
    v.list = std::make_shared<List>(std::move(items));
    return v;
  }
  static Value make_tuple(List items) {
    Value v = make_list(std::move(items));
    v.tuple = true;
    return v;
  }
  static Value make_dict(Dict d = {}) {
    Value v = with_kind(Kind::kDict);
    v.dict = std::make_shared<Dict>(std::move(d));
    return v;
  }
  static Value make_namespace(Dict d = {}) {
    Value v = make_dict(std::move(d));
    v.kind = Kind::kNamespace;
    return v;
  }
  static Value function(Function f) {
    Value v = with_kind(Kind::kFunction);
    v.fn = std::make_shared<Function>(std::move(f));
    return v;
  }

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_list() const { return kind == Kind::kList; }
  bool is_dict() const { return kind == Kind::kDict; }
  bool is_number() const {
    return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool;
  }
  double as_double() const { return kind == Kind::kFloat ? f : static_cast<double>(as_int()); }
  int64_t as_int() const { return kind == Kind::kBool ? (b ? 1 : 0) : i; }

 private:
  static Value with_kind(Kind k) {
    Value v;
    v.kind = k;
    return v;
  }
};

// Python's type name, for error messages ("'int' object ...").
std::string_view type_name(const Value& v);
// bool(v) in Python; Undefined is false.
bool truthy(const Value& v);
// str(v) in Python, which is what {{ v }} prints; Undefined prints nothing.
std::string to_str(const Value& v);
// repr(v) in Python (strings quoted), used inside printed lists and dicts.
std::string to_repr(const Value& v);
// Python's repr of a float: shortest round-trip digits, "1.0", "1e-05", "1e+16".
std::string float_repr(double x);
// a == b with Python semantics (1 == 1.0 == True; dicts ignore order).
bool equals(const Value& a, const Value& b);
// a < b for numbers, strings, lists; anything else is a TemplateError.
bool less(const Value& a, const Value& b);

// json.dumps(v, ensure_ascii=False, indent=indent, separators=..., sort_keys=...) as transformers'
// tojson filter calls it. indent < 0 means None (one line, ", " and ": ").
struct JsonStyle {
  int indent = -1;
  std::string item_sep;  // empty: Python's default for the indent
  std::string key_sep;
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonStyle& style);

Value from_json(const nlohmann::ordered_json& j);

}  // namespace tandem::jinja
