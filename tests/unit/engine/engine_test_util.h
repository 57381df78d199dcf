// Shared by the engine tests: tiny random models with the real Qwen tokenizer, an observer that
// collects every request's tokens and finish event, greedy inputs, page-accounting checks and a
// runner that forwards to another (tests override what they watch).
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "forwarding_runner.h"
#include "model/mkmodel.h"
#include "test_paths.h"
#include "transport/kv_transport.h"

namespace tandem::testing {

// A model directory under the temp dir, written once per (name) and reused by later runs;
// `pattern`: a pattern model (model/pattern_model.h), whose draft agrees as set.
inline std::string make_tiny_model(const std::string& name, const std::string& preset,
                                   uint64_t seed,
                                   std::optional<mkmodel::PatternOptions> pattern = std::nullopt) {
  std::string d = std::filesystem::temp_directory_path() / name;
  if (!std::filesystem::exists(d + "/config.json")) {
    MkModelOptions o;
    o.preset = preset;
    o.out_dir = d;
    o.seed = seed;
    o.tokenizer_dir = qwen_tokenizer_dir();
    o.pattern = pattern;
    Status st = make_model(o);
    REQUIRE_MESSAGE(st.ok(), st.error().to_string());
  }
  return d;
}

// The value of a counter or gauge without labels in the engine's metrics text.
inline double metric_of(const Engine& engine, const std::string& name) {
  const std::string text = engine.metrics_text();
  const std::string key = "\n" + name + " ";
  const size_t at = text.find(key);
  REQUIRE_MESSAGE(at != std::string::npos, name);
  return std::stod(text.substr(at + key.size()));
}

struct Collector final : EngineObserver {
  void on_tokens(TokenEvent ev) override {
    std::lock_guard lock(mu);
    auto& r = results[ev.request_id];
    r.ids.insert(r.ids.end(), ev.ids.begin(), ev.ids.end());
    r.text += ev.text;
  }
  void on_finished(FinishEvent ev) override {
    std::lock_guard lock(mu);
    auto& r = results[ev.request_id];
    r.text += ev.text_tail;
    r.finish = ev;
  }
  struct Result {
    std::vector<int32_t> ids;
    std::string text;
    std::optional<FinishEvent> finish;
  };
  std::mutex mu;
  std::map<uint64_t, Result> results;
};

inline std::vector<int32_t> prompt_of(int len, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < len; ++i) p.push_back(1000 + (i * 37 + salt * 101) % 5000);
  return p;
}

inline GenerateInput greedy(std::vector<int32_t> prompt, int max_tokens) {
  GenerateInput in;
  in.prompt_ids = std::move(prompt);
  in.sampling.temperature = 0.0f;
  in.sampling.max_tokens = max_tokens;
  in.sampling.ignore_eos = true;
  return in;
}

inline std::unique_ptr<Engine> make_engine(EngineOptions o) {
  o.threads = 1;
  auto e = Engine::create(o);
  REQUIRE_MESSAGE(e.ok(), e.error().to_string());
  return std::move(e).value();
}

// A counter of the engine's Prometheus text.
inline uint64_t metric(const Engine& e, const std::string& name) {
  std::istringstream in(e.metrics_text());
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + " ", 0) == 0) return std::stoull(line.substr(name.size() + 1));
  }
  FAIL("no metric " << name);
  return 0;
}

// Whether a KV transfer writes decode page 0, which only a run's first request gets: the fault
// hooks of the transfer-failure tests fail exactly those.
inline bool ships_to_page_zero(const ShipOrder& order) {
  for (const PageCopy& p : order.pages) {
    if (p.dst == 0) return true;
  }
  return false;
}

// After a transfer fault `fault` hit request 1 of two: it finished with that error, and request 2
// ran to its length.
inline void check_only_first_failed(Collector& col, ErrorCode fault) {
  REQUIRE(col.results[1].finish);
  CHECK(col.results[1].finish->reason == FinishReason::kError);
  REQUIRE(col.results[1].finish->error);
  CHECK(col.results[1].finish->error->code == fault);
  REQUIRE(col.results[2].finish);
  CHECK(col.results[2].finish->reason == FinishReason::kLength);
}

inline void check_pages_free(const Engine& e) {
  for (const PoolStatus& p : e.status().pools) CHECK_MESSAGE(p.used_pages == 0, p.name);
}

// Waits for a started engine to finish `n` requests reporting to `col`; false on a stall: no
// token and no finish for `quiet` (a step of the tiny models takes milliseconds, so a slow
// machine only makes the wait longer). The caller stops the engine, which aborts what stalled.
inline bool wait_finished(const Engine& e, Collector& col, int64_t n,
                          std::chrono::seconds quiet = std::chrono::seconds(10)) {
  auto progress = [&] {
    std::lock_guard lock(col.mu);
    int64_t events = 0;
    for (const auto& [id, r] : col.results) events += int64_t(r.ids.size()) + (r.finish ? 1 : 0);
    return events;
  };
  int64_t seen = -1;
  auto last_change = std::chrono::steady_clock::now();
  while (e.status().finished < n) {
    if (const int64_t now = progress(); now != seen) {
      seen = now;
      last_change = std::chrono::steady_clock::now();
    } else if (std::chrono::steady_clock::now() - last_change >= quiet) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace tandem::testing
