// Two stages on two devices: chunked prefill of prompts on the prefill device, KV pages shipped
// to the decode device after every chunk, continuous-batching decode there. Each stage is a
// worker thread that owns its runner; they meet at three places only: the decode pool (guarded
// by pool_mu_), the hand-off queues, and the request table.
//
// Handshake: before a prompt's first chunk, the prefill stage reserves the request's pages in
// the decode pool (admission fails until they fit); with prefix caching it first shares the
// leading pages the decode pool already caches for this prefix, and those are never shipped.
// After each chunk it ships the pages that chunk wrote (prefill page i -> decode page i), plus,
// with the first chunk, prefix pages the prefill stage took from its own cache that the decode
// stage lacks. The first token is sampled on the prefill stage
// from the last chunk's logits (they are already there; shipping logits or recomputing the last
// position on the decode stage would cost more) and travels with the KV; the decode stage admits
// the request once every transfer of it has landed.
//
// With a draft model (speculative decoding) both stages hold it too: the prefill stage runs the
// draft over every chunk right after the target, the handshake reserves the prompt's pages in
// the decode stage's target AND draft pools (and the prefill stage's draft pool), and each chunk
// ships both models' pages in one shipping step. The decode stage's spec decoder then starts with
// the draft already caught up on the prompt.
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
#include "transport/kv_transport.h"

namespace tandem {

class DisaggregatedEngine final : public EngineBase {
 public:
  DisaggregatedEngine(const EngineOptions& options, ModelDir model, Tokenizer tokenizer,
                      std::optional<ChatTemplate> chat_template,
                      std::unique_ptr<ModelRunner> prefill_runner,
                      std::unique_ptr<ModelRunner> decode_runner,
                      std::unique_ptr<KvTransport> transport,
                      std::optional<DraftModel> draft = std::nullopt,
                      std::unique_ptr<ModelRunner> prefill_draft_runner = nullptr);
  ~DisaggregatedEngine() override;

  void start() override;
  void stop(double drain_ms) override;
  Status submit(uint64_t request_id, GenerateInput input, EngineObserver* observer) override;
  void cancel(uint64_t request_id) override;
  EngineStatus status() const override;
  void run_until_idle() override;
  KvTransport& transport() { return *transport_; }
  std::chrono::milliseconds ship_timeout{5000};

  // One step of each stage; false when it had nothing to do.
  bool prefill_step();
  bool decode_step();

 private:
  struct Shipping {
    Sequence* seq;
    std::vector<KvTransport::Ticket> tickets;
    // Set when the prefill stage sampled the sequence's next token: its last chunk ran. Only
    // then may it move on (pending() == 1 also holds mid-prompt, one token before the end).
    std::optional<Clock::time_point> prefill_end;
  };

  void prefill_take_inbox();
  void ship_chunk(Sequence& seq, int64_t end);
  void poll_shipping();
  void drop_shipping(Sequence* seq);
  void decode_take_handoff();
  // Whether no handoff or cancel waits for the decode stage (its async step continues then).
  bool decode_inbox_empty() const;
  void publish_decode_counts();
  void release_deferred(std::vector<BlockTable>& tables);
  // The handshake: the pages a prompt's KV lands in (decode target + draft pools) and the
  // prefill stage's draft pages, all or nothing. Prefill thread only.
  bool reserve_handoff_pages(Sequence& seq);
  // Frees what reserve_handoff_pages took (a prefill-stage preemption).
  void release_handoff_pages(Sequence& seq);
  void run_speculative(std::span<Sequence* const> seqs);
  std::vector<uint64_t> take_cancels_for(const std::unordered_set<Sequence*>& owned);
  // Releases every page the sequence holds on both stages and reports the finish event.
  void finish(Sequence* seq, FinishReason reason, std::optional<Error> error, bool on_prefill);
  void stage_loop(bool prefill);
  bool has_work(bool prefill) const;  // callers hold mu_

  std::unique_ptr<ModelRunner> prefill_runner_;
  std::unique_ptr<ModelRunner> decode_runner_;
  std::unique_ptr<KvTransport> transport_;
  std::string transport_name_;  // kv_ship spans point at it
  KvPoolView prefill_view_;
  KvPoolView decode_view_;
  int32_t page_size_ = 16;
  std::optional<PrefixCache> prefix_cache_;  // one hasher for both pools: their hashes agree

  // Speculative decoding: the decode stage's draft (runner + pool, the pool guarded by pool_mu_
  // like decode_pool_) and the prefill stage's draft runner and pool. Unset without --draft.
  std::optional<DraftModel> draft_;
  std::unique_ptr<ModelRunner> prefill_draft_runner_;
  std::unique_ptr<PagePool> prefill_draft_pool_;
  KvPoolView prefill_draft_view_;
  KvPoolView decode_draft_view_;
  std::unique_ptr<SpecDecoder> spec_;

  // Prefill stage (its thread only).
  PagePool prefill_pool_;
  Scheduler prefill_scheduler_;
  std::deque<Sequence*> prefill_waiting_;
  std::vector<Sequence*> prefilling_;
  std::vector<Shipping> shipping_;

  // Decode stage (its thread only), and the decode pool shared with the prefill stage's
  // handshake.
  std::mutex pool_mu_;
  PagePool decode_pool_;
  Scheduler decode_scheduler_;
  std::deque<Sequence*> decode_waiting_;
  std::vector<Sequence*> decoding_;
  std::unique_ptr<AsyncDecode> async_;  // with --async-decode
  // Decode pages of sequences that finished while a step was in flight: that step may still
  // write their last page on the decode device's stream, and the KV transport may ship a new
  // prompt into a freed page from another stream, so they go back to the pool once the step is
  // read (release_deferred). Decode thread only; the pool under pool_mu_.
  std::vector<BlockTable> deferred_pages_;

  // Shared: inboxes of both stages, cancels, the request table.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Sequence*> prefill_inbox_;  // new requests and decode-stage preemptions
  std::deque<Sequence*> decode_inbox_;   // prefilled requests whose KV has landed
  std::unordered_set<uint64_t> cancels_;
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> seqs_;
  int64_t next_arrival_ = 0;
  bool stopping_ = false;
  bool started_ = false;
  std::thread prefill_thread_;
  std::thread decode_thread_;

  std::atomic<int32_t> decoding_count_{0};
  std::atomic<int32_t> prefilling_count_{0};
  std::atomic<int32_t> waiting_count_{0};         // the prefill stage's queue
  std::atomic<int32_t> decode_waiting_count_{0};  // landed, not yet admitted to decode
  std::atomic<int32_t> prefill_used_{0};
  std::atomic<int32_t> decode_used_{0};
  std::atomic<int32_t> prefill_cached_{0};
  std::atomic<int32_t> decode_cached_{0};
  std::atomic<int32_t> prefill_draft_used_{0};
  std::atomic<int32_t> decode_draft_used_{0};
  std::atomic<int64_t> finished_count_{0};
};

}  // namespace tandem
