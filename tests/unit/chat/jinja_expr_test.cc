// Expressions: literals, operators, access, slicing, tests, filters, methods. Expected strings were
// rendered by jinja2 3.1 configured as transformers configures it (trim_blocks, lstrip_blocks,
// loopcontrols, transformers' tojson), so each row is a claim about jinja2's behaviour, not about
// this implementation. Rows come from scripts/golden/chat_unit_cases.py.
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
    {"{{ 'a\\tb\\n' ~ \"q\\\"\" ~ '\\u00e9\\x41' }}", R"({})", "a\tb\nq\"éA"},
    {"{{ 1 }} {{ -2 }} {{ 3.5 }} {{ 1e3 }} {{ 2.0 }} {{ 1_000 }} {{ 0.1 + 0.2 }} {{ 1e-7 }} {{ "
     "1e22 }}",
     R"({})", "1 -2 3.5 1000.0 2.0 1000 0.30000000000000004 1e-07 1e+22"},
    {"{{ true }} {{ True }} {{ false }} {{ none }} {{ None }} {{ [1, 'a', none, true] }} {{ {'k': "
     "'v', 'n': [1.5]} }}",
     R"({})", "True True False None None [1, 'a', None, True] {'k': 'v', 'n': [1.5]}"},
    {"{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 - "
     "4 }} {{ (1 + 2) * 3 }}",
     R"({})", "3 -4 1 2 3.5 1024 3 9"},
    {"{{ 'ab' * 3 }} {{ [1] + [2, 3] }} {{ 'x' + 'y' }} {{ 1 ~ 2 ~ none }} {{ 1 + 2.5 }} {{ true + "
     "1 }}",
     R"({})", "ababab [1, 2, 3] xy 12None 3.5 2"},
    {"{{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 2 < 3 }} {{ 'b' >= 'a' }} {{ [1, 2] == [1, 2] }} {{ {'a': "
     "1, 'b': 2} == {'b': 2, 'a': 1} }} {{ 1 <= 0 }}",
     R"({})", "True True True True True True False"},
    {"{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'k' in d }} {{ 'z' not in d }} {{ 3 not in [3] "
     "}}",
     R"({"d": {"k": 1}})", "True True True True False"},
    {"{{ x and y }}|{{ x or y }}|{{ not x }}|{{ z or 'dflt' }}|{{ x and not z }}",
     R"({"x": 1, "y": "yes", "z": ""})", "yes|1|False|dflt|True"},
    {"{{ 'a' if x else 'b' }} {{ 'a' if z else 'b' }} [{{ 'only' if z }}]",
     R"({"x": true, "z": false})", "a b []"},
    {"{{ m.role }} {{ m['content'] }} [{{ m.missing }}] {{ l[0] }} {{ l[-1] }} [{{ l[9] }}] {{ l.1 "
     "}} {{ s[1] }} {{ s[-1] }}",
     R"({"m": {"role": "user", "content": "hi"}, "l": [10, 20, 30], "s": "hé你"})",
     "user hi [] 10 30 [] 20 é 你"},
    {"{{ l[1:] }} {{ l[:2] }} {{ l[::-1] }} {{ l[-2:] }} {{ l[::2] }} {{ s[::-1] }} {{ s[1:3] }} "
     "{{ l[5:] }} {{ l[1:-1] }}",
     R"({"l": [1, 2, 3, 4], "s": "aé你z"})",
     "[2, 3, 4] [1, 2] [4, 3, 2, 1] [3, 4] [1, 3] z你éa é你 [] [2, 3]"},
    {"{{ s.startswith('<a') }} {{ s.endswith('>') }} {{ s.startswith(('x', '<')) }} {{ "
     "s.split('b')[0] }} {{ s.split('b') }} {{ '  p  q '.split() }} {{ 'a,b,c'.split(',', 1) }}",
     R"({"s": "<abbc>"})", "True True True <a ['<a', '', 'c>'] ['p', 'q'] ['a', 'b,c']"},
    {"[{{ s.strip() }}] [{{ s.lstrip() }}] [{{ s.rstrip() }}] [{{ '\\nxx\\n'.strip('\\n') }}] [{{ "
     "'xxhixx'.strip('x') }}] [{{ 'aab'.lstrip('a') }}]",
     R"({"s": " \t hi there \n"})", "[hi there] [hi there \n] [ \t hi there] [xx] [hi] [b]"},
    {"{{ s.replace('a', 'o') }} {{ s.replace('a', 'o', 1) }} {{ s.upper() }} {{ s.lower() }} {{ "
     "s.title() }} {{ 'hello world'.capitalize() }} {{ s.find('n') }} {{ s.count('a') }}",
     R"({"s": "BaNaNa split"})",
     "BoNoNo split BoNaNa split BANANA SPLIT banana split Banana Split Hello world -1 3"},
    {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {{ d.keys() | list }} {{ d.values() "
     "| list }} {{ d.get('a') }} {{ d.get('zz', 'dflt') }} {{ d.get('zz') }}",
     R"({"d": {"b": 2, "a": 1}})", "b=2;a=1; ['b', 'a'] [2, 1] 1 dflt None"},
    {"{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ n is none }} {{ x is not none "
     "}} {{ s is string }} {{ d is mapping }} {{ l is sequence }} {{ s is iterable }} {{ d is "
     "iterable }} {{ x is number }} {{ t is true }} {{ f is false }} {{ x is equalto 3 }} {{ x is "
     "equalto(4) }} {{ s is not string }}",
     R"({"x": 3, "n": null, "s": "s", "d": {}, "l": [], "t": true, "f": false})",
     "True False True True True True True True True True True True True True False False"},
    {"{{ l | length }} {{ s | length }} {{ d | length }} {{ '  x ' | trim }}| {{ s | upper }} {{ s "
     "| lower }} {{ s | capitalize }} {{ l | first }} {{ l | last }} {{ l | join(', ') }} {{ l | "
     "join }} {{ s | list }}",
     R"({"l": [1, 2, 3], "s": "héllo", "d": {"a": 1}})",
     "3 5 1 x| HÉLLO héllo Héllo 1 3 1, 2, 3 123 ['h', 'é', 'l', 'l', 'o']"},
    {"{{ u | default('x') }} {{ e | default('x') }} {{ e | default('x', true) }} {{ v | d('x') }} "
     "{{ s | replace('l', 'L') }} {{ 3 | string }} {{ '42' | int + 1 }} {{ 'x' | int }} {{ 3.9 | "
     "int }} {{ '2.5' | float }} {{ s | safe }}",
     R"({"e": "", "v": 0, "s": "hello"})", "x  x 0 heLLo 3 43 0 3 2.5 hello"},
    {"{{ d | items | list }} {% for k, v in d | items %}{{ k }}{{ v }}{% endfor %}",
     R"({"d": {"z": 1, "a": [2]}})", "[('z', 1), ('a', [2])] z1a[2]"},
    {"{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='content') | join('|') }} {{ "
     "ms | rejectattr('role', 'equalto', 'user') | list | length }} {{ ms | selectattr('tool') | "
     "map(attribute='role') | list }} {{ ms | map(attribute='x', default='-') | join }}",
     R"({"ms": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "tool": 1}, {"role": "user", "content": "c"}]})",
     "a|c 1 ['assistant'] ---"},
    {"{{ l | select('odd') | list }} {{ l | reject('odd') | list }} {{ l | select | list }} {{ "
     "['a', 'B'] | map('upper') | list }} {{ l | unique | list }} {{ -3 | abs }}",
     R"({"l": [0, 1, 2, 3, 3]})", "[1, 3, 3] [0, 2] [1, 2, 3, 3] ['A', 'B'] [0, 1, 2, 3] 3"},
    {"{{ v | tojson }}",
     R"({"v": {"name": "f", "args": {"cé": "Zürich 你", "n": [1, 2.5, true, null, {}], "q": "a\"b\\c\n\t\u0001"}, "e": [], "f": 1e-07}})",
     "{\"name\": \"f\", \"args\": {\"cé\": \"Zürich 你\", \"n\": [1, 2.5, true, null, {}], \"q\": "
     "\"a\\\"b\\\\c\\n\\t\\u0001\"}, \"e\": [], \"f\": 1e-07}"},
    {"{{ v | tojson(indent=4) }}",
     R"({"v": {"type": "function", "function": {"name": "f", "parameters": {"properties": {}, "required": ["a", "b"]}}}})",
     "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"f\",\n        "
     "\"parameters\": {\n            \"properties\": {},\n            \"required\": [\n            "
     "    \"a\",\n                \"b\"\n            ]\n        }\n    }\n}"},
    {"{{ v | tojson(indent=2, sort_keys=true) }} {{ v | tojson(separators=(',', ':')) }}",
     R"({"v": {"b": [1, {"y": 1, "x": 2}], "a": "s"}})",
     "{\n  \"a\": \"s\",\n  \"b\": [\n    1,\n    {\n      \"x\": 2,\n      \"y\": 1\n    }\n  "
     "]\n} {\"b\":[1,{\"y\":1,\"x\":2}],\"a\":\"s\"}"},
    {"{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ namespace(a=1).a }} {{ dict(a=1, b='x') "
     "}}",
     R"({})", "[0, 1, 2] [1, 3, 5] 1 {'a': 1, 'b': 'x'}"},
    {"{{ 'abc' ~ 1 ~ 2.5 ~ true ~ none ~ [1] }}", R"({})", "abc12.5TrueNone[1]"},
    {"{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1 != 2 }} {{ 'a' in 'abc' in ['abc'] }}", R"({})",
     "True False True True"},
    {"{{ 1.5e300 * 1e10 }} {{ 1/3 }} {{ 100.0 }} {{ 1e16 }} {{ 12345678901234567.0 }} {{ 0.0001 }} "
     "{{ 0.00001 }} {{ -0.0 }}",
     R"({})", "inf 0.3333333333333333 100.0 1e+16 1.2345678901234568e+16 0.0001 1e-05 -0.0"},
    {"{{ [1.0, 'it\\'s', \"q\\\"\", none, true] }} {{ ('a',) }} {{ (1, 2) }} {{ d }}",
     R"({"d": {"a": null, "b": [true]}})",
     "[1.0, \"it's\", 'q\"', None, True] ('a',) (1, 2) {'a': None, 'b': [True]}"},
    {"{{ s[0] }}{{ s | length }}{{ s[-1] }}", R"({"s": "😀é"})", "😀2é"},
    {"{{ '  a  b  '.split(none, 1) }} {{ 'a  b'.split(' ') }} {{ ''.split() }} {{ ''.split(',') }}",
     R"({})", "['a', 'b  '] ['a', '', 'b'] [] ['']"},
    {"{{ l[1:3][::-1] }} {{ l[-10:10] }} {{ l[3:1] }} {{ l[::-3] }}",
     R"({"l": [0, 1, 2, 3, 4, 5]})", "[2, 1] [0, 1, 2, 3, 4, 5] [] [5, 2]"},
    {"{{ x.y }}|{{ true and 0 }} {{ 0 or false }} {{ [] or 'e' }} {{ none and 1 }}",
     R"({"x": null})", "|0 False e None"},
    {"{{ 3 is divisibleby 3 }} {{ 4 is odd }} {{ 'ab' is lower }} {{ x is sameas none }} {{ 2 is "
     "in [1, 2] }}",
     R"({"x": null})", "True False True True True"},
    {"{{ x | int }} {{ x | float }} {{ '  12 ' | int }} {{ '0x1A' | int }} {{ '3.7' | int }} {{ "
     "'nan' | float }}",
     R"({"x": "3"})", "3 3.0 12 0 3 nan"},
    {"{{ 'é'.upper() }} {{ 'ÀB'.lower() }} {{ 'straße'.title() }} {{ 'ǅx'.capitalize() }} {{ "
     "'hello wORLD' | title }}",
     R"({})", "É àb Straße ǅx Hello World"},
    {"{{ -x|abs }} {{ - 2 ** 2 }} {{ 2 ** 3 ** 2 }} {{ not 1 == 2 }} {{ 'a' ~ 'b' if false else "
     "'c' }}",
     R"({"x": 5})", "5 4 64 True c"},
};

}  // namespace

TEST_CASE("jinja expressions evaluate like jinja2") {
  for (const Case& c : kCases) {
    CAPTURE(c.source);
    auto tmpl = ChatTemplate::parse(c.source);
    REQUIRE_MESSAGE(tmpl.ok(), (tmpl.ok() ? "" : tmpl.error().message));
    auto rendered = tmpl->render(nlohmann::ordered_json::parse(c.context));
    REQUIRE_MESSAGE(rendered.ok(), (rendered.ok() ? "" : rendered.error().message));
    CHECK(*rendered == std::string(c.expected));
  }
}
