// The int4 GEMV's launch plans (kernels/int4_plan.h) on the shapes they were swept on: the
// launcher runs whatever they return, so a change here changes every AWQ / GPTQ Linear's grid.
#include "int4_plan.h"

#include <doctest/doctest.h>

namespace tandem::kernels::int4_plan {
namespace {

constexpr int kH200Sms = 132;
constexpr int kH200Slots = 3 * kH200Sms;  // sliced blocks one wave holds (three an SM)

// A plan as a pair, and how often the launcher's occupancy query was asked.
struct Picked {
  int tiles_per_block, parts, asked;
};

Picked pick(int n, int k, int m, bool groups128, bool clusters = true, int slots = kH200Slots) {
  int asked = 0;
  const Plan plan = choose_plan((n + 15) / 16, k, m, groups128, kH200Sms, clusters, [&] {
    ++asked;
    return slots;
  });
  return {plan.tiles_per_block, plan.parts, asked};
}

void check(const Picked& got, int tiles_per_block, int parts) {
  CHECK(got.tiles_per_block == tiles_per_block);
  CHECK(got.parts == parts);
}

}  // namespace

TEST_CASE("int4 plan: many tiles stay unsliced up to 8 tokens, never asking the occupancy") {
  // Qwen2.5-7B gate|up: 37,888 rows = 2,368 tiles, >= 16 a SM.
  const Picked one = pick(37888, 3584, 1, true);
  check(one, 4, 1);
  CHECK(one.asked == 0);
  check(pick(37888, 3584, 4, true), 4, 1);
  check(pick(37888, 3584, 5, true), 8, 1);  // 8 tiles a block from 5 tokens (v18)
  check(pick(37888, 3584, 8, false), 8, 1);
  // Past 8 tokens one tile a warp in 2 slices where clusters exist.
  check(pick(37888, 3584, 16, true), 8, 2);
  check(pick(37888, 3584, 16, true, false), 8, 1);
  // 8-16 tiles a SM: 2 tiles a block (16,896 rows = 1,056 tiles = 8 a SM).
  check(pick(16896, 3584, 1, false), 2, 1);
}

TEST_CASE("int4 plan: few tiles sliced over as many cluster blocks as one wave holds") {
  // Qwen2.5-7B down (3,584 rows = 224 tiles, k = 18,944): one token on the group-128 path stays
  // unsliced (v20's re-sweep); other paths, or more tokens, slice k 8 ways (28 x 8 = 224 blocks).
  check(pick(3584, 18944, 1, true), 1, 1);
  check(pick(3584, 18944, 1, false), 8, 8);
  check(pick(3584, 18944, 5, true), 8, 8);
  // Short rows at 1-2 tokens stay unsliced; from 3 tokens they slice.
  const Picked o = pick(3584, 3584, 2, false);
  check(o, 1, 1);
  CHECK(o.asked == 0);
  check(pick(3584, 3584, 3, false), 8, 8);
  // The wave bounds the slices: 28 tile blocks x 2 fit 100 slots, x 4 do not.
  check(pick(3584, 18944, 5, true, true, 100), 8, 2);
  // Too few slots for 2 slices: one tile a block, unsliced.
  check(pick(3584, 18944, 5, true, true, 40), 1, 1);
  // No clusters (before sm_90): never sliced.
  check(pick(3584, 18944, 5, true, false), 1, 1);
  // k bounds the slices too: 128 features are 2 pairs of 32-feature blocks.
  check(pick(3584, 128, 5, false), 8, 2);
}

TEST_CASE("int4 plan: whole heads a block for the RoPE epilogue, k sliced as one wave allows") {
  auto heads = [](int n, bool clusters, int slots) {
    const Plan plan = whole_heads_plan((n + 15) / 16, clusters, [&] { return slots; });
    return Picked{plan.tiles_per_block, plan.parts, 0};
  };
  check(heads(4608, true, kH200Slots), 8, 8);  // Qwen2.5-7B q|k|v: 36 blocks x 8
  check(heads(1152, true, kH200Slots), 8, 8);  // Qwen2.5-0.5B q|k|v: 9 blocks x 8
  check(heads(6144, true, kH200Slots), 8, 8);  // Llama-3.1-8B q|k|v: 48 x 8 = 384 of 396 slots
  check(heads(6144, true, 300), 8, 4);
  check(heads(4608, true, 100), 8, 2);
  check(heads(4608, false, kH200Slots), 8, 1);
}

}  // namespace tandem::kernels::int4_plan
