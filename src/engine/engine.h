// The engine: admission, KV pages, chunked prefill and continuous-batching decode over one or two
// ModelRunners, on a worker thread. `tandem run` and `tandemd` both drive it; nothing above this
// header knows which devices run the stages.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/events.h"
#include "engine/memory_report.h"
#include "sampling/sampling_params.h"
#include "trace/trace.h"

namespace tandem {

class Tokenizer;
class ChatTemplate;
struct ModelConfig;
struct GenerationDefaults;

// Upper bounds of EngineOptions (Engine::create refuses more, naming the flag).
constexpr int32_t kMaxNumSeqs = 1 << 16;  // --max-num-seqs
constexpr int32_t kMaxDraftTokens = 32;   // --draft-max

struct EngineOptions {
  std::string model_dir;
  std::string draft_dir;  // empty = no speculative decoding
  // --quantization / --draft-quantization: "" runs the checkpoint as stored (quantized or not);
  // "fp8" quantizes a float checkpoint's Linears to FP8 at load (docs/quantization.md).
  std::string quantization;
  std::string draft_quantization;
  std::string prefill_device = "cpu";
  std::string decode_device = "cpu";  // "cpu", "cpu:N" (a CPU stage of its own), "cuda:N"
  std::string kv_transport = "auto";  // auto | local | peer | nccl | host_staged
  int32_t page_size = 16;
  int32_t kv_pages = 0;  // per pool; 0 = size from memory
  double gpu_memory_utilization = 0.90;
  int32_t max_num_seqs = 64;              // running sequences on the decode stage
  int32_t max_num_batched_tokens = 2048;  // per engine step (prefill chunk budget)
  int32_t prefill_chunk = 512;            // tokens per prefill chunk of one prompt
  int32_t max_model_len = 0;              // 0 = the model's max_position_embeddings
  int32_t max_queue = 1024;               // waiting requests before kOverloaded
  int32_t max_cuda_graphs = 512;          // per CUDA runner (RunnerOptions::max_graphs)
  int32_t threads = 0;                    // CPU runner threads; 0 = all cores
  bool trace = true;                      // --trace on|off: per-request spans and the ring
  bool prefix_caching = true;             // --prefix-caching on|off: share cached prompt pages
  // --async-decode on|off: a decode batch launches its next step before its tokens
  // are read, so the host's per-step work overlaps the device's, and an all-greedy speculative
  // step its next draft round likewise (docs/async-decode.md).
  bool async_decode = true;
  // Admission order and preemption victims (engine/scheduling_policy.h): "fcfs".
  std::string scheduling_policy = "fcfs";
  // Speculative decoding (with draft_dir).
  bool spec = true;       // --spec on|off
  int32_t draft_max = 8;  // --draft-max: most tokens proposed per step
  int32_t draft_min = 1;  // --draft-min: fewest, when speculating at all
  // --draft-vocab: the draft scores (and proposes) only ids below this, 0 = every id. Its
  // lm_head is its largest read (Qwen2.5-0.5B: 272 MB of ~1 GB a draft token); a BPE
  // vocabulary's frequent tokens have low ids. Lossless either way (docs/speculative.md).
  int32_t draft_vocab = 0;
  int32_t spec_max_batch = 32;  // --spec-max-batch: no speculation above this batch
};

struct GenerateInput {
  std::vector<int32_t> prompt_ids;
  SamplingParams sampling;
};

struct PoolStatus {
  std::string name;  // "target", "draft"
  std::string device;
  int32_t page_size = 0;
  int32_t total_pages = 0;
  int32_t used_pages = 0;  // referenced by a request
  int64_t page_bytes = 0;
  int32_t cached_pages = 0;  // free but holding a cached prefix (reclaimable; not in used_pages)
};

struct EngineStatus {
  int32_t running = 0;
  int32_t waiting = 0;
  int64_t finished = 0;
  std::vector<PoolStatus> pools;
  std::vector<DeviceMemory> memory;  // per device; parts + free == total (memory_report.h)
};

class Engine {
 public:
  // Loads models, tokenizer and chat template, builds runners, starts nothing yet.
  static Result<std::unique_ptr<Engine>> create(const EngineOptions& options);
  virtual ~Engine() = default;

  // Starts the worker thread. Requests submitted before start() wait.
  virtual void start() = 0;
  // Stops taking work; requests still running after `drain_ms` finish with kAbort; joins.
  virtual void stop(double drain_ms) = 0;

  // Thread-safe. Validates (prompt length, sampling ranges, queue space) and queues; a rejected
  // request gets the Error here and no events. The observer must live until on_finished.
  virtual Status submit(uint64_t request_id, GenerateInput input, EngineObserver* observer) = 0;
  // Thread-safe; an unknown or finished id is ignored. The request finishes with kAbort and its
  // pages are freed wherever it was (queued, prefilling, decoding).
  virtual void cancel(uint64_t request_id) = 0;
  virtual EngineStatus status() const = 0;
  // Runs until every submitted request finished; for `tandem run` and tests without start().
  virtual void run_until_idle() = 0;

  // Prometheus text of the engine's metrics (tandem:* names).
  virtual std::string metrics_text() const = 0;
  // Chrome Trace Event JSON of finished requests: one request, or the last `last_n` (0 = all kept).
  virtual std::string trace_json(std::optional<uint64_t> request_id, size_t last_n) const = 0;
  // Thread-safe. Adds spans recorded outside the engine (the daemon's tokenize and stream
  // writes, host monotonic clock: trace_now_ns) to a finished request's trace; ignored when the
  // request has left the ring or tracing is off.
  virtual void add_trace_spans(uint64_t request_id, const std::vector<Span>& spans) = 0;

  virtual const Tokenizer& tokenizer() const = 0;
  virtual const ChatTemplate* chat_template() const = 0;  // null when the model has none
  virtual const ModelConfig& model_config() const = 0;
  virtual const GenerationDefaults& generation_defaults() const = 0;
};

}  // namespace tandem
