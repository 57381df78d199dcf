// Syntax tree of a parsed template. One node type per tree (Expr, Stmt) with a kind tag keeps the
// interpreter a pair of switch statements.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "chat/jinja_value.h"

namespace tandem::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // value
    kName,     // name
    kList,     // args: items; name "tuple" for (a, b)
    kDict,     // args: key0, value0, key1, value1, ...
    kAttr,     // a.name
    kItem,     // a[b]
    kSlice,    // a[b:c:d]; args hold start, stop, step (null when omitted)
    kCall,     // a(args, kwnames[i] = args[positional + i])
    kFilter,   // a | name(args)
    kTest,     // a is [not] name(args)
    kUnary,    // op a       (op: "not", "-", "+")
    kBinary,   // a op b     (op: + - * / // % ** ~ == != < <= > >= in notin and or)
    kCond,     // b if a else c   (a: condition, b: then, c: else, may be null)
    kCompare,  // chained comparison args[0] ops[0] args[1] ops[1] args[2] ... (Python semantics)
  };
  Kind kind;
  int line = 0;
  std::string name;  // kName, kAttr, kFilter, kTest, operator
  Value value;       // kLiteral
  ExprPtr a, b, c;
  std::vector<ExprPtr> args;
  std::vector<std::string> kwnames;  // names of the trailing keyword args
  std::vector<std::string> ops;      // kCompare operators
  bool negated = false;              // kTest: "is not"
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    kText,    // text
    kOutput,  // {{ expr }}
    kIf,      // conds[i] -> bodies[i]; bodies.back() is else when bodies > conds
    kFor,     // for targets in expr [if cond]: bodies[0]; else: bodies[1]
    kSet,     // set targets[0][.attr] = expr   |  set name %}bodies[0]{% endset
    kMacro,   // macro name(params = defaults) bodies[0]
    kBreak,
    kContinue,
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  std::vector<std::string> targets;  // loop or set names; macro parameter names
  std::string attr;                  // kSet: namespace attribute
  std::vector<ExprPtr> defaults;     // kMacro: default per parameter (null when none)
};

}  // namespace tandem::jinja
