// The sample kernel's temperature-only case spread over many blocks per row. The one-block
// kernel (sample.cuh) runs each row of a 152k vocabulary on one SM, three double-precision exp
// passes deep: ~0.3 ms a row on the H200, most of the gap between a sampled and a greedy 7B step
// (4.22 vs 3.88 ms) and of a sampled speculative round (1.47 vs 0.83 ms). With no top-k, top-p
// or min-p cut the work is a softmax and an inverse-CDF walk, which split into slices of a row:
// each of kSampleWideSlices blocks takes one, and the per-slice partials combine in a fixed
// order (the same inputs give the same bits on every launch).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "sample.cuh"

namespace tandem::kernels {

constexpr int32_t kSampleWideSlices = 16;  // blocks per row

// Rows this form takes: temperature > 0 and no top-k, top-p or min-p cut (penalties and bans
// are fine). Host code decides per launch.
inline bool sample_row_is_wide(const SampleRowParams& p, int32_t valid_vocab) {
  const bool cut_k = p.top_k > 0 && p.top_k < valid_vocab;
  return p.temperature > 0.0f && !cut_k && !(p.top_p < 1.0f) && !(p.min_p > 0.0f);
}

// Device scratch of one launch beside the one-block kernel's: [kSampleMaxRows, row_stride] fp64
// (each token's exp term, then its probability), the per-slice partials and the prefilter's
// per-slice buckets.
constexpr size_t sample_wide_scratch_bytes(int64_t row_stride) {
  return size_t(kSampleMaxRows) * size_t(row_stride) * 8 +
         size_t(kSampleMaxRows) * size_t(kSampleWideSlices) * (8 * 3 + 4 * 3) +
         size_t(kSampleMaxRows) * size_t(kSampleWideSlices) * size_t(kSamplePrefilterBuckets) * 8 +
         size_t(kSampleMaxRows) * size_t(kSampleMaxCandidates) * 8;
}

// The one-block kernel's passes over a whole row (sample.cuh), for rows it keeps (a top-k, top-p
// or min-p cut, or greedy with penalties or bans), spread over kSampleWideSlices blocks a row:
// the copy and adjustment into `scratch`, the largest logit, the exp terms of rows without
// top-k (into the scratch's fp64 rows), the prefilter's buckets and its tokens (each slice
// writes its own at its place in id order). On one SM these took ~0.45 ms a 152k-id row (H100;
// a Qwen2.5-0.5B step drawn with Qwen's defaults, 1.05 ms against 0.60 greedy); the one-block
// kernel then only cuts among the candidates.
RowPrefilter launch_wide_prefilter(const float* logits, int32_t row_stride, int32_t valid_vocab,
                                   const SampleRowParams* params, const LogitAdjust* adjust,
                                   int32_t num_rows,    // <= kSampleMaxRows
                                   float* scratch,      // sample_scratch_bytes(row_stride)
                                   void* wide_scratch,  // sample_wide_scratch_bytes(row_stride)
                                   cudaStream_t stream);

// launch_sample_rows / launch_probs_rows for rows that all pass sample_row_is_wide, with the
// same results up to the order of the normalising sums: with probs == nullptr, out[i] is row i's
// token; otherwise row i's probabilities go to probs + i * probs_stride and out[i] is its token
// when `draw`, else 0. out[i] = -1 when no finite logit is left.
void launch_sample_rows_wide(const float* logits, int32_t row_stride, int32_t valid_vocab,
                             const SampleRowParams* params, const LogitAdjust* adjust,
                             int32_t num_rows,    // <= kSampleMaxRows
                             float* scratch,      // [kSampleMaxRows, row_stride] fp32
                             void* wide_scratch,  // sample_wide_scratch_bytes(row_stride)
                             int32_t* out,        // [num_rows]
                             float* probs,        // [num_rows, probs_stride] fp32 or nullptr
                             int32_t probs_stride, bool draw, cudaStream_t stream);

}  // namespace tandem::kernels
