#include "runner/decode_slices.h"

#include <algorithm>

namespace tandem {
namespace {

// Split-K decode attention: key slices so that (tokens x KV heads x slices) warps give each SM
// this many. Swept on the H200 (NOTES.md v8, one-warp blocks): 2 -> 8 took Qwen2.5-7B decode at
// batch 64, 1k context from 10.06 to 7.11 ms a step and batch 16 from 11.0 to 5.87 ms (batch 1
// at 2k/8k unchanged); 16 gave 7.51 ms at batch 64. With the cp.async kernel (NOTES.md v10) 12
// measured no better than 8 (batch 64: 5.77 vs 5.76 ms; at 4k 8.63 vs 8.57).
constexpr int64_t kDecodeWarpsPerSm = 8;
// The tensor-core kernel (head_dim 64 and 128) takes every decode batch, in slices down to one
// 32-key tile: at batch 1 and 128 tokens the per-query-head kernel, each block serial over
// all keys, took 24 us a layer on Qwen2.5-7B and 20 us on Qwen2.5-0.5B (ncu, NOTES.md v9).
// Minimum slices of 64/128/256 keys measured slower there (7B 3.94/4.05/4.27 vs 3.89 ms), and
// with multi-warp blocks at a 2k context too (64/128: 4.26/4.43 vs 4.15 ms; NOTES.md v10).
constexpr int64_t kDecodeTcMinSliceKeys = 32;
constexpr int64_t kDecodeScalarMinSliceKeys = 128;

}  // namespace

int32_t decode_slice_count(const DecodeSliceShape& s, const DecodeSliceLimits& limits) {
  const bool tc = s.tensor_cores;
  const int64_t blocks = std::max<int64_t>(1, int64_t(s.tokens) * s.kv_heads);
  const int64_t min_keys = tc ? kDecodeTcMinSliceKeys : kDecodeScalarMinSliceKeys;
  const int64_t by_ctx = (int64_t(std::max(s.max_context, 1)) + min_keys - 1) / min_keys;
  int64_t slices = 0;
  if (tc) {
    // At most one wave of kDecodeWarpsPerSm warps per SM: rounded up where the context limits
    // the slices (each still one tile or less), down where the SMs do; whole blocks of 8 above
    // 8. Grids of at most 8 (token, KV head) blocks (batch 1 of 2-8 KV heads) keep one block of 8
    // slices, some of two tiles, for contexts of 9-12 tiles (257-384 keys): a second split and
    // its combine launch cost more there (H200, batch 1, NOTES.md v36: at 256 keys 7B 3.70 ->
    // 3.65-3.67 ms, 8B 4.04 -> 4.01, 0.5B 0.61 -> 0.56; at 384 keys 0.5B 0.60 -> 0.57, 7B
    // unchanged; at 512 the 7B lost 15-40 us). Larger grids were not measured so.
    //
    // At head size 64 (the drafts: Qwen2.5-0.5B, Llama-3.2-1B) contexts of up to a block's worth
    // of tiles take a whole block of slices, each then less than a tile (the kernel splits keys
    // by count; warps past the context hold empty slices). The 0.5B's batch-1 step was faster so
    // (H100, NOTES.md v51: 0.540-0.541 -> 0.528 ms at 64-192 keys, 0.531-0.532 -> 0.526-0.527
    // at 128-256; batch 16 -1%, batch 4 +1.5%, not explained), and the slice count, part of the
    // CUDA runner's graph key, no longer changes every 32 keys (each change captured the batch's
    // graphs again). At head size 128 the 7B lost 5-10 us a step so (4.835 -> 4.844 ms at 64-192
    // keys), and keeps one slice a tile.
    const int64_t one_block_tiles = blocks <= 8 ? 12 : 8;
    const int64_t whole_block =
        s.head_dim <= 64 ? std::clamp<int64_t>(limits.block_slices, 1, 8) : 1;
    const auto up = [&](int64_t n) {
      return n <= whole_block       ? whole_block
             : n <= 8               ? n
             : n <= one_block_tiles ? 8
                                    : (n + 7) / 8 * 8;
    };
    const auto down = [](int64_t n) { return n <= 8 ? n : n / 8 * 8; };
    slices = std::min(up(by_ctx), down(std::max<int64_t>(1, kDecodeWarpsPerSm * s.sms / blocks)));
  } else {
    slices = std::min((kDecodeWarpsPerSm * s.sms + blocks - 1) / blocks, by_ctx);
  }
  slices = std::min<int64_t>(slices, kDecodeSplitRows / std::max(s.tokens, 1));  // splits <= slices
  slices = std::clamp<int64_t>(slices, 1, tc ? limits.max_slices : limits.max_splits);
  // The scalar kernel only where it has at least as many blocks as the per-query-head kernel:
  // many (token, KV head) pairs, or contexts long enough to split into a group's worth of slices
  // (measured on the H200: at batch 1 and 128 tokens its 4-8 blocks cost 0.8 ms a step; NOTES.md
  // v5).
  return tc || blocks >= s.sms || slices >= s.group ? int32_t(slices) : 0;
}

}  // namespace tandem
