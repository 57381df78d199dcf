// The few Unicode-aware string operations Python's str gives chat templates: they index and strip
// by code point, not by byte.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::jinja {

// Byte offsets of each code point start, plus s.size() at the end. Invalid UTF-8 bytes count as
// one code point each (Python would not hold such a string; this keeps indexing total).
std::vector<size_t> code_point_offsets(std::string_view s);
size_t code_point_count(std::string_view s);
// Python str.isspace() for one code point.
bool is_python_space(char32_t c);
// str.strip()/lstrip()/rstrip(); chars == nullptr strips whitespace, else any code point in chars.
std::string python_strip(std::string_view s, const std::string* chars, bool left, bool right);
std::string python_upper(std::string_view s);
std::string python_lower(std::string_view s);
std::string python_title(std::string_view s);
std::string python_capitalize(std::string_view s);
// str.split(sep, maxsplit); sep == nullptr splits on whitespace runs.
std::vector<std::string> python_split(std::string_view s, const std::string* sep, int64_t maxsplit);

}  // namespace tandem::jinja
