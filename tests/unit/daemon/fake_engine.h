// A scripted Engine for daemon tests: no model, deterministic tokens produced on its own worker
// thread at a configurable pace, real KV page accounting (PagePool), cancellation in every state.
// Token i of a request is (last + 7) % 1000 and its text is " <id>", so a test knows the output.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "daemon/server.h"
#include "engine/engine.h"
#include "fake_requests.h"
#include "kv/page_pool.h"
#include "model/config.h"

namespace tandem::testing {

struct FakeEngineOptions {
  int32_t step_ms = 1;  // sleep per engine step
  int32_t total_pages = 4096;
  int32_t page_size = 16;
  int32_t vocab_size = 1000;
  int32_t max_running = 64;
};

class FakeEngine final : public Engine {
 public:
  explicit FakeEngine(FakeEngineOptions options);
  ~FakeEngine() override;

  void start() override;
  void stop(double drain_ms) override;
  Status submit(uint64_t request_id, GenerateInput input, EngineObserver* observer) override;
  void cancel(uint64_t request_id) override;
  EngineStatus status() const override;
  void run_until_idle() override;
  std::string metrics_text() const override;
  // One complete ("X") event per finished request, tid = request id.
  std::string trace_json(std::optional<uint64_t> request_id, size_t last_n) const override;
  // The daemon's spans become more X events on the request's row.
  void add_trace_spans(uint64_t request_id, const std::vector<tandem::Span>& spans) override;

  // The daemon reaches tokenization through a PromptBuilder (fake_prompt_builder below).
  const Tokenizer& tokenizer() const override;
  const ChatTemplate* chat_template() const override { return nullptr; }
  const ModelConfig& model_config() const override { return model_config_; }
  const GenerationDefaults& generation_defaults() const override { return defaults_; }

 private:
  struct Request {
    uint64_t id = 0;
    std::vector<int32_t> tokens;  // prompt then output
    int32_t prompt_len = 0;
    SamplingParams sampling;
    EngineObserver* observer = nullptr;
    BlockTable pages;
    bool cancelled = false;
    std::chrono::steady_clock::time_point arrival;
  };

  void worker();
  // One step for everything running; returns events to deliver outside the lock.
  void step(std::unique_lock<std::mutex>& lock);
  FinishEvent finish(Request& r, FinishReason reason);

  FakeEngineOptions options_;
  ModelConfig model_config_;
  GenerationDefaults defaults_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  PagePool pool_;
  std::deque<std::unique_ptr<Request>> waiting_;
  std::vector<std::unique_ptr<Request>> running_;
  int64_t finished_ = 0;
  struct Span {
    uint64_t id;
    double start_us, dur_us;
    std::string name = "request";
  };
  std::deque<Span> spans_;  // finished requests, oldest first (at most 1024)
  bool started_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

// Text and messages become byte ids; token ids pass through.
daemon::PromptBuilder fake_prompt_builder();

}  // namespace tandem::testing
