// Causal paged attention for prefill chunks on the tensor cores (mma.sync bf16, sm_80+): a block
// takes a tile of up to 64 consecutive query tokens of one sequence and one query head, and
// streams that sequence's keys in tiles of 64 through shared memory with an online softmax
// (flash-attention 2 style). Same inputs and result as launch_paged_attention; the host plans the
// query tiles (plan_prefill_tiles: plan on the host, run on the device).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "paged_attention.cuh"

namespace tandem::kernels {

constexpr int32_t kPrefillQueryTile = 64;

// The query tiles of a batch of sequences (q_start, q_len, context_len each, as SeqSlice): each
// sequence's rows cut into tiles of kPrefillQueryTile, ordered by the keys they read, most first
// (ties in batch order), so that the grid's last blocks are its shortest. In batch order a
// causal prompt's grid ended on its longest tiles: with 3 blocks an SM, a 2,048-token prompt's
// 28 heads x 32 tiles take ~59 tile-times in order against ~40 longest first (list scheduling);
// measured on the H200, its TTFT went 49.4 -> 48.2 ms (benchmarks/NOTES.md v24).
// Writes tile_start / tile_len; returns the number of tiles. More tiles than `capacity` (the
// outputs' length) abort before anything is written.
int32_t plan_prefill_tiles(const int32_t* q_start, const int32_t* q_len, const int32_t* context_len,
                           int32_t num_seqs, int32_t capacity,
                           int32_t* tile_start,  // [capacity] out
                           int32_t* tile_len);   // [capacity] out

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
