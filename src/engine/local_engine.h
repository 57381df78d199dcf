// The engine with both stages on one device (CPU or one GPU): one runner, one KV pool, one
// worker thread. The disaggregated engine (prefill and decode stages on two devices) builds on
// the same Sequence, scheduler and step logic.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "chat/chat_template.h"
#include "engine/async_decode.h"
#include "engine/engine_base.h"
#include "engine/prefix_cache.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/spec_decoder.h"
#include "engine/step.h"
#include "kv/page_pool.h"
#include "model/model_dir.h"
#include "runner/runner.h"
#include "tokenizer/tokenizer.h"

namespace tandem {

class LocalEngine final : public EngineBase {
 public:
  LocalEngine(const EngineOptions& options, ModelDir model, Tokenizer tokenizer,
              std::optional<ChatTemplate> chat_template, std::unique_ptr<ModelRunner> runner,
              std::optional<DraftModel> draft);
  ~LocalEngine() override;

  void start() override;
  void stop(double drain_ms) override;
  Status submit(uint64_t request_id, GenerateInput input, EngineObserver* observer) override;
  void cancel(uint64_t request_id) override;
  EngineStatus status() const override;
  void run_until_idle() override;
  // One scheduling step; false when there was nothing to do.
  bool step();

 private:
  void take_inbox();
  void finish(Sequence* seq, FinishReason reason, std::optional<Error> error);
  void abort_all();
  void worker_loop();
  void run_speculative(std::span<Sequence* const> seqs);
  bool idle_locked() const;
  void publish_counts();

  // --async-decode (engine/async_decode.h): whether a scheduled plain batch may start one
  // (nothing waits or arrives besides), and the sequence of (id, arrival) if it still runs.
  bool async_eligible(std::span<const ScheduledSeq> plain, const SchedulePlan& plan) const;
  bool nothing_arrived() const;
  Sequence* live(uint64_t id, int64_t arrival) const;

  std::unique_ptr<ModelRunner> runner_;
  std::optional<DraftModel> draft_;
  std::unique_ptr<SpecDecoder> spec_;  // set when a draft model is loaded

  // Owned by the worker (or by run_until_idle's caller).
  PagePool pool_;
  Scheduler scheduler_;
  std::optional<PrefixCache> prefix_cache_;  // set with --prefix-caching on
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> seqs_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;
  int64_t next_arrival_ = 0;
  std::unique_ptr<AsyncDecode> async_;  // with --async-decode

  // Shared with submitting threads.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> inbox_;
  std::unordered_set<uint64_t> cancels_;
  std::unordered_set<uint64_t> live_ids_;  // submitted and not finished
  bool stopping_ = false;
  bool started_ = false;
  std::thread worker_;

  std::atomic<int32_t> running_count_{0};
  std::atomic<int32_t> waiting_count_{0};
  std::atomic<int32_t> used_pages_{0};
  std::atomic<int32_t> draft_used_pages_{0};
  std::atomic<int32_t> cached_pages_{0};
  std::atomic<int64_t> finished_count_{0};
};

}  // namespace tandem
