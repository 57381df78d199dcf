#include "chat/jinja_lexer.h"

#include <algorithm>
#include <cctype>

namespace tandem::jinja {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {
    for (size_t k = 0; k < src_.size(); ++k)
      if (src_[k] == '\n') newlines_.push_back(k);
  }

  Result<std::vector<Token>> run() {
    size_t pos = 0;
    bool strip_next_text = false;  // the previous tag ended with '-'
    while (pos <= src_.size()) {
      size_t open = find_tag(pos);
      std::string text = src_.substr(pos, open - pos);
      if (strip_next_text)
        text.erase(0, std::min(text.size(), text.find_first_not_of(" \t\n\r\v\f")));
      if (open == src_.size()) {
        push_text(std::move(text), line_of(pos));
        break;
      }
      char kind = src_[open + 1];  // '{', '%' or '#'
      char mod = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (mod == '+' && kind == '{') mod = '\0';  // "{{+x" is unary plus, not a modifier
      if (mod == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (mod != '+' && kind != '{') {
        // lstrip_blocks: spaces and tabs between a line start and a block or comment tag go.
        size_t line_start = text.rfind('\n');
        bool at_line_start = line_start != std::string::npos || pos == 0 || src_[pos - 1] == '\n';
        size_t from = line_start == std::string::npos ? 0 : line_start + 1;
        if (at_line_start && text.find_first_not_of(" \t\r\v\f", from) == std::string::npos)
          text.erase(from);
      }
      push_text(std::move(text), line_of(pos));
      size_t body = open + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
      if (kind == '#') {
        size_t close = src_.find("#}", body);
        if (close == std::string::npos) return error(open, "unclosed comment '{#'");
        bool strip = close > body && src_[close - 1] == '-';
        pos = after_close(close + 2, strip, /*trim_newline=*/true, strip_next_text);
        continue;
      }
      tokens_.push_back({kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin, "", line_of(open)});
      size_t close = 0;
      char end_mod = '\0';  // '-' or '+' before the closing delimiter
      TANDEM_TRY(lex_expression(body, kind, close, end_mod));
      tokens_.push_back({kind == '{' ? Tok::kVarEnd : Tok::kBlockEnd, "", line_of(close)});
      pos = after_close(close + 2, end_mod == '-', kind == '%' && end_mod != '+', strip_next_text);
    }
    tokens_.push_back({Tok::kEof, "", line_of(src_.size())});
    return std::move(tokens_);
  }

 private:
  // Position of the next "{{", "{%" or "{#" at or after pos, or src_.size().
  size_t find_tag(size_t pos) const {
    for (size_t k = pos; k + 1 < src_.size(); ++k)
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#'))
        return k;
    return src_.size();
  }

  size_t after_close(size_t pos, bool strip, bool trim_newline, bool& strip_next_text) {
    strip_next_text = strip;
    // trim_blocks: the first newline after a block or comment tag goes.
    if (!strip && trim_newline && pos < src_.size() && src_[pos] == '\n') ++pos;
    return pos;
  }

  void push_text(std::string text, int line) {
    if (!text.empty()) tokens_.push_back({Tok::kText, std::move(text), line});
  }

  // 1-based line of byte pos: one more than the newlines before it.
  int line_of(size_t pos) const {
    return 1 + static_cast<int>(std::lower_bound(newlines_.begin(), newlines_.end(), pos) -
                                newlines_.begin());
  }

  Error error(size_t pos, const std::string& what) const {
    return make_error(ErrorCode::kTemplate,
                      "chat template line " + std::to_string(line_of(pos)) + ": " + what);
  }

  // Lexes expression tokens from pos to the tag's closing delimiter; sets close to the index
  // of the delimiter ("}}" or "%}") and end_mod to the '-' or '+' before it, if any.
  Status lex_expression(size_t pos, char kind, size_t& close, char& end_mod) {
    const char end_char = kind == '{' ? '}' : '%';
    while (true) {
      while (pos < src_.size() && is_space(src_[pos])) ++pos;
      if (pos >= src_.size()) return error(pos, std::string("unclosed tag '{") + kind + "'");
      char c = src_[pos];
      auto at = [&](size_t k) { return k < src_.size() ? src_[k] : '\0'; };
      if ((c == '-' || c == '+') && at(pos + 1) == end_char && at(pos + 2) == '}') {
        close = pos + 1;
        end_mod = c;
        return Status::Ok();
      }
      if (c == end_char && at(pos + 1) == '}') {
        close = pos;
        return Status::Ok();
      }
      int line = line_of(pos);
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t start = pos;
        while (pos < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[pos])) || src_[pos] == '_'))
          ++pos;
        tokens_.push_back({Tok::kName, src_.substr(start, pos - start), line});
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t start = pos;
        bool is_float = false;
        while (std::isdigit(static_cast<unsigned char>(at(pos))) || at(pos) == '_') ++pos;
        if (at(pos) == '.' && std::isdigit(static_cast<unsigned char>(at(pos + 1)))) {
          is_float = true;
          ++pos;
          while (std::isdigit(static_cast<unsigned char>(at(pos))) || at(pos) == '_') ++pos;
        }
        if ((at(pos) == 'e' || at(pos) == 'E') &&
            (std::isdigit(static_cast<unsigned char>(at(pos + 1))) ||
             ((at(pos + 1) == '-' || at(pos + 1) == '+') &&
              std::isdigit(static_cast<unsigned char>(at(pos + 2)))))) {
          is_float = true;
          pos += 2;
          while (std::isdigit(static_cast<unsigned char>(at(pos)))) ++pos;
        }
        std::string digits;
        for (size_t k = start; k < pos; ++k)
          if (src_[k] != '_') digits += src_[k];
        tokens_.push_back({is_float ? Tok::kFloat : Tok::kInt, digits, line});
      } else if (c == '\'' || c == '"') {
        std::string value;
        TANDEM_TRY(lex_string(pos, value));
        tokens_.push_back({Tok::kString, std::move(value), line});
      } else {
        static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                           "/",  "%",  "~",  "<",  ">",  "=",  ".", ",", ":",
                                           "|",  "(",  ")",  "[",  "]",  "{",  "}"};
        bool matched = false;
        for (const char* op : kOps) {
          std::string_view o(op);
          if (src_.compare(pos, o.size(), o) == 0) {
            tokens_.push_back({Tok::kOp, std::string(o), line});
            pos += o.size();
            matched = true;
            break;
          }
        }
        if (!matched) return error(pos, std::string("unexpected character '") + c + "'");
      }
    }
  }

  // Python string literal escapes, as Jinja decodes them.
  Status lex_string(size_t& pos, std::string& value) {
    char quote = src_[pos++];
    while (true) {
      if (pos >= src_.size()) return error(pos, "unterminated string literal");
      char c = src_[pos++];
      if (c == quote) return Status::Ok();
      if (c != '\\') {
        value += c;
        continue;
      }
      if (pos >= src_.size()) return error(pos, "unterminated string literal");
      char e = src_[pos++];
      switch (e) {
        case 'n':
          value += '\n';
          break;
        case 't':
          value += '\t';
          break;
        case 'r':
          value += '\r';
          break;
        case '0':
          value += '\0';
          break;
        case 'a':
          value += '\a';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'v':
          value += '\v';
          break;
        case '\\':
          value += '\\';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case '\n':
          break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (pos + n > src_.size())
            return error(pos, "truncated \\" + std::string(1, e) + " escape");
          uint32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            char h = src_[pos + k];
            if (!std::isxdigit(static_cast<unsigned char>(h)))
              return error(pos, "bad \\" + std::string(1, e) + " escape");
            cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                                     ? h - '0'
                                                     : (std::tolower(h) - 'a' + 10));
          }
          pos += n;
          append_utf8(cp, value);
          break;
        }
        default:  // Python keeps unknown escapes verbatim
          value += '\\';
          value += e;
      }
    }
  }

  static void append_utf8(uint32_t cp, std::string& out) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string src_;
  std::vector<size_t> newlines_;  // byte offsets of every '\n' in src_, ascending
  std::vector<Token> tokens_;
};

// Jinja normalizes newlines to "\n" and, with keep_trailing_newline=False, drops one final "\n".
std::string normalize(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      out += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      out += source[k];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

Result<std::vector<Token>> lex(std::string_view source) {
  return Lexer(normalize(source)).run();
}

}  // namespace tandem::jinja
