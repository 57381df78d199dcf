// Statements and whitespace control: if, for/loop, set, namespace, macro, break/continue, comments,
// trim_blocks/lstrip_blocks/-/+. Expected strings were rendered by jinja2 3.1 configured as
// transformers configures it (trim_blocks, lstrip_blocks, loopcontrols, transformers' tojson), so
// each row is a claim about jinja2's behaviour, not about this implementation.
// Rows come from scripts/golden/chat_unit_cases.py.
#include <doctest/doctest.h>

#include "chat/chat_template.h"

using namespace tandem;

namespace {

struct Case {
  const char* source;
  const char* context;  // JSON object
  const char* expected;
};

const Case kCases[] = {
    {"{% if x %}A{% elif y %}B{% else %}C{% endif %}{% if not x %}D{% elif not y %}E{% endif %}",
     R"({"x": false, "y": true})", "BD"},
    {"{% for m in ms %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 "
     "}}/{{ loop.length }}/{{ loop.first }}/{{ loop.last }}:{{ m }} {% endfor %}",
     R"({"ms": ["a", "b", "c"]})",
     "1/0/3/2/3/True/False:a 2/1/2/1/3/False/False:b 3/2/1/0/3/False/True:c "},
    {"{% for m in ms if m != 'b' %}{{ loop.index }}{{ m }}{{ loop.length }} {% endfor %}|{% for m "
     "in [] %}x{% else %}empty{% endfor %}|{% for c in 'hé' %}[{{ c }}]{% endfor %}",
     R"({"ms": ["a", "b", "c"]})", "1a2 2c2 |empty|[h][é]"},
    {"{% for m in ms %}{% for n in m %}{{ loop.index }}{{ n }}{% endfor %}@{{ loop.index }} {% "
     "endfor %}",
     R"({"ms": [["x", "y"], ["z"]]})", "1x2y@1 1z@2 "},
    {"{% for k in d %}{{ k }}{% endfor %}|{% for m in ms %}{{ loop.previtem }}>{{ m }}<{{ "
     "loop.nextitem }} {% endfor %}|{% for m in ms %}{{ loop.cycle('o', 'e') }}{% endfor %}",
     R"({"d": {"b": 1, "a": 2}, "ms": [1, 2, 3]})", "ba|>1<2 1>2<3 2>3< |oeo"},
    {"{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}|{% if "
     "true %}{% set x = 5 %}{% endif %}{{ x }}",
     R"({})", "23|1|5"},
    {"{% set ns = namespace(count=0, last=none) %}{% for i in [1, 2, 3] %}{% set ns.count = "
     "ns.count + i %}{% set ns.last = i %}{% endfor %}{{ ns.count }} {{ ns.last }}",
     R"({})", "6 3"},
    {"{% set block %}in{{ 1 + 1 }}side{% endset %}[{{ block }}]", R"({})", "[in2side]"},
    {"{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ "
     "greet('B', '?') }} {{ greet(name='C', punct='.') }}",
     R"({})", "Hi A! Hi B? Hi C."},
    {"{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% "
     "endif %}{{ i }}{% endfor %}",
     R"({})", "0134"},
    {"{# a comment #}A{#- trimmed -#}  B {{- ' C ' -}} D", R"({})", "AB C D"},
    {"<{% if true %}\n  x\n{% endif %}\n>", R"({})", "<  x\n>"},
    {"line1\n    {% if true %}\n    inner\n    {% endif %}\nline2\n", R"({})",
     "line1\n    inner\nline2"},
    {"a  {%- if true %} b {% endif -%}  \n  c", R"({})", "a b c"},
    {"  {%+ if true %}kept{% endif +%}\nnext", R"({})", "  kept\nnext"},
    {"{{ 'x' }}\n{{ 'y' }}\n  {{ 'z' }}\n", R"({})", "x\ny\n  z"},
    {"  {# c #}\nafter\n{#- x #}\n", R"({})", "after"},
    {"{%- set x = 1 -%}\n\n   {{ x }}   \n\n{%- if x %}\n\n\tyes\n{% endif -%}\n\nend", R"({})",
     "1\n\tyes\nend"},
    {"a\n  {%- if true %}\n  b\n  {%- endif %}\nc|  {% if true %}x{% endif %}  y|x  {% if true "
     "%}y{% endif %}|\t{# c #}\t\nz",
     R"({})", "a  bc|  x  y|x  y|\t\t\nz"},
    {"{% for i in [1,2] -%}\n  {{ i }}\n{%- endfor %}|{% if true %}  \n  a{% endif %}|{% if true "
     "%}\x0d\nwin\x0d\n{% endif %}\x0d\n",
     R"({})", "12|  \n  a|win\n"},
    {"{% set x %}\n  block\n{% endset %}[{{ x }}]{% macro m() %}\n  M\n{% endmacro %}[{{ m() }}]",
     R"({})", "[  block\n][  M\n]"},
    {"{% if c is mapping or c is iterable %}{{ c | tojson }}{% else %}{{ c }}{% endif %}|{% for d "
     "in ds %}{% if d is mapping or d is iterable %}{{ d | tojson }}{% else %}{{ d }}{% endif %}{% "
     "endfor %}",
     R"({"c": "plain", "ds": [5, {"a": 1}, [1]]})", "\"plain\"|5{\"a\": 1}[1]"},
    {"{% for m in ms %}{% generation %}[{{ m }}]{% endgeneration %}{% endfor %}",
     R"({"ms": ["a", "b"]})", "[a][b]"},
    {"{{ message['content'] | trim + '!' }} {{ messages|length - 1 }} {{ not ms|length == 1 }}",
     R"({"message": {"content": " hi "}, "messages": [1, 2, 3], "ms": [1]})", "hi! 2 False"},
    {"{% for message in messages[::-1] %}{% set index = (messages|length - 1) - loop.index0 %}{{ "
     "index }}{{ message.role }} {% endfor %}",
     R"({"messages": [{"role": "a"}, {"role": "b"}, {"role": "c"}]})", "2c 1b 0a "},
};

}  // namespace

TEST_CASE("jinja statements and whitespace control render like jinja2") {
  for (const Case& c : kCases) {
    CAPTURE(c.source);
    auto tmpl = ChatTemplate::parse(c.source);
    REQUIRE_MESSAGE(tmpl.ok(), (tmpl.ok() ? "" : tmpl.error().message));
    auto rendered = tmpl->render(nlohmann::ordered_json::parse(c.context));
    REQUIRE_MESSAGE(rendered.ok(), (rendered.ok() ? "" : rendered.error().message));
    CHECK(*rendered == std::string(c.expected));
  }
}
