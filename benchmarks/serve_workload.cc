#include "serve_workload.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

namespace tandem::bench {

namespace {

int32_t lognormal_len(std::mt19937_64& rng, int32_t median, double sigma, int32_t max_len) {
  if (sigma <= 0) return std::clamp(median, 1, max_len);
  std::lognormal_distribution<double> dist(std::log(double(median)), sigma);
  return int32_t(std::clamp<double>(std::round(dist(rng)), 1, max_len));
}

std::vector<int32_t> random_ids(std::mt19937_64& rng, int32_t n, const WorkloadOptions& o) {
  std::uniform_int_distribution<int32_t> id(o.min_token_id, o.max_token_id - 1);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& t : ids) t = id(rng);
  return ids;
}

Result<std::vector<ServeRequest>> read_dataset(const WorkloadOptions& o, std::mt19937_64& rng) {
  std::ifstream in(o.dataset);
  if (!in) return make_error(ErrorCode::kNotFound, "--dataset: cannot open " + o.dataset);
  std::vector<ServeRequest> lines;
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = o.dataset + ":" + std::to_string(lineno) + ": ";
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return make_error(ErrorCode::kInvalidArgument, where + "not a JSON object");
    ServeRequest r;
    if (j.contains("prompt") && j["prompt"].is_string()) {
      r.prompt_text = j["prompt"].get<std::string>();
    } else if (j.contains("prompt_ids") && j["prompt_ids"].is_array()) {
      for (const auto& v : j["prompt_ids"]) {
        if (!v.is_number_integer()) {
          return make_error(ErrorCode::kInvalidArgument, where + "prompt_ids holds a non-integer");
        }
        r.prompt_ids.push_back(v.get<int32_t>());
      }
      r.prompt_len = int32_t(r.prompt_ids.size());
    } else if (j.contains("prompt_len") && j["prompt_len"].is_number_integer()) {
      r.prompt_len = j["prompt_len"].get<int32_t>();
      if (r.prompt_len < 1)
        return make_error(ErrorCode::kInvalidArgument, where + "prompt_len < 1");
      r.prompt_ids = random_ids(rng, r.prompt_len, o);
    } else {
      return make_error(ErrorCode::kInvalidArgument,
                        where + "needs \"prompt\", \"prompt_ids\" or \"prompt_len\"");
    }
    const char* out_key = j.contains("output_len") ? "output_len" : "max_tokens";
    if (!j.contains(out_key) || !j[out_key].is_number_integer() || j[out_key].get<int64_t>() < 1) {
      return make_error(ErrorCode::kInvalidArgument,
                        where + "needs a positive integer \"output_len\" (or \"max_tokens\")");
    }
    r.output_len = j[out_key].get<int32_t>();
    lines.push_back(std::move(r));
  }
  if (lines.empty()) return make_error(ErrorCode::kInvalidArgument, "--dataset: no requests");
  std::vector<ServeRequest> out;
  for (int32_t i = 0; i < o.num_prompts; ++i) out.push_back(lines[size_t(i) % lines.size()]);
  return out;
}

}  // namespace

Result<std::vector<ServeRequest>> make_workload(const WorkloadOptions& o) {
  if (o.num_prompts < 1) return make_error(ErrorCode::kInvalidArgument, "--num-prompts < 1");
  if (o.min_token_id < 0 || o.max_token_id <= o.min_token_id) {
    return make_error(ErrorCode::kInvalidArgument, "--max-token-id must exceed --min-token-id");
  }
  std::mt19937_64 rng(o.seed);
  if (!o.dataset.empty()) return read_dataset(o, rng);
  if (o.input_len < 1 || o.output_len < 1) {
    return make_error(ErrorCode::kInvalidArgument, "--input-len and --output-len must be >= 1");
  }
  std::vector<ServeRequest> out(size_t(o.num_prompts));
  for (ServeRequest& r : out) {
    r.prompt_len = lognormal_len(rng, o.input_len, o.len_sigma, o.max_input_len);
    r.output_len = lognormal_len(rng, o.output_len, o.len_sigma, o.max_output_len);
    r.prompt_ids = random_ids(rng, r.prompt_len, o);
  }
  return out;
}

std::vector<double> arrival_offsets(int32_t n, double rate, Arrivals kind, uint64_t seed) {
  std::vector<double> out(size_t(std::max(n, 0)), 0.0);
  if (!std::isfinite(rate)) return out;
  std::mt19937_64 rng(seed ^ 0xa5a5a5a5ull);
  std::exponential_distribution<double> gap(rate);
  double t = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = t;
    t += kind == Arrivals::kPoisson ? gap(rng) : 1.0 / rate;
  }
  return out;
}

}  // namespace tandem::bench
