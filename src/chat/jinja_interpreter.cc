#include "chat/jinja_interpreter.h"

#include <cmath>

#include "chat/jinja_builtins.h"
#include "core/check.h"

namespace tandem::jinja {
namespace {

// Marks an error that already names its template line, so outer statements don't add theirs.
struct LocatedError : TemplateError {
  using TemplateError::TemplateError;
};

[[noreturn]] void operand_error(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) {
    const Value& u = a.is_undefined() ? a : b;
    fail("'" + (u.s.empty() ? std::string("value") : u.s) + "' is undefined");
  }
  fail("unsupported operand type(s) for " + op + ": '" + std::string(type_name(a)) + "' and '" +
       std::string(type_name(b)) + "'");
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value::string(a.s + b.s);
    if (a.is_list() && b.is_list()) {
      List out = *a.list;
      out.insert(out.end(), b.list->begin(), b.list->end());
      return Value::make_list(std::move(out));
    }
  }
  if (op == "*") {
    const Value* seq =
        a.is_string() || a.is_list() ? &a : (b.is_string() || b.is_list() ? &b : nullptr);
    const Value* times = seq == &a ? &b : &a;
    if (seq && (times->kind == Kind::kInt || times->kind == Kind::kBool)) {
      int64_t n = std::max<int64_t>(0, times->as_int());
      if (seq->is_string()) {
        std::string out;
        for (int64_t k = 0; k < n; ++k) out += seq->s;
        return Value::string(std::move(out));
      }
      List out;
      for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq->list->begin(), seq->list->end());
      return Value::make_list(std::move(out));
    }
  }
  if (!a.is_number() || !b.is_number()) operand_error(op, a, b);
  bool real = a.kind == Kind::kFloat || b.kind == Kind::kFloat;
  if (op == "/") {
    if (b.as_double() == 0) fail("division by zero");
    return Value::real(a.as_double() / b.as_double());
  }
  if (real) {
    double x = a.as_double(), y = b.as_double();
    if (op == "+") return Value::real(x + y);
    if (op == "-") return Value::real(x - y);
    if (op == "*") return Value::real(x * y);
    if (op == "**") return Value::real(std::pow(x, y));
    if (y == 0) fail("float division by zero");
    if (op == "//") return Value::real(std::floor(x / y));
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value::real(m);
  }
  int64_t x = a.as_int(), y = b.as_int();
  if (op == "+") return Value::integer(x + y);
  if (op == "-") return Value::integer(x - y);
  if (op == "*") return Value::integer(x * y);
  if (op == "**") {
    if (y < 0) return Value::real(std::pow(static_cast<double>(x), static_cast<double>(y)));
    int64_t r = 1;
    for (int64_t k = 0; k < y; ++k) r *= x;
    return Value::integer(r);
  }
  if (y == 0) fail("integer division or modulo by zero");
  if (op == "//") return Value::integer(floor_div(x, y));
  return Value::integer(x - floor_div(x, y) * y);
}

}  // namespace

Interpreter::Interpreter(std::time_t now) : now_(now) {}

void Interpreter::install_globals() {
  Scope& g = scopes_.front();
  g["raise_exception"] = Value::function([](CallArgs& args) -> Value {
    throw RaisedError(args.positional.empty() ? std::string("raise_exception() called")
                                              : to_str(args.positional[0]));
  });
  std::time_t now = now_;
  g["strftime_now"] = Value::function([now](CallArgs& args) -> Value {
    if (args.positional.empty() || !args.positional[0].is_string())
      fail("strftime_now() takes a format string");
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[256];
    size_t n = std::strftime(buf, sizeof buf, args.positional[0].s.c_str(), &tm);
    return Value::string(std::string(buf, n));
  });
  g["namespace"] = Value::function([](CallArgs& args) {
    Dict d;
    for (const Value& p : args.positional) {
      if (!p.is_dict()) fail("namespace() takes a mapping or keyword arguments");
      for (const auto& [k, v] : p.dict->items) d.set(k, v);
    }
    for (const auto& [k, v] : args.keyword) d.set(k, v);
    return Value::make_namespace(std::move(d));
  });
  g["dict"] = Value::function([](CallArgs& args) {
    Dict d;
    for (const auto& [k, v] : args.keyword) d.set(k, v);
    return Value::make_dict(std::move(d));
  });
  g["range"] = Value::function([](CallArgs& args) {
    auto& p = args.positional;
    for (const Value& x : p)
      if (x.kind != Kind::kInt) fail("range() takes integers");
    if (p.empty() || p.size() > 3) fail("range() takes 1 to 3 arguments");
    int64_t start = p.size() > 1 ? p[0].i : 0, stop = p.size() > 1 ? p[1].i : p[0].i;
    int64_t step = p.size() > 2 ? p[2].i : 1;
    if (step == 0) fail("range() step must not be zero");
    if ((stop - start) / step > 100000) fail("range() too long");
    List out;
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step)
      out.push_back(Value::integer(k));
    return Value::make_list(std::move(out));
  });
}

std::string Interpreter::render(const Body& body, const Value& globals) {
  scopes_.assign(1, Scope{});
  install_globals();
  if (globals.is_dict())
    for (const auto& [k, v] : globals.dict->items) scopes_.front()[k] = v;
  std::string out;
  out_ = &out;
  exec_body(body);
  return out;
}

Interpreter::Flow Interpreter::exec_body(const Body& body) {
  for (const auto& s : body) {
    Flow f = exec(*s);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s) {
  try {
    switch (s.kind) {
      case Stmt::Kind::kText:
        *out_ += s.text;
        return Flow::kNormal;
      case Stmt::Kind::kOutput:
        *out_ += to_str(eval(*s.expr));
        return Flow::kNormal;
      case Stmt::Kind::kIf:
        for (size_t k = 0; k < s.conds.size(); ++k)
          if (truthy(eval(*s.conds[k]))) return exec_body(s.bodies[k]);
        if (s.bodies.size() > s.conds.size()) return exec_body(s.bodies.back());
        return Flow::kNormal;
      case Stmt::Kind::kFor:
        return exec_for(s);
      case Stmt::Kind::kSet: {
        Value v;
        if (s.expr) {
          v = eval(*s.expr);
        } else {
          std::string captured;
          std::string* saved = out_;
          out_ = &captured;
          exec_body(s.bodies[0]);
          out_ = saved;
          v = Value::string(std::move(captured));
        }
        if (s.attr.empty()) {
          assign(s.targets[0], std::move(v));
        } else {
          Value ns = lookup(s.targets[0]);
          if (ns.kind != Kind::kNamespace)
            fail("cannot assign attribute on non-namespace object '" + s.targets[0] + "'");
          ns.dict->set(s.attr, std::move(v));
        }
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro: {
        const Stmt* macro = &s;
        assign(s.text,
               Value::function([this, macro](CallArgs& args) { return call_macro(*macro, args); }));
        return Flow::kNormal;
      }
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
    }
  } catch (const RaisedError&) {
    throw;
  } catch (const LocatedError&) {
    throw;
  } catch (const TemplateError& e) {
    throw LocatedError("chat template line " + std::to_string(s.line) + ": " + e.what());
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s) {
  List items = iterate(eval(*s.expr));
  // Each iteration starts from the enclosing scope: a `set` in one iteration is not seen by the
  // next (jinja2 renders "{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}..." as
  // "23"), which is why templates carry state across iterations in a namespace().
  scopes_.emplace_back();
  auto bind = [&](const Value& item) {
    if (s.targets.size() == 1) {
      assign(s.targets[0], item);
      return;
    }
    if (!item.is_list() || item.list->size() != s.targets.size())
      fail("cannot unpack " + std::string(type_name(item)) + " into " +
           std::to_string(s.targets.size()) + " loop variables");
    for (size_t k = 0; k < s.targets.size(); ++k) assign(s.targets[k], (*item.list)[k]);
  };
  if (s.cond) {  // `for x in xs if cond` filters before loop.index and loop.length are counted
    List kept;
    for (const Value& item : items) {
      bind(item);
      if (truthy(eval(*s.cond))) kept.push_back(item);
    }
    items = std::move(kept);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t k = 0; k < n; ++k) {
    const Value& item = items[static_cast<size_t>(k)];
    scopes_.back().clear();
    bind(item);
    Dict loop;
    loop.set("index", Value::integer(k + 1));
    loop.set("index0", Value::integer(k));
    loop.set("revindex", Value::integer(n - k));
    loop.set("revindex0", Value::integer(n - k - 1));
    loop.set("first", Value::boolean(k == 0));
    loop.set("last", Value::boolean(k == n - 1));
    loop.set("length", Value::integer(n));
    loop.set("previtem", k > 0 ? items[static_cast<size_t>(k - 1)] : Value::undefined("previtem"));
    loop.set("nextitem",
             k + 1 < n ? items[static_cast<size_t>(k + 1)] : Value::undefined("nextitem"));
    loop.set("cycle", Value::function([k](CallArgs& args) {
               if (args.positional.empty()) fail("loop.cycle() takes at least one argument");
               return args.positional[static_cast<size_t>(k) % args.positional.size()];
             }));
    assign("loop", Value::make_dict(std::move(loop)));
    if (exec_body(s.bodies[0]) == Flow::kBreak) break;
  }
  scopes_.pop_back();
  if (n == 0 && s.bodies.size() > 1) return exec_body(s.bodies[1]);
  return Flow::kNormal;
}

Value Interpreter::call_macro(const Stmt& macro, CallArgs& args) {
  if (args.positional.size() > macro.targets.size())
    fail("macro '" + macro.text + "' takes " + std::to_string(macro.targets.size()) + " arguments");
  scopes_.emplace_back();
  for (size_t k = 0; k < macro.targets.size(); ++k) {
    const std::string& param = macro.targets[k];
    if (k < args.positional.size())
      assign(param, args.positional[k]);
    else if (const Value* kw = args.kwarg(param))
      assign(param, *kw);
    else if (macro.defaults[k])
      assign(param, eval(*macro.defaults[k]));
    else
      assign(param, Value::undefined(param));
  }
  for (const auto& [k, v] : args.keyword) {
    bool known = false;
    for (const auto& p : macro.targets) known = known || p == k;
    if (!known) fail("macro '" + macro.text + "' has no parameter '" + k + "'");
  }
  std::string captured;
  std::string* saved = out_;
  out_ = &captured;
  try {
    exec_body(macro.bodies[0]);
  } catch (...) {
    out_ = saved;
    scopes_.pop_back();
    throw;
  }
  out_ = saved;
  scopes_.pop_back();
  return Value::string(std::move(captured));
}

Value Interpreter::lookup(const std::string& name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto found = it->find(name);
    if (found != it->end()) return found->second;
  }
  return Value::undefined(name);
}

CallArgs Interpreter::eval_args(const Expr& e) {
  CallArgs args;
  size_t positional = e.args.size() - e.kwnames.size();
  for (size_t k = 0; k < e.args.size(); ++k) {
    Value v = eval(*e.args[k]);
    if (k < positional)
      args.positional.push_back(std::move(v));
    else
      args.keyword.emplace_back(e.kwnames[k - positional], std::move(v));
  }
  return args;
}

Value Interpreter::eval_call(const Expr& e) {
  CallArgs args = eval_args(e);
  if (e.a->kind == Expr::Kind::kAttr) {
    Value obj = eval(*e.a->a);
    Value result;
    if (call_method(obj, e.a->name, args, result)) return result;
    Value fn = get_attr(obj, e.a->name);
    if (fn.kind != Kind::kFunction)
      fail("'" + std::string(type_name(obj)) + "' object has no method '" + e.a->name + "'");
    return (*fn.fn)(args);
  }
  Value fn = eval(*e.a);
  if (fn.is_undefined()) fail("'" + fn.s + "' is undefined");
  if (fn.kind != Kind::kFunction)
    fail("'" + std::string(type_name(fn)) + "' object is not callable");
  return (*fn.fn)(args);
}

namespace {

bool compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "<") return less(a, b);
  if (op == ">") return less(b, a);
  if (op == "<=") return !less(b, a);
  if (op == ">=") return !less(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  TANDEM_CHECK(false, "unknown comparison '%s'", op.c_str());
}

}  // namespace

Value Interpreter::eval_binary(const Expr& e) {
  const std::string& op = e.name;
  if (op == "and") {
    Value a = eval(*e.a);
    return truthy(a) ? eval(*e.b) : a;
  }
  if (op == "or") {
    Value a = eval(*e.a);
    return truthy(a) ? a : eval(*e.b);
  }
  Value a = eval(*e.a);
  Value b = eval(*e.b);
  if (op == "~") return Value::string(to_str(a) + to_str(b));
  if (op == "==" || op == "!=" || op == "<" || op == ">" || op == "<=" || op == ">=" ||
      op == "in" || op == "notin")
    return Value::boolean(compare(op, a, b));
  return arithmetic(op, a, b);
}

Value Interpreter::eval(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.value;
    case Expr::Kind::kName:
      return lookup(e.name);
    case Expr::Kind::kList: {
      List items;
      for (const auto& x : e.args) items.push_back(eval(*x));
      return e.name == "tuple" ? Value::make_tuple(std::move(items))
                               : Value::make_list(std::move(items));
    }
    case Expr::Kind::kDict: {
      Dict d;
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
        Value key = eval(*e.args[k]);
        if (!key.is_string()) fail("dict literal keys must be strings");
        d.set(key.s, eval(*e.args[k + 1]));
      }
      return Value::make_dict(std::move(d));
    }
    case Expr::Kind::kAttr:
      return get_attr(eval(*e.a), e.name);
    case Expr::Kind::kItem:
      return get_item(eval(*e.a), eval(*e.b));
    case Expr::Kind::kSlice: {
      Value parts[3];
      for (size_t k = 0; k < 3; ++k)
        if (e.args[k]) parts[k] = eval(*e.args[k]);
      return get_slice(eval(*e.a), parts[0], parts[1], parts[2]);
    }
    case Expr::Kind::kCall:
      return eval_call(e);
    case Expr::Kind::kFilter: {
      Value v = eval(*e.a);
      CallArgs args = eval_args(e);
      return apply_filter(e.name, v, args);
    }
    case Expr::Kind::kTest: {
      Value v = eval(*e.a);
      CallArgs args = eval_args(e);
      return Value::boolean(apply_test(e.name, v, args) != e.negated);
    }
    case Expr::Kind::kUnary: {
      Value v = eval(*e.a);
      if (e.name == "not") return Value::boolean(!truthy(v));
      if (!v.is_number()) {
        if (v.is_undefined()) fail("'" + v.s + "' is undefined");
        fail("bad operand type for unary " + e.name + ": '" + std::string(type_name(v)) + "'");
      }
      if (e.name == "+") return v.kind == Kind::kBool ? Value::integer(v.as_int()) : v;
      return v.kind == Kind::kFloat ? Value::real(-v.f) : Value::integer(-v.as_int());
    }
    case Expr::Kind::kBinary:
      return eval_binary(e);
    case Expr::Kind::kCond:
      if (truthy(eval(*e.a))) return eval(*e.b);
      return e.c ? eval(*e.c) : Value::undefined();
    case Expr::Kind::kCompare: {
      Value left = eval(*e.args[0]);
      for (size_t k = 0; k < e.ops.size(); ++k) {
        Value right = eval(*e.args[k + 1]);
        if (!compare(e.ops[k], left, right)) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
  }
  return Value::undefined();
}

}  // namespace tandem::jinja
