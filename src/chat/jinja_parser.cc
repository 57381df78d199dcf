#include "chat/jinja_parser.h"

#include <set>
#include <stdexcept>

namespace tandem::jinja {
namespace {

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : toks_(tokens) {}

  Body parse_template() {
    Body body = parse_body({});
    if (peek().type != Tok::kEof) error(peek().line, "unexpected tag");
    return body;
  }

 private:
  [[noreturn]] void error(int line, const std::string& what) const {
    fail("chat template line " + std::to_string(line) + ": " + what);
  }

  const Token& peek(size_t ahead = 0) const {
    size_t k = std::min(pos_ + ahead, toks_.size() - 1);
    return toks_[k];
  }
  const Token& next() {
    const Token& t = peek();
    if (pos_ < toks_.size() - 1) ++pos_;
    return t;
  }
  bool at_op(const char* op) const { return peek().type == Tok::kOp && peek().text == op; }
  bool at_name(const char* name) const { return peek().type == Tok::kName && peek().text == name; }
  bool accept_op(const char* op) {
    if (!at_op(op)) return false;
    next();
    return true;
  }
  bool accept_name(const char* name) {
    if (!at_name(name)) return false;
    next();
    return true;
  }
  void expect_op(const char* op) {
    if (!accept_op(op))
      error(peek().line, std::string("expected '") + op + "', got " + describe(peek()));
  }
  void expect(Tok type, const char* what) {
    if (peek().type != type)
      error(peek().line, std::string("expected ") + what + ", got " + describe(peek()));
    next();
  }
  std::string expect_name() {
    if (peek().type != Tok::kName) error(peek().line, "expected a name, got " + describe(peek()));
    return next().text;
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::kText:
        return "template text";
      case Tok::kVarBegin:
        return "'{{'";
      case Tok::kVarEnd:
        return "'}}'";
      case Tok::kBlockBegin:
        return "'{%'";
      case Tok::kBlockEnd:
        return "'%}'";
      case Tok::kEof:
        return "end of template";
      case Tok::kString:
        return "a string";
      default:
        return "'" + t.text + "'";
    }
  }

  // Parses statements until a block tag whose keyword is in `stops` (left unconsumed, positioned
  // on the keyword) or the end of input.
  Body parse_body(const std::set<std::string>& stops) {
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.type == Tok::kEof) {
        if (!stops.empty()) error(t.line, "missing '" + *stops.begin() + "' (unclosed block)");
        return body;
      }
      if (t.type == Tok::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->line = t.line;
        s->text = next().text;
        body.push_back(std::move(s));
      } else if (t.type == Tok::kVarBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->line = t.line;
        s->expr = parse_expr();
        expect(Tok::kVarEnd, "'}}'");
        body.push_back(std::move(s));
      } else if (t.type == Tok::kBlockBegin) {
        const Token& kw = peek(1);
        if (kw.type == Tok::kName && stops.count(kw.text)) {
          next();
          return body;
        }
        next();
        body.push_back(parse_statement());
      } else {
        error(t.line, "unexpected " + describe(t));
      }
    }
  }

  // Consumes "{% keyword" already positioned on keyword; checks the keyword and the closing %}.
  void end_tag(const char* keyword) {
    if (!accept_name(keyword)) error(peek().line, std::string("expected '") + keyword + "'");
    expect(Tok::kBlockEnd, "'%}'");
  }

  std::unique_ptr<Stmt> parse_statement() {
    int line = peek().line;
    std::string kw = expect_name();
    auto s = std::make_unique<Stmt>();
    s->line = line;
    if (kw == "if") {
      s->kind = Stmt::Kind::kIf;
      s->conds.push_back(parse_expr());
      expect(Tok::kBlockEnd, "'%}'");
      while (true) {
        s->bodies.push_back(parse_body({"elif", "else", "endif"}));
        std::string which = next().text;
        if (which == "elif") {
          s->conds.push_back(parse_expr());
          expect(Tok::kBlockEnd, "'%}'");
        } else if (which == "else") {
          expect(Tok::kBlockEnd, "'%}'");
          s->bodies.push_back(parse_body({"endif"}));
          end_tag("endif");
          break;
        } else {
          expect(Tok::kBlockEnd, "'%}'");
          break;
        }
      }
    } else if (kw == "for") {
      s->kind = Stmt::Kind::kFor;
      s->targets.push_back(expect_name());
      while (accept_op(",")) s->targets.push_back(expect_name());
      if (!accept_name("in")) error(peek().line, "expected 'in' in for loop");
      s->expr = parse_or_ternary(/*allow_ternary=*/false);
      if (accept_name("if")) s->cond = parse_or_ternary(false);
      if (at_name("recursive")) error(peek().line, "unsupported construct 'for ... recursive'");
      expect(Tok::kBlockEnd, "'%}'");
      ++loop_depth_;
      s->bodies.push_back(parse_body({"else", "endfor"}));
      --loop_depth_;
      if (next().text == "else") {
        expect(Tok::kBlockEnd, "'%}'");
        s->bodies.push_back(parse_body({"endfor"}));
        end_tag("endfor");
      } else {
        expect(Tok::kBlockEnd, "'%}'");
      }
    } else if (kw == "set") {
      s->kind = Stmt::Kind::kSet;
      s->targets.push_back(expect_name());
      if (accept_op(".")) s->attr = expect_name();
      if (at_op(",")) error(peek().line, "unsupported construct 'set' with several targets");
      if (accept_op("=")) {
        s->expr = parse_expr();
        expect(Tok::kBlockEnd, "'%}'");
      } else {
        if (!s->attr.empty()) error(line, "block 'set' cannot assign an attribute");
        expect(Tok::kBlockEnd, "'%}'");
        s->bodies.push_back(parse_body({"endset"}));
        end_tag("endset");
      }
    } else if (kw == "macro") {
      s->kind = Stmt::Kind::kMacro;
      s->text = expect_name();
      expect_op("(");
      while (!at_op(")")) {
        s->targets.push_back(expect_name());
        s->defaults.push_back(accept_op("=") ? parse_expr() : nullptr);
        if (!accept_op(",")) break;
      }
      expect_op(")");
      expect(Tok::kBlockEnd, "'%}'");
      s->bodies.push_back(parse_body({"endmacro"}));
      end_tag("endmacro");
    } else if (kw == "generation") {
      // transformers' AssistantTracker marks assistant spans for return_assistant_tokens_mask;
      // for rendering text the block is its body.
      s->kind = Stmt::Kind::kIf;
      s->conds.push_back(literal(Value::boolean(true), line));
      expect(Tok::kBlockEnd, "'%}'");
      s->bodies.push_back(parse_body({"endgeneration"}));
      end_tag("endgeneration");
    } else if (kw == "break" || kw == "continue") {
      if (loop_depth_ == 0) error(line, "'" + kw + "' outside a loop");
      s->kind = kw == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      expect(Tok::kBlockEnd, "'%}'");
    } else {
      error(line, "unsupported construct '{% " + kw + " %}'");
    }
    return s;
  }

  // expr := or_expr ['if' or_expr ['else' expr]]
  ExprPtr parse_expr() { return parse_or_ternary(true); }

  ExprPtr parse_or_ternary(bool allow_ternary) {
    ExprPtr e = parse_or();
    while (allow_ternary && at_name("if")) {
      int line = next().line;
      auto cond = make(Expr::Kind::kCond, line);
      cond->a = parse_or();
      cond->b = std::move(e);
      if (accept_name("else")) cond->c = parse_expr();
      e = std::move(cond);
    }
    return e;
  }

  ExprPtr binary(std::string op, ExprPtr l, ExprPtr r, int line) {
    auto e = make(Expr::Kind::kBinary, line);
    e->name = std::move(op);
    e->a = std::move(l);
    e->b = std::move(r);
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (at_name("or")) {
      int line = next().line;
      e = binary("or", std::move(e), parse_and(), line);
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (at_name("and")) {
      int line = next().line;
      e = binary("and", std::move(e), parse_not(), line);
    }
    return e;
  }
  ExprPtr parse_not() {
    if (at_name("not")) {
      int line = next().line;
      auto e = make(Expr::Kind::kUnary, line);
      e->name = "not";
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }
  // Returns the comparison operator at the cursor (consuming it), or "" when there is none.
  std::string accept_compare_op() {
    if (peek().type == Tok::kOp &&
        (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == "<=" ||
         peek().text == ">" || peek().text == ">=")) {
      return next().text;
    }
    if (accept_name("in")) return "in";
    if (at_name("not") && peek(1).type == Tok::kName && peek(1).text == "in") {
      next();
      next();
      return "notin";
    }
    return "";
  }
  ExprPtr parse_compare() {
    ExprPtr first = parse_math1();
    int line = peek().line;
    std::string op = accept_compare_op();
    if (op.empty()) return first;
    ExprPtr second = parse_math1();
    std::string op2 = accept_compare_op();
    if (op2.empty()) return binary(op, std::move(first), std::move(second), line);
    // a < b < c: Python's chained comparison, each operand evaluated once.
    auto chain = make(Expr::Kind::kCompare, line);
    chain->args.push_back(std::move(first));
    chain->args.push_back(std::move(second));
    chain->ops = {op, op2};
    chain->args.push_back(parse_math1());
    for (std::string more = accept_compare_op(); !more.empty(); more = accept_compare_op()) {
      chain->ops.push_back(more);
      chain->args.push_back(parse_math1());
    }
    return chain;
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (at_op("+") || at_op("-")) {
      const Token& t = next();
      e = binary(t.text, std::move(e), parse_concat(), t.line);
    }
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (at_op("~")) {
      int line = next().line;
      e = binary("~", std::move(e), parse_math2(), line);
    }
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const Token& t = next();
      e = binary(t.text, std::move(e), parse_pow(), t.line);
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (at_op("**")) {
      int line = next().line;
      e = binary("**", std::move(e), parse_unary(true), line);
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    ExprPtr e;
    if (at_op("-") || at_op("+")) {
      const Token& t = next();
      e = make(Expr::Kind::kUnary, t.line);
      e->name = t.text;
      e->a = parse_unary(false);
    } else {
      e = parse_postfix(parse_primary());
    }
    if (with_filter) e = parse_filters(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    switch (t.type) {
      case Tok::kName: {
        next();
        if (t.text == "true" || t.text == "True") return literal(Value::boolean(true), t.line);
        if (t.text == "false" || t.text == "False") return literal(Value::boolean(false), t.line);
        if (t.text == "none" || t.text == "None") return literal(Value::none(), t.line);
        auto e = make(Expr::Kind::kName, t.line);
        e->name = t.text;
        return e;
      }
      case Tok::kString: {
        std::string s = next().text;
        while (peek().type == Tok::kString) s += next().text;  // adjacent literals concatenate
        return literal(Value::string(std::move(s)), t.line);
      }
      case Tok::kInt: {
        next();
        try {
          return literal(Value::integer(std::stoll(t.text)), t.line);
        } catch (const std::out_of_range&) {
          error(t.line, "integer literal out of range: " + t.text);
        }
      }
      case Tok::kFloat:
        next();
        return literal(Value::real(std::stod(t.text)), t.line);
      case Tok::kOp:
        if (t.text == "(") {
          next();
          ExprPtr e = parse_expr();
          if (at_op(",")) {  // a tuple: a list that prints as a tuple
            auto list = make(Expr::Kind::kList, t.line);
            list->name = "tuple";
            list->args.push_back(std::move(e));
            while (accept_op(",") && !at_op(")")) list->args.push_back(parse_expr());
            e = std::move(list);
          }
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          next();
          auto e = make(Expr::Kind::kList, t.line);
          while (!at_op("]")) {
            e->args.push_back(parse_expr());
            if (!accept_op(",")) break;
          }
          expect_op("]");
          return e;
        }
        if (t.text == "{") {
          next();
          auto e = make(Expr::Kind::kDict, t.line);
          while (!at_op("}")) {
            e->args.push_back(parse_expr());
            expect_op(":");
            e->args.push_back(parse_expr());
            if (!accept_op(",")) break;
          }
          expect_op("}");
          return e;
        }
        break;
      default:
        break;
    }
    error(t.line, "unexpected " + describe(t) + " in expression");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const Token& t = peek();
      if (at_op(".")) {
        next();
        auto attr = make(Expr::Kind::kAttr, t.line);
        if (peek().type == Tok::kInt) {  // foo.0 is foo[0] in Jinja
          attr->kind = Expr::Kind::kItem;
          attr->b = literal(Value::integer(std::stoll(next().text)), t.line);
        } else {
          attr->name = expect_name();
        }
        attr->a = std::move(e);
        e = std::move(attr);
      } else if (at_op("[")) {
        next();
        e = parse_subscript(std::move(e), t.line);
      } else if (at_op("(")) {
        next();
        auto call = make(Expr::Kind::kCall, t.line);
        call->a = std::move(e);
        parse_call_args(*call);
        e = std::move(call);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target, int line) {
    ExprPtr parts[3];
    int n = 0;
    bool slice = false;
    while (true) {
      if (!at_op(":") && !at_op("]")) parts[n] = parse_expr();
      if (accept_op(":")) {
        slice = true;
        if (++n > 2) error(line, "too many ':' in slice");
        continue;
      }
      break;
    }
    expect_op("]");
    if (!slice) {
      auto e = make(Expr::Kind::kItem, line);
      e->a = std::move(target);
      e->b = std::move(parts[0]);
      return e;
    }
    auto e = make(Expr::Kind::kSlice, line);
    e->a = std::move(target);
    for (auto& p : parts) e->args.push_back(std::move(p));
    return e;
  }

  // After '(' : positional args, then name=value args; consumes ')'.
  void parse_call_args(Expr& call) {
    while (!at_op(")")) {
      if (peek().type == Tok::kName && peek(1).type == Tok::kOp && peek(1).text == "=") {
        call.kwnames.push_back(next().text);
        next();
        call.args.push_back(parse_expr());
      } else {
        if (!call.kwnames.empty()) error(peek().line, "positional argument after keyword argument");
        if (at_op("*") || at_op("**"))
          error(peek().line, "unsupported construct: *args/**kwargs in a call");
        call.args.push_back(parse_expr());
      }
      if (!accept_op(",")) break;
    }
    expect_op(")");
  }

  ExprPtr parse_filters(ExprPtr e) {
    while (true) {
      if (at_op("|")) {
        int line = next().line;
        auto f = make(Expr::Kind::kFilter, line);
        f->name = expect_name();
        if (!is_known_filter(f->name)) error(line, "unsupported filter '" + f->name + "'");
        f->a = std::move(e);
        if (accept_op("(")) parse_call_args(*f);
        e = std::move(f);
      } else if (at_name("is")) {
        int line = next().line;
        auto t = make(Expr::Kind::kTest, line);
        t->negated = accept_name("not");
        t->name = expect_name();
        if (!is_known_test(t->name)) error(line, "unsupported test '" + t->name + "'");
        t->a = std::move(e);
        if (accept_op("(")) {
          parse_call_args(*t);
        } else if (starts_test_argument()) {
          t->args.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  // Jinja takes one bare argument after a test name: `x is divisibleby 3`, `x is equalto y`.
  bool starts_test_argument() const {
    const Token& t = peek();
    if (t.type == Tok::kName)
      return t.text != "else" && t.text != "or" && t.text != "and" && t.text != "if" &&
             t.text != "not" && t.text != "in" && t.text != "is";
    if (t.type == Tok::kString || t.type == Tok::kInt || t.type == Tok::kFloat) return true;
    return t.type == Tok::kOp && (t.text == "[" || t.text == "{");
  }

  ExprPtr make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }
  ExprPtr literal(Value v, int line) {
    auto e = make(Expr::Kind::kLiteral, line);
    e->value = std::move(v);
    return e;
  }

  const std::vector<Token>& toks_;
  size_t pos_ = 0;
  int loop_depth_ = 0;  // break/continue are only valid inside a for body
};

}  // namespace

bool is_known_filter(const std::string& name) {
  static const std::set<std::string> kFilters = {
      "length", "count",      "trim",  "tojson",     "upper",      "lower",   "default",
      "d",      "join",       "first", "last",       "list",       "replace", "string",
      "int",    "float",      "items", "selectattr", "rejectattr", "map",     "reject",
      "select", "capitalize", "title", "safe",       "abs",        "unique"};
  return kFilters.count(name) > 0;
}

bool is_known_test(const std::string& name) {
  static const std::set<std::string> kTests = {
      "defined",  "undefined", "none",  "string",  "mapping", "sequence", "iterable",
      "number",   "integer",   "float", "boolean", "true",    "false",    "equalto",
      "eq",       "==",        "ne",    "!=",      "odd",     "even",     "divisibleby",
      "callable", "in",        "lower", "upper",   "sameas"};
  return kTests.count(name) > 0;
}

Result<Body> parse(const std::vector<Token>& tokens) {
  try {
    return Parser(tokens).parse_template();
  } catch (const TemplateError& e) {
    return make_error(ErrorCode::kTemplate, e.what());
  }
}

}  // namespace tandem::jinja
