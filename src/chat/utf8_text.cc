#include "chat/utf8_text.h"

#include <utf8proc.h>

namespace tandem::jinja {
namespace {

// Decodes the code point at s[pos]; sets len to its byte length (1 for an invalid byte).
char32_t decode(std::string_view s, size_t pos, size_t& len) {
  utf8proc_int32_t cp = -1;
  utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + pos),
                                        static_cast<utf8proc_ssize_t>(s.size() - pos), &cp);
  if (n <= 0 || cp < 0) {
    len = 1;
    return static_cast<unsigned char>(s[pos]);
  }
  len = static_cast<size_t>(n);
  return static_cast<char32_t>(cp);
}

void encode(char32_t c, std::string& out) {
  utf8proc_uint8_t buf[4];
  utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

std::vector<char32_t> decode_all(std::string_view s) {
  std::vector<char32_t> out;
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len) out.push_back(decode(s, pos, len));
  return out;
}

bool is_cased_letter(char32_t c) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

template <typename F>
std::string map_code_points(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  size_t index = 0;
  bool prev_cased = false;
  for (size_t pos = 0, len = 0; pos < s.size(); pos += len, ++index) {
    char32_t c = decode(s, pos, len);
    encode(f(c, index, prev_cased), out);
    prev_cased = is_cased_letter(c);
  }
  return out;
}

char32_t upper(char32_t c) {
  return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c)));
}
char32_t title(char32_t c) {
  return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c)));
}
char32_t lower(char32_t c) {
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}

}  // namespace

std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> offsets;
  size_t len = 0;
  for (size_t pos = 0; pos < s.size(); pos += len) {
    offsets.push_back(pos);
    decode(s, pos, len);
  }
  offsets.push_back(s.size());
  return offsets;
}

size_t code_point_count(std::string_view s) {
  return code_point_offsets(s).size() - 1;
}

bool is_python_space(char32_t c) {
  switch (c) {
    case ' ':
    case '\t':
    case '\n':
    case '\r':
    case '\v':
    case '\f':
    case 0x1c:
    case 0x1d:
    case 0x1e:
    case 0x1f:
    case 0x85:
    case 0xa0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202f:
    case 0x205f:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200a;
  }
}

std::string python_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<char32_t> strip_set;
  if (chars) strip_set = decode_all(*chars);
  auto strippable = [&](char32_t c) {
    if (!chars) return is_python_space(c);
    for (char32_t x : strip_set)
      if (x == c) return true;
    return false;
  };
  std::vector<size_t> offs = code_point_offsets(s);
  size_t n = offs.size() - 1, begin = 0, end = n, len = 0;
  if (left)
    while (begin < end && strippable(decode(s, offs[begin], len))) ++begin;
  if (right)
    while (end > begin && strippable(decode(s, offs[end - 1], len))) --end;
  return std::string(s.substr(offs[begin], offs[end] - offs[begin]));
}

std::string python_upper(std::string_view s) {
  return map_code_points(s, [](char32_t c, size_t, bool) { return upper(c); });
}
std::string python_lower(std::string_view s) {
  return map_code_points(s, [](char32_t c, size_t, bool) { return lower(c); });
}
std::string python_title(std::string_view s) {
  return map_code_points(
      s, [](char32_t c, size_t, bool prev_cased) { return prev_cased ? lower(c) : title(c); });
}
std::string python_capitalize(std::string_view s) {
  return map_code_points(
      s, [](char32_t c, size_t index, bool) { return index == 0 ? title(c) : lower(c); });
}

std::vector<std::string> python_split(std::string_view s, const std::string* sep,
                                      int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      size_t hit = s.find(*sep, start);
      if (hit == std::string_view::npos) break;
      parts.emplace_back(s.substr(start, hit - start));
      start = hit + sep->size();
    }
    parts.emplace_back(s.substr(start));
    return parts;
  }
  // Whitespace split: runs of whitespace separate, no empty parts.
  std::vector<size_t> offs = code_point_offsets(s);
  size_t n = offs.size() - 1, i = 0, len = 0;
  auto space_at = [&](size_t k) { return is_python_space(decode(s, offs[k], len)); };
  while (i < n) {
    while (i < n && space_at(i)) ++i;
    if (i == n) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      parts.emplace_back(s.substr(offs[i]));  // Python keeps the remainder's trailing space
      break;
    }
    size_t j = i;
    while (j < n && !space_at(j)) ++j;
    parts.emplace_back(s.substr(offs[i], offs[j] - offs[i]));
    i = j;
  }
  return parts;
}

}  // namespace tandem::jinja
