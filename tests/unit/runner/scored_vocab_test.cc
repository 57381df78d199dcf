// A runner whose valid vocabulary is below its lm_head's rows (a padded vocabulary, or a draft's
// --draft-vocab cap) scores only those ids: their logits are the full lm_head's, bit for bit,
// the others read -inf, greedy and drawn tokens stay below the cap, and probability rows of a
// wider width are 0 past it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "runner_driver.h"

using namespace tandem;
using namespace tandem::testing;

TEST_CASE("a runner scores only its valid ids: the same logits there, -inf and 0 past them") {
  const ModelDir model = load_golden_model("qwen2_untied_fp16_gqa4");
  RunnerDriver full(model, 16), capped(model, 16);
  const int64_t vocab = full.vocab();
  const int32_t cap = int32_t(vocab / 2) + 3;  // not a multiple of any block of rows
  capped.runner().set_valid_vocab(cap);
  TestSeq a_full, b_full, a_cap, b_cap;
  a_full.tokens = a_cap.tokens = {1, 5, 9, 14, 200};
  b_full.tokens = b_cap.tokens = {3, 3, 7};
  // 6 logit rows: the lm_head's many-row path on the CPU.
  const auto want = full.step({{&a_full, 5, true}, {&b_full, 3}});
  const auto got = capped.step({{&a_cap, 5, true}, {&b_cap, 3}});
  REQUIRE(got.size() == want.size());
  const size_t rows = got.size() / size_t(vocab);
  REQUIRE(rows == 6);
  int64_t tail_not_inf = 0;
  for (size_t r = 0; r < rows; ++r) {
    const float* g = &got[r * size_t(vocab)];
    const float* w = &want[r * size_t(vocab)];
    CHECK(std::memcmp(g, w, size_t(cap) * sizeof(float)) == 0);
    for (int64_t i = cap; i < vocab; ++i) tail_not_inf += !(std::isinf(g[i]) && g[i] < 0);
  }
  CHECK(tail_not_inf == 0);

  // Greedy ids: the argmax of the first `cap` logits, which the full row's argmax is not.
  int32_t differs = 0;
  for (size_t r = 0; r < rows; ++r) {
    const float* w = &want[r * size_t(vocab)];
    const auto capped_argmax = int32_t(std::max_element(w, w + cap) - w);
    const auto full_argmax = int32_t(std::max_element(w, w + vocab) - w);
    CHECK(capped.sample_greedy(int32_t(r)) == capped_argmax);
    differs += full_argmax != capped_argmax;
  }
  CHECK(differs > 0);  // the cap decided some row's token

  // Probabilities over the full width: 0 past the cap, and within it the rows of a runner
  // asked for `cap` ids; drawn tokens stay below the cap.
  ResolvedSampling hot;
  hot.temperature = 1.5f;
  const std::vector<int32_t> prompt = {1, 5};
  std::vector<SamplingRng> rngs_full, rngs_cap;
  for (uint64_t s = 0; s < rows; ++s) rngs_full.push_back({s + 7, 0});
  rngs_cap = rngs_full;
  std::vector<SampleRequest> reqs_full, reqs_cap;
  for (int32_t r = 0; r < int32_t(rows); ++r) {
    reqs_full.push_back({r, &hot, TokenHistory{prompt, {}}, {}, &rngs_full[size_t(r)]});
    reqs_cap.push_back({r, &hot, TokenHistory{prompt, {}}, {}, &rngs_cap[size_t(r)]});
  }
  const int32_t width = int32_t(vocab);
  std::vector<float> p_cap(rows * size_t(width), NAN), p_full(rows * size_t(cap), NAN);
  std::vector<int32_t> d_cap(rows), d_full(rows);
  capped.runner().probs(reqs_cap, width, p_cap, d_cap);
  full.runner().probs(reqs_full, cap, p_full, d_full);
  int64_t tail_nonzero = 0;
  for (size_t r = 0; r < rows; ++r) {
    CAPTURE(r);
    const float* row = &p_cap[r * size_t(width)];
    for (int32_t i = cap; i < width; ++i) tail_nonzero += row[i] != 0.0f;
    CHECK(std::memcmp(row, &p_full[r * size_t(cap)], size_t(cap) * sizeof(float)) == 0);
    CHECK(d_cap[r] == d_full[r]);
    CHECK(d_cap[r] < cap);
  }
  CHECK(tail_nonzero == 0);
}
