// A model runner computes one model on one device: the CPU reference runner (the oracle) or the
// CUDA runner. The pipeline (scheduler, stages, speculative loop) talks only to this interface,
// so every backend runs the same code path above it.
//
// Plan on the host, run on the device: the caller builds a ForwardBatch (tokens, positions,
// per-sequence block tables) and the runner executes it. KV storage lives in the runner, indexed
// by page ids the caller allocated from a PagePool of num_pages() pages.
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kv/kv_pool_view.h"
#include "model/config.h"
#include "runner/prob_rows.h"
#include "sampling/sampler.h"
#include "sampling/speculative.h"
#include "trace/trace.h"

namespace tandem {

struct ModelDir;

// One sequence's slice of a batch. Its query tokens are tokens[q_start, q_start + q_len) at
// positions [context_len - q_len, context_len): a prefill chunk, one decode token, or k+1
// speculative positions. KV for all context_len tokens is (after this step) in its pages.
struct SeqSlice {
  int32_t q_start = 0;
  int32_t q_len = 0;
  int32_t context_len = 0;
  std::span<const int32_t> pages;  // [ceil(context_len / page_size)] page ids, token order
};

struct ForwardBatch {
  std::span<const int32_t> tokens;      // [num_tokens] ids, sequences back to back
  std::span<const SeqSlice> seqs;       // [num_seqs]
  std::span<const int32_t> logit_rows;  // [num_logits] rows of `tokens` whose logits are wanted
  // Empty, or [num_tokens]: fed[t] >= 0 takes token t from the last sample_async(), the id it
  // drew for its request fed[t] (tokens[t] is then ignored). An engine that launches a decode
  // step before it has read the previous step's tokens feeds them this way, without a round
  // trip through the host.
  std::span<const int32_t> fed;
  // True when the next call after this forward is sample_async() with one plain_greedy()
  // request per logit row, request i on row i (greedy_in_row_order): a runner may then take
  // those ids inside the forward (the CUDA runner's lm_head GEMV of one or two rows does, with
  // no argmax launch after it). sample() may not follow such a forward.
  bool greedy_next = false;
};

// One row of logits to sample, after forward(): which row, with what settings.
struct SampleRequest {
  int32_t logit_index = 0;  // index into the forward's logit_rows
  const ResolvedSampling* params = nullptr;
  TokenHistory history;
  std::span<const int32_t> suppress;  // ids banned this step (eos/stop before min_tokens)
  SamplingRng* rng = nullptr;         // advanced by the draw
  // sample_async() only: >= 0 when history.output lacks its last token, the one the last
  // sample_async() drew for its request `fed` (still on the device while the host has not read
  // it); the penalties count it as the host would. -1 everywhere else.
  int32_t fed = -1;
};

struct RunnerOptions {
  std::string device = "cpu";  // "cpu" or "cuda:N"
  int32_t page_size = 16;
  int32_t num_pages = 0;  // 0 = size from memory (gpu_memory_utilization)
  double gpu_memory_utilization = 0.90;
  int32_t max_batch_tokens = 2048;  // largest ForwardBatch the runner must accept
  int32_t max_seqs = 256;
  // Logit rows one forward may keep; 0 = min(max_batch_tokens, 4 * max_seqs). Speculative
  // verification keeps k + 1 rows per sequence.
  int32_t max_logit_rows = 0;
  // Probability rows of config().vocab_size ids reserved at construction for speculative
  // acceptance of sampled sequences (make_prob_rows hands out views of them): on the CUDA runner
  // they are device memory counted with the activations, before the KV pool takes what is left,
  // so a burst of sampled speculation cannot run the device out of memory later. 0 = none: a
  // store is then allocated when asked (benchmarks, tests). The CPU runner allocates on demand.
  int32_t prob_rows = 0;
  int32_t threads = 0;  // CPU runner: 0 = hardware concurrency
  // Time each forward on the device for traces (CUDA: a pair of events per forward).
  bool device_timing = false;
  // CUDA graphs the runner keeps (one per batch shape it has met); past this many, the least
  // recently used is released and captured again if its shape returns. A long-running server
  // meets ever more shapes, each holding the driver's host and device memory while kept.
  int32_t max_graphs = 512;
  // "" = the checkpoint as stored; "fp8" = quantize a float checkpoint's Linears at load
  // (model/quant_config.h load_time_quantization).
  std::string quantization;
};

// Where a runner's memory went; `tandem status` prints it (engine/memory_report.h). The CUDA
// runner measures each part as the drop in cudaMemGetInfo's free bytes around its allocation
// phase, so the parts, what was used before (baseline) and free add up to the driver's total.
struct MemoryPlan {
  int64_t weights_bytes = 0;
  int64_t kv_bytes = 0;
  int64_t activation_bytes = 0;
  int64_t prob_rows_bytes = 0;  // RunnerOptions::prob_rows reserved (CUDA)
  int64_t workspace_bytes = 0;  // cuBLASLt workspace, split-K scratch, batch metadata
  int64_t graph_bytes = 0;  // captured CUDA graphs (the driver may place them in memory it holds)
  int32_t graph_count = 0;  // CUDA graphs captured so far (released ones included)
  int32_t graphs_held = 0;  // of them, kept now (at most RunnerOptions::max_graphs)
  int64_t device_total_bytes = 0;
  int64_t device_free_bytes = 0;    // right after this runner finished allocating
  int64_t baseline_used_bytes = 0;  // CUDA: used before it (context, other runners/processes)
  int64_t kv_page_bytes = 0;        // one page, K and V, all layers
  int64_t kv_budget_bytes = 0;      // what sizing from memory allowed (0 with --kv-pages)
  // weights_bytes by how they are stored: {"awq int4", ...}, {"bf16", ...}; a quantized
  // Linear's scales, zero points and g_idx count under its format.
  std::vector<std::pair<std::string, int64_t>> weight_bytes_by_format;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  virtual const ModelConfig& config() const = 0;
  virtual std::string device() const = 0;
  // The GPU's PCI bus id ("0000:3B:00.0", as cudaDeviceGetPCIBusId gives it), for tools that
  // ask the driver about it (benchmarks' clock samples); empty for the CPU.
  virtual std::string pci_bus_id() const { return {}; }
  virtual int32_t page_size() const = 0;
  virtual int32_t num_pages() const = 0;
  // Tokens the sampler may produce: min(model rows, tokenizer vocabulary), or fewer for a draft
  // with a capped vocabulary (--draft-vocab); set by the engine before the first forward. The
  // lm_head scores only these ids (its first rows): the others' logits read -inf
  // (copy_logits) and their probabilities 0 (probs), whatever the width asked.
  virtual void set_valid_vocab(int32_t valid_vocab) = 0;
  // Thread-safe: an engine's status() calls it from other threads while forward() runs.
  virtual MemoryPlan memory_plan() const = 0;

  // Runs the model over the batch, writing K/V of every query token into its pages, and keeps
  // the logits of logit_rows for sample() / copy_logits().
  virtual void forward(const ForwardBatch& batch) = 0;
  // The last forward's interval on the device when device_timing is on and the runner runs
  // asynchronously (CUDA); null otherwise (the CPU runner's forward is synchronous, so the
  // host's clock around it is exact).
  virtual std::shared_ptr<const DeviceInterval> last_forward_interval() const { return nullptr; }
  // The most query rows a forward keeps on its decode kernels, past which some Linear takes a
  // path that costs several decode steps (the CUDA runner's int4 weights past
  // kernels::kInt4GemvMaxTokens rows are dequantized to bf16 for cuBLASLt). Speculation keeps
  // its verify passes within it. No limit by default.
  virtual int32_t decode_rows_limit() const { return std::numeric_limits<int32_t>::max(); }
  // CUDA graphs captured so far, one per batch shape at its first forward (0 for runners
  // without graphs). A forward that captured one is not a steady step: a capture took 0.64-9.1
  // ms of host time against a 4-10 ms verify step on the H100 (NOTES.md v49). The same count as
  // memory_plan().graph_count, without copying the whole plan: the spec decoder asks every step.
  virtual int64_t graphs_captured() const { return 0; }
  // The token count a multi-token forward of a few tokens a sequence (a draft's first round) is
  // best padded up to a multiple of, or 1 for none. A runner that replays a CUDA graph per batch
  // shape captures one at each new count: a draft's first round at batch 16 carries 17-32
  // tokens (one or two a sequence, as the last verify accepted), and in a 128-token run at
  // acceptance 0.5 its captures cost 65-111 ms of 710-780 (H100, NOTES.md v50).
  virtual int32_t graph_token_bucket() const { return 1; }
  // Samples one token per request from the last forward's logits.
  virtual void sample(std::span<const SampleRequest> requests, std::span<int32_t> out_tokens) = 0;
  // sample() in two halves, for an engine that overlaps a step's host work with the next step:
  // sample_async() starts it (any settings: greedy or drawn, penalties, bans; a request's last
  // output token may still be on the device, SampleRequest::fed) and returns; the next forward
  // may feed its ids (ForwardBatch::fed); sample_wait() gives the oldest outstanding call's ids.
  // At most kMaxAsyncSamples calls are outstanding, and sample() and the other readers of the
  // last forward are not called while any is. This default samples at once and keeps the ids
  // (the CPU runner computes synchronously anyway); the CUDA runner returns before the device
  // has run the step.
  static constexpr size_t kMaxAsyncSamples = 2;
  virtual void sample_async(std::span<const SampleRequest> requests);
  virtual void sample_wait(std::span<int32_t> out_tokens);
  // Forwards so far whose ForwardBatch::greedy_next promise a sample_async() kept (what tests
  // read to see that an engine promises where it may).
  int64_t greedy_next_kept() const { return greedy_next_kept_; }
  // fp32 logits of the last forward: [num_logits, config().vocab_size], for tests and golden
  // comparisons (the engine never copies logits: it takes ids from sample() and keeps
  // probability rows in the runner through probs_into()); the CUDA runner copies them to the
  // host.
  virtual void copy_logits(std::span<float> out) = 0;
  // Processed probabilities of the last forward's rows over ids [0, width), one row per request
  // into out [requests.size(), width]: apply_logits_processors (the request's history and
  // suppressed ids) then logits_to_probs, as the reference sampler computes them (tests and
  // golden comparisons read them on the host; the engine uses probs_into()). With `draws`
  // ([requests.size()]; empty: no draw, request.rng is not read), each row's token is drawn from
  // its probabilities too, one uniform from request.rng in request order, as sample_from_probs
  // takes it. The CUDA runner computes them on the device (kernels/sample.cuh; the draw is the
  // device sampler's) and copies only these rows; the CPU runner runs the reference functions, rows
  // in parallel.
  virtual void probs(std::span<const SampleRequest> requests, int32_t width, std::span<float> out,
                     std::span<int32_t> draws) = 0;

  // Speculative acceptance of sampled sequences without their rows leaving the runner
  // (runner/prob_rows.h). A store of `rows` rows of `width` ids in this runner's memory.
  virtual ProbRows make_prob_rows(int32_t rows, int32_t width) const = 0;
  // probs() into slots [first_slot, first_slot + requests.size()) of `rows`, a store of this
  // runner's (its width is the rows' width): the same rows and draws, which alone come back.
  virtual void probs_into(std::span<const SampleRequest> requests, ProbRows& rows,
                          int32_t first_slot, std::span<int32_t> draws) = 0;
  // accept_sampled for each of `seqs` into out[i], reading the draft's rows from `draft_rows`
  // (the draft model's store: it must lie in this runner's memory, on the same device) and the
  // target's from `target_rows`, and advancing each rng by the tests made + 1. The CPU runner
  // runs accept_sampled itself; the CUDA runner runs one launch for all of them and copies back
  // only each sequence's accepted count and final token.
  virtual void accept_sampled(std::span<const SampledDrafts> seqs, const ProbRows& draft_rows,
                              const ProbRows& target_rows, std::span<SpeculativeResult> out) = 0;

  // The KV storage behind the page ids, for transports between stages. Pages are laid out so
  // that one page of one layer's K (and V) is page_bytes contiguous bytes.
  virtual KvPoolView kv_pool_view() = 0;

 protected:
  // For a runner that resolves ForwardBatch::fed on the host: the batch's tokens with the fed
  // ones taken from the last sample_async() of the default pair above.
  std::vector<int32_t> fed_tokens(const ForwardBatch& batch) const;
  // ForwardBatch::greedy_next is a promise about the next sampling call; every runner checks it,
  // so that an engine which breaks it fails on the CPU too. forward() notes it; sample() and
  // sample_async() check their requests against it (sample() may not follow it at all).
  void note_greedy_next(const ForwardBatch& batch);
  void check_greedy_next(std::span<const SampleRequest> requests, bool async);

 private:
  int64_t greedy_next_rows_ = -1;  // the last forward's logit rows when it promised, else -1
  int64_t greedy_next_kept_ = 0;
  std::deque<std::vector<int32_t>> async_ids_;  // the default pair's outstanding ids, oldest first
  std::vector<int32_t> last_async_ids_;         // the last sample_async()'s, for fed tokens
};

// Greedy with no penalty and nothing suppressed: an argmax.
bool plain_greedy(const SampleRequest& request);
// Every request plain_greedy, request i on logit row i, one per row of a forward of `rows`
// logit rows (what ForwardBatch::greedy_next promises).
bool greedy_in_row_order(std::span<const SampleRequest> requests, size_t rows);

// device == kind, or kind + ":N" with N decimal digits ("cpu", "cpu:1", "cuda:0").
bool is_device_name(const std::string& device, const std::string& kind);

// Rejects unknown devices and builds without CUDA with a clear kUnsupported error.
// "cpu" and "cpu:N" give the CPU runner ("cpu:N": one of several CPU stages).
Result<std::unique_ptr<ModelRunner>> make_runner(const ModelDir& model, const RunnerOptions& opts);
Result<std::unique_ptr<ModelRunner>> make_cpu_runner(const ModelDir& model,
                                                     const RunnerOptions& opts);
// Defined in src/runner/cuda/ (built only with CUDA); make_runner calls it for "cuda:N".
Result<std::unique_ptr<ModelRunner>> make_cuda_runner(const ModelDir& model,
                                                      const RunnerOptions& opts);
// What the CUDA runner refuses from the config alone (Llama o_proj / MLP biases, a bad
// --quantization), as a kUnsupported error naming the field. make_runner checks it before
// make_cuda_runner; compiled in every build so it is tested without a GPU.
Status cuda_runner_supports(const ModelConfig& config, const RunnerOptions& opts);

}  // namespace tandem
