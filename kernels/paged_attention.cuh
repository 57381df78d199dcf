// Causal paged attention with GQA, for prefill chunks and decode alike: each query token at
// absolute position p attends to keys 0..p of its sequence, read from the sequence's pages.
// The current chunk's K/V are already in the pages (rope_kv writes them first), so "earlier
// pages plus the current chunk" is one loop. Online softmax (flash-attention style) over tiles
// of keys; fp32 accumulation; any page size >= 1.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::kernels {

struct PagedAttentionShape {
  int32_t num_tokens = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;  // divides num_heads
  int32_t head_dim = 0;      // multiple of 8, <= 256
  int32_t page_size = 0;
  float scale = 0.0f;  // 1 / sqrt(head_dim)
};

void launch_paged_attention(const __nv_bfloat16* q,         // [T, H * D] in
                            const __nv_bfloat16* k_cache,   // layer's K pages (rope_kv.cuh layout)
                            const __nv_bfloat16* v_cache,   // layer's V pages
                            const int32_t* token_seq,       // [T] in: sequence of each token
                            const int32_t* positions,       // [T] in: absolute position
                            const int32_t* seq_page_start,  // [S] in: offset into page_ids
                            const int32_t* page_ids,        // [sum of pages] in
                            PagedAttentionShape shape,
                            __nv_bfloat16* out,  // [T, H * D] out
                            cudaStream_t stream);

}  // namespace tandem::kernels
