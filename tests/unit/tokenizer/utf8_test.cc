// UTF-8 repair (Rust's from_utf8_lossy rules, which HF's decoder uses) and the streaming
// detokenizer's promise: whole characters only, and the same text as decode().
#include <doctest/doctest.h>

#include "test_paths.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"

using namespace tandem;

namespace {

const std::string kFffd = "\xEF\xBF\xBD";

std::string lossy(std::string_view bytes) {
  std::string out;
  CHECK(tokenizer::append_utf8_lossy(bytes, true, out) == bytes.size());
  return out;
}

bool valid_utf8(std::string_view s) {
  std::string out;
  return tokenizer::append_utf8_lossy(s, true, out) == s.size() && out == s;
}

}  // namespace

TEST_CASE("invalid bytes become one U+FFFD per maximal subpart") {
  CHECK(lossy("abc") == "abc");
  CHECK(lossy("\xFF") == kFffd);
  CHECK(lossy("\xF0\x9F\x98") == kFffd);  // truncated 4-byte sequence
  CHECK(lossy("\xF0\x9F\x98"
              "a") == kFffd + "a");
  CHECK(lossy("\xED\xA0\x80") == kFffd + kFffd + kFffd);              // surrogate: each byte
  CHECK(lossy("\xC0\xAF") == kFffd + kFffd);                          // overlong
  CHECK(lossy("\xF4\x90\x80\x80") == kFffd + kFffd + kFffd + kFffd);  // above U+10FFFF
  CHECK(lossy("\xE4\xBD\xE5\xA5\xBD") == kFffd + "\xE5\xA5\xBD");
  std::string out;
  CHECK(tokenizer::append_utf8_lossy("a\xE5\xA5", false, out) == 1);  // waits for the rest
  CHECK(out == "a");
}

TEST_CASE("the byte-level table round-trips every byte") {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(char(b));
  std::string chars = tokenizer::bytes_to_token_chars(all);
  CHECK(tokenizer::token_chars_to_bytes(chars) == all);
  CHECK(tokenizer::byte_to_token_char(' ') == "\xC4\xA0");   // 'Ġ'
  CHECK(tokenizer::byte_to_token_char('\n') == "\xC4\x8A");  // 'Ċ'
  CHECK_FALSE(tokenizer::token_chars_to_bytes(" "));         // U+0020 stands for no byte
}

TEST_CASE("streaming detokenizer emits whole characters and ends equal to decode()") {
  auto tok = Tokenizer::load(testing::qwen_tokenizer_dir());
  REQUIRE(tok.ok());
  std::string text = "日本語 😀👨‍👩‍👧 é ok <|im_end|> 한국어\n\t";
  std::vector<int32_t> ids = tok->encode(text, false);
  // Single-byte tokens split characters across pushes; add special tokens in between.
  ids.push_back(*tok->token_to_id("\xC3\xB0"));  // byte 0xF0: a lead byte left dangling
  ids.insert(ids.begin() + 3, 151644);
  for (bool skip : {true, false}) {
    IncrementalDetokenizer detok(*tok, skip);
    std::string streamed;
    for (int32_t id : ids) {
      std::string part = detok.push(id);
      CHECK(valid_utf8(part));
      streamed += part;
    }
    std::string tail = detok.flush();
    CHECK(tail == kFffd);
    CHECK(streamed + tail == tok->decode(ids, skip));
  }
}
