// --async-decode on the CPU: a decode batch launches its next step (its tokens fed from the
// runner's last sample_async, whose penalties count the fed token as the last output) before it
// reads this step's tokens. Nothing a client sees may change: tokens, text and finish reasons
// equal synchronous decoding's through finishes by length, stop ids and stop strings that land
// while a step is in flight, requests that arrive, sampled and penalised requests, min_tokens
// bans, cancels; and every page comes back.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "engine/disaggregated_engine.h"
#include "engine/engine.h"
#include "engine/local_engine.h"
#include "engine_test_util.h"

using namespace tandem;

namespace {

using testing::check_pages_free;
using testing::Collector;
using testing::metric;
using testing::prompt_of;

// Greedy with no penalty: the model's generation_config.json (Qwen's) asks for a repetition
// penalty of 1.05, which a request that sets none inherits.
GenerateInput greedy(std::vector<int32_t> prompt, int max_tokens) {
  GenerateInput in = testing::greedy(std::move(prompt), max_tokens);
  in.sampling.repetition_penalty = 1.0f;
  return in;
}

const std::string& tiny_model() {
  static const std::string dir =
      testing::make_tiny_model("tandem-async-decode-test-tiny-qwen", "tiny-qwen", 5);
  return dir;
}

// One CPU device (a LocalEngine) or two CPU stages (a DisaggregatedEngine, whose decode stage
// runs the async steps), and one step of it for tests that interleave steps and submits.
struct Rig {
  std::unique_ptr<Engine> engine;
  std::function<void()> step;
};

Rig make_rig(bool two_stages, bool async_decode) {
  EngineOptions o;
  o.model_dir = tiny_model();
  o.kv_pages = 256;
  o.page_size = 4;  // the next token's page is often a new one
  o.async_decode = async_decode;
  o.prefill_device = two_stages ? "cpu:0" : "cpu";
  o.decode_device = two_stages ? "cpu:1" : "cpu";
  Rig rig{testing::make_engine(o), {}};
  if (auto* local = dynamic_cast<LocalEngine*>(rig.engine.get())) {
    rig.step = [local] { local->step(); };
  } else {
    auto* stages = dynamic_cast<DisaggregatedEngine*>(rig.engine.get());
    REQUIRE(stages != nullptr);
    rig.step = [stages] {
      stages->prefill_step();
      stages->decode_step();
    };
  }
  REQUIRE((dynamic_cast<DisaggregatedEngine*>(rig.engine.get()) != nullptr) == two_stages);
  return rig;
}

struct Outcome {
  std::vector<int32_t> ids;
  std::string text;
  FinishReason reason = FinishReason::kError;
};

// Group A from the start; group B after `late_after` steps, while A decodes.
std::map<uint64_t, Outcome> run(Rig& rig, const std::map<uint64_t, GenerateInput>& a,
                                const std::map<uint64_t, GenerateInput>& b, int late_after) {
  Engine& engine = *rig.engine;
  Collector col;
  for (const auto& [id, in] : a) REQUIRE(engine.submit(id, in, &col).ok());
  for (int i = 0; i < late_after; ++i) rig.step();
  for (const auto& [id, in] : b) REQUIRE(engine.submit(id, in, &col).ok());
  engine.run_until_idle();
  std::map<uint64_t, Outcome> out;
  for (auto& [id, r] : col.results) {
    REQUIRE_MESSAGE(r.finish, "request ", id, " never finished");
    out[id] = Outcome{r.ids, r.text, r.finish->reason};
  }
  return out;
}

}  // namespace

TEST_CASE("async decode: the same tokens, text and finishes as synchronous decode") {
  // The reference run picks stop ids and strings out of its own output, so they land mid-decode.
  Rig sync = make_rig(false, false);
  std::map<uint64_t, GenerateInput> a, b;
  for (uint64_t i = 0; i < 4; ++i) a[i] = greedy(prompt_of(9 + 5 * int(i), int(i)), 6 + 7 * int(i));
  a[4] = greedy(prompt_of(3, 4), 1);  // finishes with its first token
  a[5] = greedy(prompt_of(12, 5), 2);
  const auto base = run(sync, a, {}, 0);
  // A stop id that appears at output 5 of request 3, a stop string out of request 2's text.
  a[6] = greedy(prompt_of(24, 3), 40);
  a[6].sampling.stop_token_ids = {base.at(3).ids.at(5)};
  a[7] = greedy(prompt_of(19, 2), 40);
  const std::string& t2 = base.at(2).text;
  REQUIRE(t2.size() > 8);
  a[7].sampling.stop = {t2.substr(t2.size() / 2, 3)};
  // An eos ban (min_tokens) that lifts mid-decode.
  a[8] = greedy(prompt_of(14, 8), 12);
  a[8].sampling.ignore_eos = false;
  a[8].sampling.min_tokens = 5;
  // Penalties strong enough to move the argmax of this model, which repeats itself: the in-flight
  // token must count (a[9] greedy, a[10] drawn with a top-p cut).
  a[9] = greedy(prompt_of(10, 9), 30);
  a[9].sampling.repetition_penalty = 1.8f;
  a[9].sampling.frequency_penalty = 0.9f;
  a[9].sampling.presence_penalty = 0.5f;
  a[10] = a[9];
  a[10].prompt_ids = prompt_of(13, 10);
  a[10].sampling.temperature = 0.9f;
  a[10].sampling.top_p = 0.9f;
  a[10].sampling.seed = 3;
  // Late arrivals: another greedy one, a seeded sampled one and one with the model's repetition
  // penalty.
  b[20] = greedy(prompt_of(30, 20), 15);
  b[21] = greedy(prompt_of(8, 21), 9);
  b[21].sampling.temperature = 0.8f;
  b[21].sampling.seed = 7;
  b[22] = testing::greedy(prompt_of(11, 22), 7);

  const std::map<uint64_t, Outcome> want = run(sync, a, b, 12);
  for (bool two_stages : {false, true}) {
    CAPTURE(two_stages);
    std::map<bool, std::map<uint64_t, Outcome>> got;
    for (bool on : {false, true}) {
      CAPTURE(on);
      Rig rig = make_rig(two_stages, on);
      got[on] = run(rig, a, b, 12);
      check_pages_free(*rig.engine);
      const uint64_t async_steps = metric(*rig.engine, "tandem:async_decode_steps_total");
      if (on) {
        MESSAGE("async steps: ", async_steps);
        CHECK(async_steps > 5);
      } else {
        CHECK(async_steps == 0);
      }
    }
    REQUIRE(got[true].size() == a.size() + b.size());
    for (const auto& [id, w] : want) {
      CAPTURE(id);
      for (bool on : {false, true}) {
        const Outcome& have = got[on].at(id);
        CHECK(have.ids == w.ids);
        CHECK(have.text == w.text);
        CHECK(have.reason == w.reason);
      }
    }
    // Not vacuous: the stop id and the stop string did stop their requests early.
    CHECK(got[true].at(6).reason == FinishReason::kStop);
    CHECK(got[true].at(6).ids.size() < 40);
    CHECK(got[true].at(7).reason == FinishReason::kStop);
    CHECK(got[true].at(4).ids.size() == 1);
    for (uint64_t i = 0; i < 4; ++i) CHECK(got[true].at(i).ids == base.at(i).ids);
  }
}

TEST_CASE("async decode: cancels that land while a step is in flight free every page") {
  for (bool two_stages : {false, true}) {
    CAPTURE(two_stages);
    Rig rig = make_rig(two_stages, true);
    Engine* engine = rig.engine.get();
    engine->start();
    Collector col;
    for (uint64_t i = 0; i < 6; ++i) {
      REQUIRE(engine->submit(i, greedy(prompt_of(10 + int(i), int(i)), 300), &col).ok());
    }
    // Cancel half of them once each has some tokens out, the others run to their length.
    for (uint64_t i = 0; i < 6; i += 2) {
      for (int spin = 0; spin < 20000; ++spin) {
        {
          std::lock_guard lock(col.mu);
          if (col.results[i].ids.size() >= 3 + i) break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      engine->cancel(i);
    }
    REQUIRE(testing::wait_finished(*engine, col, 6, std::chrono::seconds(60)));
    engine->stop(/*drain_ms=*/0);
    for (uint64_t i = 0; i < 6; ++i) {
      CAPTURE(i);
      REQUIRE(col.results[i].finish);
      CHECK(col.results[i].finish->reason ==
            (i % 2 == 0 ? FinishReason::kAbort : FinishReason::kLength));
      if (i % 2 == 1) CHECK(col.results[i].ids.size() == 300);
    }
    check_pages_free(*engine);
    CHECK(metric(*engine, "tandem:async_decode_steps_total") > 0);
  }
}

TEST_CASE(
    "two stages: a sequence that stops while a step is in flight keeps its pages until then") {
  // Its last page may still be written by the step launched before its stop was read, and the
  // KV transport may ship a new prompt into a freed page from another stream: the decode stage
  // hands its pages back once that step is read, one step later, not at the finish.
  const GenerateInput a = greedy(prompt_of(9, 1), 40);
  GenerateInput b = greedy(prompt_of(12, 2), 40);
  Rig ref = make_rig(false, false);
  const std::vector<int32_t> b_ids = run(ref, {{1, b}}, {}, 0).at(1).ids;
  // A stop id first seen at output 15 or later: both decode asynchronously by then.
  size_t stop_at = 15;
  while (stop_at < b_ids.size() &&
         std::find(b_ids.begin(), b_ids.begin() + std::ptrdiff_t(stop_at), b_ids[stop_at]) !=
             b_ids.begin() + std::ptrdiff_t(stop_at)) {
    ++stop_at;
  }
  REQUIRE(stop_at < b_ids.size());
  b.sampling.stop_token_ids = {b_ids[stop_at]};
  Rig rig = make_rig(true, true);
  Collector col;
  REQUIRE(rig.engine->submit(0, a, &col).ok());
  REQUIRE(rig.engine->submit(1, b, &col).ok());
  auto decode_used = [&] {
    for (const PoolStatus& p : rig.engine->status().pools)
      if (p.name == "target") return p.used_pages;
    FAIL("no decode pool");
    return 0;
  };
  int32_t at_finish = -1, after = -1;
  for (int i = 0; i < 400 && after < 0; ++i) {
    rig.step();
    bool b_done = false;
    {
      std::lock_guard lock(col.mu);
      b_done = col.results[1].finish.has_value();
    }
    if (!b_done) continue;
    if (at_finish < 0) {
      at_finish = decode_used();
    } else {
      after = decode_used();
    }
  }
  REQUIRE(after >= 0);
  CHECK(col.results[1].finish->reason == FinishReason::kStop);
  CHECK(col.results[1].ids.size() == stop_at + 1);
  // B's 28 or more tokens fill 7 or more pages of 4; A grows by at most one page a step.
  CHECK(after <= at_finish - 6);
  CHECK(metric(*rig.engine, "tandem:async_decode_steps_total") > 0);
  rig.engine->run_until_idle();
  check_pages_free(*rig.engine);
}
