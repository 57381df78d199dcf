// The decode attention's key slices: how the CUDA runner spreads each (token, KV head) pair's keys
// over warps and blocks for a decode-shaped batch. Kept apart from cuda_runner.cc so that the CPU
// unit suite checks the rule (which shapes it picks needs no GPU to know).
#pragma once

#include <cstdint>

namespace tandem {

// Tokens x splits the CUDA runner's split-K scratch holds (its partial states are
// [kDecodeSplitRows, heads, head_dim + 2] fp32): a batch's slices stay within it.
constexpr int64_t kDecodeSplitRows = 4096;

struct DecodeSliceShape {
  int32_t tokens = 1;  // query tokens in the batch
  int32_t kv_heads = 1;
  int32_t group = 1;         // query heads per KV head
  int32_t max_context = 1;   // keys of the longest context among the tokens
  bool tensor_cores = true;  // head size 64 or 128: the tensor-core kernel
  int32_t sms = 1;           // the device's multiprocessors
  int32_t head_dim = 128;
};

// The kernels' limits (kernels/decode_attention.cuh), passed in so this file needs no CUDA header.
struct DecodeSliceLimits {
  int32_t max_slices = 512;  // kDecodeMaxSlices: the tensor-core kernel
  int32_t max_splits = 64;   // kDecodeMaxSplits: the scalar kernel
  // decode_attention_block_slices: slices one tensor-core block merges on the device (8 on
  // Hopper and A100 at both head sizes; fewer at head size 128 where shared memory is smaller).
  int32_t block_slices = 8;
};

// Slices per (token, KV head) for the GQA decode kernels, or 0 where the per-query-head kernel
// should take the batch (the scalar GQA kernel with fewer blocks than that one has).
int32_t decode_slice_count(const DecodeSliceShape& s, const DecodeSliceLimits& limits);

}  // namespace tandem
