// Server metrics in Prometheus text format, named like vLLM's under a `tandem:` prefix
// (tandem:time_to_first_token_seconds, tandem:num_requests_running, ...). Thread-safe: stages
// observe, the daemon renders.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace tandem {

class Histogram {
 public:
  explicit Histogram(std::vector<double> buckets);  // upper bounds, ascending; +Inf implied
  void observe(double v);
  void render(std::string& out, const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // [bounds + 1], not cumulative
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct EngineMetrics {
  EngineMetrics();

  Histogram ttft;          // seconds
  Histogram itl;           // seconds, per output token after the first
  Histogram e2e;           // seconds
  Histogram queue_time;    // seconds
  Histogram prefill_time;  // seconds
  Histogram decode_time;   // seconds
  Histogram kv_ship_time;  // seconds, exposed after the last chunk
  std::atomic<uint64_t> kv_ship_bytes{0};
  std::atomic<uint64_t> kv_ship_pages{0};
  std::atomic<uint64_t> prompt_tokens{0};
  std::atomic<uint64_t> generation_tokens{0};
  std::atomic<uint64_t> preemptions{0};
  std::atomic<uint64_t> spec_drafts{0};
  std::atomic<uint64_t> spec_draft_tokens{0};
  std::atomic<uint64_t> spec_accepted_tokens{0};
  std::atomic<uint64_t> spec_gated_steps{0};      // decode steps the speculation gate ran plainly
  std::atomic<uint64_t> async_decode_steps{0};    // decode steps launched before the last was read
  std::atomic<uint64_t> prefix_cache_queries{0};  // tokens of admitted prompts looked up
  std::atomic<uint64_t> prefix_cache_hits{0};     // of which found in the cache
  std::mutex finished_mu;
  std::map<std::string, uint64_t> finished;     // by finish reason
  std::vector<uint64_t> accepted_per_position;  // [draft_max], guarded by finished_mu

  void count_finished(const std::string& reason);
  void count_accepted_per_position(const std::vector<int64_t>& per_position);
};

struct GaugeValues {
  int32_t running = 0;
  int32_t waiting = 0;
  struct Pool {
    std::string name;
    int32_t used = 0;
    int32_t cached = 0;  // free but holding a cached prefix
    int32_t total = 0;
  };
  std::vector<Pool> pools;
};

std::string render_prometheus(EngineMetrics& m, const GaugeValues& gauges);

}  // namespace tandem
