// tokenizer.json / tokenizer_config.json handling on small hand-made files: merge formats and
// order, ignore_merges, added-token options, post-processing, and the errors for components
// tandem does not implement.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"

using namespace tandem;
using nlohmann::json;

namespace {

// A byte-level BPE whose ids 0..255 are the bytes themselves; `extra` tokens get 256, 257, ...
json tiny_tokenizer(const std::vector<std::string>& extra, const json& merges) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[tokenizer::byte_to_token_char(uint8_t(b))] = b;
  int next = 256;
  for (const auto& t : extra) vocab[t] = next++;
  return {{"version", "1.0"},
          {"normalizer", nullptr},
          {"pre_tokenizer", nullptr},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"added_tokens", json::array()},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

Tokenizer make(const json& tokenizer_json, const json& config = json()) {
  auto tok = Tokenizer::from_json(tokenizer_json.dump(), config.is_null() ? "" : config.dump());
  REQUIRE_MESSAGE(tok.ok(), (tok.ok() ? "" : tok.error().to_string()));
  return std::move(tok).value();
}

void require_error(const json& tokenizer_json, const std::string& names) {
  auto tok = Tokenizer::from_json(tokenizer_json.dump(), "");
  REQUIRE_FALSE(tok.ok());
  CHECK(tok.error().code == ErrorCode::kTokenizer);
  CHECK_MESSAGE(tok.error().message.find(names) != std::string::npos, tok.error().message);
}

using Ids = std::vector<int32_t>;

}  // namespace

TEST_CASE("merges apply by rank, leftmost first, in both file formats") {
  // ab=256 bc=257 abc=258
  std::vector<std::string> extra = {"ab", "bc", "abc"};
  for (const json& merges :
       {json{"b c", "a b", "a bc"}, json::array({json::array({"b", "c"}), json::array({"a", "b"}),
                                                 json::array({"a", "bc"})})}) {
    Tokenizer tok = make(tiny_tokenizer(extra, merges));
    CHECK(tok.encode("abc", false) == Ids{258});  // b+c (rank 0) wins over a+b (rank 1)
    CHECK(tok.encode("abab", false) == Ids{256, 256});
    CHECK(tok.encode("xbc", false) == Ids{'x', 257});
    CHECK(tok.decode(Ids{258, 'x'}, false) == "abcx");
  }
  Tokenizer tok = make(tiny_tokenizer({"aa"}, json{"a a"}));
  CHECK(tok.encode("aaa", false) == Ids{256, 'a'});  // overlapping pairs: the left one merges
  CHECK(tok.encode("aaaa", false) == Ids{256, 256});
}

TEST_CASE("vocab and merges read in any order; a repeated vocab key keeps its last id") {
  // The parser takes both lists out of the document as it reads them (tokenizer_json.cc):
  // the order of the file's members must not matter, nor lists of those names elsewhere.
  const json j = tiny_tokenizer({"ab", "xy"}, json::array({"a b"}));
  const std::string reordered = R"({"decoder": {"type": "ByteLevel"}, "added_tokens": [],
      "normalizer": null, "pre_tokenizer": null, "post_processor": null,
      "extra": {"vocab": {"ab": 5}, "merges": ["x y"]},
      "model": {"merges": ["a b"], "type": "BPE", "vocab": )" +
                                j["model"]["vocab"].dump() + "}}";
  auto tok = Tokenizer::from_json(reordered, "");
  REQUIRE_MESSAGE(tok.ok(), tok.error().to_string());
  CHECK(tok->encode("abxy", false) == Ids{256, 'x', 'y'});
  // "ab" twice: the last value wins, as in a parsed JSON object.
  std::string twice = j.dump();
  const size_t at = twice.find(R"("ab":256)");
  REQUIRE(at != std::string::npos);
  twice.insert(at, R"("ab":300,)");
  auto last = Tokenizer::from_json(twice, "");
  REQUIRE_MESSAGE(last.ok(), last.error().to_string());
  CHECK(last->encode("ab", false) == Ids{256});
}

TEST_CASE("ignore_merges takes a whole piece found in the vocabulary") {
  json j = tiny_tokenizer({"ab", "abc"}, json{"a b"});
  CHECK(make(j).encode("abc", false) == Ids{256, 'c'});
  j["model"]["ignore_merges"] = true;
  CHECK(make(j).encode("abc", false) == Ids{257});
  CHECK(make(j).encode("abcabc", false) == Ids{256, 'c', 256, 'c'});  // not a vocabulary entry
}

TEST_CASE("Split pre-tokenizer isolates matches and keeps gaps") {
  json j = tiny_tokenizer({"ab"}, json{"a b"});
  j["pre_tokenizer"] = {{"type", "Split"},
                        {"pattern", {{"Regex", "\\s+"}}},
                        {"behavior", "Isolated"},
                        {"invert", false}};
  CHECK(make(j).encode("ab a b", false) == Ids{256, ' ', 'a', ' ', 'b'});
  j["pre_tokenizer"]["behavior"] = "Removed";
  CHECK(make(j).encode("ab a b", false) == Ids{256, 'a', 'b'});
  // \s means what it means to Oniguruma (HF's regex engine): U+0085 and U+3000 are spaces,
  // U+180E and U+FEFF are not (PCRE2 alone would take U+180E).
  CHECK(make(j).encode("a\xC2\x85"
                       "b\xE3\x80\x80",
                       false) == Ids{'a', 'b'});
  CHECK(make(j).encode("a\xE1\xA0\x8E"
                       "b\xEF\xBB\xBF",
                       false) == Ids{'a', 0xE1, 0xA0, 0x8E, 'b', 0xEF, 0xBB, 0xBF});
  j["pre_tokenizer"]["pattern"] = {{"Regex", "[\\s]+"}};  // \s inside a class
  CHECK(make(j).encode("a\xE1\xA0\x8E"
                       "b\xC2\x85"
                       "c",
                       false) == Ids{'a', 0xE1, 0xA0, 0x8E, 'b', 'c'});
  j["pre_tokenizer"]["pattern"] = {{"Regex", "\\S+"}};
  CHECK(make(j).encode("a\xE1\xA0\x8E b", false) == Ids{' '});
  j["pre_tokenizer"]["pattern"] = {{"Regex", "\\s+"}};
  j["pre_tokenizer"]["behavior"] = "Contiguous";
  require_error(j, "Contiguous");
  j["pre_tokenizer"]["behavior"] = "Isolated";
  j["pre_tokenizer"]["pattern"] = {{"Regex", "(unclosed"}};
  require_error(j, "regex");
}

TEST_CASE("added tokens: longest match, lstrip/rstrip, single_word, normalized, special") {
  json j = tiny_tokenizer({}, json::array());
  j["normalizer"] = {{"type", "NFC"}};
  auto added = [](int id, const std::string& content, bool special) {
    return json{{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", special}};
  };
  j["added_tokens"] =
      json::array({added(300, "<s>", true), added(301, "<s>x", false), added(302, "<m>", true),
                   added(303, "<w>", false), added(304, "\xC3\xA9", false)});
  j["added_tokens"][2]["lstrip"] = true;
  j["added_tokens"][2]["rstrip"] = true;
  j["added_tokens"][3]["single_word"] = true;
  j["added_tokens"][4]["normalized"] = true;
  Tokenizer tok = make(j);
  CHECK(tok.encode("a<s>xb<s>", false) == Ids{'a', 301, 'b', 300});  // "<s>x" is longer
  CHECK(tok.encode("a  <m>  b", false) == Ids{'a', 302, 'b'});       // spaces absorbed
  CHECK(tok.encode("x<w>", false) == Ids{'x', '<', 'w', '>'});       // inside a word
  CHECK(tok.encode("x <w> y", false) == Ids{'x', ' ', 303, ' ', 'y'});
  // Word characters are letters and numbers of any script; punctuation is a boundary.
  CHECK(tok.encode("\xC3\xBC<w>", false).size() == 5);                        // ü<w>: no match
  CHECK(tok.encode("\xEF\xBC\x8C<w>", false) == Ids{0xEF, 0xBC, 0x8C, 303});  // ，<w>
  CHECK(tok.encode("a\xE3\x80\x80<m>\n", false) == Ids{'a', 302});  // U+3000 is whitespace
  CHECK(tok.encode("e\xCC\x81", false) == Ids{304});  // e + combining acute, NFC'd, then matched
  CHECK(tok.decode(Ids{'a', 300, 'b', 301}, true) == "ab<s>x");
  CHECK(tok.decode(Ids{'a', 300, 'b', 301}, false) == "a<s>b<s>x");
  CHECK(tok.is_special(300));
  CHECK_FALSE(tok.is_special(301));
  CHECK(tok.vocab_size() == 305);
  CHECK(tok.token_bytes(280).empty());  // a hole in the id space
}

TEST_CASE("post-processing: the file's template wins, else add_bos/add_eos from the config") {
  json j = tiny_tokenizer({}, json::array());
  j["added_tokens"] = json::array(
      {json{{"id", 300}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
       json{{"id", 301}, {"content", "</s>"}, {"special", true}, {"normalized", false}}});
  json config = {{"bos_token", {{"content", "<s>"}, {"lstrip", false}}},
                 {"eos_token", "</s>"},
                 {"add_bos_token", true},
                 {"add_eos_token", true},
                 {"model_max_length", 4096},
                 {"chat_template", json::array({json{{"name", "tool_use"}, {"template", "T"}},
                                                json{{"name", "default"}, {"template", "D"}}})}};
  Tokenizer tok = make(j, config);
  CHECK(tok.encode("a", true) == Ids{300, 'a', 301});
  CHECK(tok.encode("a", false) == Ids{'a'});
  CHECK(tok.config().chat_template == "D");
  CHECK(tok.config().model_max_length == 4096);
  CHECK(tok.bos_id() == 300);
  CHECK(tok.eos_id() == 301);

  j["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       json::array({json{{"type", "ByteLevel"}},
                    json{{"type", "TemplateProcessing"},
                         {"single", json::array({json{{"SpecialToken", {{"id", "<s>"}}}},
                                                 json{{"Sequence", {{"id", "A"}}}}})},
                         {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {300}}}}}}}})}};
  Tokenizer templated = make(j, config);
  CHECK(templated.encode("a", true) == Ids{300, 'a'});  // the template has no eos
  CHECK(templated.config().add_bos_token);
  CHECK_FALSE(templated.config().add_eos_token);
  // An id past the vocabulary would reach the model as a prompt token.
  j["post_processor"]["processors"][1]["special_tokens"]["<s>"]["ids"] = {2000000000};
  require_error(j, "special token '<s>' has id 2000000000, not a token of the vocabulary");

  j["post_processor"] = {{"type", "RobertaProcessing"}};
  require_error(j, "RobertaProcessing");
}

TEST_CASE("components tandem does not implement are errors naming them") {
  json j = tiny_tokenizer({}, json::array());
  json bad = j;
  bad["model"]["type"] = "Unigram";
  require_error(bad, "Unigram");
  bad = j;
  bad["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers", json::array({json{{"type", "NFC"}}, json{{"type", "Lowercase"}}})}};
  require_error(bad, "Lowercase");
  bad = j;
  bad["decoder"] = {{"type", "WordPiece"}};
  require_error(bad, "WordPiece");
  bad = j;
  bad["model"]["byte_fallback"] = true;
  require_error(bad, "byte_fallback");
  bad = j;
  bad["pre_tokenizer"] = {{"type", "Whitespace"}};
  require_error(bad, "Whitespace");
  bad = tiny_tokenizer({}, json{"a b"});  // "ab" is not in the vocabulary
  require_error(bad, "merges[0]");
  require_error(json::array(), "not a JSON object");
  bad = j;
  bad["model"]["merges"] = {{"a", "b"}};  // an object, not a list
  require_error(bad, "merges");
  bad = j;
  bad["model"]["vocab"]["a"] = "not an id";
  require_error(bad, "model.vocab: the id of 'a' is not an integer");
  bad = j;
  bad["model"]["vocab"]["a"] = json::array({97});  // a container, not an id
  require_error(bad, "the id of 'a' is not an integer");
  bad = j;
  bad["model"]["vocab"]["a"] = 2000000000;  // would size the per-id tables to 2e9 entries
  require_error(bad, "model.vocab: id 2000000000 of 'a' is past");
  bad = j;
  bad["model"]["vocab"]["a"] = int64_t(1) << 32;  // not truncated to 0
  require_error(bad, "is past");
  bad = j;
  bad["added_tokens"] = json::array({json{{"id", 2000000000}, {"content", "<x>"}}});
  require_error(bad, "added_tokens entry");
  bad = j;
  bad["model"]["vocab"] = json::array({0, 1});
  require_error(bad, "model.vocab is missing or empty");
  for (const json& member : {json(7), json{{"a", "b"}}, json::array({"a"})}) {
    bad = tiny_tokenizer({"ab"}, json::array({member}));
    require_error(bad, "merges[0]");
  }
  auto garbage = Tokenizer::from_json("{not json", "");
  CHECK_FALSE(garbage.ok());
  auto bad_config = Tokenizer::from_json(j.dump(), R"({"bos_token": 5})");
  REQUIRE_FALSE(bad_config.ok());
  CHECK(bad_config.error().message.find("bos_token") != std::string::npos);
  auto missing = Tokenizer::load("/nonexistent/model");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code == ErrorCode::kIo);
}
