// `tandem metrics` text, parsed: every line valid, histograms consistent, the names the issue
// requires present, after a run that exercised prefill, KV shipping and speculation.
#include <doctest/doctest.h>

#include "engine_fixture.h"
#include "trace_checks.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

const std::set<std::string> kRequired = {
    "tandem:num_requests_running",
    "tandem:num_requests_waiting",
    "tandem:kv_cache_usage_perc",
    "tandem:kv_cache_pages",
    "tandem:time_to_first_token_seconds",
    "tandem:inter_token_latency_seconds",
    "tandem:e2e_request_latency_seconds",
    "tandem:request_queue_time_seconds",
    "tandem:request_prefill_time_seconds",
    "tandem:request_decode_time_seconds",
    "tandem:kv_ship_exposed_seconds",
    "tandem:kv_ship_bytes_total",
    "tandem:prompt_tokens_total",
    "tandem:generation_tokens_total",
    "tandem:num_preemptions_total",
    "tandem:spec_decode_num_drafts_total",
    "tandem:spec_decode_num_draft_tokens_total",
    "tandem:spec_decode_num_accepted_tokens_total",
    "tandem:spec_decode_num_accepted_tokens_per_pos",
    "tandem:spec_decode_num_gated_steps_total",
    "tandem:request_success_total",
};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

// One CPU stage with the tiny model as its own draft, proposing 2 tokens a step.
std::unique_ptr<Engine> make_self_draft_engine() {
  EngineOptions o;
  o.draft_dir = tiny_qwen();
  o.draft_max = 2;
  o.draft_min = 2;
  return make_engine(o);
}

double sample(const std::string& text, const std::string& line_prefix) {
  const size_t at = text.find("\n" + line_prefix + " ");
  REQUIRE_MESSAGE(at != std::string::npos, line_prefix);
  return std::stod(text.substr(at + line_prefix.size() + 2));
}

}  // namespace

TEST_CASE("metrics text of two CPU stages parses, with every required family") {
  EngineOptions o;
  o.prefill_chunk = 16;
  o.prefill_device = "cpu:0";
  o.decode_device = "cpu:1";
  auto engine = make_engine(o);
  Finished done;
  REQUIRE(engine->submit(1, greedy_input(40, 4), &done).ok());
  REQUIRE(engine->submit(2, greedy_input(20, 6), &done).ok());
  engine->run_until_idle();
  const std::string text = engine->metrics_text();
  const auto bad = check_prometheus(text, kRequired);
  CHECK_MESSAGE(bad.empty(), (join(bad) + text));
  CHECK(sample(text, "tandem:time_to_first_token_seconds_count") == 2);
  CHECK(sample(text, "tandem:kv_ship_exposed_seconds_count") == 2);
  CHECK(sample(text, "tandem:generation_tokens_total") == 10);
  CHECK(sample(text, "tandem:prompt_tokens_total") == 60);
  CHECK(sample(text, "tandem:kv_ship_bytes_total") > 0);
  CHECK(sample(text, "tandem:request_success_total{finished_reason=\"length\"}") == 2);
}

TEST_CASE("speculative counters: drafts, draft tokens, accepted, per position") {
  auto engine = make_self_draft_engine();
  Finished done;
  REQUIRE(engine->submit(1, greedy_input(12, 7), &done).ok());
  engine->run_until_idle();
  const std::string text = engine->metrics_text();
  const auto bad = check_prometheus(text, kRequired);
  CHECK_MESSAGE(bad.empty(), (join(bad) + text));
  REQUIRE(done.events[1].spec);
  const SpecStats& spec = *done.events[1].spec;
  CHECK(sample(text, "tandem:spec_decode_num_draft_tokens_total") == double(spec.proposed));
  CHECK(sample(text, "tandem:spec_decode_num_accepted_tokens_total") == double(spec.accepted));
  CHECK(sample(text, "tandem:spec_decode_num_accepted_tokens_per_pos{position=\"0\"}") ==
        double(spec.accepted_per_position.at(0)));
  CHECK(spec.drafts > 0);
  CHECK(sample(text, "tandem:spec_decode_num_drafts_total") == double(spec.drafts));
}

TEST_CASE("the speculation gate's plain steps are counted") {
  auto engine = make_self_draft_engine();
  Finished done;
  // A self-draft emits 3 tokens a step: 40 tokens take more than the gate's first
  // SpecGate::kMinSpecSteps steps, after which it runs one step plainly to measure it.
  REQUIRE(engine->submit(1, greedy_input(12, 40), &done).ok());
  engine->run_until_idle();
  const std::string text = engine->metrics_text();
  CHECK(sample(text, "tandem:spec_decode_num_gated_steps_total") >= 1);
  REQUIRE(done.events[1].spec);
  CHECK(done.events[1].spec->proposed > 0);
}

TEST_CASE("the parser rejects malformed exposition text") {
  const std::string broken =
      "# HELP a:b ok\n# TYPE a:b histogram\n"
      "a:b_bucket{le=\"1\"} 3\na:b_bucket{le=\"2\"} 2\na:b_bucket{le=\"+Inf\"} 4\n"
      "a:b_sum 1\na:b_count 5\n"
      "# TYPE c counter\nc -1\nd 1\nnot a line\n";
  const auto bad = check_prometheus(broken, {"a:b", "missing"});
  // non-monotone buckets, +Inf != count, negative counter, d outside c, bad line, missing
  CHECK_MESSAGE(bad.size() == 6, join(bad));
}
