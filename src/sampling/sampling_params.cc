#include "sampling/sampling_params.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace tandem {
namespace {

// vLLM treats temperatures below this as greedy, and raises tiny positive ones to kMinTemperature
// because dividing logits by them overflows to inf/nan.
constexpr float kGreedyEpsilon = 1e-5f;
constexpr float kMinTemperature = 1e-2f;

std::string num(double v) {
  std::string s = std::to_string(v);
  // std::to_string prints 6 decimals; trim the zeros so messages read like vLLM's ("got -0.5").
  if (s.find('.') != std::string::npos) {
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
  }
  return s;
}

Error invalid(std::string message) {
  return make_error(ErrorCode::kInvalidArgument, std::move(message));
}

}  // namespace

Result<ResolvedSampling> resolve_sampling(const SamplingParams& params,
                                          const GenerationDefaults& defaults,
                                          const std::vector<int32_t>& model_eos_ids) {
  ResolvedSampling r;
  r.temperature = params.temperature.value_or(defaults.temperature.value_or(1.0f));
  r.top_p = params.top_p.value_or(defaults.top_p.value_or(1.0f));
  r.top_k = params.top_k.value_or(defaults.top_k.value_or(0));
  r.min_p = params.min_p.value_or(defaults.min_p.value_or(0.0f));
  r.repetition_penalty =
      params.repetition_penalty.value_or(defaults.repetition_penalty.value_or(1.0f));
  r.presence_penalty = params.presence_penalty;
  r.frequency_penalty = params.frequency_penalty;

  // Written as !(in range) so that NaN is rejected too.
  if (!(r.temperature >= 0.0f) || std::isinf(r.temperature))
    return invalid("temperature must be non-negative, got " + num(r.temperature) + ".");
  if (!(r.top_p > 0.0f && r.top_p <= 1.0f))
    return invalid("top_p must be in (0, 1], got " + num(r.top_p) + ".");
  if (r.top_k < -1)
    return invalid("top_k must be -1 (disable), or at least 1, got " + std::to_string(r.top_k) +
                   ".");
  if (!(r.min_p >= 0.0f && r.min_p <= 1.0f))
    return invalid("min_p must be in [0, 1], got " + num(r.min_p) + ".");
  if (!(r.repetition_penalty > 0.0f) || std::isinf(r.repetition_penalty))
    return invalid("repetition_penalty must be greater than zero, got " +
                   num(r.repetition_penalty) + ".");
  if (!(r.presence_penalty >= -2.0f && r.presence_penalty <= 2.0f))
    return invalid("presence_penalty must be in [-2, 2], got " + num(r.presence_penalty) + ".");
  if (!(r.frequency_penalty >= -2.0f && r.frequency_penalty <= 2.0f))
    return invalid("frequency_penalty must be in [-2, 2], got " + num(r.frequency_penalty) + ".");
  if (params.max_tokens < 1)
    return invalid("max_tokens must be at least 1, got " + std::to_string(params.max_tokens) + ".");
  if (params.min_tokens < 0)
    return invalid("min_tokens must be greater than or equal to 0, got " +
                   std::to_string(params.min_tokens) + ".");
  if (params.min_tokens > params.max_tokens)
    return invalid(
        "min_tokens must be less than or equal to max_tokens=" + std::to_string(params.max_tokens) +
        ", got " + std::to_string(params.min_tokens) + ".");
  for (const std::string& s : params.stop)
    if (s.empty()) return invalid("stop cannot contain an empty string.");
  for (int32_t id : params.stop_token_ids)
    if (id < 0)
      return invalid("stop_token_ids must be non-negative, got " + std::to_string(id) + ".");

  if (r.top_k == -1) r.top_k = 0;  // both spellings of "off" become 0
  if (r.temperature < kGreedyEpsilon) {
    // Greedy: truncation cannot change the argmax, so switch it off as vLLM does.
    r.temperature = 0.0f;
    r.top_p = 1.0f;
    r.top_k = 0;
    r.min_p = 0.0f;
  } else if (r.temperature < kMinTemperature) {
    r.temperature = kMinTemperature;
  }

  r.seed = params.seed.value_or(0);
  r.has_seed = params.seed.has_value();
  r.stop = params.stop;
  r.stop_token_ids = params.stop_token_ids;
  r.ignore_eos = params.ignore_eos;
  if (!params.ignore_eos) {
    // The model's eos ids and generation_config.json's (Llama 3 lists <|eot_id|> and <|eom_id|>
    // there), each once, in order of appearance.
    for (const std::vector<int32_t>* ids : {&model_eos_ids, &defaults.eos_token_ids})
      for (int32_t id : *ids)
        if (std::find(r.eos_token_ids.begin(), r.eos_token_ids.end(), id) == r.eos_token_ids.end())
          r.eos_token_ids.push_back(id);
  }
  r.max_tokens = params.max_tokens;
  r.min_tokens = params.min_tokens;
  r.skip_special_tokens = params.skip_special_tokens;
  return r;
}

}  // namespace tandem
