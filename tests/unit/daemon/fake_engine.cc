#include "fake_engine.h"

#include <set>

#include <nlohmann/json.hpp>

#include "core/check.h"

namespace tandem::testing {

using Clock = std::chrono::steady_clock;

FakeEngine::FakeEngine(FakeEngineOptions options) : options_(options), pool_(options.total_pages) {
  model_config_.architecture = "FakeForCausalLM";
  model_config_.vocab_size = options.vocab_size;
  model_config_.max_position_embeddings = 1 << 20;
  model_config_.bos_token_id = 1;
}

FakeEngine::~FakeEngine() {
  if (thread_.joinable()) stop(0);
}

void FakeEngine::start() {
  std::lock_guard<std::mutex> lock(mu_);
  TANDEM_CHECK(!started_, "FakeEngine started twice");
  started_ = true;
  thread_ = std::thread([this] { worker(); });
}

void FakeEngine::stop(double drain_ms) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::duration<double, std::milli>(drain_ms),
                 [&] { return waiting_.empty() && running_.empty(); });
    for (auto& r : waiting_) r->cancelled = true;
    for (auto& r : running_) r->cancelled = true;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status FakeEngine::submit(uint64_t request_id, GenerateInput input, EngineObserver* observer) {
  if (input.prompt_ids.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "prompt is empty");
  }
  for (int32_t id : input.prompt_ids) {
    if (id < 0 || id >= options_.vocab_size) {
      return make_error(ErrorCode::kInvalidArgument,
                        "prompt id " + std::to_string(id) + " is outside the vocabulary");
    }
  }
  if (input.sampling.max_tokens < 1) {
    return make_error(ErrorCode::kInvalidArgument, "max_tokens must be at least 1");
  }
  if (input.sampling.temperature && *input.sampling.temperature < 0) {
    return make_error(ErrorCode::kInvalidArgument, "temperature must not be negative");
  }
  const int64_t total = int64_t(input.prompt_ids.size()) + input.sampling.max_tokens;
  if (pages_for_tokens(total, options_.page_size) > options_.total_pages) {
    return make_error(ErrorCode::kOutOfPages, "request needs more pages than the pool has");
  }
  auto r = std::make_unique<Request>();
  r->id = request_id;
  r->prompt_len = int32_t(input.prompt_ids.size());
  r->tokens = std::move(input.prompt_ids);
  r->sampling = std::move(input.sampling);
  r->observer = observer;
  r->arrival = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return make_error(ErrorCode::kOverloaded, "engine is stopping");
    waiting_.push_back(std::move(r));
  }
  cv_.notify_all();
  return Status::Ok();
}

void FakeEngine::cancel(uint64_t request_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& r : waiting_) {
      if (r->id == request_id) r->cancelled = true;
    }
    for (auto& r : running_) {
      if (r->id == request_id) r->cancelled = true;
    }
  }
  cv_.notify_all();
}

EngineStatus FakeEngine::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineStatus s;
  s.running = int32_t(running_.size());
  s.waiting = int32_t(waiting_.size());
  s.finished = finished_;
  s.pools.push_back(
      PoolStatus{"target", "cpu", options_.page_size, pool_.num_pages(), pool_.used_pages(), 4096});
  return s;
}

void FakeEngine::run_until_idle() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!waiting_.empty() || !running_.empty()) step(lock);
}

std::string FakeEngine::metrics_text() const {
  const EngineStatus s = status();
  return "# TYPE tandem:num_requests_running gauge\ntandem:num_requests_running " +
         std::to_string(s.running) + "\n# TYPE tandem:num_requests_waiting gauge\n" +
         "tandem:num_requests_waiting " + std::to_string(s.waiting) + "\n";
}

std::string FakeEngine::trace_json(std::optional<uint64_t> request_id, size_t last_n) const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json events = nlohmann::json::array();
  // --last N counts requests, as the engine's ring does, not spans.
  std::set<uint64_t> last_ids;
  for (auto it = spans_.rbegin(); it != spans_.rend() && last_ids.size() < last_n; ++it) {
    last_ids.insert(it->id);
  }
  for (const Span& sp : spans_) {
    if (request_id && sp.id != *request_id) continue;
    if (!request_id && last_n != 0 && !last_ids.count(sp.id)) continue;
    events.push_back({{"name", sp.name},
                      {"ph", "X"},
                      {"pid", 1},
                      {"tid", sp.id},
                      {"ts", sp.start_us},
                      {"dur", sp.dur_us}});
  }
  return nlohmann::json{{"traceEvents", events}}.dump();
}

void FakeEngine::add_trace_spans(uint64_t request_id, const std::vector<tandem::Span>& spans) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const tandem::Span& s : spans) {
    spans_.push_back(Span{request_id, double(s.start_ns) / 1e3, double(s.dur_ns) / 1e3, s.name});
  }
  while (spans_.size() > 1024) spans_.pop_front();
}

const Tokenizer& FakeEngine::tokenizer() const {
  TANDEM_CHECK(false, "FakeEngine has no tokenizer: daemon tests pass fake_prompt_builder()");
}

FinishEvent FakeEngine::finish(Request& r, FinishReason reason) {
  r.pages.release_all(pool_);
  ++finished_;
  FinishEvent ev;
  ev.request_id = r.id;
  ev.reason = reason;
  ev.usage.prompt_tokens = r.prompt_len;
  ev.usage.completion_tokens = int32_t(r.tokens.size()) - r.prompt_len;
  ev.timings.e2e_ms = std::chrono::duration<double, std::milli>(Clock::now() - r.arrival).count();
  ev.timings.decode_steps = ev.usage.completion_tokens;
  const double start_us =
      std::chrono::duration<double, std::micro>(r.arrival.time_since_epoch()).count();
  spans_.push_back(Span{r.id, start_us, ev.timings.e2e_ms * 1000.0});
  if (spans_.size() > 1024) spans_.pop_front();
  return ev;
}

void FakeEngine::step(std::unique_lock<std::mutex>& lock) {
  std::vector<std::pair<EngineObserver*, TokenEvent>> tokens;
  std::vector<std::pair<EngineObserver*, FinishEvent>> finished;
  // Cancelled waiting requests finish without ever holding pages.
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if ((*it)->cancelled) {
      finished.emplace_back((*it)->observer, finish(**it, FinishReason::kAbort));
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
  while (!waiting_.empty() && int32_t(running_.size()) < options_.max_running) {
    Request& r = *waiting_.front();
    if (!r.pages.reserve(pool_, int64_t(r.tokens.size()) + 1, options_.page_size)) break;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  for (auto it = running_.begin(); it != running_.end();) {
    Request& r = **it;
    bool done = r.cancelled;
    FinishReason reason = FinishReason::kAbort;
    if (!done) {
      const int32_t id = fake_next_token(r.tokens.back());
      r.tokens.push_back(id);
      TANDEM_CHECK(r.pages.reserve(pool_, int64_t(r.tokens.size()), options_.page_size),
                   "fake pool sized for every admitted request");
      std::string text(1, ' ');  // appended, not " " + ...: GCC 12 -Wrestrict false positive
      text += std::to_string(id);
      tokens.emplace_back(r.observer, TokenEvent{r.id, {id}, std::move(text)});
      const int32_t generated = int32_t(r.tokens.size()) - r.prompt_len;
      for (int32_t stop : r.sampling.stop_token_ids) {
        if (id == stop) done = true, reason = FinishReason::kStop;
      }
      if (!done && generated >= r.sampling.max_tokens) done = true, reason = FinishReason::kLength;
    }
    if (done) {
      finished.emplace_back(r.observer, finish(r, reason));
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  lock.unlock();
  for (auto& [observer, ev] : tokens) observer->on_tokens(std::move(ev));
  for (auto& [observer, ev] : finished) observer->on_finished(std::move(ev));
  lock.lock();
  cv_.notify_all();  // stop() waits for the queues to empty
}

void FakeEngine::worker() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !running_.empty(); });
    if (stopping_ && waiting_.empty() && running_.empty()) return;
    step(lock);
    if (options_.step_ms > 0) {
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(options_.step_ms));
      lock.lock();
    }
  }
}

daemon::PromptBuilder fake_prompt_builder() {
  return [](const PromptInput& in) -> Result<std::vector<int32_t>> {
    std::string text;
    switch (in.kind) {
      case PromptInput::Kind::kTokenIds:
        return in.token_ids;
      case PromptInput::Kind::kText:
        text = in.text;
        break;
      case PromptInput::Kind::kMessages:
        for (const auto& m : in.messages) {
          text += m.value("role", "") + ": " + m.value("content", "") + "\n";
        }
        break;
    }
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(int32_t(c));
    return ids;
  };
}

}  // namespace tandem::testing
