// Every case of tests/golden/tokenizer/<name>.json (made by scripts/golden/tokenizer_golden.py
// with HF `tokenizers` on the real Qwen3 and Llama 3.1 files) must come out identical.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "test_paths.h"
#include "tokenizer/tokenizer.h"

using namespace tandem;
using nlohmann::json;

namespace {

json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "missing golden file ", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

// Loading takes a second; every test case shares one instance per tokenizer.
const Tokenizer& tokenizer(const std::string& name) {
  static std::map<std::string, Tokenizer> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    std::string dir =
        name == "qwen3" ? testing::qwen_tokenizer_dir() : testing::llama_tokenizer_dir();
    auto tok = Tokenizer::load(dir);
    REQUIRE_MESSAGE(tok.ok(), (tok.ok() ? "" : tok.error().to_string()));
    it = cache.emplace(name, std::move(tok).value()).first;
  }
  return it->second;
}

std::string streamed(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip) {
  IncrementalDetokenizer detok(tok, skip);
  std::string text;
  for (int32_t id : ids) {
    std::string part = detok.push(id);
    // A pushed piece is always whole UTF-8: it would survive a lossy re-decode unchanged.
    text += part;
  }
  return text + detok.flush();
}

void check_golden(const std::string& name) {
  const Tokenizer& tok = tokenizer(name);
  json golden = read_json(testing::golden_dir() + "/tokenizer/" + name + ".json");
  REQUIRE(golden["encode"].size() > 50);
  REQUIRE(golden["decode"].size() > 50);
  int failures = 0;
  for (const json& c : golden["encode"]) {
    std::string text = c["text"];
    auto plain = tok.encode(text, false);
    auto with_special = tok.encode(text, true);
    CAPTURE(text);
    CHECK(plain == c["ids"].get<std::vector<int32_t>>());
    CHECK(with_special == c["ids_special"].get<std::vector<int32_t>>());
    failures += plain != c["ids"].get<std::vector<int32_t>>();
  }
  for (const json& c : golden["decode"]) {
    auto ids = c["ids"].get<std::vector<int32_t>>();
    std::string skip = c["skip"], keep = c["keep"];
    CAPTURE(c["ids"].dump());
    CHECK(tok.decode(ids, true) == skip);
    CHECK(tok.decode(ids, false) == keep);
    CHECK(streamed(tok, ids, true) == skip);
    CHECK(streamed(tok, ids, false) == keep);
  }
  // Seeded random strings aimed at the regex's edges (unusual spaces, contractions, marks).
  REQUIRE(golden["fuzz"].size() >= 1000);
  for (const json& c : golden["fuzz"]) {
    std::string text = c["text"];
    auto ids = tok.encode(text, false);
    CAPTURE(text);
    CHECK(ids == c["ids"].get<std::vector<int32_t>>());
    failures += ids != c["ids"].get<std::vector<int32_t>>();
  }
  MESSAGE(name, ": ", golden["encode"].size(), " encode and ", golden["fuzz"].size(),
          " random cases, ", failures, " failing");
}

}  // namespace

TEST_CASE("qwen3 tokenizer matches HF tokenizers") {
  check_golden("qwen3");
}
TEST_CASE("llama3.1 tokenizer matches HF tokenizers") {
  check_golden("llama3_1");
}

TEST_CASE("config from the real tokenizer_config.json files") {
  const Tokenizer& qwen = tokenizer("qwen3");
  CHECK(qwen.config().eos_token == "<|im_end|>");
  CHECK(qwen.eos_id() == 151645);
  CHECK_FALSE(qwen.bos_id());
  CHECK_FALSE(qwen.config().add_bos_token);
  CHECK(qwen.config().model_max_length == 131072);
  CHECK(qwen.config().chat_template.find("<|im_start|>") != std::string::npos);
  CHECK(qwen.vocab_size() == 151669);
  CHECK(qwen.is_special(151644));
  CHECK_FALSE(qwen.is_special(151667));  // <think> is an added token, not a special one
  CHECK(qwen.token_to_id("<think>") == 151667);
  CHECK(qwen.token_bytes(151644) == "<|im_start|>");

  const Tokenizer& llama = tokenizer("llama3_1");
  CHECK(llama.bos_id() == 128000);
  CHECK(llama.eos_id() == 128009);
  CHECK(llama.config().add_bos_token);          // from the file's TemplateProcessing
  CHECK(llama.config().model_max_length == 0);  // 1e30 means "no limit"
  CHECK(llama.vocab_size() == 128256);
  CHECK(llama.token_to_id("Ġthe").has_value());
  CHECK(llama.token_bytes(*llama.token_to_id("Ġthe")) == " the");
  CHECK(llama.token_bytes(-1).empty());
  CHECK(llama.token_bytes(1 << 30).empty());
}

TEST_CASE("bytes that are not UTF-8 encode like their U+FFFD replacement") {
  for (const char* name : {"qwen3", "llama3_1"}) {
    const Tokenizer& tok = tokenizer(name);
    CHECK(tok.encode("a\xff"
                     "b",
                     false) == tok.encode("a\xEF\xBF\xBD"
                                          "b",
                                          false));
    CHECK(tok.encode("\xF0\x9F\x98", false) == tok.encode("\xEF\xBF\xBD", false));
  }
}

TEST_CASE("decode skips ids outside the vocabulary") {
  const Tokenizer& tok = tokenizer("qwen3");
  auto ids = tok.encode("hi there", false);
  std::vector<int32_t> with_bad = {-5, ids[0], 1 << 29, ids[1]};
  CHECK(tok.decode(with_bad, false) == "hi there");
}

TEST_CASE("long and repetitive inputs (deep regex backtracking, long BPE words)") {
  const Tokenizer& tok = tokenizer("llama3_1");
  std::string spaces(200000, ' ');
  std::string text = spaces + "x" + std::string(100000, '\n') + std::string(50000, 'a');
  auto ids = tok.encode(text, false);
  CHECK(tok.decode(ids, false) == text);
  auto again = tok.encode(text, false);
  CHECK(ids == again);  // the word cache gives what the merge loop gave
}

TEST_CASE("encoding from several threads at once gives the single-threaded ids") {
  const Tokenizer& tok = tokenizer("qwen3");
  json prompts = read_json(testing::golden_dir() + "/tokenizer/bench_prompts.json");
  std::vector<std::string> texts;
  for (auto& [kind, list] : prompts.items()) {
    for (const auto& t : list) texts.push_back(t.get<std::string>());
  }
  std::vector<std::vector<int32_t>> expected;
  for (const auto& t : texts) expected.push_back(tok.encode(t, false));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int round = 0; round < 3; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          size_t k = (i + size_t(w) * 5) % texts.size();  // threads start at different prompts
          mismatches[size_t(w)] += tok.encode(texts[k], false) != expected[k];
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(mismatches == std::vector<int>(4, 0));
}
