#include "tokenizer/byte_level.h"

#include <array>

namespace tandem::tokenizer {
namespace {

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

struct ByteTables {
  std::array<std::string, 256> byte_to_char;  // [byte] UTF-8 of its printable stand-in
  std::array<int16_t, 512> char_to_byte;      // [code point < 512] byte, or -1
};

// Printable bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves; the rest get 256, 257, ...
// in byte order. This is GPT-2's bytes_to_unicode, which every ByteLevel vocabulary is spelled in.
ByteTables make_tables() {
  ByteTables t;
  t.char_to_byte.fill(-1);
  uint32_t next_extra = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    uint32_t cp = printable ? b : next_extra++;
    append_utf8(cp, t.byte_to_char[b]);
    t.char_to_byte[cp] = int16_t(b);
  }
  return t;
}

const ByteTables& tables() {
  static const ByteTables t = make_tables();
  return t;
}

// Length of the valid UTF-8 sequence at s[0..], 0 when invalid; sets *needed to the full length a
// valid prefix would need when the input ends early (so the caller can wait for more bytes).
// Follows the Unicode "maximal subpart" rule: `valid_prefix` is how many bytes form a prefix of
// some valid sequence.
struct SeqCheck {
  size_t length;        // bytes of a complete valid sequence, 0 if none
  size_t valid_prefix;  // bytes that are a prefix of a valid sequence (>= 1 for an invalid lead)
  bool truncated;       // the input ended inside a so far valid sequence
};

SeqCheck check_sequence(const unsigned char* s, size_t n) {
  unsigned char c = s[0];
  if (c < 0x80) return {1, 1, false};
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    need = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return {0, 1, false};
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= n) return {0, i, true};
    unsigned char b = s[i];
    bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return {0, i, false};
  }
  return {need, need, false};
}

}  // namespace

const std::string& byte_to_token_char(uint8_t b) {
  return tables().byte_to_char[b];
}

std::optional<std::string> token_chars_to_bytes(std::string_view token) {
  const auto& t = tables();
  std::string out;
  out.reserve(token.size());
  const auto* s = reinterpret_cast<const unsigned char*>(token.data());
  size_t i = 0;
  while (i < token.size()) {
    SeqCheck seq = check_sequence(s + i, token.size() - i);
    if (seq.length == 0) return std::nullopt;
    uint32_t cp;
    if (seq.length == 1) {
      cp = s[i];
    } else if (seq.length == 2) {
      cp = (uint32_t(s[i] & 0x1F) << 6) | (s[i + 1] & 0x3F);
    } else {
      return std::nullopt;  // every stand-in is below U+0800
    }
    if (cp >= t.char_to_byte.size() || t.char_to_byte[cp] < 0) return std::nullopt;
    out.push_back(char(t.char_to_byte[cp]));
    i += seq.length;
  }
  return out;
}

std::string bytes_to_token_chars(std::string_view bytes) {
  const auto& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.byte_to_char[uint8_t(c)];
  return out;
}

size_t append_utf8_lossy(std::string_view bytes, bool at_end, std::string& out) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0;
  while (i < bytes.size()) {
    SeqCheck seq = check_sequence(s + i, bytes.size() - i);
    if (seq.length > 0) {
      out.append(bytes.data() + i, seq.length);
      i += seq.length;
    } else if (seq.truncated && !at_end) {
      break;  // the next token may complete it
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD for the maximal invalid subpart
      i += seq.valid_prefix;
    }
  }
  return i;
}

}  // namespace tandem::tokenizer
