// Failures: syntax outside the subset is refused at parse time with the construct and the line;
// render failures (Python TypeErrors, use of undefined values, raise_exception) are kTemplate
// errors; and Undefined behaves like jinja2's default Undefined where jinja2 does not fail.
#include <doctest/doctest.h>

#include "chat/chat_template.h"

using namespace tandem;
using ojson = nlohmann::ordered_json;

namespace {

Error parse_error(const char* source) {
  auto tmpl = ChatTemplate::parse(source);
  REQUIRE_MESSAGE(!tmpl.ok(), "parsed: " << source);
  return tmpl.error();
}

Error render_error(const char* source, const char* context = "{}") {
  auto tmpl = ChatTemplate::parse(source);
  REQUIRE_MESSAGE(tmpl.ok(), (tmpl.ok() ? "" : tmpl.error().message));
  auto rendered = tmpl->render(ojson::parse(context));
  REQUIRE_MESSAGE(!rendered.ok(), "rendered: " << source << " -> " << *rendered);
  return rendered.error();
}

void check_contains(const Error& e, const std::string& needle) {
  CHECK(e.code == ErrorCode::kTemplate);
  CHECK_MESSAGE(e.message.find(needle) != std::string::npos, e.message << " lacks " << needle);
}

}  // namespace

TEST_CASE("unsupported syntax is refused naming the construct and line") {
  check_contains(parse_error("{% include 'other.jinja' %}"),
                 "unsupported construct '{% include %}'");
  check_contains(parse_error("a\n{% raw %}x{% endraw %}"), "line 2");
  check_contains(parse_error("a\n{% raw %}x{% endraw %}"), "'{% raw %}'");
  check_contains(parse_error("{% extends 'base' %}"), "'{% extends %}'");
  check_contains(parse_error("\n\n{{ x | wordwrap }}"), "line 3: unsupported filter 'wordwrap'");
  check_contains(parse_error("{{ x is escaped }}"), "unsupported test 'escaped'");
  check_contains(parse_error("{% for x in y recursive %}{% endfor %}"), "recursive");
  check_contains(parse_error("{% set a, b = 1, 2 %}"), "several targets");
  check_contains(parse_error("{{ f(*args) }}"), "*args");
  check_contains(parse_error("{% break %}"), "'break' outside a loop");
}

TEST_CASE("malformed templates are refused with the line") {
  check_contains(parse_error("{% if x %}open"), "missing 'elif'");
  check_contains(parse_error("{% for x in y %}open"), "unclosed block");
  check_contains(parse_error("ok\n{{ 'abc }}"), "line 2: unterminated string literal");
  check_contains(parse_error("{{ x }"), "unclosed tag");
  check_contains(parse_error("{# never closed"), "unclosed comment");
  check_contains(parse_error("{{ x ? y }}"), "unexpected character '?'");
  check_contains(parse_error("{% endif %}"), "unsupported construct '{% endif %}'");
  check_contains(parse_error("{{ [1, 2 }}"), "expected ']'");
  check_contains(parse_error("{{ }}"), "unexpected '}}' in expression");
  check_contains(parse_error("{{ f(a=1, 2) }}"), "positional argument after keyword argument");
}

TEST_CASE("raise_exception becomes a kTemplate error carrying the message") {
  Error e =
      render_error("{% if messages|length == 0 %}{{ raise_exception('No messages!') }}{% endif %}",
                   R"({"messages": []})");
  CHECK(e.code == ErrorCode::kTemplate);
  CHECK(e.message == "No messages!");
}

TEST_CASE("render failures name the problem and the line") {
  check_contains(render_error("{{ x.y.z }}", R"({"x": {}})"), "'y' is undefined");
  check_contains(render_error("\n{{ 'a' + 1 }}"),
                 "line 2: unsupported operand type(s) for +: 'str' and 'int'");
  check_contains(render_error("{{ u + 1 }}"), "'u' is undefined");
  check_contains(render_error("{{ 1 // 0 }}"), "division or modulo by zero");
  check_contains(render_error("{{ 1 < 'a' }}"),
                 "'<' not supported between instances of 'int' and 'str'");
  check_contains(render_error("{% for x in 5 %}{% endfor %}"), "'int' object is not iterable");
  check_contains(render_error("{{ nofn() }}"), "'nofn' is undefined");
  check_contains(render_error("{% set n = 1 %}{% set n.x = 2 %}"), "non-namespace object 'n'");
  check_contains(render_error("{{ none | length }}"), "has no len()");
  check_contains(render_error("{{ namespace() | tojson }}"), "not JSON serializable");
  check_contains(render_error("{{ 'abc'.nomethod() }}"), "'str' object has no method 'nomethod'");
  check_contains(render_error("{{ s[1:2:0] }}", R"({"s": "abc"})"), "slice step cannot be zero");
  check_contains(render_error("{% macro m(a) %}{% endmacro %}{{ m(b=1) }}"), "no parameter 'b'");
  auto tmpl = ChatTemplate::parse("x");
  REQUIRE(tmpl.ok());
  auto rendered = tmpl->render(ojson::array());
  REQUIRE_FALSE(rendered.ok());
  CHECK(rendered.error().code == ErrorCode::kTemplate);
}

TEST_CASE("undefined values behave like jinja2's default Undefined") {
  auto tmpl = ChatTemplate::parse(
      "[{{ u }}][{{ u | length }}][{% for x in u %}x{% endfor %}][{{ u is defined }}]"
      "[{{ m.nokey }}][{{ m.nokey is defined }}][{{ u | default('d') }}][{{ 'a' if u else 'b' }}]"
      "[{{ u == u }}][{{ 'x' in u }}]");
  REQUIRE(tmpl.ok());
  auto rendered = tmpl->render(ojson::parse(R"({"m": {}})"));
  REQUIRE_MESSAGE(rendered.ok(), (rendered.ok() ? "" : rendered.error().message));
  // Rendered by jinja2 3.1.6 with the same context.
  CHECK(*rendered == "[][0][][False][][False][d][b][True][False]");
}

TEST_CASE("tools and documents are none unless given, as transformers passes them") {
  auto tmpl =
      ChatTemplate::parse("{{ tools is defined }} {{ tools is none }} {{ documents is none }}");
  REQUIRE(tmpl.ok());
  auto rendered = tmpl->render(ojson::object());
  REQUIRE(rendered.ok());
  CHECK(*rendered == "True True True");
}
