// Filters, tests, attribute/item access and the str/dict methods of the Jinja subset, with
// Python's semantics (the templates were written against jinja2 on CPython).
#pragma once

#include <functional>
#include <string>

#include "chat/jinja_value.h"

namespace tandem::jinja {

// Attribute access (obj.name): dict keys and namespace attributes; anything else is Undefined.
// Accessing an attribute of Undefined is an error, as in jinja2.
Value get_attr(const Value& obj, const std::string& name);
// Item access (obj[key]): dict keys, list and string indices (negative from the end).
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] for lists and strings; absent parts are Undefined values.
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// Items a for loop visits: list items, dict keys, string characters; Undefined visits none.
List iterate(const Value& v);
// len(v) for strings (code points), lists and dicts.
int64_t length_of(const Value& v);
// `a in b`.
bool contains(const Value& container, const Value& item);

// Calls obj.name(args) when obj is a str or dict with such a method; false when there is none.
bool call_method(const Value& obj, const std::string& name, CallArgs& args, Value& result);

bool apply_test(const std::string& name, const Value& v, CallArgs& args);
Value apply_filter(const std::string& name, const Value& v, CallArgs& args);

}  // namespace tandem::jinja
