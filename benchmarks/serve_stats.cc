#include "serve_stats.h"

#include <algorithm>
#include <cmath>

namespace tandem::bench {

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  p.count = v.size();
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  p.mean = sum / double(v.size());
  auto at = [&](double q) {
    const double pos = q * double(v.size() - 1);
    const size_t lo = size_t(std::floor(pos));
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
  };
  p.p50 = at(0.50);
  p.p90 = at(0.90);
  p.p99 = at(0.99);
  return p;
}

RateSummary summarize(double rate, const std::vector<RequestOutcome>& outcomes, double duration_s,
                      const Slo& slo) {
  RateSummary s;
  s.rate = rate;
  s.requests = int32_t(outcomes.size());
  s.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2e;
  for (const RequestOutcome& r : outcomes) {
    if (!r.ok) {
      s.failed++;
      s.errors[r.error]++;
      continue;
    }
    s.completed++;
    if (slo.met_by(r)) s.good++;
    s.prompt_tokens += r.prompt_tokens;
    s.output_tokens += r.output_tokens;
    ttft.push_back(r.ttft_ms);
    if (r.output_tokens > 1) tpot.push_back(r.tpot_ms);
    itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
    e2e.push_back(r.e2e_ms);
  }
  if (duration_s > 0) {
    s.request_throughput = s.completed / duration_s;
    s.output_throughput = double(s.output_tokens) / duration_s;
    s.total_token_throughput = double(s.prompt_tokens + s.output_tokens) / duration_s;
    s.goodput = s.good / duration_s;
  }
  s.ttft = percentiles(std::move(ttft));
  s.tpot = percentiles(std::move(tpot));
  s.itl = percentiles(std::move(itl));
  s.e2e = percentiles(std::move(e2e));
  return s;
}

namespace {

nlohmann::json to_json(const Percentiles& p) {
  return {{"mean", p.mean}, {"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}, {"count", p.count}};
}

}  // namespace

nlohmann::json to_json(const RateSummary& s) {
  nlohmann::json j;
  // JSON has no infinity: "all at once" is written as the string "inf".
  j["request_rate"] = std::isfinite(s.rate) ? nlohmann::json(s.rate) : nlohmann::json("inf");
  j["requests"] = s.requests;
  j["completed"] = s.completed;
  j["failed"] = s.failed;
  j["errors"] = s.errors;
  j["good"] = s.good;
  j["duration_s"] = s.duration_s;
  j["prompt_tokens"] = s.prompt_tokens;
  j["output_tokens"] = s.output_tokens;
  j["request_throughput"] = s.request_throughput;
  j["output_throughput"] = s.output_throughput;
  j["total_token_throughput"] = s.total_token_throughput;
  j["goodput"] = s.goodput;
  j["ttft_ms"] = to_json(s.ttft);
  j["tpot_ms"] = to_json(s.tpot);
  j["itl_ms"] = to_json(s.itl);
  j["e2e_ms"] = to_json(s.e2e);
  return j;
}

}  // namespace tandem::bench
