// Random schedules on the threaded engines (one stage and two, CPU): random page sizes, chunks,
// token budgets, pools from the smallest that admits the largest request upwards, prefixes that
// share pages, drafts, and cancels at random moments. Whatever the schedule, every request must
// end (a stall, 10 s without a token, is a failure here, not a hung test), an uncancelled one
// with the tokens it gets alone, and every page must come back. It catches the two-stage stall
// that the daemon's serve test hit once in CI: a handshake that reserved no slot for the first
// decode step (disaggregated_engine.cc, reserve_handoff_pages).
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include "engine/engine.h"
#include "engine_test_util.h"

using namespace tandem;

namespace {

const std::string& tiny_model() {
  static const std::string dir =
      testing::make_tiny_model("tandem-schedule-fuzz-tiny-qwen", "tiny-qwen", 13);
  return dir;
}

// A draft that disagrees often (random weights, other shapes): speculation with rejections.
const std::string& other_draft() {
  static const std::string dir =
      testing::make_tiny_model("tandem-schedule-fuzz-tiny-qwen-draft", "tiny-qwen-draft", 17);
  return dir;
}

struct Request {
  int len, salt, max_tokens;
  auto key() const { return std::tie(len, salt, max_tokens); }
};

// Each request alone on a roomy pool (one engine, one request at a time): the tokens any
// schedule must reproduce.
const std::vector<int32_t>& reference(const Request& r) {
  static std::map<std::tuple<int, int, int>, std::vector<int32_t>> memo;
  static std::unique_ptr<Engine> engine;
  static uint64_t next_id = 0;
  auto it = memo.find(r.key());
  if (it != memo.end()) return it->second;
  if (!engine) {
    EngineOptions o;
    o.model_dir = tiny_model();
    o.kv_pages = 256;
    o.prefix_caching = false;  // each reference computed from scratch
    engine = testing::make_engine(o);
  }
  const uint64_t id = next_id++;
  testing::Collector c;
  REQUIRE(engine->submit(id, testing::greedy(testing::prompt_of(r.len, r.salt), r.max_tokens), &c)
              .ok());
  engine->run_until_idle();
  REQUIRE(c.results[id].ids.size() == size_t(r.max_tokens));
  return memo[r.key()] = c.results[id].ids;
}

}  // namespace

TEST_CASE("random schedules and cancels: every request ends, with its own tokens, no page kept") {
  // CI runs schedules 0-31; a soak run sets TANDEM_FUZZ_FIRST and TANDEM_FUZZ_SCHEDULES.
  auto env = [](const char* name, uint32_t fallback) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? uint32_t(std::strtoul(v, nullptr, 10)) : fallback;
  };
  const uint32_t first_seed = env("TANDEM_FUZZ_FIRST", 0);
  const uint32_t count = env("TANDEM_FUZZ_SCHEDULES", 32);
  for (uint32_t seed = first_seed; seed < first_seed + count; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };

    EngineOptions o;
    o.model_dir = tiny_model();
    const bool two = seed % 2 == 1;
    o.prefill_device = two ? "cpu:0" : "cpu";
    o.decode_device = two ? "cpu:1" : "cpu";
    o.page_size = std::array{1, 4, 16}[size_t(pick(0, 2))];
    o.prefill_chunk = std::array{4, 16, 64}[size_t(pick(0, 2))];
    o.max_num_batched_tokens = pick(0, 1) ? 2048 : 32;
    o.prefix_caching = pick(0, 1) == 1;
    // A third of the schedules speculate: greedy tokens must not change, and the draft's pools
    // (on both stages with two) must come back too. A self-draft accepts every proposal.
    const int draft = pick(0, 5);
    if (draft < 2) {
      o.draft_dir = draft == 0 ? tiny_model() : other_draft();
      o.draft_max = pick(1, 4);
      o.draft_min = 1;
    }

    // Half the schedules fill the pool exactly: page-multiple prompts whose first ones' pages
    // add up to the whole pool, the edge where a stage can wait on pages nobody will free.
    const bool exact = pick(0, 1) == 1;
    std::vector<Request> reqs(size_t(pick(3, 6)));
    int64_t largest = 0;
    for (Request& r : reqs) {
      r.len = exact || pick(0, 2) == 0 ? o.page_size * pick(1, 40 / o.page_size) : pick(1, 40);
      r.salt = pick(0, 2);  // equal salts share a prefix
      r.max_tokens = pick(1, 8);
      largest = std::max<int64_t>(largest, r.len + r.max_tokens);
    }
    const int64_t min_pages = (largest + o.page_size - 1) / o.page_size;
    if (exact) {
      int64_t first = 0;
      for (size_t i = 0; i < size_t(pick(2, 3)); ++i) first += reqs[i].len / o.page_size;
      o.kv_pages = int32_t(std::max(min_pages, first));
    } else {  // from the smallest pool that admits the largest request to a few requests' worth
      o.kv_pages = int32_t(min_pages + pick(0, int(2 * min_pages)));
    }
    CAPTURE(exact);
    CAPTURE(o.draft_dir);
    CAPTURE(two);
    CAPTURE(o.page_size);
    CAPTURE(o.prefill_chunk);
    CAPTURE(o.max_num_batched_tokens);
    CAPTURE(o.prefix_caching);
    CAPTURE(o.kv_pages);

    std::set<uint64_t> cancelled;
    for (uint64_t i = 0; i < reqs.size(); ++i) {
      if (pick(0, 3) == 0) cancelled.insert(i);
    }
    for (const Request& r : reqs) reference(r);  // before the clock starts

    auto engine = testing::make_engine(o);
    engine->start();
    testing::Collector col;
    for (uint64_t i = 0; i < reqs.size(); ++i) {
      const Request& r = reqs[i];
      REQUIRE(
          engine->submit(i, testing::greedy(testing::prompt_of(r.len, r.salt), r.max_tokens), &col)
              .ok());
    }
    for (uint64_t id : cancelled) {
      std::this_thread::sleep_for(std::chrono::microseconds(pick(0, 3000)));
      engine->cancel(id);
    }
    const bool ended = testing::wait_finished(*engine, col, int64_t(reqs.size()));
    const EngineStatus stalled = engine->status();
    CHECK_MESSAGE(ended, "stalled: running " << stalled.running << ", waiting " << stalled.waiting);
    engine->stop(/*drain_ms=*/0);  // aborts whatever stalled, so the checks below still run

    for (uint64_t i = 0; i < reqs.size(); ++i) {
      CAPTURE(i);
      REQUIRE(col.results[i].finish);
      const std::vector<int32_t>& want = reference(reqs[i]);
      const std::vector<int32_t>& got = col.results[i].ids;
      if (cancelled.count(i)) {  // cut anywhere, or done before the cancel
        const FinishReason reason = col.results[i].finish->reason;
        CHECK((reason == FinishReason::kAbort || reason == FinishReason::kLength));
        CHECK(got.size() <= want.size());
        CHECK(std::equal(got.begin(), got.end(), want.begin()));
      } else {
        CHECK(col.results[i].finish->reason == FinishReason::kLength);
        CHECK(got == want);
      }
    }
    testing::check_pages_free(*engine);
  }
}
