// Batching must not change results: sequences of different lengths in one forward, a prefill
// chunk mixed with decode tokens, and KV pages outside the block tables (poisoned with NaN)
// give the same logits, bit for bit, as each sequence run alone.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "runner_driver.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

std::vector<int32_t> make_prompt(int32_t len, int32_t salt, int64_t vocab) {
  std::vector<int32_t> p;
  for (int32_t i = 0; i < len; ++i) p.push_back(int32_t((i * 37 + salt * 101 + 11) % vocab));
  return p;
}

// Rows [row, row + count) of a [rows, vocab] logits block.
std::vector<float> rows_of(const std::vector<float>& logits, int64_t vocab, size_t row,
                           size_t count = 1) {
  return {logits.begin() + int64_t(row) * vocab, logits.begin() + int64_t(row + count) * vocab};
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("sequences of different lengths in one forward equal each alone") {
  for (const char* name : {"qwen2_untied_fp16_gqa4", "llama_untied_bf16_llama3rope"}) {
    const ModelDir model = load_golden_model(name);
    for (int32_t page_size : {1, 16}) {
      CAPTURE(name);
      CAPTURE(page_size);
      RunnerDriver alone(model, page_size), batched(model, page_size);
      alone.poison_all_pages();
      batched.poison_all_pages();
      const int64_t vocab = alone.vocab();
      const std::vector<int32_t> lengths = {5, 17, 33, 1, 16};
      std::vector<TestSeq> a(lengths.size()), b(lengths.size());
      std::vector<StepPart> parts;
      for (size_t i = 0; i < lengths.size(); ++i) {
        a[i].tokens = b[i].tokens = make_prompt(lengths[i], int32_t(i), vocab);
        parts.push_back({&b[i], lengths[i]});
      }
      const auto together = batched.step(parts);
      REQUIRE(together.size() == lengths.size() * size_t(vocab));
      for (size_t i = 0; i < lengths.size(); ++i) {
        CAPTURE(i);
        const auto single = alone.step({{&a[i], lengths[i]}});
        CHECK(bit_equal(rows_of(together, vocab, i), single));
      }
    }
  }
}

TEST_CASE("a prefill chunk and decode tokens in one forward equal each alone") {
  const ModelDir model = load_golden_model("qwen2_tied_bf16_sharded");
  for (int32_t page_size : {1, 16}) {
    CAPTURE(page_size);
    // Runs the same schedule either mixed or one sequence per forward; returns the logits of
    // the second phase: A's 24-token chunk (every row), then B's and C's decode tokens.
    auto run = [&](bool mixed) {
      RunnerDriver d(model, page_size);
      d.poison_all_pages();
      const int64_t vocab = d.vocab();
      TestSeq A, B, C;
      A.tokens = make_prompt(40, 1, vocab);
      B.tokens = make_prompt(20, 2, vocab);
      C.tokens = make_prompt(9, 3, vocab);
      d.step({{&A, 16}});
      d.step({{&B, 20}});
      B.tokens.push_back(d.sample_greedy(0));
      d.step({{&C, 9}});
      C.tokens.push_back(d.sample_greedy(0));
      if (mixed) return d.step({{&A, 24, /*all_logits=*/true}, {&B, 1}, {&C, 1}});
      auto out = d.step({{&A, 24, true}});
      auto b = d.step({{&B, 1}});
      auto c = d.step({{&C, 1}});
      out.insert(out.end(), b.begin(), b.end());
      out.insert(out.end(), c.begin(), c.end());
      return out;
    };
    const auto mixed = run(true);
    const auto separate = run(false);
    REQUIRE(mixed.size() == separate.size());
    CHECK(bit_equal(mixed, separate));
    // A rerun of the same schedule is bit-identical too.
    CHECK(bit_equal(run(true), mixed));
  }
}

TEST_CASE("pages outside the block table do not change results") {
  const ModelDir model = load_golden_model("llama_tied_fp32");
  RunnerDriver clean(model, 16), poisoned(model, 16);
  poisoned.poison_all_pages();
  const auto prompt = make_prompt(37, 5, clean.vocab());
  std::vector<float> l_clean, l_poisoned;
  const auto t_clean = clean.greedy(prompt, 7, 6, &l_clean);
  const auto t_poisoned = poisoned.greedy(prompt, 7, 6, &l_poisoned);
  CHECK(t_clean == t_poisoned);
  CHECK(bit_equal(l_clean, l_poisoned));
  for (float v : l_poisoned) REQUIRE(std::isfinite(v));
}

TEST_CASE("the runner keeps working after its ModelDir moves (the engine moves it)") {
  auto loaded = load_model_dir(golden_model_dir("llama_tied_fp32"));
  REQUIRE(loaded.ok());
  auto model = std::make_unique<ModelDir>(std::move(loaded).value());
  RunnerDriver d(*model, 16);
  const auto prompt = make_prompt(9, 4, d.vocab());
  std::vector<float> before, after;
  const auto t_before = d.greedy(prompt, 4, 3, &before);
  ModelDir moved = std::move(*model);
  // The old object now holds another model: a runner that still read through it would
  // compute other logits (or crash).
  auto other = load_model_dir(golden_model_dir("qwen2_tied_bf16_sharded"));
  REQUIRE(other.ok());
  *model = std::move(other).value();
  const auto t_after = d.greedy(prompt, 4, 3, &after);
  CHECK(t_before == t_after);
  CHECK(bit_equal(before, after));
}

TEST_CASE("the thread count does not change results") {
  const ModelDir model = load_golden_model("qwen2_untied_fp16_gqa4");
  const auto prompt = make_prompt(45, 6, model.config.vocab_size);
  std::vector<int32_t> tokens[3];
  std::vector<float> logits[3];
  const int32_t threads[3] = {1, 2, 3};
  for (int i = 0; i < 3; ++i) {
    RunnerDriver d(model, 16, 64, threads[i]);
    tokens[i] = d.greedy(prompt, 16, 4, &logits[i]);
  }
  for (int i = 1; i < 3; ++i) {
    CAPTURE(threads[i]);
    CHECK(tokens[i] == tokens[0]);
    CHECK(bit_equal(logits[i], logits[0]));
  }
}
