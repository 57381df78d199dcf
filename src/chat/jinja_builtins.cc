#include "chat/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "chat/utf8_text.h"

namespace tandem::jinja {
namespace {

[[noreturn]] void undefined_error(const Value& v) {
  fail("'" + (v.s.empty() ? std::string("value") : v.s) + "' is undefined");
}

// Positional argument k, else keyword `name`, else nullptr.
const Value* arg(const CallArgs& args, size_t k, std::string_view name) {
  if (k < args.positional.size()) return &args.positional[k];
  return args.kwarg(name);
}

std::string string_arg(const CallArgs& args, size_t k, std::string_view name,
                       std::string_view where) {
  const Value* v = arg(args, k, name);
  if (!v || !v->is_string())
    fail(std::string(where) + ": argument '" + std::string(name) + "' must be a string");
  return v->s;
}

const std::string& need_string(const Value& v, std::string_view where) {
  if (v.is_undefined()) undefined_error(v);
  if (!v.is_string())
    fail(std::string(where) + " expects a string, got '" + std::string(type_name(v)) + "'");
  return v.s;
}

int64_t normalize_index(int64_t index, int64_t size) {
  return index < 0 ? index + size : index;
}

std::string python_replace(const std::string& s, const std::string& old, const std::string& repl,
                           int64_t count) {
  std::string out;
  int64_t done = 0;
  if (old.empty()) {  // Python inserts repl before every code point and at the end
    std::vector<size_t> offs = code_point_offsets(s);
    for (size_t k = 0; k + 1 < offs.size(); ++k) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      out.append(s, offs[k], offs[k + 1] - offs[k]);
    }
    if (count < 0 || done < count) out += repl;
    return out;
  }
  size_t pos = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(old, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += repl;
    pos = hit + old.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

// Attribute path "a.b.c" as selectattr/map use it.
Value attr_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = numeric && cur.is_list() ? get_item(cur, Value::integer(std::stoll(part)))
                                   : get_attr(cur, part);
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// Runs `test` (default: truthiness) with the remaining positional args from `first_extra` on.
bool run_test(const CallArgs& args, size_t test_pos, const Value& v) {
  if (test_pos >= args.positional.size()) return truthy(v);
  const Value& name = args.positional[test_pos];
  if (!name.is_string()) fail("select/reject: the test name must be a string");
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + static_cast<long>(test_pos) + 1,
                         args.positional.end());
  return apply_test(name.s, v, rest);
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) undefined_error(obj);
  if (obj.kind == Kind::kDict || obj.kind == Kind::kNamespace) {
    if (const Value* found = obj.dict->find(name)) return *found;
  }
  return Value::undefined(name);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) undefined_error(obj);
  if (obj.kind == Kind::kDict || obj.kind == Kind::kNamespace) {
    if (key.is_string())
      if (const Value* found = obj.dict->find(key.s)) return *found;
    return Value::undefined(key.is_string() ? key.s : to_str(key));
  }
  if ((obj.is_list() || obj.is_string()) && (key.kind == Kind::kInt || key.kind == Kind::kBool)) {
    if (obj.is_list()) {
      int64_t size = static_cast<int64_t>(obj.list->size());
      int64_t k = normalize_index(key.as_int(), size);
      if (k < 0 || k >= size) return Value::undefined("[" + std::to_string(key.as_int()) + "]");
      return (*obj.list)[static_cast<size_t>(k)];
    }
    std::vector<size_t> offs = code_point_offsets(obj.s);
    int64_t size = static_cast<int64_t>(offs.size()) - 1;
    int64_t k = normalize_index(key.as_int(), size);
    if (k < 0 || k >= size) return Value::undefined("[" + std::to_string(key.as_int()) + "]");
    size_t u = static_cast<size_t>(k);
    return Value::string(obj.s.substr(offs[u], offs[u + 1] - offs[u]));
  }
  if (key.is_string()) return get_attr(obj, key.s);
  return Value::undefined(to_str(key));
}

Value get_slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (obj.is_undefined()) undefined_error(obj);
  if (!obj.is_list() && !obj.is_string())
    fail("'" + std::string(type_name(obj)) + "' object is not subscriptable");
  auto bound = [](const Value& v, std::string_view what) -> const Value* {
    if (v.is_undefined() || v.is_none()) return nullptr;
    if (v.kind != Kind::kInt && v.kind != Kind::kBool)
      fail("slice " + std::string(what) + " must be an integer");
    return &v;
  };
  std::vector<size_t> offs;
  int64_t size;
  if (obj.is_list()) {
    size = static_cast<int64_t>(obj.list->size());
  } else {
    offs = code_point_offsets(obj.s);
    size = static_cast<int64_t>(offs.size()) - 1;
  }
  const Value* step_p = bound(step_v, "step");
  int64_t step = step_p ? step_p->as_int() : 1;
  if (step == 0) fail("slice step cannot be zero");
  // Python's PySlice_AdjustIndices.
  auto adjust = [&](const Value* v, int64_t dflt) {
    if (!v) return dflt;
    int64_t k = v->as_int();
    if (k < 0) {
      k += size;
      if (k < 0) k = step < 0 ? -1 : 0;
    } else if (k >= size) {
      k = step < 0 ? size - 1 : size;
    }
    return k;
  };
  int64_t start = adjust(bound(start_v, "start"), step < 0 ? size - 1 : 0);
  int64_t stop = adjust(bound(stop_v, "stop"), step < 0 ? -1 : size);
  List items;
  std::string text;
  for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
    size_t u = static_cast<size_t>(k);
    if (obj.is_list())
      items.push_back((*obj.list)[u]);
    else
      text.append(obj.s, offs[u], offs[u + 1] - offs[u]);
  }
  return obj.is_list() ? Value::make_list(std::move(items)) : Value::string(std::move(text));
}

List iterate(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
      return {};
    case Kind::kList:
      return *v.list;
    case Kind::kDict: {
      List keys;
      for (const auto& [k, x] : v.dict->items) keys.push_back(Value::string(k));
      return keys;
    }
    case Kind::kString: {
      List chars;
      std::vector<size_t> offs = code_point_offsets(v.s);
      for (size_t k = 0; k + 1 < offs.size(); ++k)
        chars.push_back(Value::string(v.s.substr(offs[k], offs[k + 1] - offs[k])));
      return chars;
    }
    default:
      fail("'" + std::string(type_name(v)) + "' object is not iterable");
  }
}

int64_t length_of(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
      return 0;
    case Kind::kString:
      return static_cast<int64_t>(code_point_count(v.s));
    case Kind::kList:
      return static_cast<int64_t>(v.list->size());
    case Kind::kDict:
      return static_cast<int64_t>(v.dict->items.size());
    default:
      fail("object of type '" + std::string(type_name(v)) + "' has no len()");
  }
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Kind::kUndefined:
      return false;
    case Kind::kString:
      if (!item.is_string())
        fail("'in <string>' requires string as left operand, not " + std::string(type_name(item)));
      return container.s.find(item.s) != std::string::npos;
    case Kind::kList:
      return std::any_of(container.list->begin(), container.list->end(),
                         [&](const Value& x) { return equals(x, item); });
    case Kind::kDict:
      return item.is_string() && container.dict->find(item.s) != nullptr;
    default:
      fail("argument of type '" + std::string(type_name(container)) + "' is not iterable");
  }
}

bool call_method(const Value& obj, const std::string& name, CallArgs& args, Value& result) {
  if (obj.is_string()) {
    const std::string& s = obj.s;
    const std::string where = "str." + name + "()";
    if (name == "startswith" || name == "endswith") {
      const Value* p = arg(args, 0, "prefix");
      if (!p) fail(where + " takes a prefix");
      List candidates = p->is_list() ? *p->list : List{*p};
      bool hit = false;
      for (const Value& c : candidates) {
        const std::string& x = need_string(c, where);
        hit = hit || (x.size() <= s.size() &&
                      (name == "startswith" ? s.compare(0, x.size(), x) == 0
                                            : s.compare(s.size() - x.size(), x.size(), x) == 0));
      }
      result = Value::boolean(hit);
    } else if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const Value* chars = arg(args, 0, "chars");
      std::string set;
      bool has_set = chars && !chars->is_none();
      if (has_set) set = need_string(*chars, where);
      result = Value::string(
          python_strip(s, has_set ? &set : nullptr, name != "rstrip", name != "lstrip"));
    } else if (name == "split") {
      const Value* sep = arg(args, 0, "sep");
      const Value* maxsplit = arg(args, 1, "maxsplit");
      std::string sep_s;
      bool has_sep = sep && !sep->is_none();
      if (has_sep) {
        sep_s = need_string(*sep, where);
        if (sep_s.empty()) fail("str.split(): empty separator");
      }
      List parts;
      for (auto& p :
           python_split(s, has_sep ? &sep_s : nullptr, maxsplit ? maxsplit->as_int() : -1))
        parts.push_back(Value::string(std::move(p)));
      result = Value::make_list(std::move(parts));
    } else if (name == "replace") {
      const Value* count = arg(args, 2, "count");
      result = Value::string(python_replace(s, string_arg(args, 0, "old", where),
                                            string_arg(args, 1, "new", where),
                                            count ? count->as_int() : -1));
    } else if (name == "upper") {
      result = Value::string(python_upper(s));
    } else if (name == "lower") {
      result = Value::string(python_lower(s));
    } else if (name == "title") {
      result = Value::string(python_title(s));
    } else if (name == "capitalize") {
      result = Value::string(python_capitalize(s));
    } else if (name == "find") {
      size_t hit = s.find(string_arg(args, 0, "sub", where));
      result = Value::integer(
          hit == std::string::npos ? -1 : static_cast<int64_t>(code_point_count(s.substr(0, hit))));
    } else if (name == "count") {
      std::string sub = string_arg(args, 0, "sub", where);
      int64_t n = 0;
      if (sub.empty()) {
        n = static_cast<int64_t>(code_point_count(s)) + 1;
      } else {
        for (size_t pos = s.find(sub); pos != std::string::npos;
             pos = s.find(sub, pos + sub.size()))
          ++n;
      }
      result = Value::integer(n);
    } else if (name == "join") {
      const Value* items = arg(args, 0, "iterable");
      if (!items) fail(where + " takes an iterable");
      std::string out;
      bool first = true;
      for (const Value& x : iterate(*items)) {
        out += (first ? "" : s) + need_string(x, where);
        first = false;
      }
      result = Value::string(std::move(out));
    } else {
      return false;
    }
    return true;
  }
  if (obj.is_dict()) {
    if (name == "items" || name == "keys" || name == "values") {
      List out;
      for (const auto& [k, v] : obj.dict->items) {
        if (name == "items")
          out.push_back(Value::make_tuple({Value::string(k), v}));
        else if (name == "keys")
          out.push_back(Value::string(k));
        else
          out.push_back(v);
      }
      result = Value::make_list(std::move(out));
    } else if (name == "get") {
      const Value* key = arg(args, 0, "key");
      const Value* dflt = arg(args, 1, "default");
      if (!key) fail("dict.get() takes a key");
      const Value* found = key->is_string() ? obj.dict->find(key->s) : nullptr;
      result = found ? *found : (dflt ? *dflt : Value::none());
    } else {
      return false;
    }
    return true;
  }
  return false;
}

bool apply_test(const std::string& name, const Value& v, CallArgs& args) {
  auto operand = [&]() -> const Value& {
    if (args.positional.empty()) fail("test '" + name + "' takes an argument");
    return args.positional[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "sequence") return v.is_list() || v.is_string() || v.is_dict();
  if (name == "iterable") return v.is_list() || v.is_string() || v.is_dict() || v.is_undefined();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == Kind::kInt;
  if (name == "float") return v.kind == Kind::kFloat;
  if (name == "boolean") return v.kind == Kind::kBool;
  if (name == "true") return v.kind == Kind::kBool && v.b;
  if (name == "false") return v.kind == Kind::kBool && !v.b;
  if (name == "callable") return v.kind == Kind::kFunction;
  if (name == "equalto" || name == "eq" || name == "==") return equals(v, operand());
  if (name == "ne" || name == "!=") return !equals(v, operand());
  if (name == "in") return contains(operand(), v);
  if (name == "lower") return v.is_string() && python_lower(v.s) == v.s;
  if (name == "upper") return v.is_string() && python_upper(v.s) == v.s;
  if (name == "sameas") {
    const Value& o = operand();
    if (v.kind != o.kind) return false;
    if (v.is_list()) return v.list == o.list;
    if (v.is_dict() || v.kind == Kind::kNamespace) return v.dict == o.dict;
    return equals(v, o);
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (v.kind != Kind::kInt && v.kind != Kind::kBool) fail("test '" + name + "' needs an integer");
    int64_t x = v.as_int();
    if (name == "odd") return x % 2 != 0;
    if (name == "even") return x % 2 == 0;
    int64_t d = operand().as_int();
    if (d == 0) fail("divisibleby 0");
    return x % d == 0;
  }
  fail("unsupported test '" + name + "'");
}

Value apply_filter(const std::string& name, const Value& v, CallArgs& args) {
  const std::string where = "filter '" + name + "'";
  if (name == "length" || name == "count") return Value::integer(length_of(v));
  if (name == "safe") return v;
  if (name == "string") return Value::string(to_str(v));
  if (name == "trim") {
    if (v.is_undefined()) undefined_error(v);
    const Value* chars = arg(args, 0, "chars");
    std::string set;
    bool has_set = chars && !chars->is_none();
    if (has_set) set = need_string(*chars, where);
    return Value::string(python_strip(to_str(v), has_set ? &set : nullptr, true, true));
  }
  if (name == "upper") return Value::string(python_upper(to_str(v)));
  if (name == "lower") return Value::string(python_lower(to_str(v)));
  if (name == "capitalize") return Value::string(python_capitalize(to_str(v)));
  if (name == "title") return Value::string(python_title(to_str(v)));
  if (name == "tojson") {
    JsonStyle style;
    if (const Value* ea = arg(args, 0, "ensure_ascii"); ea && truthy(*ea))
      fail("tojson(ensure_ascii=true) is not supported");
    if (const Value* indent = arg(args, 1, "indent"); indent && !indent->is_none()) {
      if (indent->kind != Kind::kInt) fail("tojson: indent must be an integer");
      style.indent = static_cast<int>(std::max<int64_t>(0, indent->i));
    }
    if (const Value* seps = arg(args, 2, "separators"); seps && !seps->is_none()) {
      if (!seps->is_list() || seps->list->size() != 2 || !(*seps->list)[0].is_string() ||
          !(*seps->list)[1].is_string())
        fail("tojson: separators must be two strings");
      style.item_sep = (*seps->list)[0].s;
      style.key_sep = (*seps->list)[1].s;
      if (style.item_sep.empty() || style.key_sep.empty())
        fail("tojson: empty separators are not supported");
    }
    if (const Value* sk = arg(args, 3, "sort_keys")) style.sort_keys = truthy(*sk);
    return Value::string(to_json(v, style));
  }
  if (name == "default" || name == "d") {
    const Value* dflt = arg(args, 0, "default_value");
    const Value* boolean = arg(args, 1, "boolean");
    bool use_default = v.is_undefined() || (boolean && truthy(*boolean) && !truthy(v));
    if (!use_default) return v;
    return dflt ? *dflt : Value::string("");
  }
  if (name == "join") {
    const Value* sep = arg(args, 0, "d");
    const Value* attribute = arg(args, 1, "attribute");
    std::string out, sep_s = sep ? to_str(*sep) : "";
    bool first = true;
    for (const Value& x : iterate(v)) {
      out += (first ? "" : sep_s) + to_str(attribute ? attr_path(x, to_str(*attribute)) : x);
      first = false;
    }
    return Value::string(std::move(out));
  }
  if (name == "first" || name == "last") {
    List items = iterate(v);
    if (items.empty()) return Value::undefined(name);
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value::make_list(iterate(v));
  if (name == "unique") {
    List out;
    for (const Value& x : iterate(v))
      if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return equals(x, y); }))
        out.push_back(x);
    return Value::make_list(std::move(out));
  }
  if (name == "replace") {
    const Value* count = arg(args, 2, "count");
    return Value::string(python_replace(to_str(v), string_arg(args, 0, "old", where),
                                        string_arg(args, 1, "new", where),
                                        count && !count->is_none() ? count->as_int() : -1));
  }
  if (name == "int" || name == "float") {
    const Value* dflt = arg(args, 0, "default");
    Value fallback = dflt ? *dflt : (name == "int" ? Value::integer(0) : Value::real(0));
    double x = 0;
    if (v.is_number()) {
      x = v.as_double();
      if (name == "int" && v.kind != Kind::kFloat) return Value::integer(v.as_int());
    } else if (v.is_string()) {
      std::string t = python_strip(v.s, nullptr, true, true);
      // strtod also reads hex ("0x1A"), which Python's int() and float() refuse.
      if (t.find_first_of("xXpP") != std::string::npos) return fallback;
      char* end = nullptr;
      x = std::strtod(t.c_str(), &end);
      if (t.empty() || end != t.c_str() + t.size()) return fallback;
    } else {
      return fallback;
    }
    return name == "int" ? Value::integer(static_cast<int64_t>(std::trunc(x))) : Value::real(x);
  }
  if (name == "abs") {
    if (v.kind == Kind::kFloat) return Value::real(std::fabs(v.f));
    if (v.is_number()) return Value::integer(std::llabs(v.as_int()));
    fail("bad operand type for abs(): '" + std::string(type_name(v)) + "'");
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::make_list();
    if (!v.is_dict())
      fail("filter 'items' expects a mapping, got '" + std::string(type_name(v)) + "'");
    List out;
    for (const auto& [k, x] : v.dict->items)
      out.push_back(Value::make_tuple({Value::string(k), x}));
    return Value::make_list(std::move(out));
  }
  if (name == "selectattr" || name == "rejectattr") {
    if (args.positional.empty() || !args.positional[0].is_string())
      fail(where + " takes an attribute name");
    bool keep_if = name == "selectattr";
    List out;
    for (const Value& x : iterate(v))
      if (run_test(args, 1, attr_path(x, args.positional[0].s)) == keep_if) out.push_back(x);
    return Value::make_list(std::move(out));
  }
  if (name == "select" || name == "reject") {
    bool keep_if = name == "select";
    List out;
    for (const Value& x : iterate(v))
      if (run_test(args, 0, x) == keep_if) out.push_back(x);
    return Value::make_list(std::move(out));
  }
  if (name == "map") {
    List out;
    if (const Value* attribute = args.kwarg("attribute")) {
      const Value* dflt = args.kwarg("default");
      for (const Value& x : iterate(v)) {
        Value got = attr_path(x, to_str(*attribute));
        out.push_back(got.is_undefined() && dflt ? *dflt : got);
      }
    } else {
      if (args.positional.empty() || !args.positional[0].is_string())
        fail("filter 'map' takes a filter name or attribute=");
      std::string filter = args.positional[0].s;
      if (filter == "map") fail("filter 'map' cannot map itself");
      CallArgs rest;
      rest.positional.assign(args.positional.begin() + 1, args.positional.end());
      rest.keyword = args.keyword;
      for (const Value& x : iterate(v)) out.push_back(apply_filter(filter, x, rest));
    }
    return Value::make_list(std::move(out));
  }
  fail("unsupported filter '" + name + "'");
}

}  // namespace tandem::jinja
