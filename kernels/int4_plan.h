#pragma once
// How the int4 GEMV spreads a Linear's row tiles over blocks and clusters (int4_linear.cu's
// launcher asks it). Plain C++, so that the CPU unit suite checks the plans it picks
// (tests/unit/runner/int4_plan_test.cc); `sliced_slots()` is the launcher's occupancy query.

#include <cstdio>
#include <cstdlib>

namespace tandem::kernels::int4_plan {

constexpr int kWarps = 8;  // warps a block of the int4 GEMV; a block's tiles share them

// How a Linear's tiles are spread: tiles per block and k-slices (blocks of a cluster) per tile.
struct Plan {
  int tiles_per_block = 1;
  int parts = 1;
};

inline bool power_of_two_to_8(int v) {
  return v == 1 || v == 2 || v == 4 || v == 8;
}

// TANDEM_INT4_PLAN=tiles_per_block,parts forces one plan on every Linear (benchmark sweeps);
// each of 1, 2, 4, 8, and parts > 1 only where clusters exist. Anything else is refused.
inline bool forced_plan(Plan& plan, bool clusters) {
  static const char* env = std::getenv("TANDEM_INT4_PLAN");
  if (env == nullptr) return false;
  char tail = 0;
  if (std::sscanf(env, "%d,%d%c", &plan.tiles_per_block, &plan.parts, &tail) != 2 ||
      !power_of_two_to_8(plan.tiles_per_block) || !power_of_two_to_8(plan.parts) ||
      (plan.parts > 1 && !clusters)) {
    std::fprintf(stderr,
                 "TANDEM_INT4_PLAN=%s: want tiles_per_block,parts, each 1, 2, 4 or 8 (parts > 1 "
                 "needs sm_90 clusters)\n",
                 env);
    std::abort();
  }
  return true;
}

// The most k-slices a tile (2, 4 or 8, at most `limit`) for which `tile_blocks` x slices blocks
// fit in one wave of `slots`; 1 where not even 2 do.
inline int slices_in_one_wave(int tile_blocks, int slots, int limit) {
  int parts = 1;
  for (int p = 2; p <= 8 && p <= limit; p *= 2) {
    if (tile_blocks * p <= slots) parts = p;
  }
  return parts;
}

// The plan, from a sweep of every (tiles per block, parts) in {1, 2, 4, 8}^2 at Qwen2.5-7B's
// shapes and 1-32 tokens on the H200 (NOTES.md v12):
// - Many tiles (gate|up, >= 8 a SM): k unsliced up to 8 tokens, 2 or 4 tiles a block (8 from 5
//   tokens where the tiles are >= 16 a SM, v18's re-sweep); past 8 tokens one tile a warp in 2
//   slices (7B gate|up at 16 tokens 61.7 -> 54.6 us).
// - Few tiles (q|k|v, o, down): one tile a warp and k in up to 8 slices, as many as one wave of
//   blocks holds. Each block stages only its slice of x, and the blocks are as many as with one
//   tile a block. 7B down at 5 / 16 / 32 tokens 32.8 / 69.2 / 126.8 -> 22.7 / 26.9 / 39.6 us.
//   At 1-2 tokens the unsliced kernel ties or wins except on long rows (down: 23.0 -> 22.5).
// `sliced_slots()`: how many sliced blocks one wave holds; asked only where slicing is weighed.
// On the group-128 path at one token the unsliced kernel wins on long rows too (a re-sweep of
// every plan: 7B down 15.44 -> 14.78 us, q|k|v and o tie; H200, NOTES.md v20).
template <typename SlotsFn>
Plan choose_plan(int tiles, int k, int m, bool groups128, int sms, bool clusters,
                 SlotsFn sliced_slots) {
  Plan plan;
  if (forced_plan(plan, clusters)) return plan;
  if (tiles >= 8 * sms) {
    if (m > 8) return clusters ? Plan{kWarps, 2} : Plan{kWarps, 1};
    // gate|up at 5-8 tokens: 8 tiles a block 31.3-33.2 us against 4 tiles' 31.9-35.1 (even at
    // 4 tokens, 4 better at 3; NOTES.md v18).
    if (tiles >= 16 * sms) return Plan{m >= 5 ? kWarps : 4, 1};
    return Plan{2, 1};
  }
  if (!clusters || (m <= 2 && k < 8192) || (groups128 && m == 1)) return plan;
  const int pairs = k / 64;
  const int tile_blocks = (tiles + kWarps - 1) / kWarps;
  plan.tiles_per_block = kWarps;
  plan.parts = slices_in_one_wave(tile_blocks, sliced_slots(), pairs);
  if (plan.parts == 1) plan.tiles_per_block = 1;  // too few blocks to slice: one tile a block
  return plan;
}

// Rows of whole heads a block (the RoPE epilogue): 8 tiles, k sliced over as many blocks of a
// cluster as one wave holds (the few-tile rule of choose_plan, at every token count).
template <typename SlotsFn>
Plan whole_heads_plan(int tiles, bool clusters, SlotsFn sliced_slots) {
  Plan plan{kWarps, 1};
  if (!clusters) return plan;
  plan.parts = slices_in_one_wave((tiles + kWarps - 1) / kWarps, sliced_slots(), 8);
  return plan;
}

}  // namespace tandem::kernels::int4_plan
