// `tandem trace` output, structurally: a request that ran prefill chunks and decode steps (one
// stage, two CPU stages with KV shipping, speculative decoding) yields every span it should,
// nested in its request, with resolving flows and named tracks; --trace off records nothing.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "engine_fixture.h"
#include "trace/trace.h"
#include "trace_checks.h"

using namespace tandem;
using namespace tandem::testing;
using nlohmann::json;

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

// Runs two requests (40-token prompts in chunks of 16: three chunks each, 5 tokens out).
std::string run_two(Engine& engine) {
  Finished done;
  REQUIRE(engine.submit(1, greedy_input(40, 5), &done).ok());
  REQUIRE(engine.submit(2, greedy_input(33, 5), &done).ok());
  engine.run_until_idle();
  REQUIRE(done.events.size() == 2);
  return engine.trace_json(std::nullopt, 0);
}

std::vector<json> spans_of(const std::string& trace, uint64_t id, const std::string& name) {
  std::vector<json> out;
  const json doc = json::parse(trace);
  for (const json& e : doc["traceEvents"]) {
    if (e.value("ph", "") == "X" && e.value("name", "") == name &&
        e["args"].value("request_id", uint64_t(0)) == id) {
      out.push_back(e);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("one stage: queue, every prefill chunk, decode steps and detokenize, nested") {
  EngineOptions o;
  o.prefill_chunk = 16;
  auto engine = make_engine(o);
  const std::string trace = run_two(*engine);
  const auto bad =
      check_chrome_trace(trace, {"queue", "prefill_chunk", "decode_step", "detokenize"});
  CHECK_MESSAGE(bad.empty(), (join(bad)));
  const auto chunks = spans_of(trace, 1, "prefill_chunk");
  REQUIRE(chunks.size() == 3);
  for (int i = 0; i < 3; ++i) CHECK(chunks[size_t(i)]["args"]["index"] == i);
  CHECK(spans_of(trace, 1, "decode_step").size() == 4);  // the first token comes from prefill
  CHECK(spans_of(trace, 1, "detokenize").size() == 5);
  // Tracks are named for the stages.
  std::set<std::string> tracks;
  const json doc = json::parse(trace);
  for (const json& e : doc["traceEvents"]) {
    if (e.value("name", "") == "thread_name") tracks.insert(e["args"]["name"].get<std::string>());
  }
  for (const char* t : {"daemon loop", "prefill stage", "KV transport", "decode stage",
                        "decode stage: draft", "decode stage: verify"}) {
    CHECK_MESSAGE(tracks.count(t), t);
  }
}

TEST_CASE("two CPU stages: KV ship spans carry chunk, layers, bytes and the backend") {
  EngineOptions o;
  o.prefill_chunk = 16;
  o.prefill_device = "cpu:0";
  o.decode_device = "cpu:1";
  auto engine = make_engine(o);
  const std::string trace = run_two(*engine);
  const auto bad = check_chrome_trace(
      trace, {"queue", "prefill_chunk", "kv_ship", "decode_ready", "decode_step", "detokenize"});
  CHECK_MESSAGE(bad.empty(), (join(bad)));
  const auto ships = spans_of(trace, 1, "kv_ship");
  REQUIRE(ships.size() == 3);  // one per chunk
  for (int i = 0; i < 3; ++i) {
    const json& args = ships[size_t(i)]["args"];
    CHECK(args["index"] == i);
    CHECK(args["layers"] == "0.." + std::to_string(engine->model_config().num_layers));
    CHECK(args["bytes"].get<int64_t>() > 0);
    CHECK(args["backend"] == "local");
  }
  CHECK(spans_of(trace, 1, "decode_ready").size() == 1);
}

TEST_CASE("speculative decoding: draft spans carry k, verify spans the accepted count") {
  EngineOptions o;
  o.prefill_chunk = 16;
  o.draft_dir = tiny_qwen();  // the target as its own draft: it always agrees
  o.draft_max = 3;
  o.draft_min = 3;
  auto engine = make_engine(o);
  const std::string trace = run_two(*engine);
  const auto bad = check_chrome_trace(
      trace, {"queue", "prefill_chunk", "spec_draft", "spec_verify", "detokenize"});
  CHECK_MESSAGE(bad.empty(), (join(bad)));
  const auto drafts = spans_of(trace, 1, "spec_draft");
  const auto verifies = spans_of(trace, 1, "spec_verify");
  REQUIRE(!drafts.empty());
  REQUIRE(drafts.size() == verifies.size());
  int64_t proposed = 0, accepted = 0;
  for (size_t i = 0; i < drafts.size(); ++i) {
    const int64_t k = drafts[i]["args"].value("tokens", 0);
    const int64_t a = verifies[i]["args"].value("accepted", -1);
    CHECK(a >= 0);
    CHECK(a <= k);
    // Verify runs after the draft of the same step.
    CHECK(verifies[i]["ts"].get<double>() >= drafts[i]["ts"].get<double>());
    proposed += k;
    accepted += a;
  }
  CHECK(proposed > 0);
  CHECK(accepted == proposed);  // a self-draft is always accepted
}

TEST_CASE("--trace off records no spans and keeps no traces; metrics still count") {
  EngineOptions o;
  o.trace = false;
  auto engine = make_engine(o);
  Finished done;
  REQUIRE(engine->submit(7, greedy_input(10, 3), &done).ok());
  engine->run_until_idle();
  const json doc = json::parse(engine->trace_json(std::nullopt, 0));
  for (const json& e : doc["traceEvents"]) CHECK(e.value("ph", "") == "M");
  CHECK(engine->metrics_text().find("tandem:generation_tokens_total 3") != std::string::npos);
}

TEST_CASE("spans added after the finish (the daemon's) widen the request; flows resolve") {
  TraceRing ring(2);
  RequestTrace r;
  r.request_id = 9;
  r.arrival_ns = 1000000;
  r.finish_ns = 2000000;
  r.add(Span{"prefill_chunk", Track::kPrefill, 1100000, 200000});
  r.add(Span{"decode_step", Track::kDecode, 1400000, 100000});
  ring.push(r);
  Span tok{"tokenize", Track::kDaemon, 900000, 50000};
  Span write{"stream_write", Track::kDaemon, 2100000, 5000};
  CHECK(ring.append(9, {tok, write}));
  CHECK_FALSE(ring.append(10, {tok}));
  const std::string trace = chrome_trace_json(ring.snapshot(std::nullopt, 0));
  const auto bad = check_chrome_trace(trace, {"tokenize", "stream_write", "prefill_chunk"});
  CHECK_MESSAGE(bad.empty(), (join(bad)));
  // The ring keeps the last two only.
  r.request_id = 10;
  ring.push(r);
  r.request_id = 11;
  ring.push(r);
  CHECK(ring.snapshot(std::nullopt, 0).size() == 2);
  CHECK(ring.snapshot(9, 0).empty());
}

TEST_CASE("the checker rejects broken traces") {
  // A span outside its request, a flow without its finish, a track without a name.
  const std::string broken = R"({"traceEvents":[
    {"name":"thread_name","ph":"M","pid":1,"tid":0,"args":{"name":"daemon loop"}},
    {"name":"request 1","cat":"request","ph":"b","id":1,"pid":1,"tid":0,"ts":10},
    {"name":"request 1","cat":"request","ph":"e","id":1,"pid":1,"tid":0,"ts":20},
    {"name":"queue","cat":"stage","ph":"X","pid":1,"tid":0,"ts":15,"dur":10,
     "args":{"request_id":1}},
    {"name":"decode_step","cat":"stage","ph":"X","pid":1,"tid":3,"ts":12,"dur":-1,
     "args":{"request_id":1}},
    {"name":"request 1","cat":"flow","ph":"s","id":1,"pid":1,"tid":0,"ts":12}]})";
  const auto bad = check_chrome_trace(broken, {"queue", "tokenize"});
  CHECK(bad.size() == 5);  // outside, negative dur, unnamed track, flow, missing tokenize
  CHECK_MESSAGE(!bad.empty(), join(bad));
}

namespace {

// A device interval that has (or has not yet) run, as the CUDA runner's events would report.
struct FakeInterval final : DeviceInterval {
  bool done = false;
  int64_t start = 0, end = 0;
  bool resolve(int64_t& s, int64_t& e) const override {
    if (!done) return false;
    s = start;
    e = end;
    return true;
  }
};

}  // namespace

TEST_CASE("spans of GPU work take the device's interval when the trace is finished") {
  auto ran = std::make_shared<FakeInterval>();
  ran->done = true;
  ran->start = 5'000;
  ran->end = 12'000;
  auto pending = std::make_shared<FakeInterval>();
  RequestTrace tr;
  {
    Span host;  // host-timed: left alone
    host.name = "tokenize";
    host.start_ns = 100;
    host.dur_ns = 50;
    tr.add(host);
    Span chunk = host;
    chunk.name = "prefill_chunk";
    chunk.start_ns = 1'000;  // the host's launch window
    chunk.dur_ns = 300;
    chunk.device = ran;
    tr.add(chunk);
    Span unfinished = chunk;  // a cancelled request's last launch may never have run
    unfinished.device = pending;
    tr.add(unfinished);
  }
  tr.resolve_device_times();
  REQUIRE(tr.spans.size() == 3);
  CHECK(tr.spans[0].start_ns == 100);
  CHECK(tr.spans[0].dur_ns == 50);
  CHECK(tr.spans[1].start_ns == 5'000);
  CHECK(tr.spans[1].dur_ns == 7'000);
  CHECK(tr.spans[2].start_ns == 1'000);
  CHECK(tr.spans[2].dur_ns == 300);
  for (const Span& s : tr.spans) CHECK(s.device == nullptr);  // handles (events) released
  CHECK(ran.use_count() == 1);
}
