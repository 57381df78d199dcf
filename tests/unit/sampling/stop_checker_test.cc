#include <doctest/doctest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "sampling/stop_checker.h"

using namespace tandem;

namespace {

constexpr int32_t kEos = 2;
constexpr int32_t kText = 100;  // any ordinary token

ResolvedSampling params(std::vector<std::string> stop = {}, int32_t max_tokens = 100,
                        int32_t min_tokens = 0) {
  ResolvedSampling p;
  p.stop = std::move(stop);
  p.eos_token_ids = {kEos};
  p.max_tokens = max_tokens;
  p.min_tokens = min_tokens;
  return p;
}

// Feeds pieces as ordinary tokens; returns the streamed text (verdicts then flush) and the reason.
struct Run {
  std::string streamed;
  std::optional<FinishReason> reason;
  int32_t tokens_used = 0;
};
Run feed(StopChecker& checker, const std::vector<std::string>& pieces, std::string tail = "") {
  Run run;
  for (const std::string& piece : pieces) {
    run.tokens_used++;
    StopChecker::Verdict v = checker.push(kText, piece, run.tokens_used);
    run.streamed += v.text;
    if (v.finished) {
      run.reason = v.finished;
      break;
    }
  }
  run.streamed += checker.flush(tail);
  return run;
}

}  // namespace

TEST_CASE("eos finishes with its own text dropped; ignore_eos keeps going") {
  StopChecker c(params());
  CHECK(c.push(kText, "Hi", 1).text == "Hi");
  StopChecker::Verdict v = c.push(kEos, "<|endoftext|>", 2);
  CHECK(v.finished == FinishReason::kStop);
  CHECK(v.text.empty());
  CHECK(c.flush("") == "");

  ResolvedSampling p = params();
  p.ignore_eos = true;
  p.eos_token_ids.clear();  // what resolve_sampling gives with ignore_eos
  StopChecker ignoring(p);
  CHECK_FALSE(ignoring.push(kEos, "", 1).finished);
}

TEST_CASE("stop_token_ids finish the request") {
  ResolvedSampling p = params();
  p.stop_token_ids = {50};
  StopChecker c(p);
  CHECK_FALSE(c.push(kText, "a", 1).finished);
  StopChecker::Verdict v = c.push(50, "<stop>", 2);
  CHECK(v.finished == FinishReason::kStop);
  CHECK(v.text.empty());
}

TEST_CASE("max_tokens finishes with length and releases held text") {
  StopChecker c(params({"xyz"}, 2));
  StopChecker::Verdict v = c.push(kText, "abx", 1);
  CHECK(v.text == "ab");  // "x" may start "xyz"
  CHECK(c.held_bytes() == 1);
  v = c.push(kText, "w", 2);
  CHECK(v.finished == FinishReason::kLength);
  CHECK(v.text == "xw");
  CHECK(c.flush("") == "");
}

TEST_CASE("eos on the last allowed token reports length, as vLLM does") {
  StopChecker c(params({}, 1));
  CHECK(c.push(kEos, "", 1).finished == FinishReason::kLength);
}

TEST_CASE("a stop string inside one piece cuts the text before it") {
  StopChecker c(params({"."}));
  const Run run = feed(c, {"Hello", " world. Bye"});
  CHECK(run.reason == FinishReason::kStop);
  CHECK(run.streamed == "Hello world");
  CHECK(c.matched_stop() == std::optional<std::string>("."));
}

TEST_CASE("a stop string spanning tokens is found, and held text is never streamed") {
  StopChecker c(params({"lo wo"}));
  StopChecker::Verdict v = c.push(kText, "Hel", 1);
  CHECK(v.text == "He");  // "l" could begin "lo wo"
  v = c.push(kText, "lo ", 2);
  CHECK(v.text == "l");  // "lo " still could
  CHECK(c.held_bytes() == 3);
  v = c.push(kText, "wor", 3);
  CHECK(v.finished == FinishReason::kStop);
  CHECK(v.text.empty());
  CHECK(c.flush("ld") == "");  // nothing after a stop string is output
}

TEST_CASE("held text is released once it cannot begin a stop string") {
  StopChecker c(params({"</answer>"}));
  CHECK(c.push(kText, "x </", 1).text == "x ");
  CHECK(c.push(kText, "ans", 2).text.empty());
  CHECK(c.push(kText, "wer", 3).text.empty());  // "</answer" is one byte short
  CHECK(c.push(kText, "!", 4).text == "</answer!");
}

TEST_CASE("the earliest of several matching stop strings wins") {
  StopChecker c(params({"cd", "bcde"}));
  const Run run = feed(c, {"ab", "cdef"});
  CHECK(run.streamed == "a");
  CHECK(c.matched_stop() == std::optional<std::string>("bcde"));
}

TEST_CASE("flush at an abort returns held text and the detokenizer's tail") {
  StopChecker c(params({"xyz"}));
  CHECK(c.push(kText, "abx", 1).text == "ab");
  CHECK(c.flush("!") == "x!");
}

TEST_CASE("min_tokens: eos, stop ids and stop strings are ignored before it") {
  ResolvedSampling p = params({"STOP"}, 100, 4);
  p.stop_token_ids = {50};
  StopChecker c(p);
  StopChecker::Verdict v = c.push(kEos, "", 1);
  CHECK_FALSE(v.finished);
  v = c.push(50, "s", 2);
  CHECK_FALSE(v.finished);
  CHECK(v.text == "s");
  // A stop string completed before min_tokens is plain text...
  v = c.push(kText, "STOP", 3);
  CHECK_FALSE(v.finished);
  CHECK(v.text == "STOP");
  // ...and at min_tokens the checks are on: eos finishes.
  v = c.push(kEos, "", 4);
  CHECK(v.finished == FinishReason::kStop);
}

TEST_CASE("min_tokens: a stop string completed at min_tokens counts, even if begun before") {
  StopChecker c(params({"STOP"}, 100, 2));
  CHECK(c.push(kText, "abST", 1).text == "ab");  // held even though checks are off
  StopChecker::Verdict v = c.push(kText, "OPcd", 2);
  CHECK(v.finished == FinishReason::kStop);
  CHECK(v.text.empty());
}

TEST_CASE("streamed text always equals the reference cut, for every way to split the text") {
  // Reference: the first piece boundary whose prefix contains a stop string; cut at the
  // earliest occurrence in that prefix.
  const std::string text = "the answer is <<42>> and then more >> text";
  const std::vector<std::string> stops = {"<<4", ">> t", "42>>x"};
  for (size_t a = 1; a < text.size(); ++a) {
    for (size_t b = a + 1; b < text.size(); b += 3) {
      const std::vector<std::string> pieces = {text.substr(0, a), text.substr(a, b - a),
                                               text.substr(b)};
      std::string want;
      std::optional<FinishReason> want_reason;
      size_t end = 0;
      for (const std::string& piece : pieces) {
        end += piece.size();
        const std::string prefix = text.substr(0, end);
        size_t cut = std::string::npos;
        for (const std::string& s : stops) cut = std::min(cut, prefix.find(s));
        if (cut != std::string::npos) {
          want = text.substr(0, cut);
          want_reason = FinishReason::kStop;
          break;
        }
      }
      if (!want_reason) want = text;
      StopChecker c(params(stops));
      // Every prefix streamed so far must be a prefix of the final text: nothing is retracted.
      std::string streamed;
      int32_t n = 0;
      std::optional<FinishReason> reason;
      for (const std::string& piece : pieces) {
        StopChecker::Verdict v = c.push(kText, piece, ++n);
        streamed += v.text;
        REQUIRE(want.compare(0, streamed.size(), streamed) == 0);
        if (v.finished) {
          reason = v.finished;
          break;
        }
      }
      streamed += c.flush("");
      INFO("split at " << a << ", " << b);
      CHECK(streamed == want);
      CHECK(reason == want_reason);
    }
  }
}
