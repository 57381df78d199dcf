// Paged attention for decode steps (one query token per sequence), GQA-aware and split over the
// context into slices: a warp takes one token, one KV head with all its query heads (K/V read
// once per group, not once per query head) and one slice of the keys. Slices keep the GPU busy
// at batch 1. With the tensor-core kernel a block holds up to kDecodeMaxWarps consecutive
// slices and merges them in shared memory; only more slices than that (long contexts) leave
// partial softmax states per block ("splits") for a second launch to merge.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "paged_attention.cuh"

namespace tandem::kernels {

constexpr int32_t kDecodeMaxGroup = 8;    // query heads per KV head
constexpr int32_t kDecodeMaxSplits = 64;  // partial states per (token, head)
constexpr int32_t kDecodeMaxWarps = 8;    // slices one tensor-core block merges (fewer where
                                          // the device's shared memory holds fewer)
constexpr int32_t kDecodeMaxSlices = kDecodeMaxSplits * kDecodeMaxWarps;

// Head sizes with the tensor-core kernel (one warp per token, KV head and slice, the group's
// query heads as the rows of an mma); others take a scalar kernel (one block per slice, at most
// kDecodeMaxSplits slices).
inline bool decode_attention_tensor_cores(int32_t head_dim) {
  return head_dim == 64 || head_dim == 128;
}

// Partial states per (token, head) that `num_slices` leave for the merge (1: none, the kernel
// writes the output itself; the scalar kernel always merges).
int32_t decode_attention_splits(int32_t head_dim, int32_t num_slices);

// Slices one block merges on this device (1 for the scalar kernel): up to that many, no partial
// states and no merge launch.
int32_t decode_attention_block_slices(int32_t head_dim);

// How a tensor-core block merges its warps' slices: true, a warp a query head, the scales passed
// by shuffle (one barrier); false, G threads' scales first (two barriers). Same bits either way.
// The default is true; TANDEM_ATTN_MERGE=0 makes it false (A/B runs).
bool decode_attention_warp_merge();

// Floats of scratch `partials` must hold: num_tokens * num_heads * splits * (head_dim + 2), with
// splits = decode_attention_splits(head_dim, num_slices) <= kDecodeMaxSplits. head_dim % 8 == 0,
// <= 256; num_heads / num_kv_heads <= kDecodeMaxGroup; num_slices <= kDecodeMaxSlices (tensor
// cores) or kDecodeMaxSplits (scalar).
void launch_decode_attention(const __nv_bfloat16* q,         // [T, H * D] in
                             const __nv_bfloat16* k_cache,   // layer's K pages (rope_kv.cuh)
                             const __nv_bfloat16* v_cache,   // layer's V pages
                             const int32_t* token_seq,       // [T] in
                             const int32_t* positions,       // [T] in
                             const int32_t* seq_page_start,  // [S] in
                             const int32_t* page_ids,        // [sum of pages] in
                             PagedAttentionShape shape, int32_t num_slices,
                             float* partials,     // scratch, see above
                             __nv_bfloat16* out,  // [T, H * D] out
                             cudaStream_t stream,
                             // May overlap the kernel before (pdl.cuh, sm_90+): the metadata
                             // arrays and each sequence's K/V before its first query token's
                             // position are read before the wait, so that kernel must write
                             // only q and the query tokens' own K/V rows. A sequence's tokens
                             // are consecutive, at consecutive positions.
                             bool pdl = false, bool warp_merge = decode_attention_warp_merge(),
                             // Optional, [T][kAmaxTokenWords] fp32 bits, zero on entry: each
                             // token's max |out| raised into its slots (amax_bits.cuh), for
                             // launch_fp8_quantize_amax.
                             uint32_t* out_amax = nullptr);

}  // namespace tandem::kernels
