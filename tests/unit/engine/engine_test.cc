// The engine end to end on the CPU with a tiny random model and the real Qwen tokenizer:
// batching, chunking, preemption, cancellation and the two-stage pipeline must never change a
// greedy output, and every page must come back.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <utility>

#include "engine/disaggregated_engine.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "transport/local/local_transport.h"

using namespace tandem;

namespace {

using testing::check_only_first_failed;
using testing::check_pages_free;
using testing::Collector;
using testing::greedy;
using testing::metric_of;
using testing::prompt_of;
using testing::ships_to_page_zero;

std::string make_tiny(const char* name, uint64_t seed) {
  return testing::make_tiny_model(name, "tiny-qwen", seed);
}

const std::string& tiny_model() {
  static const std::string dir = make_tiny("tandem-engine-test-tiny-qwen", 3);
  return dir;
}

// A draft proposing up to k tokens a step, on 4-token pages (proposals and rollbacks cross page
// boundaries).
EngineOptions spec_options(const std::string& draft, int k) {
  EngineOptions o;
  o.draft_dir = draft;
  o.draft_max = k;
  o.draft_min = 1;
  o.page_size = 4;
  return o;
}

std::unique_ptr<Engine> make_engine(EngineOptions o) {
  o.model_dir = tiny_model();
  // The CPU runner's default pool (2 GiB, untouched until used) would be filled and refilled by
  // meson's MALLOC_PERTURB_ for every engine: 20x the test's own work.
  if (o.kv_pages == 0) o.kv_pages = 1024;
  return testing::make_engine(o);
}

// Each prompt alone, one at a time: the reference every other schedule must reproduce.
std::map<uint64_t, std::vector<int32_t>> reference(const std::vector<int>& lens, int max_tokens) {
  std::map<uint64_t, std::vector<int32_t>> out;
  EngineOptions o;
  o.prefill_chunk = 4096;
  auto engine = make_engine(o);
  for (size_t i = 0; i < lens.size(); ++i) {
    Collector c;
    REQUIRE(engine->submit(i, greedy(prompt_of(lens[i], int(i)), max_tokens), &c).ok());
    engine->run_until_idle();
    out[i] = c.results[i].ids;
  }
  return out;
}

// Submits the prompts of `lens` as greedy requests, runs them, checks every output against
// `want` and that each finished with spec counters; returns (proposed, accepted) over all.
std::pair<int64_t, int64_t> run_greedy_spec(Engine& engine, const std::vector<int>& lens,
                                            int max_tokens,
                                            const std::map<uint64_t, std::vector<int32_t>>& want) {
  Collector col;
  for (size_t i = 0; i < lens.size(); ++i) {
    REQUIRE(engine.submit(i, greedy(prompt_of(lens[i], int(i)), max_tokens), &col).ok());
  }
  engine.run_until_idle();
  int64_t proposed = 0, accepted = 0;
  for (size_t i = 0; i < lens.size(); ++i) {
    CAPTURE(i);
    REQUIRE(col.results[i].finish);
    CHECK(col.results[i].ids == want.at(i));
    REQUIRE(col.results[i].finish->spec);
    proposed += col.results[i].finish->spec->proposed;
    accepted += col.results[i].finish->spec->accepted;
  }
  return {proposed, accepted};
}

}  // namespace

TEST_CASE("batched, chunked, paged and preempted schedules give the same greedy tokens") {
  const std::vector<int> lens = {1, 15, 16, 17, 40, 70};
  const int max_tokens = 10;
  const auto want = reference(lens, max_tokens);

  struct Case {
    const char* name;
    int chunk, page, pages, budget;
    std::string prefill, decode;
  };
  const Case cases[] = {
      {"batched", 512, 16, 0, 2048, "cpu", "cpu"},
      {"chunks of 7, pages of 1", 7, 1, 0, 2048, "cpu", "cpu"},
      {"small budget", 16, 16, 0, 24, "cpu", "cpu"},
      {"tiny pool forces preemption", 8, 4, 36, 2048, "cpu", "cpu"},
      {"two stages", 16, 16, 0, 2048, "cpu:0", "cpu:1"},
      {"two stages, tiny pools", 8, 4, 36, 64, "cpu:0", "cpu:1"},
      {"two stages, pages and chunks of 1", 1, 1, 0, 2048, "cpu:0", "cpu:1"},
  };
  for (const Case& c : cases) {
    const std::string case_name = c.name;
    CAPTURE(case_name);
    EngineOptions o;
    o.prefill_chunk = c.chunk;
    o.page_size = c.page;
    o.kv_pages = c.pages;
    o.max_num_batched_tokens = c.budget;
    o.prefill_device = c.prefill;
    o.decode_device = c.decode;
    auto engine = make_engine(o);
    Collector col;
    for (size_t i = 0; i < lens.size(); ++i) {
      REQUIRE(engine->submit(i, greedy(prompt_of(lens[i], int(i)), max_tokens), &col).ok());
    }
    engine->run_until_idle();
    for (size_t i = 0; i < lens.size(); ++i) {
      CAPTURE(i);
      REQUIRE(col.results[i].finish);
      CHECK(col.results[i].finish->reason == FinishReason::kLength);
      CHECK(col.results[i].ids == want.at(i));
    }
    check_pages_free(*engine);
  }
}

TEST_CASE("the worker thread serves concurrent requests; cancel frees pages wherever it lands") {
  for (const char* prefill : {"cpu", "cpu:0"}) {
    CAPTURE(prefill);
    EngineOptions o;
    o.prefill_device = prefill;
    o.decode_device = std::string(prefill) == "cpu" ? "cpu" : "cpu:1";
    o.prefill_chunk = 8;
    auto engine = make_engine(o);
    engine->start();
    Collector col;
    for (uint64_t i = 0; i < 8; ++i) {
      REQUIRE(engine->submit(i, greedy(prompt_of(30 + int(i), int(i)), 200), &col).ok());
    }
    for (uint64_t i = 0; i < 8; i += 2) engine->cancel(i);
    engine->cancel(999);  // unknown ids are ignored
    engine->stop(/*drain_ms=*/60000);
    for (uint64_t i = 0; i < 8; ++i) {
      CAPTURE(i);
      REQUIRE(col.results[i].finish);
      CHECK(col.results[i].finish->reason ==
            (i % 2 == 0 ? FinishReason::kAbort : FinishReason::kLength));
    }
    check_pages_free(*engine);
  }
}

TEST_CASE("two stages: prompts that fill the decode pool exactly still decode") {
  // Two 8-token prompts on 4-token pages reserve the whole 4-page decode pool in the handshake;
  // each then needs a ninth slot for its first decode step. The handshake must have reserved it:
  // with nothing running on the decode stage nobody frees a page, and both would wait forever.
  EngineOptions o;
  o.prefill_device = "cpu:0";
  o.decode_device = "cpu:1";
  o.page_size = 4;
  o.kv_pages = 4;
  auto engine = make_engine(o);
  engine->start();
  Collector col;
  for (uint64_t i = 0; i < 2; ++i) {
    REQUIRE(engine->submit(i, greedy(prompt_of(8, int(i)), 4), &col).ok());
  }
  CHECK_MESSAGE(testing::wait_finished(*engine, col, 2), "stalled");
  engine->stop(/*drain_ms=*/0);  // aborts whatever is stuck
  for (uint64_t i = 0; i < 2; ++i) {
    CAPTURE(i);
    REQUIRE(col.results[i].finish);
    CHECK(col.results[i].finish->reason == FinishReason::kLength);
    CHECK(col.results[i].ids.size() == 4);
  }
  check_pages_free(*engine);
}

TEST_CASE("requests that can never run are refused at submit with a typed error") {
  EngineOptions o;
  o.kv_pages = 4;
  o.page_size = 4;
  o.max_queue = 2;
  auto engine = make_engine(o);
  Collector col;
  CHECK(engine->submit(1, greedy({}, 4), &col).error().code == ErrorCode::kInvalidArgument);
  CHECK(engine->submit(2, greedy(prompt_of(10, 0), 100), &col).error().code ==
        ErrorCode::kOutOfPages);
  CHECK(engine->submit(3, greedy({1, 2, 999999999}, 4), &col).error().code ==
        ErrorCode::kInvalidArgument);
  auto too_long = greedy(prompt_of(4, 0), 1 << 30);
  CHECK(engine->submit(4, too_long, &col).error().code == ErrorCode::kPromptTooLong);
  REQUIRE(engine->submit(5, greedy(prompt_of(3, 0), 2), &col).ok());
  REQUIRE(engine->submit(6, greedy(prompt_of(3, 1), 2), &col).ok());
  CHECK(engine->submit(7, greedy(prompt_of(3, 2), 2), &col).error().code == ErrorCode::kOverloaded);
  CHECK(engine->submit(5, greedy(prompt_of(3, 2), 2), &col).error().code ==
        ErrorCode::kInvalidArgument);  // id in flight
  engine->run_until_idle();
  CHECK(col.results.size() == 2);
  check_pages_free(*engine);
}

TEST_CASE("a failed or stuck KV transfer fails only its request, with no pages leaked") {
  for (ErrorCode fault : {ErrorCode::kTransport, ErrorCode::kTimeout}) {
    CAPTURE(error_code_name(fault));
    EngineOptions o;
    o.prefill_device = "cpu:0";
    o.decode_device = "cpu:1";
    o.prefill_chunk = 8;
    auto engine = make_engine(o);
    auto* disagg = dynamic_cast<DisaggregatedEngine*>(engine.get());
    REQUIRE(disagg != nullptr);
    disagg->ship_timeout = std::chrono::milliseconds(20);
    auto* local = dynamic_cast<LocalTransport*>(&disagg->transport());
    REQUIRE(local != nullptr);
    // Fail transfers that go to decode page 0, which only the first request gets.
    local->set_fault_hook([fault](const ShipOrder& order) -> std::optional<Error> {
      if (ships_to_page_zero(order)) return make_error(fault, "injected");
      return std::nullopt;
    });
    Collector col;
    REQUIRE(engine->submit(1, greedy(prompt_of(20, 1), 4), &col).ok());
    REQUIRE(engine->submit(2, greedy(prompt_of(20, 2), 4), &col).ok());
    engine->run_until_idle();
    check_only_first_failed(col, fault);
    check_pages_free(*engine);
  }
}

TEST_CASE("speculative decoding never changes greedy tokens, for every k and a mixed batch") {
  const std::vector<int> lens = {5, 17, 33, 40};
  const int max_tokens = 12;
  const auto want = reference(lens, max_tokens);
  // A different random model of the same vocabulary disagrees often; the target itself always
  // agrees. Both must reproduce the target-only tokens exactly.
  const std::string disagreeing = make_tiny("tandem-engine-test-tiny-qwen-seed11", 11);
  for (const std::string& draft : {disagreeing, tiny_model()}) {
    const bool self = draft == tiny_model();
    for (int k = 1; k <= 8; ++k) {
      CAPTURE(self);
      CAPTURE(k);
      auto engine = make_engine(spec_options(draft, k));
      const auto [proposed, accepted] = run_greedy_spec(*engine, lens, max_tokens, want);
      CHECK(proposed > 0);
      if (self) {
        CHECK(accepted == proposed);
      } else {
        CHECK(accepted < proposed);  // the disagreeing draft really was rejected
      }
      check_pages_free(*engine);
    }
  }
}

TEST_CASE("a draft with a capped vocabulary (--draft-vocab) keeps the target-only tokens") {
  const std::vector<int> lens = {5, 17, 33};
  const int max_tokens = 12;
  const auto want = reference(lens, max_tokens);
  // A cap at the median of the target's tokens: the target as its own draft then proposes
  // wrongly wherever the target's token lies past the cap, and must be rejected there.
  std::vector<int32_t> ids;
  for (const auto& [id, out] : want) ids.insert(ids.end(), out.begin(), out.end());
  std::sort(ids.begin(), ids.end());
  const int32_t cap = ids[ids.size() / 2];
  REQUIRE(ids.front() < cap);
  struct Case {
    int k;
    bool async;
    const char* prefill;
    const char* decode;
  };
  for (const Case& c : {Case{1, true, "cpu", "cpu"}, Case{4, true, "cpu", "cpu"},
                        Case{4, false, "cpu", "cpu"}, Case{8, true, "cpu:0", "cpu:1"}}) {
    CAPTURE(c.k);
    CAPTURE(c.async);
    CAPTURE(c.decode);
    EngineOptions o = spec_options(tiny_model(), c.k);
    o.draft_vocab = cap;
    o.async_decode = c.async;
    o.prefill_device = c.prefill;
    o.decode_device = c.decode;
    auto engine = make_engine(o);
    const auto [proposed, accepted] = run_greedy_spec(*engine, lens, max_tokens, want);
    CHECK(proposed > 0);
    CHECK(accepted < proposed);
    CHECK(accepted > 0);
    check_pages_free(*engine);
  }
}

TEST_CASE(
    "penalised greedy requests with a draft: the target-only tokens, rounds pipelined or not") {
  // A presence penalty pushes each step away from the tokens already generated, so every
  // proposal must join the draft's history; pipelined rounds (async decode on) keep the last one
  // on the device (SampleRequest::fed) and count it there. The target as its own draft proposes
  // exactly its own tokens only when it does.
  const std::vector<int> lens = {5, 17, 33};
  const int max_tokens = 20;
  auto request = [&](size_t i) {
    GenerateInput in = greedy(prompt_of(lens[i], int(i)), max_tokens);
    in.sampling.presence_penalty = 2.0f;
    return in;
  };
  int64_t proposed = 0, accepted = 0;
  auto run = [&](EngineOptions o) {
    auto engine = make_engine(o);
    Collector col;
    for (size_t i = 0; i < lens.size(); ++i) REQUIRE(engine->submit(i, request(i), &col).ok());
    engine->run_until_idle();
    std::map<uint64_t, std::vector<int32_t>> out;
    proposed = accepted = 0;
    for (size_t i = 0; i < lens.size(); ++i) {
      REQUIRE(col.results[i].finish);
      out[i] = col.results[i].ids;
      if (const auto& spec = col.results[i].finish->spec) {
        proposed += spec->proposed;
        accepted += spec->accepted;
      }
    }
    check_pages_free(*engine);
    return out;
  };
  const auto want = run(EngineOptions{});
  {  // the penalty matters here, or the checks below could not see it left out
    auto plain = reference(lens, max_tokens);
    CHECK(plain != want);
  }
  const std::string disagreeing = make_tiny("tandem-engine-test-tiny-qwen-seed11", 11);
  for (const std::string& draft : {disagreeing, tiny_model()}) {
    for (bool async : {true, false}) {
      for (int k : {2, 5}) {
        CAPTURE(draft == tiny_model());
        CAPTURE(async);
        CAPTURE(k);
        EngineOptions o = spec_options(draft, k);
        o.async_decode = async;
        CHECK(run(o) == want);
        CHECK(proposed > 0);
        if (draft == tiny_model()) CHECK(accepted == proposed);
      }
    }
  }
}

TEST_CASE("above --spec-max-batch the plain decode step runs: no verify pass, the same tokens") {
  // The target as its own draft: any speculative step would propose (and accept). Four requests
  // of equal lengths. One stage: they decode together throughout, so a limit of 3 keeps every
  // step plain and 4 lets them speculate. Two stages: requests reach the decode stage one by one,
  // so only a limit of 0 keeps every step plain there.
  struct Case {
    const char* prefill;
    const char* decode;
    int max_batch;
    bool speculates;
  };
  const std::vector<int> lens = {9, 9, 9, 9};
  const int max_tokens = 10;
  const auto want = reference(lens, max_tokens);
  for (const Case& c : {Case{"cpu", "cpu", 3, false}, Case{"cpu", "cpu", 4, true},
                        Case{"cpu:0", "cpu:1", 0, false}, Case{"cpu:0", "cpu:1", 4, true}}) {
    const std::string decode = c.decode;
    CAPTURE(decode);
    CAPTURE(c.max_batch);
    EngineOptions o;
    o.draft_dir = tiny_model();
    o.draft_max = 4;
    o.spec_max_batch = c.max_batch;
    o.prefill_device = c.prefill;
    o.decode_device = c.decode;
    auto engine = make_engine(o);
    const auto [proposed, accepted] = run_greedy_spec(*engine, lens, max_tokens, want);
    // A verify pass leaves a spec_verify span in each of its requests' traces.
    const nlohmann::json trace = nlohmann::json::parse(engine->trace_json(std::nullopt, 0));
    int verify_spans = 0;
    for (const auto& e : trace["traceEvents"]) verify_spans += e.value("name", "") == "spec_verify";
    if (c.speculates) {
      CHECK(proposed > 0);
      CHECK(accepted == proposed);
      CHECK(verify_spans > 0);
    } else {
      CHECK(proposed == 0);
      CHECK(verify_spans == 0);
    }
    check_pages_free(*engine);
  }
}

TEST_CASE("speculative decoding within a small token budget: the draft catches up in pieces") {
  // Six prompts of up to 40 tokens reach the draft together, and one forward of either model
  // may carry only max_num_batched_tokens = 24 (found on the H200: 93 catch-up tokens against a
  // runner's 64 aborted the process). A pattern pair (the draft agrees with the target, and
  // costs about half of it) makes every sequence propose draft_min = 4, so six verify rows of
  // 1 + 4 tokens would need 30: the proposals are cut to fit, the catch-up is split over steps,
  // and the tokens stay the target's.
  const mkmodel::PatternOptions agree{7, 0.0, 0};
  const std::string target =
      testing::make_tiny_model("tandem-engine-test-pattern-qwen", "tiny-qwen", 5, agree);
  const std::string draft = testing::make_tiny_model("tandem-engine-test-pattern-qwen-draft",
                                                     "tiny-qwen-draft", 5, agree);
  const std::vector<int> lens = {5, 17, 33, 40, 9, 26};
  auto run = [&](bool with_draft) {
    EngineOptions o;
    o.model_dir = target;
    o.kv_pages = 1024;
    o.max_num_batched_tokens = 24;
    o.prefill_chunk = 24;
    o.max_num_seqs = 6;
    if (with_draft) {
      o.draft_dir = draft;
      o.draft_max = 4;
      o.draft_min = 4;
    }
    auto engine = testing::make_engine(o);
    Collector col;
    for (size_t i = 0; i < lens.size(); ++i) {
      REQUIRE(engine->submit(i, greedy(prompt_of(lens[i], int(i)), 48), &col).ok());
    }
    engine->run_until_idle();
    std::map<uint64_t, std::vector<int32_t>> ids;
    int64_t proposed = 0;
    for (auto& [id, r] : col.results) {
      REQUIRE(r.finish);
      ids[id] = r.ids;
      if (r.finish->spec) proposed += r.finish->spec->proposed;
    }
    check_pages_free(*engine);
    return std::make_pair(ids, proposed);
  };
  const auto [want, none] = run(false);
  const auto [got, proposed] = run(true);
  CHECK(got == want);
  CHECK(proposed >= int64_t(lens.size()) * 4);  // it caught up and proposed
}

TEST_CASE("sampled requests with a draft: a self-draft accepts every proposal, reruns repeat") {
  // The target as its own draft: the draft's probabilities and the verify pass's are computed
  // from the same logits, settings and history (penalties see output + proposals so far, and
  // min_tokens bans eos on both sides), so min(1, p_t / p_d) = 1 for every proposal. A history or
  // ban off by one token on either side would reject some.
  auto run = [](const std::string& draft, int32_t draft_vocab = 0) {
    EngineOptions o;
    o.draft_dir = draft;
    o.draft_vocab = draft_vocab;
    o.draft_max = 4;
    o.draft_min = 1;
    o.page_size = 4;
    auto engine = make_engine(o);
    Collector col;
    for (int i = 0; i < 3; ++i) {
      GenerateInput in = greedy(prompt_of(9 + 7 * i, i), 10);
      // Few candidates and a strong penalty: a history one token short on either side would
      // leave that token's probability in play there and reject a third of the proposals.
      in.sampling.temperature = 0.8f;
      in.sampling.top_k = 3;
      in.sampling.top_p = 0.95f;
      in.sampling.presence_penalty = 2.0f;
      in.sampling.ignore_eos = false;
      in.sampling.min_tokens = 6;  // eos banned for 6 tokens, on the draft's rows and the target's
      in.sampling.seed = 100 + uint64_t(i);
      REQUIRE(engine->submit(uint64_t(i), std::move(in), &col).ok());
    }
    engine->run_until_idle();
    check_pages_free(*engine);
    return std::move(col.results);
  };
  const auto self = run(tiny_model());
  for (const auto& [id, r] : self) {
    CAPTURE(id);
    REQUIRE(r.finish);
    REQUIRE(r.finish->spec);
    CHECK(r.finish->spec->proposed > 0);
    CHECK(r.finish->spec->accepted == r.finish->spec->proposed);
    CHECK(r.ids.size() >= 6);
  }
  // A disagreeing draft, and the target as its own draft capped at 1,000 ids (its rows are 0
  // past the cap, where the target's candidates lie): rejections happen, and the same seeds
  // give the same tokens again.
  const std::string other = make_tiny("tandem-engine-test-tiny-qwen-seed11", 11);
  for (const auto& [draft, cap] : {std::pair{other, 0}, std::pair{tiny_model(), 1000}}) {
    CAPTURE(cap);
    const auto first = run(draft, cap), second = run(draft, cap);
    int64_t proposed = 0, accepted = 0;
    for (const auto& [id, r] : first) {
      CAPTURE(id);
      REQUIRE(r.finish);
      proposed += r.finish->spec->proposed;
      accepted += r.finish->spec->accepted;
      CHECK(r.ids == second.at(id).ids);
    }
    CHECK(accepted < proposed);
  }
}

namespace {

uint64_t preemptions_of(const Engine& e) {
  return uint64_t(metric_of(e, "tandem:num_preemptions_total"));
}

GenerateInput sampled(std::vector<int32_t> prompt, int max_tokens, uint64_t seed) {
  GenerateInput in = greedy(std::move(prompt), max_tokens);
  in.sampling.temperature = 0.9f;
  in.sampling.top_p = 0.95f;
  in.sampling.seed = seed;
  return in;
}

}  // namespace

TEST_CASE("preempted requests resume with output identical to an unpreempted run") {
  // Sampled (seeded) and greedy requests: a resumed request must redraw the same random numbers,
  // not only reach the same argmax. Each needs 15 to 17 pages of 4 tokens; 36 pages hold two, so
  // the third and later ones preempt or wait.
  const int n = 6, max_tokens = 20;
  auto input = [&](int i) {
    auto prompt = prompt_of(40 + 3 * i, 50 + i);
    return i % 2 ? greedy(prompt, max_tokens) : sampled(prompt, max_tokens, 1000 + uint64_t(i));
  };
  std::map<uint64_t, std::vector<int32_t>> want;
  {
    EngineOptions o;
    o.page_size = 4;
    auto engine = make_engine(o);
    for (int i = 0; i < n; ++i) {
      Collector c;
      REQUIRE(engine->submit(uint64_t(i), input(i), &c).ok());
      engine->run_until_idle();
      want[uint64_t(i)] = c.results[uint64_t(i)].ids;
      REQUIRE(want[uint64_t(i)].size() == size_t(max_tokens));
    }
    CHECK(preemptions_of(*engine) == 0);
  }
  for (const char* stages : {"one", "two"}) {
    CAPTURE(stages);
    EngineOptions o;
    o.page_size = 4;
    o.kv_pages = 36;
    o.prefill_chunk = 16;
    if (std::string(stages) == "two") {
      o.prefill_device = "cpu:0";
      o.decode_device = "cpu:1";
    }
    auto engine = make_engine(o);
    Collector col;
    for (int i = 0; i < n; ++i) REQUIRE(engine->submit(uint64_t(i), input(i), &col).ok());
    engine->run_until_idle();
    CHECK(preemptions_of(*engine) > 0);
    for (int i = 0; i < n; ++i) {
      CAPTURE(i);
      REQUIRE(col.results[uint64_t(i)].finish);
      CHECK(col.results[uint64_t(i)].finish->reason == FinishReason::kLength);
      CHECK(col.results[uint64_t(i)].ids == want.at(uint64_t(i)));
    }
    check_pages_free(*engine);
  }
}

TEST_CASE("max_model_len: vLLM's message; a setting past the model's length is refused") {
  EngineOptions o;
  o.max_model_len = 64;
  auto engine = make_engine(o);
  Collector col;
  auto st = engine->submit(1, greedy(prompt_of(50, 0), 20), &col);
  REQUIRE(!st.ok());
  CHECK(st.error().code == ErrorCode::kPromptTooLong);
  CHECK(st.error().message ==
        "This model's maximum context length is 64 tokens. However, you requested 70 tokens (50 "
        "in the messages, 20 in the completion). Please reduce the length of the messages or "
        "completion.");
  REQUIRE(engine->submit(2, greedy(prompt_of(50, 0), 14), &col).ok());  // exactly 64
  engine->run_until_idle();
  CHECK(col.results[2].ids.size() == 14);

  EngineOptions too_long;
  too_long.model_dir = tiny_model();
  too_long.max_model_len = 1 << 30;
  auto refused = Engine::create(too_long);
  REQUIRE(!refused.ok());
  CHECK(refused.error().code == ErrorCode::kInvalidArgument);
  CHECK(refused.error().message.find("max_model_len") != std::string::npos);
  EngineOptions policy;
  policy.model_dir = tiny_model();
  policy.scheduling_policy = "lottery";
  auto unknown = Engine::create(policy);
  REQUIRE(!unknown.ok());
  CHECK(unknown.error().message.find("scheduling_policy") != std::string::npos);
}

TEST_CASE("settings past their limits are refused at start, naming the flag") {
  struct Case {
    const char* flag;
    void (*set)(EngineOptions&);
    ErrorCode code;
  };
  const Case cases[] = {
      {"--draft-max", [](EngineOptions& o) { o.draft_max = 2'000'000'000; },
       ErrorCode::kInvalidArgument},  // hung the first speculative step
      {"--draft-max", [](EngineOptions& o) { o.draft_max = kMaxDraftTokens + 1; },
       ErrorCode::kInvalidArgument},
      {"--draft-min", [](EngineOptions& o) { o.draft_min = 9; }, ErrorCode::kInvalidArgument},
      {"--draft-vocab", [](EngineOptions& o) { o.draft_vocab = -1; }, ErrorCode::kInvalidArgument},
      {"--draft-vocab",  // more ids than the draft's tokenizer has
       [](EngineOptions& o) {
         o.draft_dir = tiny_model();
         o.draft_vocab = 10'000'000;
       },
       ErrorCode::kInvalidArgument},
      {"--max-num-seqs", [](EngineOptions& o) { o.max_num_seqs = kMaxNumSeqs + 1; },
       ErrorCode::kInvalidArgument},
      {"--gpu-memory-utilization", [](EngineOptions& o) { o.gpu_memory_utilization = 5; },
       ErrorCode::kInvalidArgument},
      {"--gpu-memory-utilization", [](EngineOptions& o) { o.gpu_memory_utilization = 0; },
       ErrorCode::kInvalidArgument},
      {"--spec-max-batch", [](EngineOptions& o) { o.spec_max_batch = -5; },
       ErrorCode::kInvalidArgument},
      {"--kv-pages", [](EngineOptions& o) { o.kv_pages = -1; }, ErrorCode::kInvalidArgument},
      {"--max-queue", [](EngineOptions& o) { o.max_queue = 0; }, ErrorCode::kInvalidArgument},
      {"--max-cuda-graphs", [](EngineOptions& o) { o.max_cuda_graphs = 0; },
       ErrorCode::kInvalidArgument},
      // Mapped lazily, the pool used to start and its 2e9-page bookkeeping to take minutes.
      {"--kv-pages", [](EngineOptions& o) { o.kv_pages = 2'000'000'000; }, ErrorCode::kOutOfPages},
      {"--page-size", [](EngineOptions& o) { o.page_size = 2'000'000'000; },
       ErrorCode::kOutOfPages},
  };
  for (const Case& c : cases) {
    EngineOptions o;
    o.model_dir = tiny_model();
    o.threads = 1;
    c.set(o);
    auto engine = Engine::create(o);
    REQUIRE(!engine.ok());
    INFO(engine.error().message);
    CHECK(engine.error().code == c.code);
    CHECK(engine.error().message.find(c.flag) != std::string::npos);
  }
  // Each limit itself is accepted.
  EngineOptions at_limits;
  at_limits.model_dir = tiny_model();
  at_limits.threads = 1;
  at_limits.draft_max = kMaxDraftTokens;
  at_limits.max_num_seqs = kMaxNumSeqs;
  at_limits.gpu_memory_utilization = 1.0;
  at_limits.spec_max_batch = 0;
  auto accepted = Engine::create(at_limits);
  CHECK_MESSAGE(accepted.ok(), (accepted.ok() ? std::string() : accepted.error().message));
}
