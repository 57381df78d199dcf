// The CPU reference runner: the oracle the CUDA runner and every optimisation is checked against.
// Plain loops, fp32 activations and accumulation, weights read in place from the mmap.
//
// KV cache, per layer, K and V each: [num_pages, page_size, num_kv_heads, head_dim] fp32, so one
// page of one layer is page_size × num_kv_heads × head_dim × 4 contiguous bytes (KvPoolView).
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "core/anonymous_memory.h"
#include "model/model_dir.h"
#include "runner/cpu/load_time_fp8.h"
#include "runner/cpu/thread_pool.h"
#include "runner/runner.h"

namespace tandem {

class CpuRunner final : public ModelRunner {
 public:
  // The weights are read from `model`'s mmap on every forward: its WeightStore must outlive the
  // runner (the ModelDir itself may move; the runner keeps the tensor pointers, not the object).
  // `quant`: model.config.quant, or the load-time fp8 config of --quantization fp8 (the
  // runner then owns FP8 copies of the Linears).
  CpuRunner(const ModelDir& model, const RunnerOptions& opts, int32_t num_pages,
            const QuantConfig& quant);

  const ModelConfig& config() const override { return config_; }
  std::string device() const override { return device_; }
  int32_t page_size() const override { return page_size_; }
  int32_t num_pages() const override { return num_pages_; }
  void set_valid_vocab(int32_t valid_vocab) override;
  MemoryPlan memory_plan() const override;

  void forward(const ForwardBatch& batch) override;
  void sample(std::span<const SampleRequest> requests, std::span<int32_t> out_tokens) override;
  void copy_logits(std::span<float> out) override;
  void probs(std::span<const SampleRequest> requests, int32_t width, std::span<float> out,
             std::span<int32_t> draws) override;
  // Host memory: acceptance runs the reference accept_sampled on the rows where they lie.
  ProbRows make_prob_rows(int32_t rows, int32_t width) const override;
  void probs_into(std::span<const SampleRequest> requests, ProbRows& rows, int32_t first_slot,
                  std::span<int32_t> draws) override;
  void accept_sampled(std::span<const SampledDrafts> seqs, const ProbRows& draft_rows,
                      const ProbRows& target_rows, std::span<SpeculativeResult> out) override;
  KvPoolView kv_pool_view() override;

 private:
  void check_batch(const ForwardBatch& batch) const;
  void run_layer(int64_t layer, const ForwardBatch& batch, const std::vector<int32_t>& positions);
  // logits_ [num_logits_, vocab] of `rows` [num_logits_, hidden] (normed): ids below
  // valid_vocab_ scored, the others -inf.
  void lm_head(const float* rows);

  const ModelConfig config_;  // config.quant is what runs (load-time fp8 included)
  ModelWeights weights_;      // pointers into the WeightStore's tensor map or fp8_copy_
  Fp8WeightCopy fp8_copy_;    // --quantization fp8 only
  int64_t weights_bytes_ = 0;
  std::vector<std::pair<std::string, int64_t>> weight_bytes_by_format_;
  const std::string device_;  // "cpu" or "cpu:N"
  int32_t page_size_;
  int32_t num_pages_;
  // The largest batch the runner accepts (RunnerOptions::max_batch_tokens): the CUDA runner's
  // buffers are sized by it, so the oracle refuses what the GPU would, not just what it can.
  int32_t max_batch_tokens_ = 1;
  bool num_pages_from_budget_ = false;  // --kv-pages 0: sized from the default CPU KV budget
  int32_t valid_vocab_;
  ThreadPool pool_;
  std::vector<float> inv_freq_;  // [head_dim / 2] RoPE inverse frequencies

  size_t page_floats_;                    // page_size × num_kv_heads × head_dim
  std::vector<AnonymousMemory> k_pages_;  // [num_layers] → [num_pages, page_floats_] fp32
  std::vector<AnonymousMemory> v_pages_;  // [num_layers] → [num_pages, page_floats_] fp32

  // Activations of the current forward, grown on demand (num_tokens = batch.tokens.size()).
  std::vector<float> x_;       // [num_tokens, hidden] residual stream
  std::vector<float> h_;       // [num_tokens, hidden] normed input of a sub-block
  std::vector<float> q_;       // [num_tokens, num_heads * head_dim]
  std::vector<float> k_;       // [num_tokens, num_kv_heads * head_dim]
  std::vector<float> v_;       // [num_tokens, num_kv_heads * head_dim]
  std::vector<float> attn_;    // [num_tokens, num_heads * head_dim]
  std::vector<float> gate_;    // [num_tokens, intermediate]
  std::vector<float> up_;      // [num_tokens, intermediate]
  std::vector<float> logits_;  // [num_logits, vocab] of the last forward
  int64_t num_logits_ = 0;
  // Their capacities' bytes, stored after forward() grows them: memory_plan() runs on other
  // threads (an engine's status() from the daemon's loop) while a stage's forward() resizes
  // the vectors, so it must not read them (a data race ThreadSanitizer found).
  std::atomic<int64_t> activation_bytes_{0};
};

}  // namespace tandem
