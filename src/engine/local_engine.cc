#include "engine/local_engine.h"

#include <algorithm>

#include "core/check.h"
#include "engine/admission.h"
#include "engine/step.h"

namespace tandem {

LocalEngine::LocalEngine(const EngineOptions& options, ModelDir model, Tokenizer tokenizer,
                         std::optional<ChatTemplate> chat_template,
                         std::unique_ptr<ModelRunner> runner, std::optional<DraftModel> draft)
    : EngineBase(options, std::move(model), std::move(tokenizer), std::move(chat_template), draft),
      runner_(std::move(runner)),
      draft_(std::move(draft)),
      pool_(runner_->num_pages()),
      scheduler_(SchedulerConfig{options.max_num_seqs, options.max_num_batched_tokens,
                                 options.prefill_chunk, runner_->page_size()},
                 &Sequence::pages, make_scheduling_policy(options.scheduling_policy).value()) {
  if (draft_) {
    draft_->runner->set_valid_vocab(draft_vocab_);
    spec_ = std::make_unique<SpecDecoder>(*runner_, *draft_->runner, *draft_->pool,
                                          spec_config(*draft_), valid_vocab_);
  }
  runner_->set_valid_vocab(valid_vocab_);
  if (options.async_decode) {
    AsyncDecode::Hooks hooks;
    hooks.live = [this](uint64_t id, int64_t arrival) { return live(id, arrival); };
    hooks.reserve = [this](Sequence& seq, int64_t tokens) {
      return seq.pages.reserve(pool_, tokens, runner_->page_size());
    };
    hooks.committed = [this](std::span<const ScheduledSeq> done) {
      if (!prefix_cache_) return;
      for (const ScheduledSeq& s : done) {
        prefix_cache_->commit(*s.seq, s.seq->pages, pool_, s.seq->num_computed);
      }
    };
    hooks.finish = [this](Sequence& seq, FinishReason reason) {
      finish(&seq, reason, std::nullopt);
    };
    async_ = std::make_unique<AsyncDecode>(*runner_, std::move(hooks),
                                           telemetry_.metrics.async_decode_steps);
  }
  // The draft's pool has no prefix cache: it catches up lazily over every token (SpecDecoder).
  if (options.prefix_caching) {
    prefix_cache_.emplace(PrefixHasher::with_random_key(kv_identity(model_)), runner_->page_size());
    scheduler_.prefix_cache = &*prefix_cache_;
  }
}

LocalEngine::~LocalEngine() {
  stop(0);
}

Status LocalEngine::submit(uint64_t request_id, GenerateInput input, EngineObserver* observer) {
  TANDEM_CHECK(observer != nullptr);
  TANDEM_ASSIGN_OR_RETURN(
      std::unique_ptr<Sequence> seq,
      new_sequence(request_id, std::move(input), observer, model_, tokenizer_,
                   AdmissionLimits{max_model_len_, runner_->page_size(), pool_.num_pages()}));
  set_up_sequence(*seq, options_.trace, spec_ != nullptr);

  std::lock_guard lock(mu_);
  TANDEM_TRY(check_submit(stopping_, live_ids_.count(request_id) > 0,
                          int64_t(inbox_.size()) + waiting_count_.load(), options_.max_queue,
                          request_id));
  live_ids_.insert(request_id);
  inbox_.push_back(std::move(seq));
  cv_.notify_one();
  return Status::Ok();
}

void LocalEngine::cancel(uint64_t request_id) {
  std::lock_guard lock(mu_);
  if (!live_ids_.count(request_id)) return;
  cancels_.insert(request_id);
  cv_.notify_one();
}

EngineStatus LocalEngine::status() const {
  EngineStatus s;
  s.running = running_count_.load();
  s.waiting = waiting_count_.load();
  {
    std::lock_guard lock(mu_);
    s.waiting += int32_t(inbox_.size());
  }
  s.finished = finished_count_.load();
  s.pools.push_back(pool_status("target", *runner_, used_pages_.load(), cached_pages_.load()));
  std::vector<RunnerRole> roles = {{"target", "", runner_.get()}};
  if (draft_) {
    s.pools.push_back(pool_status("draft", *draft_->runner, draft_used_pages_.load(), 0));
    roles.push_back({"draft", "", draft_->runner.get()});
  }
  s.memory = memory_report(roles, options_, max_model_len_);
  return s;
}

void LocalEngine::take_inbox() {
  std::deque<std::unique_ptr<Sequence>> incoming;
  std::unordered_set<uint64_t> cancels;
  {
    std::lock_guard lock(mu_);
    incoming.swap(inbox_);
    cancels.swap(cancels_);
  }
  for (auto& seq : incoming) {
    seq->arrival_order = next_arrival_++;
    scheduler_.enqueue(waiting_, seq.get());
    const uint64_t id = seq->id;
    seqs_.emplace(id, std::move(seq));
  }
  for (uint64_t id : cancels) {
    auto it = seqs_.find(id);
    if (it != seqs_.end()) finish(it->second.get(), FinishReason::kAbort, std::nullopt);
  }
}

void LocalEngine::finish(Sequence* seq, FinishReason reason, std::optional<Error> error) {
  seq->pages.release_all(pool_);
  if (spec_) spec_->release(*seq);
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq), waiting_.end());

  FinishEvent ev = make_finish_event(*seq, reason, std::move(error), Clock::now());
  telemetry_.on_finish(*seq, ev);
  EngineObserver* observer = seq->observer;
  const uint64_t id = seq->id;
  seqs_.erase(id);  // seq is gone from here on
  {
    std::lock_guard lock(mu_);
    live_ids_.erase(id);
    cancels_.erase(id);
  }
  finished_count_.fetch_add(1);
  publish_counts();
  observer->on_finished(std::move(ev));
}

void LocalEngine::publish_counts() {
  running_count_.store(int32_t(running_.size()));
  waiting_count_.store(int32_t(waiting_.size()));
  used_pages_.store(pool_.used_pages());
  if (draft_) draft_used_pages_.store(draft_->pool->used_pages());
  cached_pages_.store(pool_.cached_pages());
}

bool LocalEngine::step() {
  take_inbox();
  if (async_ && async_->in_flight()) {
    // Arrivals and cancels are scheduled first: the step after this one waits for them.
    async_->advance(waiting_.empty() && nothing_arrived());
    publish_counts();
    return true;
  }
  SchedulePlan plan = scheduler_.schedule(waiting_, running_, pool_);
  telemetry_.metrics.prefix_cache_queries += uint64_t(plan.cache_query_tokens);
  telemetry_.metrics.prefix_cache_hits += uint64_t(plan.cache_hit_tokens);
  for (Sequence* seq : plan.preempted) {
    seq->preemptions++;
    if (spec_) spec_->release(*seq);
  }
  if (plan.batch.empty()) {
    publish_counts();
    return false;
  }

  // Decode tokens of speculating sequences go through the draft + verify path; prefill chunks
  // and everything else run as one batch.
  std::vector<ScheduledSeq> plain;
  std::vector<Sequence*> speculating;
  for (const ScheduledSeq& s : plan.batch) {
    if (spec_ && s.seq->speculative && !s.seq->in_prefill() && s.seq->pending() == 1) {
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
  if (speculating.empty() && async_eligible(plain, plan)) {
    async_->launch(std::move(plain));
    publish_counts();
    return true;
  }
  if (!plain.empty()) {
    const int64_t t0 = trace_now_ns();
    StepBatch batch = build_step_batch(plain, &Sequence::pages, Clock::now());
    runner_->forward(batch.view());
    const std::vector<int32_t> sampled = sample_step(*runner_, batch);
    trace_step(plain, Track::kPrefill, Track::kDecode, t0, trace_now_ns(),
               runner_->last_forward_interval());
    commit_step(plain, &Sequence::pages);
    if (prefix_cache_) {
      for (const ScheduledSeq& s : plain) {
        prefix_cache_->commit(*s.seq, s.seq->pages, pool_, s.seq->num_computed);
      }
    }
    const auto now = Clock::now();
    for (size_t i = 0; i < batch.sampling.size(); ++i) {
      Sequence& seq = *batch.sampling[i];
      const Track track = seq.output_len() == 0 ? Track::kPrefill : Track::kDecode;
      if (auto reason = emit_token(seq, sampled[i], now, track)) {
        finish(&seq, *reason, std::nullopt);
      }
    }
  }
  if (!speculating.empty()) run_speculative(speculating);
  publish_counts();
  return true;
}

Sequence* LocalEngine::live(uint64_t id, int64_t arrival) const {
  auto it = seqs_.find(id);
  return it != seqs_.end() && it->second->arrival_order == arrival ? it->second.get() : nullptr;
}

bool LocalEngine::nothing_arrived() const {
  std::lock_guard lock(mu_);
  return inbox_.empty() && cancels_.empty();
}

bool LocalEngine::async_eligible(std::span<const ScheduledSeq> plain,
                                 const SchedulePlan& plan) const {
  return async_ && plan.preempted.empty() && waiting_.empty() &&
         AsyncDecode::eligible(plain, running_.size(), spec_ != nullptr) && nothing_arrived();
}

void LocalEngine::run_speculative(std::span<Sequence* const> seqs) {
  spec_->run_step(
      seqs, pool_, runner_->page_size(),
      [this](Sequence& seq, FinishReason reason) { finish(&seq, reason, std::nullopt); },
      [this](Sequence& seq) {
        if (prefix_cache_) prefix_cache_->commit(seq, seq.pages, pool_, seq.num_computed);
      });
  if (spec_->last_step_gated()) telemetry_.metrics.spec_gated_steps++;
}

void LocalEngine::run_until_idle() {
  while (true) {
    const bool did = step();
    if (!did) {
      std::lock_guard lock(mu_);
      if (inbox_.empty() && cancels_.empty() && seqs_.empty()) return;
    }
  }
}

bool LocalEngine::idle_locked() const {
  return inbox_.empty() && cancels_.empty() && running_count_.load() == 0 &&
         waiting_count_.load() == 0;
}

void LocalEngine::worker_loop() {
  while (true) {
    {
      std::unique_lock lock(mu_);
      // An in-flight step is read even when every sequence in it is gone (cancelled).
      const bool in_flight = async_ && async_->in_flight();
      cv_.wait(lock, [&] {
        return stopping_ || !inbox_.empty() || !cancels_.empty() || !seqs_.empty() || in_flight;
      });
      if (stopping_ && seqs_.empty() && inbox_.empty() && !in_flight) return;
    }
    step();
  }
}

void LocalEngine::start() {
  std::lock_guard lock(mu_);
  if (started_) return;
  started_ = true;
  worker_ = std::thread([this] { worker_loop(); });
}

void LocalEngine::abort_all() {
  std::vector<uint64_t> ids;
  {
    std::lock_guard lock(mu_);
    ids.assign(live_ids_.begin(), live_ids_.end());
  }
  for (uint64_t id : ids) cancel(id);
}

void LocalEngine::stop(double drain_ms) {
  {
    std::lock_guard lock(mu_);
    if (!started_ || stopping_) {
      stopping_ = true;
      return;
    }
    stopping_ = true;
  }
  const auto deadline = Clock::now() + std::chrono::duration<double, std::milli>(drain_ms);
  while (Clock::now() < deadline) {
    {
      std::lock_guard lock(mu_);
      if (live_ids_.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  abort_all();
  cv_.notify_all();
  worker_.join();
}

}  // namespace tandem
