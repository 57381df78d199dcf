// Sampling rows of device logits on the device (kernels/sample.cuh): builds each row's settings,
// uniform draw and penalty list on the host, ships them in one copy, and returns the ids. Only
// the ids and the small per-row lists cross PCIe, never a logits row.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "kernels/sample.cuh"
#include "kernels/sample_wide.cuh"
#include "runner/cuda/device_buffer.h"
#include "runner/runner.h"

namespace tandem {

class DeviceSampler {
 public:
  DeviceSampler() = default;
  // vocab: the logits row length; max_rows: the most rows one sample() call takes.
  DeviceSampler(int64_t vocab, int32_t max_rows);

  // Samples requests[which[i]] into out[which[i]]; `logits` is [*, vocab] fp32 on the device.
  // Enqueues on `stream` and returns once the ids are on the host.
  void sample(const float* logits, int32_t valid_vocab, std::span<const SampleRequest> requests,
              std::span<const size_t> which, std::span<int32_t> out, cudaStream_t stream);
  // The same draws into device memory, out[i] for requests[which[i]], enqueued without a wait
  // (the runner's sample_async). A penalised request with fed >= 0 counts the token in
  // fed_ids[fed] (device; the caller names the slot) as the last of its output
  // (kernels/fed_penalty.cuh).
  void sample_on_device(const float* logits, int32_t valid_vocab,
                        std::span<const SampleRequest> requests, std::span<const size_t> which,
                        int32_t* out, const int32_t* fed_ids, cudaStream_t stream);

  // The rows' probabilities over ids [0, width) (launch_probs_rows) into out [requests, width]
  // on the host: the processing sample() runs over ids [0, valid_vocab), and ids [valid_vocab,
  // width) get 0 (a draft with a capped vocabulary against the target's width). With `draws`
  // ([requests] or empty: none), each row's token is also drawn from them on the device, one
  // uniform from request.rng as sample() takes it. Returns once they have landed.
  void probs(const float* logits, int32_t width, int32_t valid_vocab,
             std::span<const SampleRequest> requests, std::span<float> out,
             std::span<int32_t> draws, cudaStream_t stream);
  // The same rows into `rows` [requests, width] of device memory (slots of a ProbRows), where
  // they stay: only the draws (or status) come back. Returns once the draws have landed.
  void probs_on_device(const float* logits, int32_t width, int32_t valid_vocab,
                       std::span<const SampleRequest> requests, float* rows,
                       std::span<int32_t> draws, cudaStream_t stream);

  // Every row on the one-block kernel alone (no wide form, no wide prefilter; tests compare).
  void set_one_block_only(bool on) { force_one_block_ = on; }

 private:
  // probs() and probs_on_device(): the rows land in device_rows when it is not null, else in
  // probs_ a wave at a time and then in host_rows.
  void run_probs(const float* logits, int32_t width, int32_t valid_vocab,
                 std::span<const SampleRequest> requests, float* device_rows, float* host_rows,
                 std::span<int32_t> draws, cudaStream_t stream);
  // The one-block kernel's passes over whole rows spread over many blocks
  // (kernels::launch_wide_prefilter) for a wave of uploaded rows; none (its max_value null) when
  // every row is forced onto one block.
  kernels::RowPrefilter prefilter(const float* logits, int32_t valid_vocab,
                                  const kernels::SampleRowParams* params, int32_t rows,
                                  cudaStream_t stream);
  // Rows [first, first + rows) of the uploaded settings all take the wide form.
  bool wave_is_wide(int32_t first, int32_t rows, int32_t valid_vocab) const;
  // Each row's settings (and, when `draw`, its uniform) and penalty list to the device; true
  // when a row has a token on the device to count in (a placeholder entry ends its list).
  bool upload_rows(std::span<const SampleRequest> requests, std::span<const size_t> which,
                   bool draw, cudaStream_t stream);
  // Samples the n uploaded rows into out (device), a wave of kSampleMaxRows at a time.
  void launch_waves(const float* logits, int32_t valid_vocab, int32_t n, int32_t* out,
                    cudaStream_t stream);
  void append_adjustments(const SampleRequest& r, kernels::SampleRowParams& p);
  // The n rows' ids (tokens, or probs()' status) on the host once the stream gets there; a row
  // left with no finite logit is an error.
  const int32_t* fetch_ids(int32_t n, cudaStream_t stream);
  // Grows both lists to `entries` (waiting for `stream` first when it must).
  void reserve_adjustments(size_t entries, cudaStream_t stream);

  int64_t vocab_ = 0;
  int32_t max_rows_ = 0;
  DeviceBuffer scratch_;  // sample_scratch_bytes(vocab): processed logits, exp terms
  DeviceBuffer probs_;    // [kSampleMaxRows, vocab] fp32: probs() rows of one wave
  DeviceBuffer wide_;     // sample_wide_scratch_bytes(vocab): the wide form's rows, partials
  bool force_one_block_ = false;
  DeviceBuffer params_;       // [max_rows] SampleRowParams
  PinnedBuffer params_host_;  // [max_rows] SampleRowParams
  DeviceBuffer ids_;          // [max_rows] int32
  PinnedBuffer ids_host_;     // [max_rows] int32
  DeviceBuffer adjust_;       // [adjust_capacity_] LogitAdjust, grown on demand
  PinnedBuffer adjust_host_;  // [adjust_capacity_] LogitAdjust
  size_t adjust_capacity_ = 0;
  // Recorded after each upload's copies: sample_on_device returns before they run, so the next
  // upload waits on it before it rewrites the pinned staging.
  std::shared_ptr<std::remove_pointer_t<cudaEvent_t>> uploaded_;
  std::vector<kernels::SampleRowParams> params_list_;  // this call's rows
  std::vector<kernels::LogitAdjust> adjust_list_;      // this call's entries, all rows
  std::vector<int32_t> slot_of_id_;                    // [vocab] index in adjust_list_, or -1
};

}  // namespace tandem
