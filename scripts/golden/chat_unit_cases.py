#!/usr/bin/env python3
"""Rows for tests/unit/chat/jinja_{expr,stmt}_test.cc: each small template rendered by jinja2
configured as transformers configures it (chat_golden.local_renderer), printed as C++ table rows
{source, context JSON, expected}.

usage: chat_unit_cases.py expr|stmt > rows.txt   (then paste into the kCases table)
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chat_golden as g  # noqa: E402

render = g.local_renderer()

def R(t, ctx):
    return render(t, None, {}, dict({"messages": []}, **ctx))

def cxx_str(s):
    out = '"'
    for ch in s:
        o = ord(ch)
        if ch == '\\': out += '\\\\'
        elif ch == '"': out += '\\"'
        elif ch == '\n': out += '\\n'
        elif ch == '\t': out += '\\t'
        elif o < 0x20: out += '\\x%02x' % o
        else: out += ch
    return out + '"'

def emit(cases):
    for t, ctx in cases:
        exp = R(t, ctx)
        c = json.dumps(ctx, ensure_ascii=False)
        print('    {%s, R"(%s)", %s},' % (cxx_str(t), c, cxx_str(exp)))

which = sys.argv[1]
E = {}
if which == 'expr':
    emit([
        ("{{ 'a\\tb\\n' ~ \"q\\\"\" ~ '\\u00e9\\x41' }}", E),
        ("{{ 1 }} {{ -2 }} {{ 3.5 }} {{ 1e3 }} {{ 2.0 }} {{ 1_000 }} {{ 0.1 + 0.2 }} {{ 1e-7 }} {{ 1e22 }}", E),
        ("{{ true }} {{ True }} {{ false }} {{ none }} {{ None }} {{ [1, 'a', none, true] }} {{ {'k': 'v', 'n': [1.5]} }}", E),
        ("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 - 4 }} {{ (1 + 2) * 3 }}", E),
        ("{{ 'ab' * 3 }} {{ [1] + [2, 3] }} {{ 'x' + 'y' }} {{ 1 ~ 2 ~ none }} {{ 1 + 2.5 }} {{ true + 1 }}", E),
        ("{{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 2 < 3 }} {{ 'b' >= 'a' }} {{ [1, 2] == [1, 2] }} {{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }} {{ 1 <= 0 }}", E),
        ("{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'k' in d }} {{ 'z' not in d }} {{ 3 not in [3] }}", {"d": {"k": 1}}),
        ("{{ x and y }}|{{ x or y }}|{{ not x }}|{{ z or 'dflt' }}|{{ x and not z }}", {"x": 1, "y": "yes", "z": ""}),
        ("{{ 'a' if x else 'b' }} {{ 'a' if z else 'b' }} [{{ 'only' if z }}]", {"x": True, "z": False}),
        ("{{ m.role }} {{ m['content'] }} [{{ m.missing }}] {{ l[0] }} {{ l[-1] }} [{{ l[9] }}] {{ l.1 }} {{ s[1] }} {{ s[-1] }}", {"m": {"role": "user", "content": "hi"}, "l": [10, 20, 30], "s": "h\u00e9\u4f60"}),
        ("{{ l[1:] }} {{ l[:2] }} {{ l[::-1] }} {{ l[-2:] }} {{ l[::2] }} {{ s[::-1] }} {{ s[1:3] }} {{ l[5:] }} {{ l[1:-1] }}", {"l": [1, 2, 3, 4], "s": "a\u00e9\u4f60z"}),
        ("{{ s.startswith('<a') }} {{ s.endswith('>') }} {{ s.startswith(('x', '<')) }} {{ s.split('b')[0] }} {{ s.split('b') }} {{ '  p  q '.split() }} {{ 'a,b,c'.split(',', 1) }}", {"s": "<abbc>"}),
        ("[{{ s.strip() }}] [{{ s.lstrip() }}] [{{ s.rstrip() }}] [{{ '\\nxx\\n'.strip('\\n') }}] [{{ 'xxhixx'.strip('x') }}] [{{ 'aab'.lstrip('a') }}]", {"s": " \t hi there \n"}),
        ("{{ s.replace('a', 'o') }} {{ s.replace('a', 'o', 1) }} {{ s.upper() }} {{ s.lower() }} {{ s.title() }} {{ 'hello world'.capitalize() }} {{ s.find('n') }} {{ s.count('a') }}", {"s": "BaNaNa split"}),
        ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {{ d.keys() | list }} {{ d.values() | list }} {{ d.get('a') }} {{ d.get('zz', 'dflt') }} {{ d.get('zz') }}", {"d": {"b": 2, "a": 1}}),
        ("{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ n is none }} {{ x is not none }} {{ s is string }} {{ d is mapping }} {{ l is sequence }} {{ s is iterable }} {{ d is iterable }} {{ x is number }} {{ t is true }} {{ f is false }} {{ x is equalto 3 }} {{ x is equalto(4) }} {{ s is not string }}", {"x": 3, "n": None, "s": "s", "d": {}, "l": [], "t": True, "f": False}),
        ("{{ l | length }} {{ s | length }} {{ d | length }} {{ '  x ' | trim }}| {{ s | upper }} {{ s | lower }} {{ s | capitalize }} {{ l | first }} {{ l | last }} {{ l | join(', ') }} {{ l | join }} {{ s | list }}", {"l": [1, 2, 3], "s": "h\u00e9llo", "d": {"a": 1}}),
        ("{{ u | default('x') }} {{ e | default('x') }} {{ e | default('x', true) }} {{ v | d('x') }} {{ s | replace('l', 'L') }} {{ 3 | string }} {{ '42' | int + 1 }} {{ 'x' | int }} {{ 3.9 | int }} {{ '2.5' | float }} {{ s | safe }}", {"e": "", "v": 0, "s": "hello"}),
        ("{{ d | items | list }} {% for k, v in d | items %}{{ k }}{{ v }}{% endfor %}", {"d": {"z": 1, "a": [2]}}),
        ("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='content') | join('|') }} {{ ms | rejectattr('role', 'equalto', 'user') | list | length }} {{ ms | selectattr('tool') | map(attribute='role') | list }} {{ ms | map(attribute='x', default='-') | join }}", {"ms": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "tool": 1}, {"role": "user", "content": "c"}]}),
        ("{{ l | select('odd') | list }} {{ l | reject('odd') | list }} {{ l | select | list }} {{ ['a', 'B'] | map('upper') | list }} {{ l | unique | list }} {{ -3 | abs }}", {"l": [0, 1, 2, 3, 3]}),
        ("{{ v | tojson }}", {"v": {"name": "f", "args": {"c\u00e9": "Z\u00fcrich \u4f60", "n": [1, 2.5, True, None, {}], "q": "a\"b\\c\n\t\u0001"}, "e": [], "f": 1e-7}}),
        ("{{ v | tojson(indent=4) }}", {"v": {"type": "function", "function": {"name": "f", "parameters": {"properties": {}, "required": ["a", "b"]}}}}),
        ("{{ v | tojson(indent=2, sort_keys=true) }} {{ v | tojson(separators=(',', ':')) }}", {"v": {"b": [1, {"y": 1, "x": 2}], "a": "s"}}),
        ("{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ namespace(a=1).a }} {{ dict(a=1, b='x') }}", E),
        ("{{ 'abc' ~ 1 ~ 2.5 ~ true ~ none ~ [1] }}", E),
        ("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1 != 2 }} {{ 'a' in 'abc' in ['abc'] }}", E),
        ("{{ 1.5e300 * 1e10 }} {{ 1/3 }} {{ 100.0 }} {{ 1e16 }} {{ 12345678901234567.0 }} {{ 0.0001 }} {{ 0.00001 }} {{ -0.0 }}", E),
        ("{{ [1.0, 'it\\'s', \"q\\\"\", none, true] }} {{ ('a',) }} {{ (1, 2) }} {{ d }}", {"d": {"a": None, "b": [True]}}),
        ("{{ s[0] }}{{ s | length }}{{ s[-1] }}", {"s": "\U0001F600\u00e9"}),
        ("{{ '  a  b  '.split(none, 1) }} {{ 'a  b'.split(' ') }} {{ ''.split() }} {{ ''.split(',') }}", E),
        ("{{ l[1:3][::-1] }} {{ l[-10:10] }} {{ l[3:1] }} {{ l[::-3] }}", {"l": [0, 1, 2, 3, 4, 5]}),
        ("{{ x.y }}|{{ true and 0 }} {{ 0 or false }} {{ [] or 'e' }} {{ none and 1 }}", {"x": None}),
        ("{{ 3 is divisibleby 3 }} {{ 4 is odd }} {{ 'ab' is lower }} {{ x is sameas none }} {{ 2 is in [1, 2] }}", {"x": None}),
        ("{{ x | int }} {{ x | float }} {{ '  12 ' | int }} {{ '0x1A' | int }} {{ '3.7' | int }} {{ 'nan' | float }}", {"x": "3"}),
        ("{{ '\u00e9'.upper() }} {{ '\u00c0B'.lower() }} {{ 'stra\u00dfe'.title() }} {{ '\u01c5x'.capitalize() }} {{ 'hello wORLD' | title }}", E),
        ("{{ -x|abs }} {{ - 2 ** 2 }} {{ 2 ** 3 ** 2 }} {{ not 1 == 2 }} {{ 'a' ~ 'b' if false else 'c' }}", {"x": 5}),
    ])
elif which == 'stmt':
    emit([
        ("{% if x %}A{% elif y %}B{% else %}C{% endif %}{% if not x %}D{% elif not y %}E{% endif %}", {"x": False, "y": True}),
        ("{% for m in ms %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.length }}/{{ loop.first }}/{{ loop.last }}:{{ m }} {% endfor %}", {"ms": ["a", "b", "c"]}),
        ("{% for m in ms if m != 'b' %}{{ loop.index }}{{ m }}{{ loop.length }} {% endfor %}|{% for m in [] %}x{% else %}empty{% endfor %}|{% for c in 'h\u00e9' %}[{{ c }}]{% endfor %}", {"ms": ["a", "b", "c"]}),
        ("{% for m in ms %}{% for n in m %}{{ loop.index }}{{ n }}{% endfor %}@{{ loop.index }} {% endfor %}", {"ms": [["x", "y"], ["z"]]}),
        ("{% for k in d %}{{ k }}{% endfor %}|{% for m in ms %}{{ loop.previtem }}>{{ m }}<{{ loop.nextitem }} {% endfor %}|{% for m in ms %}{{ loop.cycle('o', 'e') }}{% endfor %}", {"d": {"b": 1, "a": 2}, "ms": [1, 2, 3]}),
        ("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}|{% if true %}{% set x = 5 %}{% endif %}{{ x }}", E),
        ("{% set ns = namespace(count=0, last=none) %}{% for i in [1, 2, 3] %}{% set ns.count = ns.count + i %}{% set ns.last = i %}{% endfor %}{{ ns.count }} {{ ns.last }}", E),
        ("{% set block %}in{{ 1 + 1 }}side{% endset %}[{{ block }}]", E),
        ("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(name='C', punct='.') }}", E),
        ("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", E),
        ("{# a comment #}A{#- trimmed -#}  B {{- ' C ' -}} D", E),
        ("<{% if true %}\n  x\n{% endif %}\n>", E),
        ("line1\n    {% if true %}\n    inner\n    {% endif %}\nline2\n", E),
        ("a  {%- if true %} b {% endif -%}  \n  c", E),
        ("  {%+ if true %}kept{% endif +%}\nnext", E),
        ("{{ 'x' }}\n{{ 'y' }}\n  {{ 'z' }}\n", E),
        ("  {# c #}\nafter\n{#- x #}\n", E),
        ("{%- set x = 1 -%}\n\n   {{ x }}   \n\n{%- if x %}\n\n\tyes\n{% endif -%}\n\nend", E),
        ("a\n  {%- if true %}\n  b\n  {%- endif %}\nc|  {% if true %}x{% endif %}  y|x  {% if true %}y{% endif %}|\t{# c #}\t\nz", E),
        ("{% for i in [1,2] -%}\n  {{ i }}\n{%- endfor %}|{% if true %}  \n  a{% endif %}|{% if true %}\r\nwin\r\n{% endif %}\r\n", E),
        ("{% set x %}\n  block\n{% endset %}[{{ x }}]{% macro m() %}\n  M\n{% endmacro %}[{{ m() }}]", E),
        ("{% if c is mapping or c is iterable %}{{ c | tojson }}{% else %}{{ c }}{% endif %}|{% for d in ds %}{% if d is mapping or d is iterable %}{{ d | tojson }}{% else %}{{ d }}{% endif %}{% endfor %}", {"c": "plain", "ds": [5, {"a": 1}, [1]]}),
        ("{% for m in ms %}{% generation %}[{{ m }}]{% endgeneration %}{% endfor %}", {"ms": ["a", "b"]}),
        ("{{ message['content'] | trim + '!' }} {{ messages|length - 1 }} {{ not ms|length == 1 }}", {"message": {"content": " hi "}, "messages": [1, 2, 3], "ms": [1]}),
        ("{% for message in messages[::-1] %}{% set index = (messages|length - 1) - loop.index0 %}{{ index }}{{ message.role }} {% endfor %}", {"messages": [{"role": "a"}, {"role": "b"}, {"role": "c"}]}),
    ])
