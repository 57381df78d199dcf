// Probability rows that stay where a runner computed them, for speculative acceptance of sampled
// sequences: the draft writes each round's rows into slots of its store, the target writes its
// verify rows into its own, and the target's runner accepts over both in place. On the CUDA
// runner the stores are device memory, so no vocabulary-sized row crosses PCIe (at batch 4,
// k = 8 over a 152k vocabulary the rows were ~40 MB a step); only draws and results do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "sampling/sampler.h"

namespace tandem {

// [rows, width] fp32 probability rows in one runner's memory: device memory of CUDA device
// `device()`, or host memory when device() < 0 (the CPU runner). Made by
// ModelRunner::make_prob_rows; moves, never copies; frees its memory on destruction.
class ProbRows {
 public:
  using Free = void (*)(float* data, int32_t device);
  static constexpr int32_t kHost = -1;

  ProbRows() = default;
  ProbRows(float* data, int32_t rows, int32_t width, int32_t device, Free free)
      : data_(data, Deleter{device, free}), rows_(rows), width_(width), device_(device) {}

  float* data() const { return data_.get(); }  // a device pointer unless device() == kHost
  int32_t rows() const { return rows_; }
  int32_t width() const { return width_; }
  int32_t device() const { return device_; }
  size_t bytes() const { return size_t(rows_) * size_t(width_) * sizeof(float); }
  float* row(int32_t slot) const { return data_.get() + size_t(slot) * size_t(width_); }

 private:
  struct Deleter {
    int32_t device;
    Free free;
    void operator()(float* p) const {
      if (p != nullptr && free != nullptr) free(p, device);
    }
  };
  std::unique_ptr<float, Deleter> data_{nullptr, Deleter{kHost, nullptr}};
  int32_t rows_ = 0;
  int32_t width_ = 0;
  int32_t device_ = kHost;
};

// One sampled sequence's speculative acceptance (the rule of accept_sampled in
// sampling/speculative.h) over rows in ProbRows stores; k = tokens.size() may be 0 (a plain
// sampled token from target row 0).
struct SampledDrafts {
  std::span<const int32_t> tokens;       // [k] the draft's proposals
  std::span<const int32_t> draft_slots;  // [k] slot of proposal i's draft row (p_d)
  int32_t target_slot = 0;               // first of k + 1 consecutive target rows (p_t)
  SamplingRng* rng = nullptr;            // advanced by the tests made + 1, as accept_sampled does
};

// Checks every index a runner's accept_sampled will read for `seqs` (the CUDA kernel reads them
// without bounds): `results` >= seqs.size(), both stores of one width when any sequence drafted,
// a generator and a slot per draft, draft tokens below the width, slots and the k + 1 target rows
// inside their stores.
void check_sampled_drafts(std::span<const SampledDrafts> seqs, const ProbRows& draft_rows,
                          const ProbRows& target_rows, size_t results);

}  // namespace tandem
