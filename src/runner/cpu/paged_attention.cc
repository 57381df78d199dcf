#include "runner/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runner/cpu/dot_rows.h"

namespace tandem {

namespace {

// Offset in floats of (page slot of position t, kv head 0) in one layer's cache.
int64_t slot_offset(const AttentionShape& shape, const SeqSlice& seq, int64_t t) {
  const int64_t page = seq.pages[size_t(t / shape.page_size)];
  const int64_t slot = t % shape.page_size;
  return (page * shape.page_size + slot) * shape.num_kv_heads * shape.head_dim;
}

}  // namespace

void write_kv_pages(const AttentionShape& shape, std::span<const SeqSlice> seqs, const float* k,
                    const float* v, float* k_cache, float* v_cache) {
  const int64_t row = shape.num_kv_heads * shape.head_dim;
  for (const SeqSlice& seq : seqs) {
    for (int32_t i = 0; i < seq.q_len; ++i) {
      const int64_t position = seq.context_len - seq.q_len + i;
      const int64_t dst = slot_offset(shape, seq, position);
      const int64_t src = int64_t(seq.q_start + i) * row;
      std::copy_n(k + src, row, k_cache + dst);
      std::copy_n(v + src, row, v_cache + dst);
    }
  }
}

void paged_attention(ThreadPool& pool, const AttentionShape& shape, std::span<const SeqSlice> seqs,
                     const float* q, const float* k_cache, const float* v_cache, float* out) {
  // One work item per (query token, head); items[] maps a query token to its sequence.
  struct Item {
    int32_t seq;
    int32_t token;  // row in the batch
  };
  std::vector<Item> items;  // [num_query_tokens]
  for (size_t s = 0; s < seqs.size(); ++s)
    for (int32_t i = 0; i < seqs[s].q_len; ++i) items.push_back({int32_t(s), seqs[s].q_start + i});

  const int64_t heads = shape.num_heads;
  const int64_t d = shape.head_dim;
  const int64_t group = shape.num_heads / shape.num_kv_heads;
  const float scale = 1.0f / std::sqrt(float(d));
  pool.parallel_for(int64_t(items.size()) * heads, 4, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;  // [position + 1] attention weights of one query head
    for (int64_t w = begin; w < end; ++w) {
      const Item& item = items[size_t(w / heads)];
      const int64_t h = w % heads;
      const SeqSlice& seq = seqs[size_t(item.seq)];
      const int64_t position = seq.context_len - seq.q_len + (item.token - seq.q_start);
      const int64_t kv_head = h / group;
      const float* qh = q + (int64_t(item.token) * heads + h) * d;
      scores.resize(size_t(position + 1));
      float max_score = -std::numeric_limits<float>::infinity();
      for (int64_t t = 0; t <= position; ++t) {
        const float* kt = k_cache + slot_offset(shape, seq, t) + kv_head * d;
        scores[size_t(t)] = dot_f32(qh, kt, d) * scale;
        max_score = std::max(max_score, scores[size_t(t)]);
      }
      float sum = 0.0f;
      for (float& sc : scores) {
        sc = std::exp(sc - max_score);
        sum += sc;
      }
      float* oh = out + (int64_t(item.token) * heads + h) * d;
      std::fill_n(oh, d, 0.0f);
      for (int64_t t = 0; t <= position; ++t) {
        const float p = scores[size_t(t)] / sum;
        const float* vt = v_cache + slot_offset(shape, seq, t) + kv_head * d;
        for (int64_t i = 0; i < d; ++i) oh[i] += p * vt[i];
      }
    }
  });
}

}  // namespace tandem
