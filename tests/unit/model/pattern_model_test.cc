// Pattern models (model/pattern_model.h): the next-token map is one cycle with a controllable
// divergence, and the written weights make lm_head . E[t] peak at next(t).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "model/mkmodel.h"
#include "model/mkmodel_presets.h"
#include "model/model_dir.h"
#include "model/pattern_model.h"
#include "model_test_util.h"

using namespace tandem;
using namespace tandem::mkmodel;
using namespace tandem::testing;

namespace {

const ModelConfig& tiny_qwen() {
  const Preset* p = find_preset("tiny-qwen");
  REQUIRE(p != nullptr);
  return p->config;
}

float bf16_at(const TensorView& t, int64_t i) {
  uint16_t bits;
  std::memcpy(&bits, t.data + 2 * i, 2);
  return bf16_to_f32(bits);
}

}  // namespace

TEST_CASE("the pattern map is one cycle below the special ids, and sources() inverts next()") {
  const PatternMap map(PatternOptions{5, 0.25, 0}, tiny_qwen());
  REQUIRE(map.tokens() == 151643);  // ids below bos: no special or padding id in the cycle
  int64_t steps = 0;
  int32_t t = 0;
  do {
    t = map.base_next(t);
    ++steps;
  } while (t != 0 && steps <= map.tokens());
  CHECK(steps == map.tokens());
  int64_t divergent = 0, listed = 0, unlisted = 0;
  for (int32_t s = 0; s < map.tokens(); ++s) {
    divergent += map.diverges(s);
    const auto src = map.sources(map.next(s));
    unlisted += src[0] != s && src[1] != s;
  }
  CHECK(unlisted == 0);
  for (int32_t j = 0; j < map.tokens(); ++j) {
    for (int32_t s : map.sources(j)) listed += s >= 0;
  }
  CHECK(listed == map.tokens());  // every id is the source of exactly one row
  CHECK(std::abs(double(divergent) / double(map.tokens()) - 0.25) < 0.01);
  CHECK(map.sources(151700) == std::array<int32_t, 2>{-1, -1});
}

TEST_CASE("two pattern maps of one seed disagree on the difference of their divergences") {
  const PatternMap a(PatternOptions{9, 0.1, 0}, tiny_qwen());
  const PatternMap b(PatternOptions{9, 0.35, 0}, tiny_qwen());
  const PatternMap other(PatternOptions{10, 0.1, 0}, tiny_qwen());
  int64_t differ = 0, nested = 0, other_cycle = 0;
  for (int32_t t = 0; t < a.tokens(); ++t) {
    differ += a.next(t) != b.next(t);
    nested += a.diverges(t) && !b.diverges(t);
    other_cycle += a.base_next(t) != other.base_next(t);
  }
  CHECK(nested == 0);
  CHECK(std::abs(double(differ) / double(a.tokens()) - 0.25) < 0.01);
  CHECK(other_cycle > a.tokens() / 2);  // the seed picks the cycle
}

TEST_CASE("a pattern model's lm_head scores next(t) highest for the embedding of t") {
  ScratchDir dir("pattern");
  MkModelOptions o;
  o.preset = "tiny-qwen";
  o.out_dir = dir.path.string();
  o.seed = 4;
  o.pattern = PatternOptions{21, 0.3, 4096};
  REQUIRE(make_model(o).ok());
  CHECK(std::filesystem::exists(dir.path / "pattern.json"));
  auto model = load_model_dir(o.out_dir);
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  const ModelConfig& c = model->config;
  CHECK_FALSE(c.tie_word_embeddings);  // untied, with the tied model's lm_head shape and cost
  const TensorView& embed = *model->tensors.embed_tokens;
  const TensorView& head = *model->tensors.lm_head;
  REQUIRE(&embed != &head);
  const PatternMap map(*o.pattern, c);
  REQUIRE(map.tokens() == 4096);
  const int64_t h = c.hidden_size;
  std::vector<float> head_f(size_t(c.vocab_size * h));  // [vocab, hidden]
  for (size_t i = 0; i < head_f.size(); ++i) head_f[i] = bf16_at(head, int64_t(i));
  int hits = 0, tried = 0;
  for (int32_t t = 0; t < map.tokens(); t += 137, ++tried) {
    std::vector<float> e(static_cast<size_t>(h));
    for (int64_t x = 0; x < h; ++x) e[size_t(x)] = bf16_at(embed, t * h + x);
    int64_t best = -1;
    float best_score = -1e30f;
    for (int64_t j = 0; j < c.vocab_size; ++j) {
      float score = 0;
      for (int64_t x = 0; x < h; ++x) score += head_f[size_t(j * h + x)] * e[size_t(x)];
      if (score > best_score) best_score = score, best = j;
    }
    hits += best == map.next(t);
  }
  CHECK(hits >= tried * 95 / 100);
  // The residual writes are scaled down: o_proj's std is far below the 0.02 of the init.
  const TensorView& o_proj = *model->tensors.layers[0].o_proj;
  double sq = 0;
  for (int64_t i = 0; i < 4096; ++i) sq += double(bf16_at(o_proj, i)) * bf16_at(o_proj, i);
  const double std = std::sqrt(sq / 4096);
  CHECK(std == doctest::Approx(0.02 * pattern_residual_scale(c)).epsilon(0.1));
  CHECK(pattern_residual_scale(c) < 0.2);
}

TEST_CASE("mkmodel refuses a pattern divergence outside [0, 1]") {
  MkModelOptions o;
  o.preset = "tiny-qwen";
  o.out_dir = "/tmp/never-written";
  o.pattern = PatternOptions{1, 1.5, 0};
  auto st = make_model(o);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code == ErrorCode::kInvalidArgument);
  o.pattern = PatternOptions{1, 0.5, 2};
  CHECK_FALSE(make_model(o).ok());
}
