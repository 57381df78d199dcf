#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "sampling/sampling_params.h"

using namespace tandem;

namespace {

ResolvedSampling resolve_ok(const SamplingParams& p, const GenerationDefaults& d = {},
                            const std::vector<int32_t>& eos = {2}) {
  auto r = resolve_sampling(p, d, eos);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  return *r;
}

// The request is refused with kInvalidArgument and a message that names `field`.
void check_invalid(const SamplingParams& p, const std::string& field, const std::string& got) {
  auto r = resolve_sampling(p, GenerationDefaults{}, {2});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ErrorCode::kInvalidArgument);
  INFO(r.error().message);
  CHECK(r.error().message.rfind(field, 0) == 0);  // the message starts with the parameter
  CHECK(r.error().message.find("got " + got) != std::string::npos);
}

}  // namespace

TEST_CASE("vLLM defaults when neither the request nor generation_config sets a field") {
  const ResolvedSampling r = resolve_ok(SamplingParams{});
  CHECK(r.temperature == 1.0f);
  CHECK(r.top_p == 1.0f);
  CHECK(r.top_k == 0);
  CHECK(r.min_p == 0.0f);
  CHECK(r.repetition_penalty == 1.0f);
  CHECK(r.max_tokens == 16);
  CHECK_FALSE(r.has_seed);
  CHECK(r.eos_token_ids == std::vector<int32_t>{2});
  CHECK_FALSE(r.greedy());
}

TEST_CASE("generation_config fills unset fields; the request wins") {
  GenerationDefaults d;
  d.temperature = 0.7f;
  d.top_p = 0.8f;
  d.top_k = 20;
  d.min_p = 0.05f;
  d.repetition_penalty = 1.05f;
  ResolvedSampling r = resolve_ok(SamplingParams{}, d);
  CHECK(r.temperature == 0.7f);
  CHECK(r.top_p == 0.8f);
  CHECK(r.top_k == 20);
  CHECK(r.min_p == 0.05f);
  CHECK(r.repetition_penalty == 1.05f);

  SamplingParams p;
  p.temperature = 0.3f;
  p.top_p = 0.9f;
  p.top_k = -1;
  p.min_p = 0.0f;
  p.repetition_penalty = 1.0f;
  p.seed = 11;
  r = resolve_ok(p, d);
  CHECK(r.temperature == 0.3f);
  CHECK(r.top_p == 0.9f);
  CHECK(r.top_k == 0);  // -1 and 0 both mean off
  CHECK(r.min_p == 0.0f);
  CHECK(r.repetition_penalty == 1.0f);
  CHECK(r.has_seed);
  CHECK(r.seed == 11);
}

TEST_CASE("greedy switches truncation off; tiny temperatures are raised as in vLLM") {
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_p = 0.5f;
  p.top_k = 3;
  p.min_p = 0.2f;
  ResolvedSampling r = resolve_ok(p);
  CHECK(r.greedy());
  CHECK(r.top_p == 1.0f);
  CHECK(r.top_k == 0);
  CHECK(r.min_p == 0.0f);
  p.temperature = 1e-6f;
  CHECK(resolve_ok(p).greedy());
  p.temperature = 0.005f;
  CHECK(resolve_ok(p).temperature == 0.01f);
}

TEST_CASE("eos ids: the model's and generation_config's, none with ignore_eos") {
  GenerationDefaults d;
  d.eos_token_ids = {128001, 128008, 128009};
  SamplingParams p;
  p.stop_token_ids = {7};
  ResolvedSampling r = resolve_ok(p, d, {128009});
  CHECK(r.eos_token_ids == std::vector<int32_t>{128009, 128001, 128008});
  CHECK(r.stop_token_ids == std::vector<int32_t>{7});
  p.ignore_eos = true;
  r = resolve_ok(p, d, {128009});
  CHECK(r.eos_token_ids.empty());
  CHECK(r.ignore_eos);
  CHECK(r.stop_token_ids == std::vector<int32_t>{7});  // explicit stop ids still apply
}

TEST_CASE("invalid values are refused with the parameter named") {
  SamplingParams p;
  p.temperature = -0.5f;
  check_invalid(p, "temperature", "-0.5");
  p.temperature = std::nanf("");
  check_invalid(p, "temperature", "nan");
  p = {};
  p.top_p = 0.0f;
  check_invalid(p, "top_p", "0");
  p.top_p = 1.5f;
  check_invalid(p, "top_p", "1.5");
  p = {};
  p.top_k = -2;
  check_invalid(p, "top_k", "-2");
  p = {};
  p.min_p = 1.25f;
  check_invalid(p, "min_p", "1.25");
  p.min_p = -0.25f;
  check_invalid(p, "min_p", "-0.25");
  p = {};
  p.repetition_penalty = 0.0f;
  check_invalid(p, "repetition_penalty", "0");
  p = {};
  p.presence_penalty = 2.5f;
  check_invalid(p, "presence_penalty", "2.5");
  p = {};
  p.frequency_penalty = -3.0f;
  check_invalid(p, "frequency_penalty", "-3");
  p = {};
  p.max_tokens = 0;
  check_invalid(p, "max_tokens", "0");
  p = {};
  p.min_tokens = -1;
  check_invalid(p, "min_tokens", "-1");
  p.min_tokens = 17;  // max_tokens 16
  check_invalid(p, "min_tokens", "17");
  p = {};
  p.stop = {"ok", ""};
  auto r = resolve_sampling(p, GenerationDefaults{}, {2});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("stop") != std::string::npos);
  p = {};
  p.stop_token_ids = {-4};
  check_invalid(p, "stop_token_ids", "-4");
}

TEST_CASE("a generation_config value out of range is refused like a request value") {
  GenerationDefaults d;
  d.top_p = 0.0f;
  auto r = resolve_sampling(SamplingParams{}, d, {2});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.rfind("top_p", 0) == 0);
}

TEST_CASE("boundary values are accepted") {
  SamplingParams p;
  p.top_p = 1.0f;
  p.top_k = 0;
  p.min_p = 1.0f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.max_tokens = 1;
  p.min_tokens = 1;
  const ResolvedSampling r = resolve_ok(p);
  CHECK(r.min_p == 1.0f);
  CHECK(r.min_tokens == 1);
}
