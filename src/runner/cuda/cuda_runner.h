// The model on one GPU. forward() plans on the host (token positions, KV slots, page tables into
// one pinned buffer, one copy), then runs the kernels on the runner's stream; decode batches
// (one token per sequence) replay a CUDA graph captured per batch size, so a step costs one
// copy and one graph launch. Activations live in fixed buffers sized for max_batch_tokens.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <limits>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/fp8_linear.cuh"
#include "kernels/gemm.cuh"
#include "runner/cuda/device_acceptance.h"
#include "runner/cuda/device_buffer.h"
#include "runner/cuda/device_interval.h"
#include "runner/cuda/device_sampler.h"
#include "runner/cuda/device_weights.h"
#include "runner/lru_map.h"
#include "runner/runner.h"

namespace tandem {

class CudaRunner final : public ModelRunner {
 public:
  // Builds from resolved weights (load_model_dir's, or a test's in-memory ones).
  static Result<std::unique_ptr<CudaRunner>> create(const ModelConfig& config,
                                                    const ModelWeights& weights,
                                                    const RunnerOptions& opts);
  ~CudaRunner() override;

  const ModelConfig& config() const override { return config_; }
  std::string device() const override { return "cuda:" + std::to_string(device_); }
  std::string pci_bus_id() const override;
  int32_t page_size() const override { return page_size_; }
  int32_t num_pages() const override { return num_pages_; }
  void set_valid_vocab(int32_t valid_vocab) override;
  // Thread-safe: the graph figures grow on the worker thread as batch shapes are captured.
  MemoryPlan memory_plan() const override {
    MemoryPlan p = plan_;
    p.graph_bytes = graph_bytes_.load();
    p.graph_count = graph_count_.load();
    p.graphs_held = graphs_held_.load();
    if (const int64_t f = free_after_graphs_.load(); f > 0) p.device_free_bytes = f;
    return p;
  }

  void forward(const ForwardBatch& batch) override;
  std::shared_ptr<const DeviceInterval> last_forward_interval() const override {
    return last_interval_;
  }
  int32_t decode_rows_limit() const override { return decode_rows_limit_; }
  int64_t graphs_captured() const override { return graph_count_.load(); }
  // Multi-token forwards of up to 32 tokens replay graphs (cuda_runner.cc, kSmallQueryMaxTokens):
  // counts in 8s leave batch 16's first draft rounds two shapes (24, 32) instead of 16.
  int32_t graph_token_bucket() const override { return use_graphs_ ? 8 : 1; }
  void sample(std::span<const SampleRequest> requests, std::span<int32_t> out_tokens) override;
  // The argmax into a device buffer (what the next forward's fed tokens read) and copied back
  // behind it; sample_wait() waits for that copy alone.
  void sample_async(std::span<const SampleRequest> requests) override;
  void sample_wait(std::span<int32_t> out_tokens) override;
  void copy_logits(std::span<float> out) override;
  void probs(std::span<const SampleRequest> requests, int32_t width, std::span<float> out,
             std::span<int32_t> draws) override;
  // Device memory of this runner's GPU; the draft's store must lie on it too.
  ProbRows make_prob_rows(int32_t rows, int32_t width) const override;
  void probs_into(std::span<const SampleRequest> requests, ProbRows& rows, int32_t first_slot,
                  std::span<int32_t> draws) override;
  void accept_sampled(std::span<const SampledDrafts> seqs, const ProbRows& draft_rows,
                      const ProbRows& target_rows, std::span<SpeculativeResult> out) override;
  KvPoolView kv_pool_view() override;

  // Graph replay on or off (benchmarks compare the two; tests run both).
  void set_use_graphs(bool on) { use_graphs_ = on; }
  // Tests: whether folded one-token steps overlap their launches (kernels/pdl.cuh; on by
  // default, where the device has it). Before the first forward: graphs keep what they captured.
  void set_overlap_launches(bool on) { overlap_launches_ = on; }
  // Whether a forward of this many tokens and logit rows launches overlapped (run_model's rule).
  bool overlaps_launches(int32_t num_tokens, int32_t num_logits) const;
  // Whether an unfolded forward overlaps its launches: decode steps of int4 weights.
  bool overlaps_int4_launches(int32_t num_tokens, int32_t num_logits) const;
  // The same for one-token steps of plain bf16 weights (folded or not).
  bool overlaps_bf16_launches(int32_t num_tokens, int32_t num_logits) const;
  // The same for one-token steps of W8A8 FP8 weights.
  bool overlaps_fp8_launches(int32_t num_tokens, int32_t num_logits) const;
  // Tests: whether 1-2-token bf16 steps of small models fold the norms into the GEMVs (on by
  // default). Before the first forward, as set_overlap_launches.
  void set_fold_norms(bool on) { fold_norms_ = on; }
  // Whether a forward of this many tokens folds the RMSNorms and residual adds into the GEMVs.
  bool folds_norms(int32_t num_tokens) const;
  // Tests: whether one-token int4 steps fold the RMSNorms into the GEMVs (on by default).
  // Before the first forward, as set_overlap_launches.
  void set_fold_int4_norms(bool on) { fold_int4_norms_ = on; }
  // Whether a forward of this many tokens folds the norms into the int4 GEMVs (run_model's rule).
  bool folds_int4_norms(int32_t num_tokens) const;
  // Whether W8A8 decode steps take o's and down's input amax from their producers (the decode
  // attention's stores, the gate|up GEMV's SwiGLU epilogue: kernels::launch_fp8_quantize_amax)
  // rather than a pass of their own: 0 neither, 1 o's only, 2 both (the default: FP8 7B batch 1
  // 2.972 ms -> 2.907 on the H100, NOTES.md v62). TANDEM_FP8_ACT_AMAX=0|1|2 overrides it, for
  // A/B runs. Before the first forward, as set_overlap_launches.
  void set_fp8_act_amax(int which) { fp8_act_amax_ = which; }
  // Whether a forward of this many tokens takes o's (a decode batch) and down's (run_model's rule).
  bool takes_fp8_act_amax(int32_t num_tokens) const;
  bool takes_fp8_down_amax(int32_t num_tokens) const;
  cudaStream_t stream() const { return stream_; }
  // Forwards whose lm_head GEMV took the greedy ids itself (ForwardBatch::greedy_next).
  int64_t lm_argmax_forwards() const { return lm_argmax_forwards_; }

 private:
  CudaRunner() = default;
  // Ids the samplers may give: the engine's valid vocabulary within the model's rows.
  int32_t valid_ids() const { return std::min<int32_t>(valid_vocab_, int32_t(config_.vocab_size)); }
  // Dequantization scratch and the FP8 GEMM context the loaded Linears need; a W8A8 model on a
  // GPU without FP8 tensor cores is refused here.
  Status make_linear_scratch();
  // The device work of one forward, reading the metadata already on the device.
  void run_model(int32_t num_tokens, int32_t num_logits);
  // One layer's attention over the pages (kernel by batch shape: prefill tiles, split-K decode,
  // or per query head), q_ in, attn_ out.
  // pdl: the decode kernel may overlap the launch before it (kernels/pdl.cuh).
  // out_amax (a decode batch only): each token's max |attn_| raised into it (fp32 bits).
  void attention(int32_t num_tokens, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                 bool pdl = false, uint32_t* out_amax = nullptr);
  // Whether every layer takes the int4 fold's fused forms, and the model is small enough.
  bool int4_fold_layers() const;
  // fp8_act_amax_capable_'s rule.
  bool fp8_act_amax_layers() const;
  void linear(const __nv_bfloat16* x, const DeviceLinear& w, int32_t m, void* y, bool pdl = false) {
    run_linear(w, x, m, y, /*out_f32=*/false, linear_scratch_, stream_, pdl);
  }
  // residual_ += delta (when not null) and normed_ = RMSNorm(residual_) · norm_weight; when
  // `next` (the Linear that reads normed_) is W8A8 with one scale a token, also its quantized
  // input, in the same launch: returns whether it did (then linear_after_norm skips quantizing).
  bool add_rmsnorm(const __nv_bfloat16* delta, const float* norm_weight, int32_t m,
                   const DeviceLinear& next, bool pdl = false);
  void linear_after_norm(const __nv_bfloat16* normed, const DeviceLinear& w, int32_t m, void* y,
                         bool quantized, bool pdl = false);

  ModelConfig config_;
  int device_ = 0;
  int32_t page_size_ = 16;
  int32_t num_pages_ = 0;
  int32_t valid_vocab_ = 0;
  int32_t max_tokens_ = 0;
  int32_t max_seqs_ = 0;
  int32_t max_logits_ = 0;
  int32_t max_page_refs_ = 0;
  bool use_graphs_ = true;
  bool bf16_linears_ = false;     // every layer's Linears are plain bf16 (the GEMV kernels' input)
  bool int4_linears_ = false;     // every layer's Linears are one AWQ/GPTQ part each
  bool w8a8_linears_ = false;     // every layer's Linears are one W8A8 FP8 part each
  bool overlap_capable_ = false;  // sm_90+: launches may overlap the one before (kernels/pdl.cuh)
  bool overlap_launches_ = true;  // and folded steps use it (set_overlap_launches)
  bool int4_fold_capable_ = false;  // int4_fold_layers(), asked once at load
  bool fold_int4_norms_ = true;     // set_fold_int4_norms
  bool fold_norms_ = true;          // set_fold_norms
  // Every layer's gate|up, o and down one W8A8 part each, o's and down's activations dynamic per
  // token, gate|up's scales alike in every layer, and at least two layers (run_model rotates
  // act_amax_'s slots by layer); asked once at load.
  bool fp8_act_amax_capable_ = false;
  int fp8_act_amax_ = 0;  // set_fp8_act_amax
  MemoryPlan plan_;       // set once by make_cuda_runner
  // The fewest rows any layer's Linear keeps on its decode kernel (device_linear.h).
  int32_t decode_rows_limit_ = std::numeric_limits<int32_t>::max();
  std::atomic<int64_t> graph_bytes_{0};        // measured at each graph instantiation
  std::atomic<int64_t> free_after_graphs_{0};  // driver free bytes after the last one
  std::atomic<int32_t> graph_count_{0};
  std::atomic<int32_t> graphs_held_{0};

  cudaStream_t stream_ = nullptr;
  std::unique_ptr<kernels::GemmContext> gemm_;
  std::unique_ptr<kernels::Fp8GemmContext> fp8_gemm_;  // when a Linear is W8A8
  LinearScratch linear_scratch_;                       // quantized Linears' activations
  DeviceWeights weights_;
  DeviceBuffer inv_freq_;  // [head_dim / 2] fp32
  DeviceBuffer k_cache_;   // [layers][num_pages][KVH][page_size][D] bf16
  DeviceBuffer v_cache_;

  // Metadata, int32 sections at fixed offsets (so graphs see fixed pointers):
  // tokens, positions, slots, token_seq [max_tokens each]; logit_rows [max_logits];
  // tile_start, tile_len [max_tiles]; seq_page_start [max_seqs]; fed [max_tokens] (-1, or the
  // request of the last sample_async() whose id token t takes); page_ids [max_page_refs] (last,
  // so one copy of a prefix carries a batch).
  // Two copies, alternating forwards (meta_cur_ the current one's), each copied in on
  // copy_stream_ while the forward before runs, so that no copy sits on stream_ between two
  // steps' kernels; a graph is captured per copy. TANDEM_META_STREAM=0: copy 0 only, copied on
  // stream_ (the old form, for A/B runs).
  PinnedBuffer meta_host_[2];
  DeviceBuffer meta_dev_[2];
  cudaEvent_t meta_copied_[2] = {nullptr, nullptr};  // after meta_host_[b] -> meta_dev_[b]
  cudaEvent_t meta_read_[2] = {nullptr, nullptr};    // on stream_, after the forward reading b
  cudaStream_t copy_stream_ = nullptr;               // the metadata copies (meta_stream_)
  bool meta_stream_ = true;
  int32_t meta_cur_ = 0;
  int32_t off_tokens_ = 0, off_positions_ = 0, off_slots_ = 0, off_token_seq_ = 0;
  int32_t off_logit_rows_ = 0, off_seq_page_start_ = 0, off_fed_ = 0, off_page_ids_ = 0;
  // Prefill query tiles (launch_prefill_attention): start token and length of each.
  int32_t off_tile_start_ = 0, off_tile_len_ = 0, max_tiles_ = 0;
  int32_t num_tiles_ = 0;      // of the current forward; 0 = decode kernel
  int32_t decode_slices_ = 0;  // of the current forward; 0 = not a decode batch
  // Of the current forward: logit row i is token row i for every token (a decode step, a
  // verify), so lm_head reads the final norm's rows in place, with no gather launch.
  bool logits_in_place_ = false;
  int32_t num_sms_ = 1;
  int32_t decode_block_slices_ = 1;  // kernels::decode_attention_block_slices, once

  // Activations.
  DeviceBuffer residual_;        // [max_tokens, hidden] fp32
  DeviceBuffer normed_;          // [max_tokens, hidden] bf16
  DeviceBuffer qkv_;             // [max_tokens, (H + 2*KVH) * D] bf16
  DeviceBuffer q_;               // [max_tokens, H * D] bf16
  DeviceBuffer attn_;            // [max_tokens, H * D] bf16
  DeviceBuffer delta_;           // [max_tokens, hidden] bf16
  DeviceBuffer gate_up_;         // [max_tokens, 2 * intermediate] bf16
  DeviceBuffer act_;             // [max_tokens, intermediate] bf16
  DeviceBuffer picked_;          // [max_logits, hidden] bf16
  DeviceBuffer logits_;          // [max_logits, vocab] fp32
  DeviceBuffer prob_rows_;       // [opts.prob_rows, vocab] fp32: make_prob_rows' views
  DeviceBuffer attn_partials_;   // [kDecodeSplitRows, H, D + 2] fp32: split-K decode states
  DeviceBuffer argmax_scratch_;  // kernels::argmax_scratch_bytes(vocab)
  // kernels::kGemvArgmaxScratchBytes: the lm_head GEMV's own argmax (ForwardBatch::greedy_next)
  DeviceBuffer lm_argmax_scratch_;
  // [layers][2][kFp8GemvMaxTokens][kAmaxTokenWords] u32 (fp32 bits; kernels/amax_bits.cuh):
  // layer l's o and down input amax, raised by the decode attention and the gate|up GEMV, read
  // by the quantize, which zeroes layer l - 1's slots of its kind (l = 0: the last layer's), so
  // every slot is zero before its next producer; zeroed at load (takes_fp8_act_amax).
  DeviceBuffer act_amax_;
  // Of the current forward: its lm_head GEMV writes greedy ids into async_ids_dev_ and
  // async_ids_host_[async_next_], the buffers of the sample_async() it promised (which alone
  // moves async_next_, and clears this).
  bool lm_argmax_ = false;
  int64_t lm_argmax_forwards_ = 0;
  PinnedBuffer greedy_ids_;  // [max_logits] int32, mapped: the argmax kernel's output
  // sample_async(): the last call's ids on the device (what fed tokens and fed penalties read),
  // argmax rows first, then the device sampler's; each outstanding call's copy on the host, in
  // two alternating buffers, oldest first. A call with sampler rows draws into the stage first,
  // since its penalties may read the ids of the call before.
  struct AsyncSample {
    int32_t buffer = 0;
    std::vector<int32_t> slots;  // [requests] each request's place among the ids
  };
  DeviceBuffer async_ids_dev_;    // [max_logits] int32
  DeviceBuffer async_stage_dev_;  // [max_logits] int32
  // [max_logits] int32 each, mapped: an all-greedy call's argmax writes its ids here itself,
  // the others' ids are copied in.
  PinnedBuffer async_ids_host_[2];
  cudaEvent_t async_copied_[2] = {nullptr, nullptr};  // after each buffer's ids have landed
  std::deque<AsyncSample> async_pending_;
  int32_t async_next_ = 0;
  std::vector<int32_t> last_async_slots_;  // the last call's AsyncSample::slots
  DeviceSampler sampler_;                  // every row that is not plain greedy
  bool device_timing_ = false;             // events around each forward, for trace spans
  std::shared_ptr<const ClockAnchor> anchor_;
  std::shared_ptr<EventPool> event_pool_ = std::make_shared<EventPool>();
  std::shared_ptr<const DeviceInterval> last_interval_;
  // Speculative acceptance of sampled sequences over ProbRows in this GPU's memory.
  DeviceAcceptance acceptance_;
  int32_t num_logits_ = 0;

  // tokens, logits, splits, one query token a sequence, logits in place, metadata copy, the
  // lm_head's argmax (-1 none, else async_next_, whose buffer is in the graph's launch) and the
  // ids it scores (valid_ids()); at most RunnerOptions::max_graphs of them (set in create)
  using GraphKey = std::tuple<int32_t, int32_t, int32_t, bool, bool, int32_t, int32_t, int32_t>;
  LruMap<GraphKey, cudaGraphExec_t> graphs_{1};
};

}  // namespace tandem
