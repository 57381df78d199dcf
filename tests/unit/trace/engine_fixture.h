// A tiny random Qwen model (the real tokenizer) and an observer that keeps every event, for the
// tracing tests; the engine is the real one on CPU stages.
#pragma once

#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <optional>

#include "engine/engine.h"
#include "model/mkmodel.h"
#include "test_paths.h"

namespace tandem::testing {

inline const std::string& tiny_qwen() {
  static const std::string dir = [] {
    std::string d = std::filesystem::temp_directory_path() / "tandem-trace-test-tiny-qwen";
    if (!std::filesystem::exists(d + "/config.json")) {
      MkModelOptions o;
      o.preset = "tiny-qwen";
      o.out_dir = d;
      o.seed = 5;
      o.tokenizer_dir = qwen_tokenizer_dir();
      Status st = make_model(o);
      REQUIRE_MESSAGE(st.ok(), st.error().to_string());
    }
    return d;
  }();
  return dir;
}

struct Finished final : EngineObserver {
  void on_tokens(TokenEvent) override {}
  void on_finished(FinishEvent ev) override {
    std::lock_guard lock(mu);
    events[ev.request_id] = ev;
  }
  std::mutex mu;
  std::map<uint64_t, FinishEvent> events;
};

inline std::unique_ptr<Engine> make_engine(EngineOptions o) {
  o.model_dir = tiny_qwen();
  o.threads = 1;
  if (o.kv_pages == 0) o.kv_pages = 64;
  auto e = Engine::create(o);
  REQUIRE_MESSAGE(e.ok(), e.error().to_string());
  return std::move(e).value();
}

inline GenerateInput greedy_input(int prompt_len, int max_tokens) {
  GenerateInput in;
  for (int i = 0; i < prompt_len; ++i) in.prompt_ids.push_back(1000 + (i * 37) % 5000);
  in.sampling.temperature = 0.0f;
  in.sampling.max_tokens = max_tokens;
  in.sampling.ignore_eos = true;
  return in;
}

}  // namespace tandem::testing
