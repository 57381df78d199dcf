#include "chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace tandem::jinja {

void fail(const std::string& message) {
  throw TemplateError(message);
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(const std::string& key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

const Value* CallArgs::kwarg(std::string_view name) const {
  for (const auto& [k, v] : keyword)
    if (k == name) return &v;
  return nullptr;
}

std::string_view type_name(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kFunction:
      return "function";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return v.b;
    case Kind::kInt:
      return v.i != 0;
    case Kind::kFloat:
      return v.f != 0;
    case Kind::kString:
      return !v.s.empty();
    case Kind::kList:
      return !v.list->empty();
    case Kind::kDict:
      return !v.dict->items.empty();
    case Kind::kNamespace:
    case Kind::kFunction:
      return true;
  }
  return false;
}

std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  // Shortest round-trip digits in scientific form, then laid out the way Python's repr does:
  // positional for 1e-4 <= |x| < 1e16, else d.ddde+XX.
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, end);
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e = sci.find('e');
  int exp10 = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (char c : sci.substr(0, e))
    if (c != '.') digits += c;
  std::string out = negative ? "-" : "";
  if (exp10 < -4 || exp10 >= 16) {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1, std::string::npos);
    }
    char ebuf[16];
    std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    return out + ebuf;
  }
  if (exp10 < 0) return out + "0." + std::string(static_cast<size_t>(-exp10 - 1), '0') + digits;
  size_t int_len = static_cast<size_t>(exp10) + 1;
  if (digits.size() <= int_len)
    return out + digits + std::string(int_len - digits.size(), '0') + ".0";
  return out + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

namespace {

std::string quote_python(const std::string& s) {
  // Python prefers single quotes unless the string has ' and no ".
  char q = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == static_cast<unsigned char>(q))
      out += std::string("\\") + q;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + q;
}

}  // namespace

std::string to_repr(const Value& v) {
  switch (v.kind) {
    case Kind::kString:
      return quote_python(v.s);
    case Kind::kList: {
      std::string out = v.tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) out += (k ? ", " : "") + to_repr((*v.list)[k]);
      if (v.tuple) return out + (v.list->size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [key, val] : v.dict->items) {
        out += (first ? "" : ", ") + quote_python(key) + ": " + to_repr(val);
        first = false;
      }
      return out + "}";
    }
    default:
      return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return v.b ? "True" : "False";
    case Kind::kInt:
      return std::to_string(v.i);
    case Kind::kFloat:
      return float_repr(v.f);
    case Kind::kString:
      return v.s;
    case Kind::kList:
    case Kind::kDict:
      return to_repr(v);
    case Kind::kNamespace:
      return "<Namespace " + to_repr(Value::make_dict(*v.dict)) + ">";
    case Kind::kFunction:
      return "<function>";
  }
  return "";
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Kind::kFloat || b.kind == Kind::kFloat) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return a.s == b.s;
    case Kind::kList:
      return a.list->size() == b.list->size() &&
             std::equal(a.list->begin(), a.list->end(), b.list->begin(), equals);
    case Kind::kDict:
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, v] : a.dict->items) {
        const Value* other = b.dict->find(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    case Kind::kNamespace:
      return a.dict == b.dict;
    case Kind::kFunction:
      return a.fn == b.fn;
    default:
      return false;
  }
}

bool less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Kind::kFloat || b.kind == Kind::kFloat) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.s < b.s;  // UTF-8 byte order is code point order
  if (a.is_list() && b.is_list()) {
    const List &x = *a.list, &y = *b.list;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (less(x[k], y[k])) return true;
      if (less(y[k], x[k])) return false;
    }
    return x.size() < y.size();
  }
  fail("'<' not supported between instances of '" + std::string(type_name(a)) + "' and '" +
       std::string(type_name(b)) + "'");
}

namespace {

void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void json_value(const Value& v, const JsonStyle& st, int depth, std::string& out) {
  std::string item_sep = !st.item_sep.empty() ? st.item_sep : (st.indent >= 0 ? "," : ", ");
  std::string key_sep = !st.key_sep.empty() ? st.key_sep : ": ";
  auto newline = [&](int level) {
    if (st.indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(st.indent * level), ' ');
  };
  switch (v.kind) {
    case Kind::kNone:
      out += "null";
      return;
    case Kind::kBool:
      out += v.b ? "true" : "false";
      return;
    case Kind::kInt:
      out += std::to_string(v.i);
      return;
    case Kind::kFloat:
      if (std::isnan(v.f))
        out += "NaN";
      else if (std::isinf(v.f))
        out += v.f > 0 ? "Infinity" : "-Infinity";
      else
        out += float_repr(v.f);
      return;
    case Kind::kString:
      json_string(v.s, out);
      return;
    case Kind::kList: {
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += item_sep;
        newline(depth + 1);
        json_value((*v.list)[k], st, depth + 1, out);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Kind::kDict: {
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& item : v.dict->items) items.push_back(&item);
      if (st.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto* x, auto* y) { return x->first < y->first; });
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += item_sep;
        newline(depth + 1);
        json_string(items[k]->first, out);
        out += key_sep;
        json_value(items[k]->second, st, depth + 1, out);
      }
      newline(depth);
      out += '}';
      return;
    }
    default:
      fail("Object of type " + std::string(type_name(v)) + " is not JSON serializable");
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonStyle& style) {
  std::string out;
  json_value(v, style, 0, out);
  return out;
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float:
      return Value::real(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      for (const auto& x : j) items.push_back(from_json(x));
      return Value::make_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (const auto& [k, x] : j.items()) d.items.emplace_back(k, from_json(x));
      return Value::make_dict(std::move(d));
    }
    default:
      return Value::none();  // binary and discarded values do not come from JSON text
  }
}

}  // namespace tandem::jinja
