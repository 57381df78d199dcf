#include "runner/cuda/device_sampler.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "kernels/cuda_check.cuh"
#include "kernels/fed_penalty.cuh"

namespace tandem {

DeviceSampler::DeviceSampler(int64_t vocab, int32_t max_rows)
    : vocab_(vocab),
      max_rows_(max_rows),
      scratch_(kernels::sample_scratch_bytes(vocab)),
      probs_(size_t(kernels::kSampleMaxRows) * size_t(vocab) * 4),
      wide_(kernels::sample_wide_scratch_bytes(vocab)),
      params_(size_t(max_rows) * sizeof(kernels::SampleRowParams)),
      params_host_(size_t(max_rows) * sizeof(kernels::SampleRowParams)),
      ids_(size_t(max_rows) * 4),
      ids_host_(size_t(max_rows) * 4),
      slot_of_id_(size_t(vocab), -1) {
  // Room for a few thousand penalised ids up front; longer histories grow it (rarely, and
  // only between steps).
  reserve_adjustments(size_t(max_rows) * 256, nullptr);
  cudaEvent_t event = nullptr;
  TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  uploaded_.reset(event, [](cudaEvent_t e) { cudaEventDestroy(e); });
  // A/B switch for benchmarks: TANDEM_SAMPLE_ONE_BLOCK=1 keeps every row on the one-block kernel.
  const char* env = std::getenv("TANDEM_SAMPLE_ONE_BLOCK");
  force_one_block_ = env != nullptr && std::strcmp(env, "1") == 0;
}

void DeviceSampler::reserve_adjustments(size_t entries, cudaStream_t stream) {
  if (entries <= adjust_capacity_) return;
  // A kernel of an earlier sample_on_device() may still read the device list being replaced.
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
  const size_t n = std::max(entries, 2 * adjust_capacity_);
  adjust_ = DeviceBuffer(n * sizeof(kernels::LogitAdjust));
  adjust_host_ = PinnedBuffer(n * sizeof(kernels::LogitAdjust));
  adjust_capacity_ = n;
}

void DeviceSampler::append_adjustments(const SampleRequest& r, kernels::SampleRowParams& p) {
  const ResolvedSampling& s = *r.params;
  auto entry = [&](int32_t id) -> kernels::LogitAdjust& {
    TANDEM_CHECK(id >= 0 && id < vocab_, "token id %d outside the logits row of %lld", id,
                 static_cast<long long>(vocab_));
    int32_t& slot = slot_of_id_[size_t(id)];
    if (slot < 0) {
      slot = int32_t(adjust_list_.size());
      adjust_list_.push_back(kernels::LogitAdjust{id, 0, 0});
    }
    return adjust_list_[size_t(slot)];
  };
  p.adjust_begin = int32_t(adjust_list_.size());
  if (s.repetition_penalty != 1.0f) {
    for (int32_t id : r.history.prompt) entry(id).flags |= kernels::kAdjustRepeat;
    for (int32_t id : r.history.output) entry(id).flags |= kernels::kAdjustRepeat;
  }
  if (s.frequency_penalty != 0.0f || s.presence_penalty != 0.0f) {
    for (int32_t id : r.history.output) entry(id).output_count++;
  }
  for (int32_t id : r.suppress) entry(id).flags |= kernels::kAdjustBan;
  p.adjust_end = int32_t(adjust_list_.size());
  // The row's entries name exactly the slots it set.
  for (int32_t j = p.adjust_begin; j < p.adjust_end; ++j) {
    slot_of_id_[size_t(adjust_list_[size_t(j)].id)] = -1;
  }
}

bool DeviceSampler::upload_rows(std::span<const SampleRequest> requests,
                                std::span<const size_t> which, bool draw, cudaStream_t stream) {
  const int32_t n = int32_t(which.size());
  TANDEM_CHECK(n <= max_rows_, "%d rows to sample, room for %d", n, max_rows_);
  std::vector<kernels::SampleRowParams>& params = params_list_;
  params.resize(size_t(n));
  adjust_list_.clear();
  bool fed_rows = false;
  for (int32_t i = 0; i < n; ++i) {
    const SampleRequest& r = requests[which[size_t(i)]];
    const ResolvedSampling& s = *r.params;
    kernels::SampleRowParams& p = params[size_t(i)];
    p = kernels::SampleRowParams{};
    p.logit_row = r.logit_index;
    p.top_k = s.top_k;
    p.temperature = s.temperature;
    p.top_p = s.top_p;
    p.min_p = s.min_p;
    p.repetition_penalty = s.repetition_penalty;
    p.presence_penalty = s.presence_penalty;
    p.frequency_penalty = s.frequency_penalty;
    if (draw && !s.greedy()) {
      TANDEM_CHECK(r.rng != nullptr, "a sampled row needs its generator");
      p.u = r.rng->next_uniform();  // exactly one draw per sampled token, as on the CPU
    }
    append_adjustments(r, p);
    const bool penalised =
        s.repetition_penalty != 1.0f || s.frequency_penalty != 0.0f || s.presence_penalty != 0.0f;
    if (r.fed >= 0 && penalised) {
      p.fed_slot = r.fed;
      adjust_list_.push_back(kernels::LogitAdjust{-1, 0, 0});  // launch_merge_fed_penalties's
      p.adjust_end++;
      fed_rows = true;
    }
  }
  // The last upload's copies may not have run yet (sample_on_device does not wait): they read
  // the pinned staging rewritten below. The lists above were built meanwhile.
  TANDEM_CUDA_CHECK(cudaEventSynchronize(uploaded_.get()));
  std::memcpy(params_host_.as<void>(), params.data(), size_t(n) * sizeof(params[0]));
  reserve_adjustments(adjust_list_.size(), stream);
  if (!adjust_list_.empty()) {
    std::memcpy(adjust_host_.as<void>(), adjust_list_.data(),
                adjust_list_.size() * sizeof(kernels::LogitAdjust));
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(adjust_.ptr(), adjust_host_.as<void>(),
                                      adjust_list_.size() * sizeof(kernels::LogitAdjust),
                                      cudaMemcpyHostToDevice, stream));
  }
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(params_.ptr(), params_host_.as<void>(),
                                    size_t(n) * sizeof(params[0]), cudaMemcpyHostToDevice, stream));
  TANDEM_CUDA_CHECK(cudaEventRecord(uploaded_.get(), stream));
  return fed_rows;
}

const int32_t* DeviceSampler::fetch_ids(int32_t n, cudaStream_t stream) {
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(ids_host_.as<void>(), ids_.ptr(), size_t(n) * 4,
                                    cudaMemcpyDeviceToHost, stream));
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
  const int32_t* ids = ids_host_.as<int32_t>();
  for (int32_t i = 0; i < n; ++i) {
    TANDEM_CHECK(ids[i] >= 0, "no finite logit left to sample from (row %d)", i);
  }
  return ids;
}

kernels::RowPrefilter DeviceSampler::prefilter(const float* logits, int32_t valid_vocab,
                                               const kernels::SampleRowParams* params, int32_t rows,
                                               cudaStream_t stream) {
  if (force_one_block_) return {};
  return kernels::launch_wide_prefilter(logits, int32_t(vocab_), valid_vocab, params,
                                        adjust_.as<kernels::LogitAdjust>(), rows,
                                        scratch_.as<float>(), wide_.ptr(), stream);
}

bool DeviceSampler::wave_is_wide(int32_t first, int32_t rows, int32_t valid_vocab) const {
  if (force_one_block_) return false;
  const auto* params = params_host_.as<kernels::SampleRowParams>() + first;
  for (int32_t i = 0; i < rows; ++i) {
    if (!kernels::sample_row_is_wide(params[i], valid_vocab)) return false;
  }
  return true;
}

void DeviceSampler::sample(const float* logits, int32_t valid_vocab,
                           std::span<const SampleRequest> requests, std::span<const size_t> which,
                           std::span<int32_t> out, cudaStream_t stream) {
  const int32_t n = int32_t(which.size());
  if (n == 0) return;
  for (size_t i : which) TANDEM_CHECK(requests[i].fed < 0, "sample(): request %zu is fed", i);
  upload_rows(requests, which, /*draw=*/true, stream);
  launch_waves(logits, valid_vocab, n, ids_.as<int32_t>(), stream);
  const int32_t* ids = fetch_ids(n, stream);
  for (int32_t i = 0; i < n; ++i) out[which[size_t(i)]] = ids[i];
}

void DeviceSampler::sample_on_device(const float* logits, int32_t valid_vocab,
                                     std::span<const SampleRequest> requests,
                                     std::span<const size_t> which, int32_t* out,
                                     const int32_t* fed_ids, cudaStream_t stream) {
  const int32_t n = int32_t(which.size());
  if (n == 0) return;
  if (upload_rows(requests, which, /*draw=*/true, stream)) {
    TANDEM_CHECK(fed_ids != nullptr, "fed requests without the fed ids");
    kernels::launch_merge_fed_penalties(params_.as<kernels::SampleRowParams>(), n,
                                        adjust_.as<kernels::LogitAdjust>(), fed_ids, stream);
  }
  launch_waves(logits, valid_vocab, n, out, stream);
}

void DeviceSampler::launch_waves(const float* logits, int32_t valid_vocab, int32_t n, int32_t* out,
                                 cudaStream_t stream) {
  // Rows share the scratch rows, so waves of kSampleMaxRows run one after another.
  for (int32_t w = 0; w < n; w += kernels::kSampleMaxRows) {
    const int32_t rows = std::min(kernels::kSampleMaxRows, n - w);
    const auto* params = params_.as<kernels::SampleRowParams>() + w;
    if (wave_is_wide(w, rows, valid_vocab)) {
      kernels::launch_sample_rows_wide(logits, int32_t(vocab_), valid_vocab, params,
                                       adjust_.as<kernels::LogitAdjust>(), rows,
                                       scratch_.as<float>(), wide_.ptr(), out + w, nullptr, 0,
                                       /*draw=*/true, stream);
    } else {
      const kernels::RowPrefilter pre = prefilter(logits, valid_vocab, params, rows, stream);
      kernels::launch_sample_rows(logits, int32_t(vocab_), valid_vocab, params,
                                  adjust_.as<kernels::LogitAdjust>(), rows, scratch_.as<float>(),
                                  out + w, stream, pre.max_value != nullptr ? &pre : nullptr);
    }
  }
}

void DeviceSampler::probs(const float* logits, int32_t width, int32_t valid_vocab,
                          std::span<const SampleRequest> requests, std::span<float> out,
                          std::span<int32_t> draws, cudaStream_t stream) {
  TANDEM_CHECK(out.size() >= requests.size() * size_t(width), "%zu floats for %zu rows of %d",
               out.size(), requests.size(), width);
  run_probs(logits, width, valid_vocab, requests, nullptr, out.data(), draws, stream);
}

void DeviceSampler::probs_on_device(const float* logits, int32_t width, int32_t valid_vocab,
                                    std::span<const SampleRequest> requests, float* rows,
                                    std::span<int32_t> draws, cudaStream_t stream) {
  run_probs(logits, width, valid_vocab, requests, rows, nullptr, draws, stream);
}

void DeviceSampler::run_probs(const float* logits, int32_t width, int32_t valid_vocab,
                              std::span<const SampleRequest> requests, float* device_rows,
                              float* host_rows, std::span<int32_t> draws, cudaStream_t stream) {
  const int32_t n = int32_t(requests.size());
  if (n == 0) return;
  TANDEM_CHECK(width >= 1 && width <= vocab_, "probability rows of %d ids, logits of %lld", width,
               static_cast<long long>(vocab_));
  // The ids the kernels process; the rest of each row is zeroed after them.
  const int32_t valid = std::min(width, valid_vocab);
  TANDEM_CHECK(valid >= 1, "probability rows with %d valid ids", valid);
  const bool draw = !draws.empty();
  TANDEM_CHECK(!draw || draws.size() >= size_t(n), "%zu draws for %d rows", draws.size(), n);
  for (int32_t i = 0; i < n; ++i) {
    TANDEM_CHECK(requests[size_t(i)].fed < 0, "probability rows of fed request %d", i);
  }
  std::vector<size_t> all(static_cast<size_t>(n));  // every request, in order
  for (int32_t i = 0; i < n; ++i) all[size_t(i)] = size_t(i);
  upload_rows(requests, all, draw, stream);
  // Waves of kSampleMaxRows share the scratch rows. Rows for the host land in probs_ and go to
  // the host before the next wave overwrites them (the copy is ordered on the stream); rows
  // that stay on the device land in place.
  for (int32_t w = 0; w < n; w += kernels::kSampleMaxRows) {
    const int32_t rows = std::min(kernels::kSampleMaxRows, n - w);
    const auto* params = params_.as<kernels::SampleRowParams>() + w;
    float* dst =
        device_rows != nullptr ? device_rows + size_t(w) * size_t(width) : probs_.as<float>();
    if (wave_is_wide(w, rows, valid)) {
      kernels::launch_sample_rows_wide(
          logits, int32_t(vocab_), valid, params, adjust_.as<kernels::LogitAdjust>(), rows,
          scratch_.as<float>(), wide_.ptr(), ids_.as<int32_t>() + w, dst, width, draw, stream);
    } else {
      const kernels::RowPrefilter pre = prefilter(logits, valid, params, rows, stream);
      kernels::launch_probs_rows(logits, int32_t(vocab_), valid, params,
                                 adjust_.as<kernels::LogitAdjust>(), rows, scratch_.as<float>(),
                                 ids_.as<int32_t>() + w, dst, width, draw, stream,
                                 pre.max_value != nullptr ? &pre : nullptr);
    }
    if (valid < width) {  // zeros (all-zero bytes) for the ids no kernel wrote
      TANDEM_CUDA_CHECK(cudaMemset2DAsync(dst + valid, size_t(width) * 4, 0,
                                          size_t(width - valid) * 4, size_t(rows), stream));
    }
    if (device_rows == nullptr) {
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(host_rows + size_t(w) * size_t(width), dst,
                                        size_t(rows) * size_t(width) * 4, cudaMemcpyDeviceToHost,
                                        stream));
    }
  }
  const int32_t* status = fetch_ids(n, stream);
  if (draw) std::copy_n(status, n, draws.begin());
}

}  // namespace tandem
