#include "trace/metrics.h"

#include <cstdio>

namespace tandem {

namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void header(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void counter(std::string& out, const std::string& name, const std::string& help, uint64_t v) {
  header(out, name, "counter", help);
  out += name + " " + std::to_string(v) + "\n";
}

std::vector<double> latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
          0.75,  1.0,    2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0};
}

}  // namespace

Histogram::Histogram(std::vector<double> buckets)
    : bounds_(std::move(buckets)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  std::lock_guard lock(mu_);
  counts_[i]++;
  sum_ += v;
  count_++;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  header(out, name, "histogram", help);
  std::lock_guard lock(mu_);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name + "_bucket{le=\"" + num(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  cumulative += counts_.back();
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
  out += name + "_sum " + num(sum_) + "\n";
  out += name + "_count " + std::to_string(count_) + "\n";
}

EngineMetrics::EngineMetrics()
    : ttft(latency_buckets()),
      itl(latency_buckets()),
      e2e(latency_buckets()),
      queue_time(latency_buckets()),
      prefill_time(latency_buckets()),
      decode_time(latency_buckets()),
      kv_ship_time({0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5}) {}

void EngineMetrics::count_finished(const std::string& reason) {
  std::lock_guard lock(finished_mu);
  finished[reason]++;
}

void EngineMetrics::count_accepted_per_position(const std::vector<int64_t>& per_position) {
  std::lock_guard lock(finished_mu);
  if (accepted_per_position.size() < per_position.size()) {
    accepted_per_position.resize(per_position.size(), 0);
  }
  for (size_t i = 0; i < per_position.size(); ++i)
    accepted_per_position[i] += uint64_t(per_position[i]);
}

std::string render_prometheus(EngineMetrics& m, const GaugeValues& g) {
  std::string out;
  header(out, "tandem:num_requests_running", "gauge", "Requests in prefill or decode.");
  out += "tandem:num_requests_running " + std::to_string(g.running) + "\n";
  header(out, "tandem:num_requests_waiting", "gauge", "Requests waiting to be scheduled.");
  out += "tandem:num_requests_waiting " + std::to_string(g.waiting) + "\n";
  header(out, "tandem:kv_cache_usage_perc", "gauge", "Fraction of KV pages in use, per pool.");
  for (const auto& p : g.pools) {
    out += "tandem:kv_cache_usage_perc{pool=\"" + p.name + "\"} " +
           num(p.total ? double(p.used) / double(p.total) : 0.0) + "\n";
  }
  header(out, "tandem:kv_cache_pages", "gauge",
         "KV pages per pool, by state: used (referenced), cached (free, holding a cached prefix, "
         "reclaimable), free.");
  for (const auto& p : g.pools) {
    out += "tandem:kv_cache_pages{pool=\"" + p.name + "\",state=\"used\"} " +
           std::to_string(p.used) + "\n";
    out += "tandem:kv_cache_pages{pool=\"" + p.name + "\",state=\"cached\"} " +
           std::to_string(p.cached) + "\n";
    out += "tandem:kv_cache_pages{pool=\"" + p.name + "\",state=\"free\"} " +
           std::to_string(p.total - p.used - p.cached) + "\n";
  }
  m.ttft.render(out, "tandem:time_to_first_token_seconds", "Time to first token.");
  m.itl.render(out, "tandem:inter_token_latency_seconds", "Time per output token after the first.");
  m.e2e.render(out, "tandem:e2e_request_latency_seconds", "Arrival to finish.");
  m.queue_time.render(out, "tandem:request_queue_time_seconds", "Arrival to first scheduled.");
  m.prefill_time.render(out, "tandem:request_prefill_time_seconds", "Prefill of the prompt.");
  m.decode_time.render(out, "tandem:request_decode_time_seconds", "First to last token.");
  m.kv_ship_time.render(out, "tandem:kv_ship_exposed_seconds",
                        "KV transfer time after the last prefill chunk (not hidden by compute).");
  counter(out, "tandem:kv_ship_bytes_total", "KV bytes shipped between stages.", m.kv_ship_bytes);
  counter(out, "tandem:kv_ship_pages_total", "KV pages shipped between stages.", m.kv_ship_pages);
  counter(out, "tandem:prompt_tokens_total", "Prompt tokens processed.", m.prompt_tokens);
  counter(out, "tandem:generation_tokens_total", "Tokens generated.", m.generation_tokens);
  counter(out, "tandem:num_preemptions_total", "Sequences preempted (recomputed later).",
          m.preemptions);
  counter(out, "tandem:spec_decode_num_drafts_total", "Speculative steps.", m.spec_drafts);
  counter(out, "tandem:spec_decode_num_draft_tokens_total", "Draft tokens proposed.",
          m.spec_draft_tokens);
  counter(out, "tandem:spec_decode_num_accepted_tokens_total", "Draft tokens accepted.",
          m.spec_accepted_tokens);
  counter(out, "tandem:spec_decode_num_gated_steps_total",
          "Decode steps the speculation gate ran without drafts (probes of plain decoding, or "
          "speculating measured slower per token).",
          m.spec_gated_steps);
  counter(out, "tandem:async_decode_steps_total",
          "Decode steps launched before the previous step's tokens were read (--async-decode).",
          m.async_decode_steps);
  counter(out, "tandem:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
          m.prefix_cache_queries);
  counter(out, "tandem:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
          m.prefix_cache_hits);
  std::lock_guard lock(m.finished_mu);
  header(out, "tandem:spec_decode_num_accepted_tokens_per_pos", "counter",
         "Draft tokens accepted, by position in the proposal (0 = first).");
  for (size_t i = 0; i < m.accepted_per_position.size(); ++i) {
    out += "tandem:spec_decode_num_accepted_tokens_per_pos{position=\"" + std::to_string(i) +
           "\"} " + std::to_string(m.accepted_per_position[i]) + "\n";
  }
  header(out, "tandem:request_success_total", "counter", "Finished requests by finish reason.");
  for (const char* reason : {"stop", "length", "abort", "error"}) {
    auto it = m.finished.find(reason);
    out += std::string("tandem:request_success_total{finished_reason=\"") + reason + "\"} " +
           std::to_string(it == m.finished.end() ? 0 : it->second) + "\n";
  }
  return out;
}

}  // namespace tandem
