// The decode attention's slice rule (runner/decode_slices.h) on the shapes it was measured on:
// the CUDA runner launches whatever it returns, so a change here changes every decode step.
#include "runner/decode_slices.h"

#include <doctest/doctest.h>

#include <initializer_list>

namespace tandem {
namespace {

constexpr int32_t kH200Sms = 132;

int32_t tc_slices(int32_t tokens, int32_t kv_heads, int32_t group, int32_t max_context,
                  int32_t head_dim = 128) {
  return decode_slice_count(
      DecodeSliceShape{tokens, kv_heads, group, max_context, true, kH200Sms, head_dim},
      DecodeSliceLimits{});
}

}  // namespace

TEST_CASE("decode slices: a tile of keys a warp at short contexts, whole blocks of 8 beyond") {
  // Qwen2.5-7B (4 KV heads, group 7, head size 128) at batch 1: one 32-key tile a slice.
  CHECK(tc_slices(1, 4, 7, 1) == 1);
  CHECK(tc_slices(1, 4, 7, 64) == 2);
  CHECK(tc_slices(1, 4, 7, 129) == 5);
  CHECK(tc_slices(1, 4, 7, 256) == 8);
  // 9-12 tiles at batch 1: one block of 8 slices, not two blocks and a combine launch.
  CHECK(tc_slices(1, 4, 7, 257) == 8);
  CHECK(tc_slices(1, 4, 7, 384) == 8);
  CHECK(tc_slices(1, 8, 4, 300) == 8);  // Llama-3.1-8B: 8 KV heads, still one grid of 8 blocks
  // 13 tiles and up round up to whole blocks of 8 slices again.
  CHECK(tc_slices(1, 4, 7, 513) == 24);
  CHECK(tc_slices(1, 4, 7, 4096) == 128);
  // Grids of more than 8 blocks keep rounding 9-12 tiles up (not measured with one block).
  CHECK(tc_slices(4, 4, 7, 300) == 16);
  CHECK(tc_slices(16, 4, 7, 300) == 16);
}

TEST_CASE("decode slices: at head size 64, one whole block up to 8 tiles whatever the context") {
  // Qwen2.5-0.5B (2 KV heads, group 7): the same 8 slices from 1 to 384 keys at batch 1, so the
  // graph key stays the same as a sequence grows.
  for (int32_t ctx : {1, 31, 64, 129, 200, 256, 257, 384}) {
    CAPTURE(ctx);
    CHECK(tc_slices(1, 2, 7, ctx, 64) == 8);
  }
  CHECK(tc_slices(1, 2, 7, 385, 64) == 16);
  CHECK(tc_slices(5, 2, 7, 100, 64) == 8);   // a 5-token pass
  CHECK(tc_slices(16, 2, 7, 40, 64) == 8);   // 32 blocks: still 8 warps an SM
  CHECK(tc_slices(256, 2, 7, 40, 64) == 2);  // 512 blocks: the SMs bound it
  // A device whose blocks hold 5 slices (less shared memory) rounds up to 5; 6-8 tiles keep
  // one slice a tile (two blocks and the merge launch, as before).
  auto small = [](int32_t ctx) {
    return decode_slice_count(DecodeSliceShape{1, 8, 4, ctx, true, 84, 64},
                              DecodeSliceLimits{512, 64, 5});
  };
  CHECK(small(1) == 5);
  CHECK(small(160) == 5);
  CHECK(small(161) == 6);
  CHECK(small(256) == 8);
}

TEST_CASE(
    "decode slices: the SMs bound them at large batches, the split-K scratch at many tokens") {
  // 64 tokens x 4 KV heads = 256 blocks: 8 warps an SM allow 4 slices.
  CHECK(tc_slices(64, 4, 7, 1024) == 4);
  CHECK(tc_slices(256, 4, 7, 1024) == 1);
  // On H200's SMs 2,048 tokens get one slice; with SMs to spare (8 x 100,000 / 2,048 allow 384)
  // kDecodeSplitRows / tokens decides: 4096 / 2048 = 2.
  CHECK(tc_slices(2048, 1, 7, 100000) == 1);
  CHECK(decode_slice_count(DecodeSliceShape{2048, 1, 7, 100000, true, 100000},
                           DecodeSliceLimits{}) == 2);
  CHECK(decode_slice_count(DecodeSliceShape{2, 1, 7, 100000, true, 100000}, DecodeSliceLimits{}) ==
        512);  // clamped to the kernel's most slices
}

TEST_CASE("decode slices: the scalar kernel only with as many blocks as the per-head kernel") {
  auto scalar = [](int32_t tokens, int32_t kv_heads, int32_t group, int32_t ctx) {
    return decode_slice_count(DecodeSliceShape{tokens, kv_heads, group, ctx, false, kH200Sms},
                              DecodeSliceLimits{});
  };
  // Batch 1, 128 keys, group 4: one 128-key slice, fewer blocks than the per-head kernel: 0.
  CHECK(scalar(1, 8, 4, 128) == 0);
  // A context of 4 groups' worth of 128-key slices: 4 >= group 4.
  CHECK(scalar(1, 8, 4, 512) == 4);
  // Many (token, KV head) pairs: at least one block an SM.
  CHECK(scalar(33, 4, 4, 128) == 1);
}

}  // namespace tandem
