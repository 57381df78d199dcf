// Logits processing and sampling on the device, one block per row: penalties and banned ids,
// then greedy, or temperature, top-k, top-p and min-p followed by one inverse-CDF draw. It
// follows the reference sampler (src/sampling/sampler.h) rule for rule, in double precision, so
// the same logits, settings and uniform draw give the same token; the only differences are the
// order of floating-point sums (the top-p cut uses exact 2^-60 fixed-point sums instead), which
// can move a boundary by ~1e-16 and never makes the result depend on the launch.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tandem::kernels {

// One row to sample. Plain data, filled on the host and copied to the device.
struct SampleRowParams {
  int32_t logit_row = 0;     // row of the logits matrix
  int32_t adjust_begin = 0;  // [adjust_begin, adjust_end) of the LogitAdjust array
  int32_t adjust_end = 0;
  int32_t top_k = 0;         // <= 0: off
  float temperature = 1.0f;  // 0: greedy (after the adjustments)
  float top_p = 1.0f;        // >= 1: off
  float min_p = 0.0f;        // <= 0: off
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  double u = 0.0;  // the row's uniform draw in [0, 1); unused when greedy
  // >= 0: the row's last entry is a placeholder for a token still on the device, in this slot
  // of launch_merge_fed_penalties's fed_ids (fed_penalty.cuh); the sample kernels ignore it.
  int32_t fed_slot = -1;
};

// A change to one logit of one row, applied in the reference order: repetition penalty, then
// frequency and presence penalties, then a ban. Ids are unique within a row.
struct LogitAdjust {
  int32_t id = 0;
  int32_t output_count = 0;  // occurrences in the output: frequency/presence penalties
  int32_t flags = 0;         // kAdjustRepeat | kAdjustBan
};
constexpr int32_t kAdjustRepeat = 1;  // in prompt ∪ output: repetition penalty
constexpr int32_t kAdjustBan = 2;     // min_tokens: eos/stop ids banned this step

// Rows processed by one launch at most: each needs a private copy of its logits.
constexpr int32_t kSampleMaxRows = 32;

// What launch_wide_prefilter (sample_wide.cuh) leaves for a launch's rows, so that the one-block
// kernel below skips its passes over the whole row: the row already copied and adjusted into the
// scratch; per slice g of a row r (index r * kSampleWideSlices + g) its largest logit, the exp
// terms' sum (rows without top-k, whose exp terms are written too) and the prefilter's bucket
// counts and masses; and the prefilter's tokens. Null max_value: none (the kernel makes its own
// passes).
struct RowPrefilter {
  const float* max_value = nullptr;  // [rows, slices]
  const int32_t* max_id = nullptr;   // [rows, slices]
  const double* exp_sum = nullptr;   // [rows, slices]
  const int32_t* count = nullptr;    // [rows, slices, kSamplePrefilterBuckets]
  const float* mass = nullptr;       // [rows, slices, kSamplePrefilterBuckets]
  const float* z = nullptr;          // [rows, slices]: Σ __expf((l - m) / T) of finite logits
  // [rows, kSampleMaxCandidates]: the prefilter's tokens in id order, where they fit.
  const float* cand_value = nullptr;
  const int32_t* cand_id = nullptr;
};
// The prefilter's buckets: distance below the row's largest logit in steps of 1/8, 32 deep.
constexpr int32_t kSamplePrefilterBuckets = 256;
// The prefilter keeps at most this many tokens (in shared memory) for the exact cuts.
constexpr int32_t kSampleMaxCandidates = 2048;
// The scratch a launch needs: [kSampleMaxRows, row_stride] fp32 (each row's processed logits)
// followed by [kSampleMaxRows, row_stride] fp64 (each row's exp terms).
constexpr size_t sample_scratch_bytes(int64_t row_stride) {
  return size_t(kSampleMaxRows) * size_t(row_stride) * (4 + 8);
}

// pre: launch_wide_prefilter's results for these rows in this scratch, or null.
void launch_sample_rows(const float* logits,  // [*, row_stride] in, left unchanged
                        int32_t row_stride, int32_t valid_vocab,
                        const SampleRowParams* params,  // [num_rows] device
                        const LogitAdjust* adjust,      // device
                        int32_t num_rows,               // <= kSampleMaxRows
                        float* scratch,                 // sample_scratch_bytes(row_stride)
                        int32_t* out,                   // [num_rows] token ids
                        cudaStream_t stream, const RowPrefilter* pre = nullptr);

// The same processing, writing row i's probabilities over ids [0, valid_vocab) (zeros outside
// the kept set; one-hot at the argmax for temperature 0), as logits_to_probs gives them up to
// the order of the normalising sum, into probs + i * probs_stride. Without `draw`, status[i] = 0
// and SampleRowParams::u is not read; with it, status[i] is launch_sample_rows's token, drawn
// from those probabilities. Either way status[i] = -1 when no finite logit is left.
void launch_probs_rows(const float* logits, int32_t row_stride, int32_t valid_vocab,
                       const SampleRowParams* params, const LogitAdjust* adjust,
                       int32_t num_rows,  // <= kSampleMaxRows
                       float* scratch,    // sample_scratch_bytes(row_stride)
                       int32_t* status,   // [num_rows]
                       float* probs,      // [num_rows, probs_stride] fp32
                       int32_t probs_stride, bool draw, cudaStream_t stream,
                       const RowPrefilter* pre = nullptr);

}  // namespace tandem::kernels
