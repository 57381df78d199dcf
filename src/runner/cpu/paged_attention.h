// Attention of query tokens over a paged KV cache, on the CPU, fp32.
//
// KV layout (one layer; K and V alike): [num_pages, page_size, num_kv_heads, head_dim] fp32.
// Token position t of a sequence lives in page pages[t / page_size], slot t % page_size.
#pragma once

#include <cstdint>
#include <span>

#include "runner/cpu/thread_pool.h"
#include "runner/runner.h"

namespace tandem {

struct AttentionShape {
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // num_heads / num_kv_heads query heads share one KV head (GQA)
  int64_t head_dim = 0;
  int32_t page_size = 0;
};

// Writes k/v of every query token of `seqs` into its page slot.
//   k, v:          [num_tokens, num_kv_heads, head_dim] fp32, in (RoPE already applied to k)
//   k_cache, v_cache: one layer's pages, out
void write_kv_pages(const AttentionShape& shape, std::span<const SeqSlice> seqs, const float* k,
                    const float* v, float* k_cache, float* v_cache);

// Each query token at position p attends to positions [0, p] of its own sequence: earlier
// context from the pages plus the chunk's own tokens (already written), i.e. causal.
//   q:   [num_tokens, num_heads, head_dim] fp32, in (RoPE applied)
//   out: [num_tokens, num_heads, head_dim] fp32, out
void paged_attention(ThreadPool& pool, const AttentionShape& shape, std::span<const SeqSlice> seqs,
                     const float* q, const float* k_cache, const float* v_cache, float* out);

}  // namespace tandem
