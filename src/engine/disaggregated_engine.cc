#include "engine/disaggregated_engine.h"

#include <algorithm>

#include "core/check.h"
#include "engine/admission.h"
#include "engine/step.h"

namespace tandem {

DisaggregatedEngine::DisaggregatedEngine(
    const EngineOptions& options, ModelDir model, Tokenizer tokenizer,
    std::optional<ChatTemplate> chat_template, std::unique_ptr<ModelRunner> prefill_runner,
    std::unique_ptr<ModelRunner> decode_runner, std::unique_ptr<KvTransport> transport,
    std::optional<DraftModel> draft, std::unique_ptr<ModelRunner> prefill_draft_runner)
    : EngineBase(options, std::move(model), std::move(tokenizer), std::move(chat_template), draft),
      prefill_runner_(std::move(prefill_runner)),
      decode_runner_(std::move(decode_runner)),
      transport_(std::move(transport)),
      transport_name_(transport_->name()),
      prefill_view_(prefill_runner_->kv_pool_view()),
      decode_view_(decode_runner_->kv_pool_view()),
      page_size_(prefill_runner_->page_size()),
      draft_(std::move(draft)),
      prefill_draft_runner_(std::move(prefill_draft_runner)),
      prefill_pool_(prefill_runner_->num_pages()),
      prefill_scheduler_(SchedulerConfig{options.max_num_seqs, options.max_num_batched_tokens,
                                         options.prefill_chunk, prefill_runner_->page_size()},
                         &Sequence::prefill_pages,
                         make_scheduling_policy(options.scheduling_policy).value()),
      decode_pool_(decode_runner_->num_pages()),
      decode_scheduler_(SchedulerConfig{options.max_num_seqs, options.max_num_seqs,
                                        options.prefill_chunk, decode_runner_->page_size()},
                        &Sequence::pages,
                        make_scheduling_policy(options.scheduling_policy).value()) {
  TANDEM_CHECK(prefill_runner_->page_size() == decode_runner_->page_size());
  TANDEM_CHECK(draft_.has_value() == (prefill_draft_runner_ != nullptr));
  if (draft_) {
    TANDEM_CHECK(prefill_draft_runner_->page_size() == page_size_ &&
                 draft_->runner->page_size() == page_size_);
    prefill_draft_runner_->set_valid_vocab(draft_vocab_);
    draft_->runner->set_valid_vocab(draft_vocab_);
    prefill_draft_pool_ = std::make_unique<PagePool>(prefill_draft_runner_->num_pages());
    prefill_draft_view_ = prefill_draft_runner_->kv_pool_view();
    decode_draft_view_ = draft_->runner->kv_pool_view();
    spec_ = std::make_unique<SpecDecoder>(*decode_runner_, *draft_->runner, *draft_->pool,
                                          spec_config(*draft_), valid_vocab_);
    spec_->set_pool_mutex(&pool_mu_);
  }
  prefill_runner_->set_valid_vocab(valid_vocab_);
  decode_runner_->set_valid_vocab(valid_vocab_);
  // The draft's prompt KV is computed beside the target's on the prefill stage; a cached target
  // prefix would leave it uncomputed there, so two stages with a draft run without the cache.
  if (options.prefix_caching && !draft_) {
    prefix_cache_.emplace(PrefixHasher::with_random_key(kv_identity(model_)), page_size_);
    prefill_scheduler_.prefix_cache = &*prefix_cache_;
  }
  // Handshake: a prompt starts prefilling only once its whole KV has a place on the decode stage.
  prefill_scheduler_.admit = [this](Sequence& seq) { return reserve_handoff_pages(seq); };
  // The decode stage takes only sequences whose KV arrived; a sequence it just preempted
  // (num_computed == 0) is on its way back to the prefill stage.
  decode_scheduler_.admit = [](Sequence& seq) { return seq.num_computed > 0; };
  if (options.async_decode) {
    AsyncDecode::Hooks hooks;
    hooks.live = [this](uint64_t id, int64_t arrival) -> Sequence* {
      std::lock_guard lock(mu_);
      auto it = seqs_.find(id);
      return it != seqs_.end() && it->second->arrival_order == arrival ? it->second.get() : nullptr;
    };
    hooks.reserve = [this](Sequence& seq, int64_t tokens) {
      std::lock_guard lock(pool_mu_);
      return seq.pages.reserve(decode_pool_, tokens, page_size_);
    };
    hooks.committed = [this](std::span<const ScheduledSeq> done) {
      if (!prefix_cache_) return;
      std::lock_guard lock(pool_mu_);
      for (const ScheduledSeq& s : done) {
        prefix_cache_->commit(*s.seq, s.seq->pages, decode_pool_, s.seq->num_computed);
      }
    };
    hooks.finish = [this](Sequence& seq, FinishReason reason) {
      finish(&seq, reason, std::nullopt, /*on_prefill=*/false);
    };
    async_ = std::make_unique<AsyncDecode>(*decode_runner_, std::move(hooks),
                                           telemetry_.metrics.async_decode_steps);
  }
}

DisaggregatedEngine::~DisaggregatedEngine() {
  stop(0);
}

Status DisaggregatedEngine::submit(uint64_t request_id, GenerateInput input,
                                   EngineObserver* observer) {
  TANDEM_CHECK(observer != nullptr);
  int32_t pool_pages = std::min(prefill_pool_.num_pages(), decode_pool_.num_pages());
  if (draft_) {
    pool_pages =
        std::min({pool_pages, prefill_draft_pool_->num_pages(), draft_->pool->num_pages()});
  }
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Sequence> seq,
                          new_sequence(request_id, std::move(input), observer, model_, tokenizer_,
                                       AdmissionLimits{max_model_len_, page_size_, pool_pages}));
  set_up_sequence(*seq, options_.trace, spec_ != nullptr);
  std::lock_guard lock(mu_);
  TANDEM_TRY(check_submit(stopping_, seqs_.count(request_id) > 0,
                          int64_t(prefill_inbox_.size()) + waiting_count_.load(),
                          options_.max_queue, request_id));
  seq->arrival_order = next_arrival_++;
  prefill_inbox_.push_back(seq.get());
  seqs_.emplace(request_id, std::move(seq));
  cv_.notify_all();
  return Status::Ok();
}

void DisaggregatedEngine::cancel(uint64_t request_id) {
  std::lock_guard lock(mu_);
  if (!seqs_.count(request_id)) return;
  cancels_.insert(request_id);
  cv_.notify_all();
}

EngineStatus DisaggregatedEngine::status() const {
  EngineStatus s;
  s.running = decoding_count_.load() + prefilling_count_.load();
  // Landed requests the decode stage has not admitted yet wait too.
  s.waiting = waiting_count_.load() + decode_waiting_count_.load();
  s.finished = finished_count_.load();
  s.pools.push_back(pool_status("target.prefill", *prefill_runner_, prefill_used_.load(),
                                prefill_cached_.load()));
  s.pools.push_back(
      pool_status("target", *decode_runner_, decode_used_.load(), decode_cached_.load()));
  s.memory = memory_report(
      {{"target", "prefill", prefill_runner_.get()}, {"target", "decode", decode_runner_.get()}},
      options_, max_model_len_);
  if (draft_) {
    s.pools.push_back(
        pool_status("draft.prefill", *prefill_draft_runner_, prefill_draft_used_.load(), 0));
    s.pools.push_back(pool_status("draft", *draft_->runner, decode_draft_used_.load(), 0));
  }
  return s;
}

std::vector<uint64_t> DisaggregatedEngine::take_cancels_for(
    const std::unordered_set<Sequence*>& owned) {
  std::vector<uint64_t> ids;
  std::lock_guard lock(mu_);
  for (auto it = cancels_.begin(); it != cancels_.end();) {
    auto s = seqs_.find(*it);
    if (s == seqs_.end()) {
      it = cancels_.erase(it);
    } else if (owned.count(s->second.get())) {
      ids.push_back(*it);
      it = cancels_.erase(it);
    } else {
      ++it;
    }
  }
  return ids;
}

void DisaggregatedEngine::finish(Sequence* seq, FinishReason reason, std::optional<Error> error,
                                 bool on_prefill) {
  if (on_prefill) {
    seq->prefill_pages.release_all(prefill_pool_);
    if (draft_) seq->draft_prefill_pages.release_all(*prefill_draft_pool_);
    prefilling_.erase(std::remove(prefilling_.begin(), prefilling_.end(), seq), prefilling_.end());
    prefill_waiting_.erase(std::remove(prefill_waiting_.begin(), prefill_waiting_.end(), seq),
                           prefill_waiting_.end());
    drop_shipping(seq);
  } else {
    decoding_.erase(std::remove(decoding_.begin(), decoding_.end(), seq), decoding_.end());
    decode_waiting_.erase(std::remove(decode_waiting_.begin(), decode_waiting_.end(), seq),
                          decode_waiting_.end());
  }
  {
    std::lock_guard lock(pool_mu_);
    if (!on_prefill && async_ && async_->in_flight()) {
      deferred_pages_.push_back(std::move(seq->pages));
      seq->pages = BlockTable{};
    } else {
      seq->pages.release_all(decode_pool_);
    }
    if (draft_) seq->draft_pages.release_all(*draft_->pool);
  }
  FinishEvent ev = make_finish_event(*seq, reason, std::move(error), Clock::now());
  telemetry_.on_finish(*seq, ev);
  EngineObserver* observer = seq->observer;
  {
    std::lock_guard lock(mu_);
    cancels_.erase(seq->id);
    seqs_.erase(seq->id);  // seq is gone from here on
    // The other stage may sleep until there is work or, when stopping, until no request is left.
    cv_.notify_all();
  }
  finished_count_.fetch_add(1);
  observer->on_finished(std::move(ev));
}

// ---- prefill stage -------------------------------------------------------------------------

bool DisaggregatedEngine::reserve_handoff_pages(Sequence& seq) {
  // Room for the tokens the prefill stage computes (the prompt, or prompt and output after a
  // preemption) and, on the decode stage, for the token it samples at their end, whose KV the
  // decode stage writes in its first step. Without that slot, prompts that fill the decode pool
  // exactly (a length at a page boundary) land, wait there for a page for their first step, and
  // hold every page: nothing runs on the decode stage to free one, and both stages stall.
  const int64_t prefilled = int64_t(seq.tokens.size());
  const int64_t tokens = prefilled + 1;
  if (draft_ && !seq.draft_prefill_pages.reserve(*prefill_draft_pool_, prefilled, page_size_)) {
    return false;
  }
  bool ok = false;
  {
    std::lock_guard lock(pool_mu_);
    // Leading pages the decode pool caches for this prefix are shared there and not shipped.
    const int64_t present =
        prefix_cache_ ? prefix_cache_->match(seq, seq.pages, decode_pool_) : int64_t(0);
    ok = seq.pages.reserve(decode_pool_, tokens, page_size_);
    if (ok) seq.ship_from_page = int32_t(present / page_size_);
    if (!ok) seq.pages.release_all(decode_pool_);
    if (ok && draft_ && !seq.draft_pages.reserve(*draft_->pool, tokens, page_size_)) {
      seq.pages.release_all(decode_pool_);
      ok = false;
    }
  }
  if (!ok && draft_) seq.draft_prefill_pages.release_all(*prefill_draft_pool_);
  return ok;
}

void DisaggregatedEngine::release_handoff_pages(Sequence& seq) {
  if (draft_) seq.draft_prefill_pages.release_all(*prefill_draft_pool_);
  std::lock_guard lock(pool_mu_);
  seq.pages.release_all(decode_pool_);
  if (draft_) seq.draft_pages.release_all(*draft_->pool);
  seq.draft_computed = 0;
}

void DisaggregatedEngine::drop_shipping(Sequence* seq) {
  // Transfers still in flight write into decode pages that are about to be freed and handed to
  // someone else: let them land (or time out) first.
  for (auto it = shipping_.begin(); it != shipping_.end(); ++it) {
    if (it->seq != seq) continue;
    for (auto t : it->tickets) {
      transport_->wait(t, ship_timeout);
      transport_->release(t);
    }
    shipping_.erase(it);
    return;
  }
}

void DisaggregatedEngine::prefill_take_inbox() {
  std::deque<Sequence*> incoming;
  {
    std::lock_guard lock(mu_);
    incoming.swap(prefill_inbox_);
  }
  for (Sequence* seq : incoming) prefill_scheduler_.enqueue(prefill_waiting_, seq);
  std::unordered_set<Sequence*> owned(prefill_waiting_.begin(), prefill_waiting_.end());
  owned.insert(prefilling_.begin(), prefilling_.end());
  for (const Shipping& s : shipping_) owned.insert(s.seq);
  for (uint64_t id : take_cancels_for(owned)) {
    Sequence* seq = nullptr;
    {
      std::lock_guard lock(mu_);
      seq = seqs_.at(id).get();
    }
    finish(seq, FinishReason::kAbort, std::nullopt, /*on_prefill=*/true);
  }
}

void DisaggregatedEngine::ship_chunk(Sequence& seq, int64_t end) {
  // The pages written since the last chunk that the decode stage lacks: a page this chunk shares
  // with the previous one goes again; pages the decode stage already cached never go (the first
  // chunk also carries prefix pages the prefill stage took from its own cache).
  ShipOrder order;
  order.src = &prefill_view_;
  order.dst = &decode_view_;
  order.layer_begin = 0;
  order.layer_end = prefill_view_.num_layers();
  const int64_t first_page = seq.ship_from_page;
  for (int64_t p = first_page; p * page_size_ < end; ++p) {
    order.pages.push_back({seq.prefill_pages.pages[size_t(p)], seq.pages.pages[size_t(p)]});
  }
  seq.ship_from_page = std::max(seq.ship_from_page, int32_t(end / page_size_));
  auto& entry = [&]() -> Shipping& {
    for (Shipping& s : shipping_) {
      if (s.seq == &seq) return s;
    }
    shipping_.push_back(Shipping{&seq, {}, std::nullopt});
    return shipping_.back();
  }();
  if (order.pages.empty()) return;  // all of it is cached on the decode stage already
  telemetry_.metrics.kv_ship_pages += uint64_t(order.pages.size());
  Span span;
  span.name = "kv_ship";
  span.track = Track::kTransport;
  span.start_ns = trace_now_ns();
  span.index = seq.prefill_chunks - 1;
  span.layer_begin = order.layer_begin;
  span.layer_end = order.layer_end;
  span.bytes = int64_t(order.bytes());
  span.detail = transport_name_.c_str();
  auto ticket = transport_->ship(order);
  span.dur_ns = trace_now_ns() - span.start_ns;
  seq.trace.add(span);
  telemetry_.metrics.kv_ship_bytes += uint64_t(span.bytes);
  if (!ticket) {
    finish(&seq, FinishReason::kError, ticket.error(), /*on_prefill=*/true);
    return;
  }
  entry.tickets.push_back(*ticket);
  if (!draft_) return;
  // The draft's pages of the same chunk, in the same shipping step: the request moves on only
  // when both models' KV landed, and a failure of either fails it.
  ShipOrder draft_order;
  draft_order.src = &prefill_draft_view_;
  draft_order.dst = &decode_draft_view_;
  draft_order.layer_begin = 0;
  draft_order.layer_end = prefill_draft_view_.num_layers();
  for (int64_t p = first_page; p * page_size_ < end; ++p) {  // no prefix cache with a draft
    draft_order.pages.push_back(
        {seq.draft_prefill_pages.pages[size_t(p)], seq.draft_pages.pages[size_t(p)]});
  }
  telemetry_.metrics.kv_ship_bytes += uint64_t(draft_order.bytes());
  auto draft_ticket = transport_->ship(draft_order);
  if (!draft_ticket) {
    finish(&seq, FinishReason::kError, draft_ticket.error(), /*on_prefill=*/true);
    return;
  }
  entry.tickets.push_back(*draft_ticket);
}

void DisaggregatedEngine::poll_shipping() {
  std::vector<Shipping> still;
  std::vector<std::pair<Sequence*, Error>> failed;
  const auto now = Clock::now();
  for (Shipping& s : shipping_) {
    const bool prefill_done = s.prefill_end.has_value();
    bool all_done = true;
    std::optional<Error> error;
    for (auto t : s.tickets) {
      ShipState st = transport_->poll(t);
      if (st == ShipState::kInFlight && prefill_done && now - *s.prefill_end >= ship_timeout) {
        st = transport_->wait(t, std::chrono::milliseconds(0));  // a stuck backend: abort it
      }
      if (st == ShipState::kFailed && !error) error = transport_->take_error(t);
      all_done = all_done && st == ShipState::kDone;
    }
    if (error) {  // fail at once, even mid-prefill: no more chunks are wasted on it
      failed.emplace_back(s.seq, *error);
      still.push_back(std::move(s));  // finish() waits out and releases the other tickets
      continue;
    }
    if (!prefill_done || !all_done) {
      still.push_back(std::move(s));
      continue;
    }
    for (auto t : s.tickets) transport_->release(t);
    Sequence* seq = s.seq;
    // Seen landed now, after the polls above (`now` may predate the last chunk's end).
    const auto landed = std::max(Clock::now(), *s.prefill_end);
    seq->kv_ship_exposed_ms = ms_between(*s.prefill_end, landed);
    Span ready;  // last chunk sampled -> every transfer landed: the ship time prefill did not hide
    ready.name = "decode_ready";
    ready.track = Track::kTransport;
    ready.start_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(s.prefill_end->time_since_epoch())
            .count();
    ready.dur_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(landed - *s.prefill_end).count();
    ready.detail = transport_name_.c_str();
    seq->trace.add(ready);
    telemetry_.metrics.kv_ship_time.observe(seq->kv_ship_exposed_ms / 1e3);
    seq->prefill_pages.release_all(prefill_pool_);
    if (draft_) {
      // The draft's prompt KV landed with the target's: no catch-up on the decode stage.
      seq->draft_prefill_pages.release_all(*prefill_draft_pool_);
      seq->draft_computed = seq->num_computed;
      seq->draft_pages.num_tokens = seq->num_computed;
    }
    std::lock_guard lock(mu_);
    decode_inbox_.push_back(seq);
    cv_.notify_all();
  }
  shipping_ = std::move(still);
  for (auto& [seq, error] : failed) {
    finish(seq, FinishReason::kError, error, /*on_prefill=*/true);
  }
}

bool DisaggregatedEngine::prefill_step() {
  prefill_take_inbox();
  poll_shipping();
  SchedulePlan plan = prefill_scheduler_.schedule(prefill_waiting_, prefilling_, prefill_pool_);
  telemetry_.metrics.prefix_cache_queries += uint64_t(plan.cache_query_tokens);
  telemetry_.metrics.prefix_cache_hits += uint64_t(plan.cache_hit_tokens);
  for (Sequence* seq : plan.preempted) {  // out of prefill pages: it starts over later
    seq->preemptions++;
    drop_shipping(seq);
    release_handoff_pages(*seq);
  }
  const bool did = !plan.batch.empty();
  if (did) {
    const int64_t t0 = trace_now_ns();
    StepBatch batch = build_step_batch(plan.batch, &Sequence::prefill_pages, Clock::now());
    prefill_runner_->forward(batch.view());
    const std::vector<int32_t> sampled = sample_step(*prefill_runner_, batch);
    if (draft_) {
      // The draft's KV of the same chunk, into its own pages; no logits needed.
      std::vector<SeqSlice> slices = batch.slices;
      for (size_t i = 0; i < slices.size(); ++i) {
        slices[i].pages = plan.batch[i].seq->draft_prefill_pages.pages;
      }
      prefill_draft_runner_->forward(ForwardBatch{batch.tokens, slices, {}});
    }
    trace_step(plan.batch, Track::kPrefill, Track::kPrefill, t0, trace_now_ns(),
               prefill_runner_->last_forward_interval());
    commit_step(plan.batch, &Sequence::prefill_pages);
    for (const ScheduledSeq& s : plan.batch) {
      Sequence& seq = *s.seq;
      seq.pages.num_tokens = seq.num_computed;
      if (prefix_cache_)
        prefix_cache_->commit(seq, seq.prefill_pages, prefill_pool_, seq.num_computed);
      ship_chunk(seq, seq.num_computed);
    }
    const auto now = Clock::now();
    for (size_t i = 0; i < batch.sampling.size(); ++i) {
      Sequence& seq = *batch.sampling[i];
      prefilling_.erase(std::remove(prefilling_.begin(), prefilling_.end(), &seq),
                        prefilling_.end());
      auto reason = emit_token(seq, sampled[i], now, Track::kPrefill);
      if (reason) {
        finish(&seq, *reason, std::nullopt, /*on_prefill=*/true);
        continue;
      }
      for (Shipping& s : shipping_) {
        if (s.seq == &seq) s.prefill_end = now;
      }
    }
    poll_shipping();
  }
  prefill_used_.store(prefill_pool_.used_pages());
  prefill_cached_.store(prefill_pool_.cached_pages());
  if (draft_) prefill_draft_used_.store(prefill_draft_pool_->used_pages());
  prefilling_count_.store(int32_t(prefilling_.size() + shipping_.size()));
  waiting_count_.store(int32_t(prefill_waiting_.size()));
  return did;
}

// ---- decode stage --------------------------------------------------------------------------

void DisaggregatedEngine::decode_take_handoff() {
  std::deque<Sequence*> incoming;
  {
    std::lock_guard lock(mu_);
    incoming.swap(decode_inbox_);
  }
  for (Sequence* seq : incoming) decode_scheduler_.enqueue(decode_waiting_, seq);
  std::unordered_set<Sequence*> owned(decode_waiting_.begin(), decode_waiting_.end());
  owned.insert(decoding_.begin(), decoding_.end());
  for (uint64_t id : take_cancels_for(owned)) {
    Sequence* seq = nullptr;
    {
      std::lock_guard lock(mu_);
      seq = seqs_.at(id).get();
    }
    finish(seq, FinishReason::kAbort, std::nullopt, /*on_prefill=*/false);
  }
}

bool DisaggregatedEngine::decode_inbox_empty() const {
  std::lock_guard lock(mu_);
  return decode_inbox_.empty() && cancels_.empty();
}

void DisaggregatedEngine::release_deferred(std::vector<BlockTable>& tables) {
  std::lock_guard lock(pool_mu_);
  for (BlockTable& t : tables) t.release_all(decode_pool_);
  tables.clear();
}

void DisaggregatedEngine::publish_decode_counts() {
  decoding_count_.store(int32_t(decoding_.size()));
  decode_waiting_count_.store(int32_t(decode_waiting_.size()));
  std::lock_guard lock(pool_mu_);
  decode_used_.store(decode_pool_.used_pages());
  decode_cached_.store(decode_pool_.cached_pages());
  if (draft_) decode_draft_used_.store(draft_->pool->used_pages());
}

bool DisaggregatedEngine::decode_step() {
  decode_take_handoff();
  if (async_ && async_->in_flight()) {
    // Pages deferred so far wait on the step in flight, which this advance reads.
    std::vector<BlockTable> read = std::move(deferred_pages_);
    deferred_pages_.clear();
    // Handoffs and cancels are scheduled first: the step after this one waits for them.
    async_->advance(decode_waiting_.empty() && decode_inbox_empty());
    release_deferred(read);
    if (!async_->in_flight()) release_deferred(deferred_pages_);  // nothing left on the device
    publish_decode_counts();
    return true;
  }
  SchedulePlan plan;
  {
    std::lock_guard lock(pool_mu_);
    plan = decode_scheduler_.schedule(decode_waiting_, decoding_, decode_pool_);
  }
  // Preempted sequences lost their decode pages: they go back to the prefill stage to recompute.
  if (!plan.preempted.empty()) {
    if (spec_) {
      for (Sequence* seq : plan.preempted) spec_->release(*seq);
    }
    std::lock_guard lock(mu_);
    for (Sequence* seq : plan.preempted) {
      seq->preemptions++;
      decode_waiting_.erase(std::remove(decode_waiting_.begin(), decode_waiting_.end(), seq),
                            decode_waiting_.end());
      prefill_inbox_.push_back(seq);
    }
    cv_.notify_all();
  }
  const bool did = !plan.batch.empty();
  std::vector<ScheduledSeq> plain;
  std::vector<Sequence*> speculating;
  for (const ScheduledSeq& s : plan.batch) {
    if (spec_ && s.seq->speculative && s.seq->pending() == 1) {
      speculating.push_back(s.seq);
    } else {
      plain.push_back(s);
    }
  }
  // Nothing to propose (speculation off, a batch above --spec-max-batch): the plain step runs them.
  if (!speculating.empty() && !spec_->wants_step(speculating)) {
    plain.clear();
    for (const ScheduledSeq& s : plan.batch) plain.push_back(s);
    speculating.clear();
  }
  if (!speculating.empty()) run_speculative(speculating);
  if (async_ && speculating.empty() && plan.preempted.empty() && decode_waiting_.empty() &&
      AsyncDecode::eligible(plain, decoding_.size(), spec_ != nullptr) && decode_inbox_empty()) {
    async_->launch(std::move(plain));
  } else if (!plain.empty()) {
    const int64_t t0 = trace_now_ns();
    StepBatch batch = build_step_batch(plain, &Sequence::pages, Clock::now());
    decode_runner_->forward(batch.view());
    const std::vector<int32_t> sampled = sample_step(*decode_runner_, batch);
    trace_step(plain, Track::kDecode, Track::kDecode, t0, trace_now_ns(),
               decode_runner_->last_forward_interval());
    commit_step(plain, &Sequence::pages);
    if (prefix_cache_) {  // the pages landed (the sequence is here) or were written here
      std::lock_guard lock(pool_mu_);
      for (const ScheduledSeq& s : plain) {
        prefix_cache_->commit(*s.seq, s.seq->pages, decode_pool_, s.seq->num_computed);
      }
    }
    const auto now = Clock::now();
    for (size_t i = 0; i < batch.sampling.size(); ++i) {
      Sequence& seq = *batch.sampling[i];
      if (auto reason = emit_token(seq, sampled[i], now)) {
        finish(&seq, *reason, std::nullopt, /*on_prefill=*/false);
      }
    }
  }
  publish_decode_counts();
  return did;
}

void DisaggregatedEngine::run_speculative(std::span<Sequence* const> seqs) {
  spec_->run_step(seqs, decode_pool_, page_size_, [this](Sequence& seq, FinishReason reason) {
    finish(&seq, reason, std::nullopt, /*on_prefill=*/false);
  });
  if (spec_->last_step_gated()) telemetry_.metrics.spec_gated_steps++;
}

// ---- threads -------------------------------------------------------------------------------

bool DisaggregatedEngine::has_work(bool prefill) const {
  if (!cancels_.empty()) return true;
  return prefill ? !prefill_inbox_.empty() : !decode_inbox_.empty();
}

void DisaggregatedEngine::stage_loop(bool prefill) {
  while (true) {
    const bool did = prefill ? prefill_step() : decode_step();
    if (did) continue;
    // Waiting prompts count: they wait for pages the other stage frees (decode pages reserved
    // by the handshake), and nothing wakes this stage when that happens.
    const bool local_work =
        prefill ? (!prefilling_.empty() || !shipping_.empty() || !prefill_waiting_.empty())
                : !decoding_.empty() || !decode_waiting_.empty();
    std::unique_lock lock(mu_);
    if (stopping_ && seqs_.empty()) return;
    if (local_work) {
      // Waiting on something in flight (pages, transfers): a short timed wait, not a spin.
      cv_.wait_for(lock, std::chrono::microseconds(200));
    } else {
      cv_.wait(lock, [&] { return has_work(prefill) || (stopping_ && seqs_.empty()); });
    }
  }
}

void DisaggregatedEngine::start() {
  std::lock_guard lock(mu_);
  if (started_) return;
  started_ = true;
  prefill_thread_ = std::thread([this] { stage_loop(true); });
  decode_thread_ = std::thread([this] { stage_loop(false); });
}

void DisaggregatedEngine::run_until_idle() {
  while (true) {
    const bool a = prefill_step();
    const bool b = decode_step();
    if (!a && !b) {
      std::lock_guard lock(mu_);
      if (seqs_.empty()) return;
    }
  }
}

void DisaggregatedEngine::stop(double drain_ms) {
  {
    std::lock_guard lock(mu_);
    const bool was_running = started_ && !stopping_;
    stopping_ = true;
    if (!was_running) return;
  }
  const auto deadline = Clock::now() + std::chrono::duration<double, std::milli>(drain_ms);
  while (Clock::now() < deadline) {
    {
      std::lock_guard lock(mu_);
      if (seqs_.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  {
    std::lock_guard lock(mu_);
    for (auto& [id, seq] : seqs_) cancels_.insert(id);
    cv_.notify_all();
  }
  prefill_thread_.join();
  decode_thread_.join();
}

}  // namespace tandem
