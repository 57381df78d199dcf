// One sequence driven through a ModelRunner forward by forward, over NaN-poisoned KV pages: how
// the whole-model gpu tests (golden_model_test, quant_model_test) run a runner.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cuda_check.cuh"
#include "runner/runner.h"

namespace tandem::gpu_test {

// Every KV page of every layer to 0xffff (bf16 NaN): a read of a slot never written, or of a
// page outside the block table, shows up as NaN logits.
inline void poison_kv(ModelRunner& r) {
  const KvPoolView v = r.kv_pool_view();
  for (int l = 0; l < v.num_layers(); ++l) {
    TANDEM_CUDA_CHECK(cudaMemset(v.k[size_t(l)], 0xff, v.page_bytes * v.num_pages));
    TANDEM_CUDA_CHECK(cudaMemset(v.v[size_t(l)], 0xff, v.page_bytes * v.num_pages));
  }
}

// One sequence on pages 1, 3, 5, ... (the even pages between them stay poisoned).
struct RunnerSeq {
  ModelRunner& r;
  std::vector<int32_t> pages;
  int32_t cached = 0;

  // Runs `tokens` as the sequence's next chunk; the logits of its last token.
  std::vector<float> step(std::span<const int32_t> tokens) {
    const int32_t q_len = int32_t(tokens.size());
    const int32_t ctx = cached + q_len;
    while (int32_t(pages.size()) * r.page_size() < ctx)
      pages.push_back(2 * int32_t(pages.size()) + 1);
    SeqSlice s{0, q_len, ctx, pages};
    const std::vector<int32_t> rows = {q_len - 1};
    r.forward(ForwardBatch{tokens, std::span(&s, 1), rows});
    cached = ctx;
    std::vector<float> logits(size_t(r.config().vocab_size));
    r.copy_logits(logits);
    return logits;
  }
};

}  // namespace tandem::gpu_test
