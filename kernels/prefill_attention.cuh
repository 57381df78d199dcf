// Causal paged attention for prefill chunks on the tensor cores (WMMA bf16, sm_80+): a block
// takes a tile of up to 64 consecutive query tokens of one sequence and one query head, and
// streams that sequence's keys in tiles of 32 through shared memory with an online softmax
// (flash-attention style). Same inputs and result as launch_paged_attention; the host plans the
// query tiles (plan on the host, run on the device).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "paged_attention.cuh"

namespace tandem::kernels {

constexpr int32_t kPrefillQueryTile = 64;

// head_dim % 16 == 0 and <= 128. Tile i covers tokens [tile_start[i], tile_start[i] +
// tile_len[i]) of one sequence, 1 <= tile_len <= kPrefillQueryTile.
void launch_prefill_attention(const __nv_bfloat16* q,        // [T, H * D] in
                              const __nv_bfloat16* k_cache,  // layer's K pages (rope_kv.cuh)
                              const __nv_bfloat16* v_cache,  // layer's V pages
                              const int32_t* tile_start,     // [num_tiles] in
                              const int32_t* tile_len,       // [num_tiles] in
                              int32_t num_tiles,
                              const int32_t* token_seq,       // [T] in
                              const int32_t* positions,       // [T] in
                              const int32_t* seq_page_start,  // [S] in
                              const int32_t* page_ids,        // [sum of pages] in
                              PagedAttentionShape shape,
                              __nv_bfloat16* out,  // [T, H * D] out
                              cudaStream_t stream);

}  // namespace tandem::kernels
