#!/usr/bin/env python3
"""Golden chat-template renders for tests/unit/chat.

Renders a fixed set of conversations through each committed template with transformers'
own chat-template path (apply_chat_template(..., tokenize=False) on a tokenizer built from the
npm tokenizer files), and writes inputs + outputs as JSON. strftime_now is pinned to
FIXED_NOW (UTC noon, so the date is the same in every time zone within +-11 h) by patching the
datetime that transformers' chat_template_utils calls; the C++ test passes the same instant.

usage: chat_golden.py TEMPLATE_DIR TOKENIZER_ROOT OUT.json [--local]
  TOKENIZER_ROOT holds tokenizer-qwen3/models and tokenizer-llama3_1/models.
  --local renders with a jinja2 environment built like transformers' (for checking this script
  where transformers is not installed); the committed fixture comes from transformers.
"""
import datetime as _dt
import json
import sys

FIXED_NOW = _dt.datetime(2025, 3, 7, 12, 0, 0)
FIXED_NOW_UNIX = int(FIXED_NOW.replace(tzinfo=_dt.timezone.utc).timestamp())


class _FixedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time",
        "parameters": {"type": "object", "properties": {}},
    },
}
SYS = {"role": "system", "content": "You are a terse assistant."}
U1 = {"role": "user", "content": "Hello! What is 2+2?"}
A1 = {"role": "assistant", "content": "4."}
U2 = {"role": "user", "content": "And 3*3?"}
UNICODE = {"role": "user", "content": "  Grüße aus Zürich — 你好，世界 🌍 \"quotes\" and \\backslash\t\n"}
TOOL_CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [{"type": "function", "function": {
        "name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius", "days": 2}}}],
}
TOOL_CALL_STR_ARGS = {
    "role": "assistant",
    "content": "Let me check.",
    "tool_calls": [{"type": "function", "function": {
        "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}],
}
TWO_TOOL_CALLS = {
    "role": "assistant",
    "content": "",
    "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}},
        {"type": "function", "function": {"name": "get_time", "arguments": {}}},
    ],
}
TOOL_RESULT = {"role": "tool", "content": "{\"temperature\": 18.5, \"sky\": \"clear\"}"}
TOOL_RESULT2 = {"role": "tool", "content": "12:00"}
USER_WEATHER = {"role": "user", "content": "Weather in Paris for 2 days?"}


def cases_common():
    return [
        ("single_user_gen", {"messages": [U1], "add_generation_prompt": True}),
        ("single_user_nogen", {"messages": [U1], "add_generation_prompt": False}),
        ("system_user_gen", {"messages": [SYS, U1], "add_generation_prompt": True}),
        ("multi_turn_gen", {"messages": [SYS, U1, A1, U2], "add_generation_prompt": True}),
        ("multi_turn_ends_assistant", {"messages": [U1, A1], "add_generation_prompt": False}),
        ("unicode", {"messages": [SYS, UNICODE, {"role": "assistant", "content": "Grüße! 👋"},
                                   UNICODE], "add_generation_prompt": True}),
    ]


def cases_tools():
    return [
        ("tools_first_turn", {"messages": [SYS, USER_WEATHER], "tools": [WEATHER_TOOL, TIME_TOOL],
                              "add_generation_prompt": True}),
        ("tools_no_system", {"messages": [USER_WEATHER], "tools": [WEATHER_TOOL],
                             "add_generation_prompt": True}),
        ("tool_call_and_result", {"messages": [SYS, USER_WEATHER, TOOL_CALL, TOOL_RESULT],
                                  "tools": [WEATHER_TOOL], "add_generation_prompt": True}),
    ]


def cases_for(name):
    cases = cases_common()
    if name == "qwen2.5":
        cases += cases_tools()
        cases += [
            ("two_tool_calls_two_results",
             {"messages": [USER_WEATHER, TWO_TOOL_CALLS, TOOL_RESULT, TOOL_RESULT2,
                           {"role": "assistant", "content": "Done."}],
              "tools": [WEATHER_TOOL, TIME_TOOL], "add_generation_prompt": False}),
        ]
    elif name == "qwen3":
        cases += cases_tools()
        cases += [
            ("two_tool_calls_str_args",
             {"messages": [USER_WEATHER, TWO_TOOL_CALLS, TOOL_RESULT, TOOL_RESULT2,
                           TOOL_CALL_STR_ARGS, TOOL_RESULT],
              "tools": [WEATHER_TOOL, TIME_TOOL], "add_generation_prompt": True}),
            ("reasoning_content",
             {"messages": [U1, {"role": "assistant", "content": "4.",
                                "reasoning_content": "\nSimple sum.\n"}, U2,
                           {"role": "assistant", "content": "9.", "reasoning_content": "3*3"}],
              "add_generation_prompt": False}),
            ("think_tags_in_content",
             {"messages": [U1, {"role": "assistant",
                                "content": "<think>\nadd them\n</think>\n\n4."}, U2],
              "add_generation_prompt": True}),
            ("enable_thinking_false",
             {"messages": [SYS, U1], "add_generation_prompt": True, "enable_thinking": False}),
            ("enable_thinking_true",
             {"messages": [U1], "add_generation_prompt": True, "enable_thinking": True}),
        ]
    elif name == "llama3.2":
        cases += cases_tools()
        cases += [
            ("tools_in_system",
             {"messages": [SYS, USER_WEATHER], "tools": [WEATHER_TOOL],
              "tools_in_user_message": False, "add_generation_prompt": True}),
            ("date_string_given", {"messages": [U1], "date_string": "26 Jul 2024",
                                   "add_generation_prompt": True}),
            ("two_tool_calls_error",
             {"messages": [USER_WEATHER, TWO_TOOL_CALLS], "tools": [WEATHER_TOOL, TIME_TOOL],
              "add_generation_prompt": True}),
        ]
    elif name == "llama3.1":
        cases += [("system_whitespace_trimmed",
                   {"messages": [{"role": "system", "content": "\n  Be brief.  \n"}, U1],
                    "add_generation_prompt": True})]
    return cases


SPECIAL = {
    "qwen2.5": {"bos_token": None, "eos_token": "<|im_end|>"},
    "qwen3": {"bos_token": None, "eos_token": "<|im_end|>"},
    "llama3.1": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "llama3.2": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
}
TOKENIZER_DIR = {"qwen2.5": "tokenizer-qwen3", "qwen3": "tokenizer-qwen3",
                 "llama3.1": "tokenizer-llama3_1", "llama3.2": "tokenizer-llama3_1"}


def local_renderer():
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return _FixedDatetime.now().strftime(fmt)

    class GenerationBlock(jinja2.ext.Extension):
        """transformers' AssistantTracker as far as rendering text goes: the body, unchanged."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.Scope(body, lineno=lineno)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols, GenerationBlock])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now

    def render(template, tok_dir, special, ctx):
        kwargs = dict(ctx)
        messages = kwargs.pop("messages")
        return env.from_string(template).render(messages=messages, **special, **kwargs)
    return render


def transformers_renderer():
    import transformers
    from transformers import PreTrainedTokenizerFast
    from transformers.utils import chat_template_utils as ctu
    ctu.datetime = _FixedDatetime  # strftime_now calls datetime.now()
    cache = {}

    def render(template, tok_dir, special, ctx):
        if tok_dir not in cache:
            try:
                cache[tok_dir] = PreTrainedTokenizerFast(tokenizer_file=tok_dir + "/tokenizer.json")
            except Exception as e:
                print("PreTrainedTokenizerFast failed, using AutoTokenizer:", e)
                cache[tok_dir] = transformers.AutoTokenizer.from_pretrained(tok_dir)
        tok = cache[tok_dir]
        tok.bos_token = special["bos_token"]
        tok.eos_token = special["eos_token"]
        kwargs = dict(ctx)
        messages = kwargs.pop("messages")
        tools = kwargs.pop("tools", None)
        agp = kwargs.pop("add_generation_prompt", False)
        return tok.apply_chat_template(messages, tools=tools, chat_template=template,
                                       add_generation_prompt=agp, tokenize=False, **kwargs)
    render.version = transformers.__version__
    return render


def main():
    template_dir, tok_root, out_path = sys.argv[1:4]
    local = "--local" in sys.argv[4:]
    render = local_renderer() if local else transformers_renderer()
    result = {"generator": "jinja2 (local check)" if local else
              "transformers " + render.version + " apply_chat_template(tokenize=False)",
              "fixed_now_unix": FIXED_NOW_UNIX, "templates": {}}
    for name in ["qwen2.5", "qwen3", "llama3.1", "llama3.2"]:
        template = open(f"{template_dir}/{name}.jinja", encoding="utf-8").read()
        tok_dir = f"{tok_root}/{TOKENIZER_DIR[name]}/models"
        out_cases = []
        for case_name, ctx in cases_for(name):
            entry = {"name": case_name, "context": ctx}
            try:
                entry["rendered"] = render(template, tok_dir, SPECIAL[name], ctx)
                if name == "llama3.2" and "date_string" not in ctx:
                    if "07 Mar 2025" not in entry["rendered"]:
                        print("WARNING: strftime_now was not pinned", case_name)
                        result["unpinned"] = True
            except Exception as e:  # the template's raise_exception
                entry["error"] = str(e)
            out_cases.append(entry)
            print(name, case_name, "error" if "error" in entry else len(entry["rendered"]))
        result["templates"][name] = {"special_tokens": SPECIAL[name], "cases": out_cases}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
