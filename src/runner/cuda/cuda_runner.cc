#include "runner/cuda/cuda_runner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "kernels/argmax.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/decode_attention.cuh"
#include "kernels/embedding.cuh"
#include "kernels/env_knob.h"
#include "kernels/fp8_linear.cuh"
#include "kernels/gemm_skinny.cuh"
#include "kernels/gemv.cuh"
#include "kernels/int4_linear.cuh"
#include "kernels/paged_attention.cuh"
#include "kernels/prefill_attention.cuh"
#include "kernels/qkv_rope.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/rope_kv.cuh"
#include "kernels/silu_mul.cuh"
#include "model/model_dir.h"
#include "runner/cpu/load_time_fp8.h"
#include "runner/cpu/rope.h"
#include "runner/cpu/thread_pool.h"
#include "runner/decode_slices.h"

namespace tandem {
namespace {

// The slice rule's default limits (what its unit test uses) are the kernels' own.
static_assert(DecodeSliceLimits{}.max_slices == kernels::kDecodeMaxSlices &&
              DecodeSliceLimits{}.max_splits == kernels::kDecodeMaxSplits);

constexpr int32_t kMaxGraphBatch = 256;               // decode batches captured as graphs
constexpr int64_t kActivationSlack = 256ll << 20;     // cuBLASLt, graphs, allocator rounding
constexpr int32_t kMaxForwardTokens = 65535;          // gridDim.y of the prefill-sized launches
constexpr int64_t kAnchorRefreshNs = 10'000'000'000;  // device-timing clock anchor: every 10 s
// Batches of a few query tokens a sequence (a speculative verify of k + 1 tokens, a short prompt
// chunk) are decode-shaped: the tensor-core decode kernel takes their attention (each token its
// own causal length, positions[t] + 1 keys), not the prefill kernel's 64-row query tiles, and the
// step is captured as a graph like a decode step (its launches depend on the token, logit and
// slice counts only; the rest is in the metadata). Qwen2.5-7B, 5 tokens of one sequence at a
// 128-token context (H200, NOTES.md v26): 4.41 / 4.40 ms a step -> 4.13 / 4.10 as a graph,
// 4.02 / 4.04 with the decode kernel too. Bounded so that the graphs stay few.
constexpr int32_t kSmallQueryMaxLen = 16;
constexpr int32_t kSmallQueryMaxTokens = 32;
// Folding the RMSNorms into the GEMVs (CudaRunner::folds_norms) has every block of the
// consuming GEMV normalise the whole row for itself. Measured on the H200 (NOTES.md v9): a
// Qwen2.5-0.5B step (896 features) 1.24 -> 1.16 ms; Qwen2.5-7B (3,584) 4.52 -> 4.62 ms at batch
// 1 and 4.81 -> 5.40 at batch 2, Llama-3.1-8B 5.06 -> 5.17: there each of ~2,400 gate|up
// blocks reads 28 KB per token from L2 and holds the staged rows in shared memory. At batch 2
// the 0.5B lost too (1.41 -> 1.43 ms), when 2-token GEMVs issued a row's loads one at a time;
// with their first loads together (kernels/gemv.cu) folding 2 tokens won: 0.5B 2-token step
// 0.834 -> 0.723 ms (NOTES.md v28). Up to 2 tokens fold, the GEMVs' limit.
constexpr int64_t kFoldNormsMaxHidden = 1024;

}  // namespace

Result<std::unique_ptr<CudaRunner>> CudaRunner::create(const ModelConfig& config,
                                                       const ModelWeights& weights,
                                                       const RunnerOptions& opts) {
  int device = 0;
  if (opts.device.rfind("cuda:", 0) != 0 ||
      std::sscanf(opts.device.c_str() + 5, "%d", &device) != 1 || device < 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "device '" + opts.device + "': the CUDA runner takes cuda:N");
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device >= count) {
    cudaGetLastError();  // a missing driver is an answer here, not a sticky error
    return make_error(ErrorCode::kUnsupported, "device '" + opts.device + "': this machine has " +
                                                   std::to_string(count) + " CUDA device(s)");
  }
  if (config.head_dim % 8 != 0 || config.head_dim > 256 || config.hidden_size % 8 != 0 ||
      config.intermediate_size % 8 != 0 || config.hidden_size > 8192) {
    return make_error(ErrorCode::kUnsupported,
                      "config.json: head_dim " + std::to_string(config.head_dim) +
                          " / hidden_size " + std::to_string(config.hidden_size) +
                          ": the CUDA kernels need multiples of 8, head_dim <= 256, "
                          "hidden_size <= 8192");
  }
  if (opts.page_size < 1) {
    return make_error(ErrorCode::kInvalidArgument, "page_size must be >= 1");
  }
  if (opts.max_graphs < 1) {
    return make_error(ErrorCode::kInvalidArgument,
                      "max_graphs must be >= 1 (got " + std::to_string(opts.max_graphs) + ")");
  }
  // Prefill-sized launches put a forward's tokens in gridDim.y (silu_mul), whose limit is 65,535:
  // past it a chunk's launch would fail mid-request.
  if (opts.max_batch_tokens > kMaxForwardTokens) {
    return make_error(ErrorCode::kInvalidArgument,
                      "--max-num-batched-tokens " + std::to_string(opts.max_batch_tokens) +
                          ": the CUDA runner takes at most " + std::to_string(kMaxForwardTokens) +
                          " tokens a forward");
  }
  TANDEM_CUDA_CHECK(cudaSetDevice(device));

  // --quantization fp8: FP8 copies of the float Linears, made on the host exactly as the CPU
  // runner makes them, then uploaded like a published fp8 checkpoint. Freed after the upload.
  TANDEM_ASSIGN_OR_RETURN(
      QuantConfig quant, load_time_quantization(opts.quantization, config.quant, "--quantization"));
  ModelWeights quantized;
  Fp8WeightCopy fp8_copy;
  const ModelWeights* source = &weights;
  if (quant.quantized() && !config.quant.quantized()) {
    ThreadPool pool(0);
    quantized = weights;
    quantize_weights_fp8(quant, pool, quantized, fp8_copy);
    source = &quantized;
  }

  std::unique_ptr<CudaRunner> r(new CudaRunner());
  r->config_ = config;
  r->config_.quant = quant;
  r->device_ = device;
  r->page_size_ = opts.page_size;
  r->valid_vocab_ = int32_t(config.vocab_size);
  r->max_tokens_ = std::max(opts.max_batch_tokens, 1);
  r->max_seqs_ = std::max(opts.max_seqs, 1);
  r->graphs_ = LruMap<GraphKey, cudaGraphExec_t>(size_t(opts.max_graphs));
  r->max_logits_ = std::max(
      std::min(r->max_tokens_, opts.max_logit_rows > 0 ? opts.max_logit_rows : 4 * r->max_seqs_),
      1);
  // Every allocation phase is measured as the drop in the driver's free bytes, so the plan's
  // parts + baseline + free add up to the total (the cudaMalloc granularity included).
  size_t free_b = 0, total_b = 0;
  auto free_now = [&]() -> int64_t {
    TANDEM_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return int64_t(free_b);
  };
  const int64_t free_start = free_now();  // the context exists from here on
  r->plan_.device_total_bytes = int64_t(total_b);
  r->plan_.baseline_used_bytes = int64_t(total_b) - free_start;
  TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&r->stream_, cudaStreamNonBlocking));
  TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&r->copy_stream_, cudaStreamNonBlocking));
  for (int b = 0; b < 2; ++b) {
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&r->meta_copied_[b], cudaEventDisableTiming));
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&r->meta_read_[b], cudaEventDisableTiming));
  }
  r->meta_stream_ = kernels::env_choice("TANDEM_META_STREAM", {0, 1}, 1) == 1;
  r->gemm_ = std::make_unique<kernels::GemmContext>();
  const int64_t free_gemm = free_now();

  Result<DeviceWeights> dw = upload_weights(config, *source, /*progress=*/true);
  if (!dw.ok()) return dw.error();
  r->weights_ = std::move(dw).value();
  int major = 0;
  TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, r->device_));
  r->overlap_capable_ = major >= 9;  // programmatic dependent launch (kernels/pdl.cuh)
  // A/B switch for benchmarks: TANDEM_OVERLAP=0 launches every kernel plainly.
  const char* overlap_env = std::getenv("TANDEM_OVERLAP");
  if (overlap_env != nullptr && std::strcmp(overlap_env, "0") == 0) r->overlap_launches_ = false;
  // Whether every Linear of every layer is of one kind (the decode paths' preconditions).
  auto every_linear = [&](auto is) {
    return std::all_of(
        r->weights_.layers.begin(), r->weights_.layers.end(),
        [&](const DeviceLayer& l) { return is(l.qkv) && is(l.o) && is(l.gate_up) && is(l.down); });
  };
  r->bf16_linears_ = every_linear([](const DeviceLinear& w) { return w.bf16() != nullptr; });
  r->int4_linears_ = every_linear([](const DeviceLinear& w) {
    kernels::Int4Matrix unused;
    return single_int4_matrix(w, &unused);
  });
  r->int4_fold_capable_ = r->int4_linears_ && r->int4_fold_layers();
  r->w8a8_linears_ = every_linear([](const DeviceLinear& w) {
    kernels::Fp8Matrix unused;
    int32_t group = 0;
    return single_w8a8_matrix(w, &unused, &group);
  });
  for (const DeviceLayer& l : r->weights_.layers) {
    for (const DeviceLinear* w : {&l.qkv, &l.o, &l.gate_up, &l.down}) {
      r->decode_rows_limit_ = std::min(r->decode_rows_limit_, linear_decode_rows_limit(*w));
    }
  }
  r->fp8_act_amax_capable_ = r->fp8_act_amax_layers();
  r->fp8_act_amax_ = kernels::env_choice("TANDEM_FP8_ACT_AMAX", {0, 1, 2}, 2);
  const int64_t free_weights = free_now();
  r->plan_.weights_bytes = free_gemm - free_weights;
  r->plan_.weight_bytes_by_format = r->weights_.bytes_by_format;

  const std::vector<float> inv = rope_inv_freq(config);
  r->inv_freq_ = DeviceBuffer(inv.size() * 4);
  TANDEM_CUDA_CHECK(
      cudaMemcpy(r->inv_freq_.as<float>(), inv.data(), inv.size() * 4, cudaMemcpyHostToDevice));

  // Activations.
  const int64_t T = r->max_tokens_, H = config.hidden_size, I = config.intermediate_size;
  const int64_t QD = config.num_heads * config.head_dim;
  const int64_t QKV = (config.num_heads + 2 * config.num_kv_heads) * config.head_dim;
  const int64_t L = r->max_logits_;
  r->residual_ = DeviceBuffer(size_t(T * H * 4));
  r->normed_ = DeviceBuffer(size_t(T * H * 2));
  r->qkv_ = DeviceBuffer(size_t(T * QKV * 2));
  r->q_ = DeviceBuffer(size_t(T * QD * 2));
  r->attn_ = DeviceBuffer(size_t(T * QD * 2));
  r->delta_ = DeviceBuffer(size_t(T * H * 2));
  r->gate_up_ = DeviceBuffer(size_t(T * 2 * I * 2));
  r->act_ = DeviceBuffer(size_t(T * I * 2));
  r->picked_ = DeviceBuffer(size_t(L * H * 2));
  r->logits_ = DeviceBuffer(size_t(L * config.vocab_size * 4));
  if (opts.prob_rows > 0) {
    r->prob_rows_ = DeviceBuffer(size_t(opts.prob_rows) * size_t(config.vocab_size) * 4);
  }
  r->attn_partials_ =
      DeviceBuffer(size_t(kDecodeSplitRows * config.num_heads * (config.head_dim + 2) * 4));
  TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&r->num_sms_, cudaDevAttrMultiProcessorCount, device));
  r->decode_block_slices_ = kernels::decode_attention_block_slices(int32_t(config.head_dim));
  r->argmax_scratch_ = DeviceBuffer(kernels::argmax_scratch_bytes(int32_t(config.vocab_size)));
  TANDEM_CUDA_CHECK(cudaMemset(r->argmax_scratch_.ptr(), 0, r->argmax_scratch_.bytes()));
  r->lm_argmax_scratch_ = DeviceBuffer(kernels::kGemvArgmaxScratchBytes);
  TANDEM_CUDA_CHECK(cudaMemset(r->lm_argmax_scratch_.ptr(), 0, r->lm_argmax_scratch_.bytes()));
  if (r->fp8_act_amax_capable_) {  // an activation buffer in the plan (1.8 MB for Qwen2.5-7B)
    const size_t slots = r->weights_.layers.size() * 2 * size_t(kernels::kFp8GemvMaxTokens) *
                         size_t(kernels::kAmaxTokenWords);
    r->act_amax_ = DeviceBuffer(slots * 4);
    TANDEM_CUDA_CHECK(cudaMemset(r->act_amax_.ptr(), 0, r->act_amax_.bytes()));
  }
  r->greedy_ids_ = PinnedBuffer(size_t(L * 4), /*mapped=*/true);
  r->async_ids_dev_ = DeviceBuffer(size_t(L * 4));
  r->async_stage_dev_ = DeviceBuffer(size_t(L * 4));
  for (int i = 0; i < 2; ++i) {
    r->async_ids_host_[i] = PinnedBuffer(size_t(L * 4), /*mapped=*/true);
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&r->async_copied_[i], cudaEventDisableTiming));
  }
  r->sampler_ = DeviceSampler(config.vocab_size, int32_t(L));
  TANDEM_TRY(r->make_linear_scratch());
  // Every GEMM shape's algorithm search, for every row bucket, before the first request.
  for (const DeviceLayer& l : r->weights_.layers) {
    for (const DeviceLinear* lin : {&l.qkv, &l.o, &l.gate_up, &l.down})
      prepare_linear(*lin, int32_t(T), false, r->linear_scratch_);
  }
  r->gemm_->prepare(int32_t(L), int32_t(config.vocab_size), int32_t(H), true);
  r->device_timing_ = opts.device_timing;
  if (r->device_timing_) r->anchor_ = make_clock_anchor(r->stream_);
  const int64_t free_activations = free_now();
  r->plan_.prob_rows_bytes = int64_t(r->prob_rows_.bytes());
  r->plan_.activation_bytes = free_weights - free_activations - r->plan_.prob_rows_bytes;

  // KV pool: what is asked, or what utilization leaves after everything else.
  const int64_t page_bytes = int64_t(r->page_size_) * config.num_kv_heads * config.head_dim * 2;
  const int64_t per_page = 2 * config.num_layers * page_bytes;
  int64_t pages = opts.num_pages;
  if (pages <= 0) {
    TANDEM_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const int64_t budget = int64_t(double(total_b) * opts.gpu_memory_utilization) -
                           (int64_t(total_b) - int64_t(free_b)) - kActivationSlack;
    pages = budget / per_page;
    r->plan_.kv_budget_bytes = budget;
    if (pages < 1) {
      return make_error(ErrorCode::kOutOfPages,
                        "gpu_memory_utilization " + std::to_string(opts.gpu_memory_utilization) +
                            " leaves no room for KV pages of " + std::to_string(per_page) +
                            " bytes (--page-size " + std::to_string(r->page_size_) +
                            ") after weights and activations");
    }
  } else {
    // An explicit --kv-pages past what is free is an error that names it, not a failed
    // cudaMalloc (which aborts). Nothing was allocated since free_activations was read.
    if (pages > (free_activations - kActivationSlack) / per_page) {
      return make_error(ErrorCode::kOutOfPages,
                        "--kv-pages " + std::to_string(pages) + " x " + std::to_string(per_page) +
                            " bytes (--page-size " + std::to_string(r->page_size_) + ") is " +
                            std::to_string(pages * per_page / (1 << 20)) + " MiB of KV; " +
                            std::to_string(free_activations >> 20) + " MiB of " + opts.device +
                            " are free after weights and activations");
    }
  }
  r->num_pages_ = int32_t(pages);
  r->k_cache_ = DeviceBuffer(size_t(pages * config.num_layers * page_bytes));
  r->v_cache_ = DeviceBuffer(size_t(pages * config.num_layers * page_bytes));
  const int64_t free_kv = free_now();
  r->plan_.kv_bytes = free_activations - free_kv;
  r->plan_.kv_page_bytes = per_page;

  // Metadata sections.
  r->max_page_refs_ = std::max<int32_t>(r->num_pages_ + r->max_seqs_, 1024);
  int32_t off = 0;
  auto section = [&](int32_t& o, int32_t n) {
    o = off;
    off += (n + 31) / 32 * 32;  // 128-byte aligned sections
  };
  section(r->off_tokens_, r->max_tokens_);
  section(r->off_positions_, r->max_tokens_);
  section(r->off_slots_, r->max_tokens_);
  section(r->off_token_seq_, r->max_tokens_);
  section(r->off_logit_rows_, r->max_logits_);
  r->max_tiles_ = r->max_tokens_ / kernels::kPrefillQueryTile + r->max_seqs_;
  section(r->off_tile_start_, r->max_tiles_);
  section(r->off_tile_len_, r->max_tiles_);
  section(r->off_seq_page_start_, r->max_seqs_);
  section(r->off_fed_, r->max_tokens_);
  section(r->off_page_ids_, r->max_page_refs_);
  for (int b = 0; b < (r->meta_stream_ ? 2 : 1); ++b) {
    r->meta_host_[b] = PinnedBuffer(size_t(off) * 4);
    r->meta_dev_[b] = DeviceBuffer(size_t(off) * 4);
  }

  const int64_t free_end = free_now();
  r->plan_.workspace_bytes = (free_start - free_gemm) + (free_kv - free_end);
  r->plan_.device_free_bytes = free_end;
  std::fprintf(stderr,
               "cuda:%d memory plan: weights %.2f GB, KV %.2f GB (%d pages of %d tokens), "
               "activations %.2f GB, probability rows %.0f MB, workspace %.0f MB, free %.2f of "
               "%.2f GB\n",
               device, double(r->plan_.weights_bytes) / 1e9, double(r->plan_.kv_bytes) / 1e9,
               r->num_pages_, r->page_size_, double(r->plan_.activation_bytes) / 1e9,
               double(r->plan_.prob_rows_bytes) / 1e6, double(r->plan_.workspace_bytes) / 1e6,
               double(free_b) / 1e9, double(total_b) / 1e9);
  return r;
}

Status CudaRunner::make_linear_scratch() {
  int64_t dequant = 0, max_k = 0;
  bool fp8 = false;
  for (const DeviceLayer& l : weights_.layers) {
    for (const DeviceLinear* lin : {&l.qkv, &l.o, &l.gate_up, &l.down}) {
      dequant = std::max(dequant, dequant_scratch_elements(*lin));
      fp8 = fp8 || needs_fp8_gemm(*lin);
      max_k = std::max<int64_t>(max_k, lin->k);
    }
  }
  linear_scratch_.gemm = gemm_.get();
  if (dequant > 0) linear_scratch_.dequant = DeviceBuffer(size_t(dequant) * 2);
  if (!fp8) return Status::Ok();
  // W8A8 needs FP8 tensor cores (Ada sm_89, Hopper sm_90); never a silent bf16 run instead.
  cudaDeviceProp prop{};
  TANDEM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  if (prop.major * 10 + prop.minor < 89) {
    const std::string cc = std::to_string(prop.major) + "." + std::to_string(prop.minor);
    return make_error(ErrorCode::kUnsupported,
                      "quantization 'fp8' (" + config_.quant.describe() +
                          ") needs FP8 tensor cores (compute capability 8.9+); cuda:" +
                          std::to_string(device_) + " (" + prop.name + ") is " + cc);
  }
  fp8_gemm_ = std::make_unique<kernels::Fp8GemmContext>();
  for (const DeviceLayer& l : weights_.layers) {
    for (const DeviceLinear* lin : {&l.qkv, &l.o, &l.gate_up, &l.down}) {
      for (const DeviceLinearPart& p : lin->parts) {
        if (p.format != QuantFormat::kFp8 || p.fp8_activations == Fp8Activations::kNone) continue;
        if (!fp8_gemm_->supports(p.rows, lin->k, p.fp8_block)) {
          // Appended, not "[" + to_string(): GCC 12's -Wrestrict misfires on the latter.
          std::string shape = std::to_string(p.rows);
          shape.insert(shape.begin(), '[');
          shape += ", " + std::to_string(lin->k) + "]";
          const std::string scales = p.fp8_block ? "128 x 128 block" : "per-channel";
          return make_error(ErrorCode::kUnsupported,
                            "quantization 'fp8' (" + config_.quant.describe() +
                                "): cuBLASLt has no FP8 GEMM for a " + shape + " weight with " +
                                scales + " scales on " + prop.name);
        }
      }
    }
  }
  linear_scratch_.fp8_gemm = fp8_gemm_.get();
  // Block fp8 GEMMs read whole 16-row blocks of xq (kernels/fp8_linear.cuh).
  linear_scratch_.xq = DeviceBuffer(size_t((max_tokens_ + 15) / 16 * 16 * max_k));
  linear_scratch_.x_scale = DeviceBuffer(
      size_t(max_tokens_ * ((max_k + kernels::kFp8Block - 1) / kernels::kFp8Block)) * 4);
  return Status::Ok();
}

CudaRunner::~CudaRunner() {
  graphs_.for_each([](const GraphKey&, cudaGraphExec_t exec) { cudaGraphExecDestroy(exec); });
  if (stream_ != nullptr) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  if (copy_stream_ != nullptr) {
    cudaStreamSynchronize(copy_stream_);
    cudaStreamDestroy(copy_stream_);
  }
  for (int b = 0; b < 2; ++b) {
    if (meta_copied_[b] != nullptr) cudaEventDestroy(meta_copied_[b]);
    if (meta_read_[b] != nullptr) cudaEventDestroy(meta_read_[b]);
  }
  for (cudaEvent_t e : async_copied_) {
    if (e != nullptr) cudaEventDestroy(e);
  }
}

void CudaRunner::set_valid_vocab(int32_t valid_vocab) {
  TANDEM_CHECK(valid_vocab > 0 && valid_vocab <= config_.vocab_size,
               "valid_vocab %d outside (0, %lld]", valid_vocab, (long long)config_.vocab_size);
  if (valid_vocab == valid_vocab_) return;
  TANDEM_CUDA_CHECK(cudaSetDevice(device_));
  valid_vocab_ = valid_vocab;
  // The lm_head's cuBLASLt shape (more than 8 logit rows) now has valid_vocab rows: its
  // algorithm search before the first request, as create() ran it for the full vocabulary.
  gemm_->prepare(max_logits_, valid_vocab, int32_t(config_.hidden_size), true);
}

void CudaRunner::forward(const ForwardBatch& batch) {
  // Stages drive runners from their own threads, and two runners may sit on two devices.
  TANDEM_CUDA_CHECK(cudaSetDevice(device_));
  const int32_t T = int32_t(batch.tokens.size());
  const int32_t S = int32_t(batch.seqs.size());
  const int32_t L = int32_t(batch.logit_rows.size());
  TANDEM_CHECK(T <= max_tokens_ && S <= max_seqs_ && L <= max_logits_,
               "batch of %d tokens / %d seqs / %d logits over the runner's %d / %d / %d", T, S, L,
               max_tokens_, max_seqs_, max_logits_);
  // A forward without sample() (a prefill chunk that samples nothing) leaves the host ahead of
  // the stream: the last copy out of this forward's meta_host_ must have run before it is reused.
  const int32_t b = meta_stream_ ? 1 - meta_cur_ : 0;
  TANDEM_CUDA_CHECK(cudaEventSynchronize(meta_copied_[b]));
  note_greedy_next(batch);
  // A promised all-greedy sample_async() (ForwardBatch::greedy_next): the lm_head GEMV of one or
  // two rows takes the argmax itself, into the host buffer that call will use (free: with fewer
  // than kMaxAsyncSamples calls outstanding, the host has read it). TANDEM_LM_ARGMAX=0 keeps the
  // argmax launch after the forward (for A/B runs).
  lm_argmax_ = false;
  static const bool lm_argmax = kernels::env_choice("TANDEM_LM_ARGMAX", {0, 1}, 1) == 1;
  if (batch.greedy_next) {
    TANDEM_CHECK(async_pending_.size() < kMaxAsyncSamples,
                 "greedy_next with %zu sample_async() calls outstanding", async_pending_.size());
    lm_argmax_ = lm_argmax && L >= 1 && L <= kernels::kGemvMaxTokens;
    if (lm_argmax_) ++lm_argmax_forwards_;
  }
  int32_t* m = meta_host_[b].as<int32_t>();
  bool decode_only = T == S;
  int32_t max_q = 0;
  int32_t refs = 0;
  for (int32_t s = 0; s < S; ++s) {
    const SeqSlice& q = batch.seqs[size_t(s)];
    TANDEM_CHECK(q.q_len >= 0 && q.q_len <= q.context_len && q.q_start + q.q_len <= T);
    TANDEM_CHECK(int64_t(q.pages.size()) * page_size_ >= q.context_len,
                 "sequence %d: %zu pages for %d tokens", s, q.pages.size(), q.context_len);
    decode_only = decode_only && q.q_len == 1;
    max_q = std::max(max_q, q.q_len);
    const int32_t npages = (q.context_len + page_size_ - 1) / page_size_;
    TANDEM_CHECK(refs + npages <= max_page_refs_);
    m[off_seq_page_start_ + s] = refs;
    for (int32_t p = 0; p < npages; ++p) {
      TANDEM_CHECK(q.pages[size_t(p)] >= 0 && q.pages[size_t(p)] < num_pages_);
      m[off_page_ids_ + refs + p] = q.pages[size_t(p)];
    }
    refs += npages;
    for (int32_t i = 0; i < q.q_len; ++i) {
      const int32_t t = q.q_start + i;
      const int32_t pos = q.context_len - q.q_len + i;
      m[off_positions_ + t] = pos;
      m[off_slots_ + t] = q.pages[size_t(pos / page_size_)] * page_size_ + pos % page_size_;
      m[off_token_seq_ + t] = s;
    }
  }
  TANDEM_CHECK(batch.fed.empty() || int32_t(batch.fed.size()) == T, "%zu fed entries for %d tokens",
               batch.fed.size(), T);
  for (int32_t t = 0; t < T; ++t) {
    const int32_t fed = batch.fed.empty() ? -1 : batch.fed[size_t(t)];
    // A fed id comes from the last sample_async() on the device (a draw: within the vocabulary).
    TANDEM_CHECK(fed < int32_t(last_async_slots_.size()), "token %d fed from request %d of %zu", t,
                 fed, last_async_slots_.size());
    const int32_t id = fed >= 0 ? 0 : batch.tokens[size_t(t)];
    TANDEM_CHECK(id >= 0 && id < config_.vocab_size, "token id %d out of range", id);
    m[off_tokens_ + t] = id;
    m[off_fed_ + t] = fed >= 0 ? last_async_slots_[size_t(fed)] : -1;
  }
  logits_in_place_ = L == T;
  for (int32_t i = 0; i < L; ++i) {
    TANDEM_CHECK(batch.logit_rows[size_t(i)] >= 0 && batch.logit_rows[size_t(i)] < T);
    m[off_logit_rows_ + i] = batch.logit_rows[size_t(i)];
    logits_in_place_ = logits_in_place_ && batch.logit_rows[size_t(i)] == i;
  }
  const int64_t group = config_.num_heads / config_.num_kv_heads;
  const bool small_q = !decode_only && max_q <= kSmallQueryMaxLen && T <= kSmallQueryMaxTokens &&
                       group <= kernels::kDecodeMaxGroup &&
                       kernels::decode_attention_tensor_cores(int32_t(config_.head_dim));
  // Longer chunks use the tensor-core prefill kernel over planned query tiles.
  num_tiles_ = 0;
  if (!decode_only && !small_q && config_.head_dim % 16 == 0 && config_.head_dim <= 128) {
    const auto n = static_cast<size_t>(S);
    std::vector<int32_t> q_start(n), q_len(n), context_len(n);
    for (int32_t s = 0; s < S; ++s) {
      const SeqSlice& q = batch.seqs[size_t(s)];
      q_start[size_t(s)] = q.q_start, q_len[size_t(s)] = q.q_len;
      context_len[size_t(s)] = q.context_len;
    }
    num_tiles_ = kernels::plan_prefill_tiles(q_start.data(), q_len.data(), context_len.data(), S,
                                             max_tiles_, m + off_tile_start_, m + off_tile_len_);
  }
  // Decode batches (and small_q ones) take the GQA kernel: K/V read once per KV head, keys in
  // slices (runner/decode_slices.h) so that the grid fills the SMs, no slice shorter than the
  // minimum.
  decode_slices_ = 0;
  if ((decode_only || small_q) && group <= kernels::kDecodeMaxGroup) {
    int32_t max_ctx = 1;
    for (const SeqSlice& q : batch.seqs) max_ctx = std::max(max_ctx, q.context_len);
    const DecodeSliceShape shape{T,
                                 int32_t(config_.num_kv_heads),
                                 int32_t(group),
                                 max_ctx,
                                 kernels::decode_attention_tensor_cores(int32_t(config_.head_dim)),
                                 num_sms_,
                                 int32_t(config_.head_dim)};
    decode_slices_ = decode_slice_count(
        shape, DecodeSliceLimits{kernels::kDecodeMaxSlices, kernels::kDecodeMaxSplits,
                                 decode_block_slices_});
  }
  const size_t meta_bytes = size_t(off_page_ids_ + refs) * 4;
  // On copy_stream_ the copy waits only for the forward two back (the last to read copy b), so
  // it runs while the forward before this one does; stream_ then waits for an event long
  // complete instead of running a host-to-device copy between the two steps' kernels.
  cudaStream_t copy_stream = meta_stream_ ? copy_stream_ : stream_;
  if (meta_stream_) TANDEM_CUDA_CHECK(cudaStreamWaitEvent(copy_stream, meta_read_[b]));
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(meta_dev_[b].as<int32_t>(), m, meta_bytes,
                                    cudaMemcpyHostToDevice, copy_stream));
  TANDEM_CUDA_CHECK(cudaEventRecord(meta_copied_[b], copy_stream));
  if (meta_stream_) TANDEM_CUDA_CHECK(cudaStreamWaitEvent(stream_, meta_copied_[b]));
  meta_cur_ = b;
  num_logits_ = L;
  last_interval_ = nullptr;
  if (T == 0) return;
  // Events around the launch only: a capture must not record them into the graph.
  auto timed = [&](auto&& launch) {
    if (!device_timing_) return launch();
    auto interval = std::make_shared<CudaInterval>(anchor_, event_pool_);
    interval->record_start(stream_);
    launch();
    interval->record_end(stream_);
    last_interval_ = std::move(interval);
  };

  if (use_graphs_ && ((decode_only && T <= kMaxGraphBatch) || small_q)) {
    const int32_t argmax = lm_argmax_ ? async_next_ : -1;
    const auto key = std::make_tuple(T, L, decode_slices_, decode_only, logits_in_place_, b, argmax,
                                     valid_ids());
    cudaGraphExec_t exec = nullptr;
    if (const cudaGraphExec_t* held = graphs_.find(key)) {
      exec = *held;
    } else {
      cudaGraph_t graph = nullptr;
      // Once per batch shape, off the steady state: what the graph costs is measured.
      size_t free_before = 0, free_after = 0, total = 0;
      TANDEM_CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
      TANDEM_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      run_model(T, L);
      TANDEM_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
      TANDEM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      TANDEM_CUDA_CHECK(cudaGraphDestroy(graph));
      // The driver may put a graph's device memory in place only at its upload (the first
      // launch otherwise): uploaded here, so that the drop below is the graph's. The drop can be 0:
      // a graph's few KiB may land in a 2 MiB chunk the driver already holds (seen on an H100
      // with the two metadata copies: +0 at instantiation, upload and first launch, every graph).
      TANDEM_CUDA_CHECK(cudaGraphUpload(exec, stream_));
      TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
      TANDEM_CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
      graph_bytes_ += int64_t(free_before) - int64_t(free_after);
      free_after_graphs_ = int64_t(free_after);
      ++graph_count_;
      // A released graph still in flight is freed by the driver once it completes.
      if (auto evicted = graphs_.insert(key, exec)) cudaGraphExecDestroy(evicted->second);
      graphs_held_ = int32_t(graphs_.size());
    }
    timed([&] { TANDEM_CUDA_CHECK(cudaGraphLaunch(exec, stream_)); });
  } else {
    timed([&] { run_model(T, L); });
  }
  if (meta_stream_) TANDEM_CUDA_CHECK(cudaEventRecord(meta_read_[b], stream_));
}

std::string CudaRunner::pci_bus_id() const {
  char id[32] = {};
  TANDEM_CUDA_CHECK(cudaDeviceGetPCIBusId(id, int(sizeof(id)), device_));
  return id;
}

void CudaRunner::run_model(int32_t T, int32_t L) {
  const ModelConfig& c = config_;
  const int32_t H = int32_t(c.hidden_size), I = int32_t(c.intermediate_size);
  const int32_t D = int32_t(c.head_dim), NH = int32_t(c.num_heads), KVH = int32_t(c.num_kv_heads);
  const float eps = float(c.rms_norm_eps);
  const int32_t* meta = meta_dev_[meta_cur_].as<int32_t>();
  const int64_t layer_kv = int64_t(num_pages_) * KVH * page_size_ * D;  // elements
  auto* normed = normed_.as<__nv_bfloat16>();
  auto* delta = delta_.as<__nv_bfloat16>();
  float* residual = residual_.as<float>();

  kernels::launch_gather_rows_to_f32(weights_.embed.as<__nv_bfloat16>(), meta + off_tokens_, T, H,
                                     residual, stream_, meta + off_fed_,
                                     async_ids_dev_.as<int32_t>());
  // Single-token decode of a small model through bf16 weights: each RMSNorm folds into the GEMV
  // that reads it and each residual add into the GEMV that feeds it (5 launches a layer, not 7).
  const bool fold = folds_norms(T);
  // One-token int4 steps of small models fold them too, into the int4 GEMVs (the same 5).
  const bool fold_int4 = folds_int4_norms(T);
  const bool pdl = overlaps_launches(T, L) || overlaps_bf16_launches(T, L) ||
                   overlaps_int4_launches(T, L) || overlaps_fp8_launches(T, L);
  const bool act_amax = takes_fp8_act_amax(T), down_amax = takes_fp8_down_amax(T);
  const int32_t layers = int32_t(c.num_layers);
  // Layer l's slots for o's input (which 0) and down's (1).
  auto amax_slots = [&](int32_t layer, int which) {
    return act_amax_.as<uint32_t>() +
           (int64_t(layer) * 2 + which) * kernels::kFp8GemvMaxTokens * kernels::kAmaxTokenWords;
  };
  // Quantizes x [T, k] for the W8A8 Linear w from layer li's slots, zeroing layer li - 1's.
  auto quantize_from_amax = [&](const __nv_bfloat16* x, const DeviceLinear& w, int32_t li,
                                int which) {
    TokenFp8Input in;
    token_fp8_input(w, &in);
    kernels::launch_fp8_quantize_amax(x, T, w.k, amax_slots(li, which), in.scale_ub,
                                      linear_scratch_.xq.as<uint8_t>(),
                                      linear_scratch_.x_scale.as<float>(),
                                      amax_slots((li + layers - 1) % layers, which), stream_, pdl);
  };
  for (int32_t li = 0; li < layers; ++li) {
    const DeviceLayer& w = weights_.layers[size_t(li)];
    __nv_bfloat16* kc = k_cache_.as<__nv_bfloat16>() + li * layer_kv;
    __nv_bfloat16* vc = v_cache_.as<__nv_bfloat16>() + li * layer_kv;
    const float* qkv_bias = w.qkv_bias.bytes() > 0 ? w.qkv_bias.as<float>() : nullptr;
    const kernels::RopeKvShape rope_shape{T, NH, KVH, D, page_size_};
    const kernels::RopeKvTarget rope_out{qkv_bias,
                                         meta + off_positions_,
                                         meta + off_slots_,
                                         inv_freq_.as<float>(),
                                         rope_shape,
                                         q_.as<__nv_bfloat16>(),
                                         kc,
                                         vc};
    const kernels::NormedRows input_normed{residual, w.input_norm.as<float>(), eps};
    kernels::Int4Matrix qkv_int4, o_int4, gate_up_int4, down_int4;
    kernels::Fp8Matrix qkv_fp8m, gate_up_fp8m;
    int32_t qkv_group = 0, gate_up_group = 0;
    if (fold_int4) {
      single_int4_matrix(w.qkv, &qkv_int4);
      single_int4_matrix(w.o, &o_int4);
      single_int4_matrix(w.gate_up, &gate_up_int4);
      single_int4_matrix(w.down, &down_int4);
    }
    if (fold) {
      kernels::launch_qkv_rope_gemv(input_normed, w.qkv.bf16(), H, rope_out, stream_, pdl);
    } else if (fold_int4) {
      kernels::launch_int4_qkv_rope_gemv(input_normed, qkv_int4, T, rope_out, stream_, pdl);
    } else {
      // The previous layer's MLP output joins the residual here.
      const bool qkv_fp8 =
          add_rmsnorm(li == 0 ? nullptr : delta, input_normed.weight, T, w.qkv, pdl);
      if (T <= kernels::kGemvMaxTokens && w.qkv.bf16() != nullptr && D % 16 == 0) {
        // Decode: RoPE and the K/V write in the projection's epilogue (the same bits).
        kernels::launch_qkv_rope_gemv(normed, w.qkv.bf16(), H, rope_out, stream_, pdl);
      } else if (w.qkv.bf16() != nullptr && kernels::skinny_qkv_rope_fuses(T, H, rope_shape)) {
        // A verify pass or a small batch (2-32 tokens): the same epilogue in the skinny GEMM.
        kernels::launch_skinny_qkv_rope(normed, w.qkv.bf16(), T, H, rope_out, stream_, -1, pdl);
      } else if (single_int4_matrix(w.qkv, &qkv_int4) &&
                 kernels::int4_qkv_rope_fuses(qkv_int4, T, rope_shape)) {
        kernels::launch_int4_qkv_rope_gemv(normed, qkv_int4, T, rope_out, stream_, pdl);
      } else if (single_w8a8_matrix(w.qkv, &qkv_fp8m, &qkv_group) &&
                 kernels::fp8_qkv_rope_fuses(qkv_fp8m, T, rope_shape)) {
        // W8A8 decode: the same RoPE epilogue in the FP8 GEMV (the same bits).
        if (!qkv_fp8) quantize_linear_input(w.qkv, normed, T, linear_scratch_, stream_, pdl);
        kernels::launch_fp8_qkv_rope_gemv(linear_scratch_.xq.as<uint8_t>(),
                                          linear_scratch_.x_scale.as<float>(), qkv_group, qkv_fp8m,
                                          T, rope_out, stream_, pdl);
      } else {
        linear_after_norm(normed, w.qkv, T, qkv_.ptr(), qkv_fp8, pdl);
        kernels::launch_rope_kv_write(qkv_.as<__nv_bfloat16>(), qkv_bias, meta + off_positions_,
                                      meta + off_slots_, inv_freq_.as<float>(), rope_shape,
                                      q_.as<__nv_bfloat16>(), kc, vc, stream_, pdl);
      }
    }
    // O's input amax from the decode attention's stores (a decode batch: decode_slices_).
    const bool o_amax = act_amax && decode_slices_ > 0;
    attention(T, kc, vc, pdl, o_amax ? amax_slots(li, 0) : nullptr);
    const kernels::NormedRows post_normed{residual, w.post_attn_norm.as<float>(), eps};
    if (fold) {
      kernels::launch_gemv_add(attn_.as<__nv_bfloat16>(), w.o.bf16(), T, H, NH * D, residual,
                               stream_, pdl);
      kernels::launch_gemv_swiglu(post_normed, w.gate_up.bf16(), T, I, H, act_.as<__nv_bfloat16>(),
                                  stream_, pdl);
      kernels::launch_gemv_add(act_.as<__nv_bfloat16>(), w.down.bf16(), T, H, I, residual, stream_,
                               pdl);
      continue;
    }
    if (fold_int4) {
      kernels::launch_int4_gemv_add(attn_.as<__nv_bfloat16>(), o_int4, T, residual, stream_, pdl);
      kernels::launch_int4_gemv_swiglu(post_normed, gate_up_int4, T, act_.as<__nv_bfloat16>(),
                                       stream_, pdl);
      kernels::launch_int4_gemv_add(act_.as<__nv_bfloat16>(), down_int4, T, residual, stream_, pdl);
      continue;
    }
    if (o_amax) {
      quantize_from_amax(attn_.as<__nv_bfloat16>(), w.o, li, 0);
      run_linear_prequantized(w.o, T, delta, /*out_f32=*/false, linear_scratch_, stream_, pdl);
    } else {
      linear(attn_.as<__nv_bfloat16>(), w.o, T, delta, pdl);
    }
    const bool gate_up_fp8 = add_rmsnorm(delta, post_normed.weight, T, w.gate_up, pdl);
    // The SwiGLU fused into the projection: the GEMV for one token (4.55 vs 4.59 ms a 7B step,
    // NOTES.md v8), the skinny GEMM for 2-16 (7B gate|up 62.8-68.5 us against 75 for cuBLASLt
    // and silu_mul, v15); each the same bits as its unfused pair.
    // Int4 (group 128, up to 16 tokens): the same fusion in the int4 GEMV, its sums in the fused
    // plan's k order (NOTES.md v19).
    if (T < kernels::kSkinnyMinTokens && w.gate_up.bf16() != nullptr) {
      kernels::launch_gemv_swiglu(normed, w.gate_up.bf16(), T, I, H, act_.as<__nv_bfloat16>(),
                                  stream_, pdl);
    } else if (single_int4_matrix(w.gate_up, &gate_up_int4) &&
               kernels::int4_swiglu_fuses(gate_up_int4, T)) {
      kernels::launch_int4_gemv_swiglu(normed, gate_up_int4, T, act_.as<__nv_bfloat16>(), stream_,
                                       pdl);
    } else if (T <= kernels::kFp8GemvMaxTokens &&
               single_w8a8_matrix(w.gate_up, &gate_up_fp8m, &gate_up_group)) {
      // W8A8 decode: the SwiGLU in the FP8 GEMV's epilogue (the same bits).
      if (!gate_up_fp8) {
        quantize_linear_input(w.gate_up, normed, T, linear_scratch_, stream_, pdl);
      }
      kernels::launch_fp8_gemv_swiglu(linear_scratch_.xq.as<uint8_t>(),
                                      linear_scratch_.x_scale.as<float>(), gate_up_group,
                                      gate_up_fp8m, T, act_.as<__nv_bfloat16>(), stream_, pdl,
                                      down_amax ? amax_slots(li, 1) : nullptr);
    } else if (kernels::skinny_swiglu_wins(T) && w.gate_up.bf16() != nullptr) {
      kernels::launch_skinny_swiglu(normed, w.gate_up.bf16(), T, I, H, act_.as<__nv_bfloat16>(),
                                    stream_, -1, pdl);
    } else {
      linear_after_norm(normed, w.gate_up, T, gate_up_.ptr(), gate_up_fp8, pdl);
      kernels::launch_silu_mul(gate_up_.as<__nv_bfloat16>(), T, I, act_.as<__nv_bfloat16>(),
                               stream_);
    }
    if (down_amax) {
      quantize_from_amax(act_.as<__nv_bfloat16>(), w.down, li, 1);
      run_linear_prequantized(w.down, T, delta, /*out_f32=*/false, linear_scratch_, stream_, pdl);
    } else {
      linear(act_.as<__nv_bfloat16>(), w.down, T, delta, pdl);
    }
  }
  // Folded layers left the residual complete; otherwise the last MLP output joins it here.
  kernels::launch_add_rmsnorm(residual, fold || fold_int4 ? nullptr : delta,
                              weights_.final_norm.as<float>(), T, H, eps, normed, stream_, pdl);
  if (L == 0) return;
  // One launch less a step where every token's row is a logit row in order (on the H200 inside
  // the spread alone, NOTES.md v33).
  const __nv_bfloat16* picked = normed;
  if (!logits_in_place_) {
    kernels::launch_gather_rows_bf16(normed, meta + off_logit_rows_, L, H,
                                     picked_.as<__nv_bfloat16>(), stream_, pdl);
    picked = picked_.as<__nv_bfloat16>();
  }
  // lm_head stays bf16 in every format (quantized checkpoints keep it as stored).
  // 3-8 logit rows (a verify pass at k = 2..7) take the skinny GEMM, launched overlapped like the
  // layers' Linears, not cuBLASLt, which does not overlap (NOTES.md v42: the verify's remaining
  // seam). H100 (NOTES.md v48, x2 alternated, device span): 7B 5-token step 5.081 / 5.087 ->
  // 5.067 / 5.070 ms, 0.5B 3-token 0.751 / 0.755 -> 0.744 / 0.744.
  // Only the first valid_ids() rows are scored: no sampler reads the others (a padded
  // vocabulary's rows, or a draft's capped vocabulary, set_valid_vocab), and their columns of
  // logits_ ([L, vocab_size]) are left as they were.
  const int32_t V = int32_t(c.vocab_size);
  const int32_t N = valid_ids();
  if (lm_argmax_) {  // L <= kGemvMaxTokens
    // Greedy ids for the promised sample_async(), where its argmax would write them.
    const kernels::GemvArgmax argmax{lm_argmax_scratch_.ptr(), N, async_ids_dev_.as<int32_t>(),
                                     async_ids_host_[async_next_].device_ptr<int32_t>()};
    kernels::launch_gemv_argmax(picked, weights_.lm_head(), L, N, H, logits_.as<float>(), argmax,
                                stream_, pdl, V);
  } else if (L <= kernels::kGemvMaxTokens) {
    kernels::launch_gemv(picked, weights_.lm_head(), L, N, H, logits_.ptr(), true, stream_, V, pdl);
  } else if (L <= 8) {  // where skinny_gemm_wins holds at any vocabulary
    kernels::launch_skinny_gemm(picked, weights_.lm_head(), L, N, H, logits_.ptr(),
                                /*out_f32=*/true, stream_, V, -1, pdl);
  } else {
    gemm_->run(picked, weights_.lm_head(), L, N, H, logits_.ptr(), true, stream_, V);
  }
}

void CudaRunner::attention(int32_t T, const __nv_bfloat16* kc, const __nv_bfloat16* vc, bool pdl,
                           uint32_t* out_amax) {
  const ModelConfig& c = config_;
  const int32_t D = int32_t(c.head_dim);
  const int32_t* meta = meta_dev_[meta_cur_].as<int32_t>();
  const kernels::PagedAttentionShape shape{T, int32_t(c.num_heads), int32_t(c.num_kv_heads),
                                           D, page_size_,           1.0f / std::sqrt(float(D))};
  auto* q = q_.as<__nv_bfloat16>();
  auto* out = attn_.as<__nv_bfloat16>();
  if (num_tiles_ > 0) {
    kernels::launch_prefill_attention(q, kc, vc, meta + off_tile_start_, meta + off_tile_len_,
                                      num_tiles_, meta + off_token_seq_, meta + off_positions_,
                                      meta + off_seq_page_start_, meta + off_page_ids_, shape, out,
                                      stream_);
  } else if (decode_slices_ > 0) {
    kernels::launch_decode_attention(q, kc, vc, meta + off_token_seq_, meta + off_positions_,
                                     meta + off_seq_page_start_, meta + off_page_ids_, shape,
                                     decode_slices_, attn_partials_.as<float>(), out, stream_, pdl,
                                     kernels::decode_attention_warp_merge(), out_amax);
  } else {
    kernels::launch_paged_attention(q, kc, vc, meta + off_token_seq_, meta + off_positions_,
                                    meta + off_seq_page_start_, meta + off_page_ids_, shape, out,
                                    stream_);
  }
}

bool CudaRunner::add_rmsnorm(const __nv_bfloat16* delta, const float* norm_weight, int32_t T,
                             const DeviceLinear& next, bool pdl) {
  const ModelConfig& c = config_;
  float* residual = residual_.as<float>();
  auto* normed = normed_.as<__nv_bfloat16>();
  const float eps = float(c.rms_norm_eps);
  const int32_t H = int32_t(c.hidden_size);
  TokenFp8Input fp8;
  if (!token_fp8_input(next, &fp8)) {
    kernels::launch_add_rmsnorm(residual, delta, norm_weight, T, H, eps, normed, stream_, pdl);
    return false;
  }
  const kernels::Fp8RowQuant quant{linear_scratch_.xq.as<uint8_t>(),
                                   linear_scratch_.x_scale.as<float>(), fp8.static_scale,
                                   fp8.scale_ub};
  kernels::launch_add_rmsnorm_fp8(residual, delta, norm_weight, T, H, eps, normed, quant, stream_,
                                  pdl);
  return true;
}

void CudaRunner::linear_after_norm(const __nv_bfloat16* normed, const DeviceLinear& w, int32_t T,
                                   void* y, bool quantized, bool pdl) {
  if (quantized) {
    run_linear_prequantized(w, T, y, /*out_f32=*/false, linear_scratch_, stream_, pdl);
  } else {
    linear(normed, w, T, y, pdl);
  }
}

// Each launch of a folded step may overlap the one before (kernels/pdl.cuh): its weight loads
// and launch hide behind the previous kernel's tail. Measured on the H200 (NOTES.md v17):
// Qwen2.5-0.5B batch 1 0.78 -> 0.675 ms, 0.652 with the head's three launches too. Not in a
// forward without logits (a draft's catch-up pass): when the draft's KV pass ran beside the
// target's verify, its waiting blocks took SM slots from the verify (4.63 -> 4.88 ms at k = 8).
// The unfolded layers: overlaps_bf16_launches.
bool CudaRunner::overlaps_launches(int32_t T, int32_t L) const {
  return folds_norms(T) && overlap_capable_ && overlap_launches_ && L > 0;
}

// Int4 decode steps too: every int4 GEMV, norm and decode attention kernel of the step waits
// for its predecessor after its first weight loads; kernels without that wait launch plainly.
// H200 (NOTES.md v19): AWQ Qwen2.5-0.5B batch 1 0.746 -> 0.652 ms, AWQ 7B 2.085 -> 2.048 (across
// leases); with the GEMVs' trigger after their loop (v21) 0.618-0.630 -> 0.544 and 2.035 ->
// 1.918-1.935.
bool CudaRunner::overlaps_int4_launches(int32_t T, int32_t L) const {
  return int4_linears_ && overlap_capable_ && overlap_launches_ && L > 0 &&
         T <= kernels::kInt4GemvMaxTokens;
}

// Steps of unfolded bf16 layers too (the 7B and 8B), now that the GEMVs let their successor
// launch only after their loop: with the trigger at their start the 7B's step went 3.88 -> 4.07
// ms (NOTES.md v17); with it after the loop 3.89 -> 3.73 (H200, NOTES.md v21). Up to the skinny
// GEMM's 32 tokens (a verify pass, a small batch), which copies its first weight stages before
// its wait (H200, NOTES.md v28): 7B 5-token verify 4.00 -> 3.89 ms, batch 4 3.98 -> 3.81, 0.5B
// batch 4 0.848 -> 0.723; 20 tokens unchanged (4.51). Above 32 tokens overlap lost (v27).
bool CudaRunner::overlaps_bf16_launches(int32_t T, int32_t L) const {
  return bf16_linears_ && overlap_capable_ && overlap_launches_ && L > 0 &&
         T <= kernels::kSkinnyMaxTokens;
}

// One-token W8A8 steps too (every Linear one FP8 part, activations quantized on the device):
// the FP8 GEMVs, their quantize and norm launches and decode attention wait for their
// predecessor after their first weight loads (kernels/fp8_linear.cu). H200 (NOTES.md v21): FP8
// 7B batch 1 2.77 -> 2.69-2.71 ms; at batch 4 overlap lost (4.16 -> 4.27).
bool CudaRunner::overlaps_fp8_launches(int32_t T, int32_t L) const {
  return w8a8_linears_ && overlap_capable_ && overlap_launches_ && L > 0 && T == 1;
}

// The int4 fold (kernels/int4_linear.cuh): one token, every layer's q|k|v taking the fused RoPE
// and its gate|up the fused SwiGLU (group size 128, clusters), and small models only, as the
// bf16 fold: each block normalises the row for itself, and at 3,584 features that prologue cost
// the 7B's gate|up (1.5 waves of blocks) 24.8 -> 30.4 us, q|k|v 10.2 -> 12.3, more than the two
// norm launches it saves (AWQ 7B batch 1 2.05 -> 2.13 ms; AWQ 0.5B 0.653 -> 0.618 with the
// attention change of the same measurement; H200, NOTES.md v20).
bool CudaRunner::folds_int4_norms(int32_t T) const {
  return int4_fold_capable_ && fold_int4_norms_ && T >= 1 && T <= kernels::kInt4FoldMaxTokens;
}

// Asked once at load (the layers' formats and shapes do not change): the one-token fused forms
// hold for every layer (the fold's one token count, kInt4FoldMaxTokens == 1).
bool CudaRunner::int4_fold_layers() const {
  static_assert(kernels::kInt4FoldMaxTokens == 1, "the fused forms are checked for one token");
  if (config_.hidden_size > kFoldNormsMaxHidden) return false;
  const kernels::RopeKvShape shape{1, int32_t(config_.num_heads), int32_t(config_.num_kv_heads),
                                   int32_t(config_.head_dim), page_size_};
  return std::all_of(weights_.layers.begin(), weights_.layers.end(), [&](const DeviceLayer& l) {
    kernels::Int4Matrix qkv, gate_up;
    return single_int4_matrix(l.qkv, &qkv) && kernels::int4_qkv_rope_fuses(qkv, 1, shape) &&
           single_int4_matrix(l.gate_up, &gate_up) && kernels::int4_swiglu_fuses(gate_up, 1);
  });
}

bool CudaRunner::fp8_act_amax_layers() const {
  const auto& layers = weights_.layers;
  if (layers.size() < 2) return false;
  kernels::Fp8Matrix first;
  int32_t first_group = 0;
  if (!single_w8a8_matrix(layers[0].gate_up, &first, &first_group)) return false;
  return std::all_of(layers.begin(), layers.end(), [&](const DeviceLayer& l) {
    kernels::Fp8Matrix gate_up;
    int32_t group = 0;
    TokenFp8Input o, down;
    return single_w8a8_matrix(l.gate_up, &gate_up, &group) && gate_up.block == first.block &&
           group == first_group && token_fp8_input(l.o, &o) && o.static_scale == nullptr &&
           token_fp8_input(l.down, &down) && down.static_scale == nullptr;
  });
}

// O's and down's quantizes without their pass for the amax: the decode attention's output stores
// and the gate|up GEMV's epilogue raise it (one atomic a warp and token; the GEMV's CUDA-core
// form only), so the quantizes only divide.
bool CudaRunner::takes_fp8_act_amax(int32_t T) const {
  return fp8_act_amax_capable_ && fp8_act_amax_ >= 1 && T >= 1 && T <= kernels::kFp8GemvMaxTokens;
}

// Down's from the gate|up GEMV's epilogue too (its CUDA-core form only). At one token that is an
// atomic for each warp's one output: on one address a token, FP8 7B batch 1 +4.1% on the H100
// (NOTES.md v61); spread over kernels::kAmaxSpread slots, -2.2% with o's (v62).
bool CudaRunner::takes_fp8_down_amax(int32_t T) const {
  if (!takes_fp8_act_amax(T) || fp8_act_amax_ < 2) return false;
  kernels::Fp8Matrix gate_up;
  int32_t group = 0;
  single_w8a8_matrix(weights_.layers[0].gate_up, &gate_up, &group);
  return kernels::fp8_swiglu_gives_amax(gate_up, T, group);
}

bool CudaRunner::folds_norms(int32_t T) const {
  const int64_t H = config_.hidden_size;
  return fold_norms_ && T >= 1 && T <= kernels::kGemvMaxTokens && bf16_linears_ &&
         H <= kFoldNormsMaxHidden && H * 2 <= kernels::kNormedRowsMaxBytes &&
         config_.head_dim % 16 == 0;
}

void CudaRunner::sample(std::span<const SampleRequest> requests, std::span<int32_t> out_tokens) {
  TANDEM_CUDA_CHECK(cudaSetDevice(device_));
  TANDEM_CHECK(async_pending_.empty(), "sample() with %zu sample_async() calls outstanding",
               async_pending_.size());
  for (const SampleRequest& r : requests) TANDEM_CHECK(r.fed < 0, "sample() of a fed request");
  check_greedy_next(requests, false);
  TANDEM_CHECK(out_tokens.size() >= requests.size());
  const int64_t V = config_.vocab_size;
  const int32_t valid = valid_ids();
  // Plain greedy rows (no penalties, nothing suppressed) take the argmax kernel, which writes
  // their ids straight into mapped host memory; every other row goes through the device
  // sampler. Only ids and per-row settings cross PCIe.
  std::vector<int32_t> greedy_rows;
  std::vector<size_t> greedy, others;
  for (size_t i = 0; i < requests.size(); ++i) {
    const SampleRequest& r = requests[i];
    TANDEM_CHECK(r.logit_index >= 0 && r.logit_index < num_logits_ && r.params != nullptr);
    if (plain_greedy(r)) {
      greedy_rows.push_back(r.logit_index);
      greedy.push_back(i);
    } else {
      others.push_back(i);
    }
  }
  kernels::launch_argmax_rows(logits_.as<float>(), greedy_rows.data(), int32_t(greedy_rows.size()),
                              int32_t(V), valid, argmax_scratch_.ptr(), argmax_scratch_.bytes(),
                              greedy_ids_.device_ptr<int32_t>(), stream_);
  // Synchronises the stream, so the argmax ids above have landed too.
  sampler_.sample(logits_.as<float>(), valid, requests, others, out_tokens, stream_);
  if (others.empty() && !greedy.empty()) TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  const int32_t* ids_host = greedy_ids_.as<int32_t>();
  for (size_t j = 0; j < greedy.size(); ++j) out_tokens[greedy[j]] = ids_host[j];
  // The stream is idle here, so a fresh clock anchor costs one event round trip.
  if (device_timing_ && trace_now_ns() - anchor_->host_ns > kAnchorRefreshNs) {
    anchor_ = make_clock_anchor(stream_);
  }
}

void CudaRunner::sample_async(std::span<const SampleRequest> requests) {
  TANDEM_CUDA_CHECK(cudaSetDevice(device_));
  TANDEM_CHECK(async_pending_.size() < kMaxAsyncSamples, "%zu samples outstanding",
               async_pending_.size());
  check_greedy_next(requests, true);
  const int32_t n = int32_t(requests.size());
  if (lm_argmax_) {
    // The forward's lm_head GEMV took the argmax of each row into both of this call's buffers:
    // request i's id is id i (greedy_in_row_order, checked above).
    std::vector<int32_t> slots(requests.size());
    for (int32_t i = 0; i < n; ++i) slots[size_t(i)] = i;
    const int32_t buf = async_next_;
    async_next_ ^= 1;
    lm_argmax_ = false;
    TANDEM_CUDA_CHECK(cudaEventRecord(async_copied_[buf], stream_));
    last_async_slots_ = slots;
    async_pending_.push_back(AsyncSample{buf, std::move(slots)});
    return;
  }
  // As sample(): plain greedy rows on the argmax kernel, the others on the device sampler. Their
  // ids land argmax rows first; a fed request names its token by the last call's slot.
  std::vector<SampleRequest> resolved(requests.begin(), requests.end());
  std::vector<int32_t> greedy_rows, slots(requests.size());
  std::vector<size_t> others;
  for (size_t i = 0; i < resolved.size(); ++i) {
    SampleRequest& r = resolved[i];
    TANDEM_CHECK(r.logit_index >= 0 && r.logit_index < num_logits_ && r.params != nullptr,
                 "sample_async: request %zu is not a row of the last forward", i);
    if (r.fed >= 0) {
      TANDEM_CHECK(r.fed < int32_t(last_async_slots_.size()), "request %zu fed from %d of %zu", i,
                   r.fed, last_async_slots_.size());
      r.fed = last_async_slots_[size_t(r.fed)];
    }
    if (plain_greedy(r)) {
      slots[i] = int32_t(greedy_rows.size());
      greedy_rows.push_back(r.logit_index);
    } else {
      others.push_back(i);
    }
  }
  const int32_t greedy = int32_t(greedy_rows.size());
  for (size_t j = 0; j < others.size(); ++j) slots[others[j]] = greedy + int32_t(j);
  // The sampler's fed penalties read this buffer (the last call's ids), so its rows and the
  // argmax's land in the stage and then move here in one copy.
  int32_t* ids = async_ids_dev_.as<int32_t>();
  int32_t* dst = others.empty() ? ids : async_stage_dev_.as<int32_t>();
  const int32_t valid = valid_ids();
  const int32_t buf = async_next_;
  async_next_ ^= 1;
  // All-greedy calls (the common decode step): the argmax also writes the ids into this call's
  // mapped host buffer, so no copy follows it on the stream before the next forward's (a copy
  // there cost ~5 us a step on the 0.5B, NOTES.md v45).
  int32_t* host_copy = others.empty() ? async_ids_host_[buf].device_ptr<int32_t>() : nullptr;
  kernels::launch_argmax_rows(logits_.as<float>(), greedy_rows.data(), greedy,
                              int32_t(config_.vocab_size), valid, argmax_scratch_.ptr(),
                              argmax_scratch_.bytes(), dst, stream_, host_copy);
  sampler_.sample_on_device(logits_.as<float>(), valid, resolved, others, dst + greedy, ids,
                            stream_);
  if (dst != ids && n > 0) {
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(ids, dst, size_t(n) * 4, cudaMemcpyDeviceToDevice, stream_));
  }
  if (n > 0 && host_copy == nullptr) {
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(async_ids_host_[buf].as<void>(), ids, size_t(n) * 4,
                                      cudaMemcpyDeviceToHost, stream_));
  }
  TANDEM_CUDA_CHECK(cudaEventRecord(async_copied_[buf], stream_));
  last_async_slots_ = slots;
  async_pending_.push_back(AsyncSample{buf, std::move(slots)});
}

void CudaRunner::sample_wait(std::span<int32_t> out_tokens) {
  TANDEM_CHECK(!async_pending_.empty(), "sample_wait() without sample_async()");
  const AsyncSample& oldest = async_pending_.front();
  TANDEM_CHECK(out_tokens.size() >= oldest.slots.size());
  TANDEM_CUDA_CHECK(cudaEventSynchronize(async_copied_[oldest.buffer]));
  const int32_t* ids = async_ids_host_[oldest.buffer].as<int32_t>();
  for (size_t i = 0; i < oldest.slots.size(); ++i) {
    out_tokens[i] = ids[oldest.slots[i]];
    TANDEM_CHECK(out_tokens[i] >= 0, "no finite logit left to sample from (request %zu)", i);
  }
  async_pending_.pop_front();
}

void CudaRunner::probs(std::span<const SampleRequest> requests, int32_t width, std::span<float> out,
                       std::span<int32_t> draws) {
  TANDEM_CUDA_CHECK(cudaSetDevice(device_));
  for (const SampleRequest& r : requests) {
    TANDEM_CHECK(r.logit_index >= 0 && r.logit_index < num_logits_ && r.params != nullptr);
  }
  sampler_.probs(logits_.as<float>(), width, valid_ids(), requests, out, draws, stream_);
}

ProbRows CudaRunner::make_prob_rows(int32_t rows, int32_t width) const {
  TANDEM_CHECK(rows >= 0 && width >= 1, "%d probability rows of %d ids", rows, width);
  TANDEM_CUDA_CHECK(cudaSetDevice(device_));
  const size_t bytes = size_t(rows) * size_t(width) * sizeof(float);
  // Within the reservation: a view, freed with the runner (the spec decoder holds one store of
  // each runner at a time, so views never alias in use).
  if (bytes > 0 && bytes <= prob_rows_.bytes()) {
    return ProbRows(prob_rows_.as<float>(), rows, width, device_, nullptr);
  }
  void* p = nullptr;
  if (bytes > 0) TANDEM_CUDA_CHECK(cudaMalloc(&p, bytes));
  return ProbRows(static_cast<float*>(p), rows, width, device_, [](float* q, int32_t device) {
    // Whichever device is current on the freeing thread: cudaFree needs the owner's.
    int current = 0;
    if (cudaGetDevice(&current) != cudaSuccess) return;
    if (current != device) cudaSetDevice(device);
    cudaFree(q);
    if (current != device) cudaSetDevice(current);
  });
}

namespace {

// The store must be device memory of this runner's GPU: its kernels read it in place.
void check_on_device(const ProbRows& rows, int device, const char* what) {
  if (rows.device() == device) return;
  const std::string where =
      rows.device() == ProbRows::kHost ? "the host" : "cuda:" + std::to_string(rows.device());
  TANDEM_CHECK(rows.device() == device,
               "%s probability rows are on %s, not on this runner's cuda:%d: speculative "
               "acceptance reads the draft's and the target's rows in place, so both models "
               "must run on one GPU",
               what, where.c_str(), device);
}

}  // namespace

void CudaRunner::probs_into(std::span<const SampleRequest> requests, ProbRows& rows,
                            int32_t first_slot, std::span<int32_t> draws) {
  TANDEM_CUDA_CHECK(cudaSetDevice(device_));
  check_on_device(rows, device_, "these");
  TANDEM_CHECK(first_slot >= 0 && size_t(first_slot) + requests.size() <= size_t(rows.rows()),
               "slots [%d, %d) of %d probability rows", first_slot,
               first_slot + int32_t(requests.size()), rows.rows());
  for (const SampleRequest& r : requests) {
    TANDEM_CHECK(r.logit_index >= 0 && r.logit_index < num_logits_ && r.params != nullptr);
  }
  sampler_.probs_on_device(logits_.as<float>(), rows.width(), valid_ids(), requests,
                           rows.row(first_slot), draws, stream_);
}

void CudaRunner::accept_sampled(std::span<const SampledDrafts> seqs, const ProbRows& draft_rows,
                                const ProbRows& target_rows, std::span<SpeculativeResult> out) {
  if (seqs.empty()) return;
  TANDEM_CUDA_CHECK(cudaSetDevice(device_));
  check_on_device(target_rows, device_, "the target's");
  // A store with no rows (no sequence proposed) holds no memory and is read by nobody.
  if (draft_rows.rows() > 0) check_on_device(draft_rows, device_, "the draft's");
  acceptance_.accept(seqs, draft_rows, target_rows, out, stream_);
}

void CudaRunner::copy_logits(std::span<float> out) {
  TANDEM_CUDA_CHECK(cudaSetDevice(device_));
  const size_t n = size_t(num_logits_) * size_t(config_.vocab_size);
  TANDEM_CHECK(out.size() >= n);
  TANDEM_CUDA_CHECK(
      cudaMemcpyAsync(out.data(), logits_.ptr(), n * 4, cudaMemcpyDeviceToHost, stream_));
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  // The lm_head scored only ids below valid_ids(); the others read -inf, as on the CPU runner.
  const size_t V = size_t(config_.vocab_size);
  for (size_t row = 0; row < size_t(num_logits_); ++row)
    std::fill(out.begin() + ptrdiff_t(row * V + size_t(valid_ids())),
              out.begin() + ptrdiff_t((row + 1) * V), -std::numeric_limits<float>::infinity());
}

KvPoolView CudaRunner::kv_pool_view() {
  KvPoolView v;
  const size_t page_bytes =
      size_t(page_size_) * size_t(config_.num_kv_heads) * size_t(config_.head_dim) * 2;
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    v.k.push_back(k_cache_.as<std::byte>() + l * int64_t(num_pages_) * int64_t(page_bytes));
    v.v.push_back(v_cache_.as<std::byte>() + l * int64_t(num_pages_) * int64_t(page_bytes));
  }
  v.page_bytes = page_bytes;
  v.num_pages = num_pages_;
  v.device = device_;
  v.writer_stream = stream_;
  return v;
}

Result<std::unique_ptr<ModelRunner>> make_cuda_runner(const ModelDir& model,
                                                      const RunnerOptions& opts) {
  Result<std::unique_ptr<CudaRunner>> r = CudaRunner::create(model.config, model.tensors, opts);
  if (!r.ok()) return r.error();
  return std::unique_ptr<ModelRunner>(std::move(r).value());
}

}  // namespace tandem
