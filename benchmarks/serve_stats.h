// What one request saw from the client's side, and the summary of a run at one request rate:
// vLLM benchmark_serving's definitions (TTFT, TPOT, ITL, E2E; request and token throughput;
// goodput = requests per second that met every SLO).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tandem::bench {

struct RequestOutcome {
  bool ok = false;
  std::string error;  // error code name ("overloaded", ...) when !ok
  int32_t prompt_tokens = 0;
  int32_t output_tokens = 0;
  double ttft_ms = 0;          // send -> first token event
  double e2e_ms = 0;           // send -> Finished
  double tpot_ms = 0;          // (e2e - ttft) / (output_tokens - 1); 0 with < 2 tokens
  std::vector<double> itl_ms;  // [token events - 1] gaps between consecutive token events
};

struct Slo {
  double ttft_ms = 300;
  double tpot_ms = 15;
  bool met_by(const RequestOutcome& r) const {
    return r.ok && r.ttft_ms <= ttft_ms && r.tpot_ms <= tpot_ms;
  }
};

struct Percentiles {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;
  size_t count = 0;
};
// Linear interpolation between closest ranks (numpy's default); zeros for no samples.
Percentiles percentiles(std::vector<double> values);

struct RateSummary {
  double rate = 0;  // requests per second asked for (inf = all at once)
  int32_t requests = 0;
  int32_t completed = 0;
  int32_t failed = 0;
  std::map<std::string, int32_t> errors;  // failed requests by error code name
  int32_t good = 0;                       // completed within the SLO
  double duration_s = 0;                  // first send -> last reply
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  double request_throughput = 0;  // completed / s
  double output_throughput = 0;   // generated tokens / s
  double total_token_throughput = 0;
  double goodput = 0;  // good / s
  Percentiles ttft, tpot, itl, e2e;
};

RateSummary summarize(double rate, const std::vector<RequestOutcome>& outcomes, double duration_s,
                      const Slo& slo);

nlohmann::json to_json(const RateSummary& s);

}  // namespace tandem::bench
