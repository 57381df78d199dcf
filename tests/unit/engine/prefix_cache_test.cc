// Prefix caching end to end on the CPU: with a shared system prompt, outputs must be those of a
// run without the cache (one stage and two), a request whose prefix is cached must compute and
// ship only what is new (counted at the runner and at the transport), and preemption, eviction
// and cancellation must leave no page referenced.
#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <sstream>

#include "engine/disaggregated_engine.h"
#include "engine/engine.h"
#include "engine/local_engine.h"
#include "engine_test_util.h"
#include "model/mkmodel.h"
#include "model/model_dir.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"
#include "transport/local/local_transport.h"
#include "transport/make_transport.h"

using namespace tandem;

namespace {

using testing::metric;

const std::string& tiny_model() {
  static const std::string dir =
      testing::make_tiny_model("tandem-prefix-test-tiny-qwen", "tiny-qwen", 5);
  return dir;
}

// Counts the tokens every forward computes: on a prefill stage, the prompt tokens computed.
class CountingRunner final : public testing::ForwardingRunner {
 public:
  CountingRunner(std::unique_ptr<ModelRunner> inner, std::atomic<int64_t>& tokens)
      : ForwardingRunner(std::move(inner)), tokens_(tokens) {}
  void forward(const ForwardBatch& batch) override {
    tokens_ += int64_t(batch.tokens.size());
    ForwardingRunner::forward(batch);
  }

 private:
  std::atomic<int64_t>& tokens_;
};

struct Rig {
  std::unique_ptr<Engine> engine;
  std::atomic<int64_t> computed{0};  // tokens the prefill stage's runner computed
  std::atomic<int64_t> shipped{0};   // pages the transport copied (two stages)
};

// The engine Engine::create would build, with the prefill runner counted and, for two stages, a
// local transport whose hook counts shipped pages.
std::unique_ptr<Rig> make_rig(EngineOptions o) {
  auto rig = std::make_unique<Rig>();
  o.model_dir = tiny_model();
  o.threads = 1;
  // The CPU runner's default pool is 2 GiB, mapped and untouched until used; a small one keeps
  // the test's many engines small either way.
  if (o.kv_pages == 0) o.kv_pages = 512;
  auto model = load_model_dir(o.model_dir);
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  auto tokenizer = Tokenizer::load(o.model_dir);
  REQUIRE(tokenizer.ok());
  RunnerOptions ro;
  ro.page_size = o.page_size;
  ro.num_pages = o.kv_pages;
  ro.max_batch_tokens = o.max_num_batched_tokens;
  ro.max_seqs = o.max_num_seqs;
  ro.threads = 1;
  ro.device = o.decode_device;
  auto decode = make_runner(*model, ro);
  REQUIRE(decode.ok());
  if (o.prefill_device == o.decode_device) {
    rig->engine = std::make_unique<LocalEngine>(
        o, std::move(model).value(), std::move(tokenizer).value(), std::nullopt,
        std::make_unique<CountingRunner>(std::move(decode).value(), rig->computed), std::nullopt);
    return rig;
  }
  ro.device = o.prefill_device;
  auto prefill = make_runner(*model, ro);
  REQUIRE(prefill.ok());
  auto transport = make_transport("local", (*prefill)->kv_pool_view(), (*decode)->kv_pool_view());
  REQUIRE(transport.ok());
  auto* local = dynamic_cast<LocalTransport*>(transport->get());
  REQUIRE(local != nullptr);
  std::atomic<int64_t>* shipped = &rig->shipped;
  local->set_fault_hook([shipped](const ShipOrder& order) -> std::optional<Error> {
    *shipped += int64_t(order.pages.size());
    return std::nullopt;
  });
  rig->engine = std::make_unique<DisaggregatedEngine>(
      o, std::move(model).value(), std::move(tokenizer).value(), std::nullopt,
      std::make_unique<CountingRunner>(std::move(prefill).value(), rig->computed),
      std::move(decode).value(), std::move(transport).value());
  return rig;
}

struct Collector final : EngineObserver {
  void on_tokens(TokenEvent ev) override {
    std::lock_guard lock(mu);
    auto& r = results[ev.request_id];
    r.ids.insert(r.ids.end(), ev.ids.begin(), ev.ids.end());
  }
  void on_finished(FinishEvent ev) override {
    std::lock_guard lock(mu);
    results[ev.request_id].finish = ev;
  }
  struct Result {
    std::vector<int32_t> ids;
    std::optional<FinishEvent> finish;
  };
  std::mutex mu;
  std::map<uint64_t, Result> results;
};

std::vector<int32_t> tokens_of(int len, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < len; ++i) p.push_back(1000 + (i * 37 + salt * 101) % 5000);
  return p;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

GenerateInput greedy(std::vector<int32_t> prompt, int max_tokens) {
  GenerateInput in;
  in.prompt_ids = std::move(prompt);
  in.sampling.temperature = 0.0f;
  in.sampling.max_tokens = max_tokens;
  in.sampling.ignore_eos = true;
  return in;
}

void check_no_page_referenced(const Engine& e) {
  for (const PoolStatus& p : e.status().pools) {
    CHECK_MESSAGE(p.used_pages == 0, p.name);
    CHECK_MESSAGE(p.cached_pages <= p.total_pages, p.name);
  }
}

int32_t cached_pages(const Engine& e) {
  int32_t n = 0;
  for (const PoolStatus& p : e.status().pools) n += p.cached_pages;
  return n;
}

struct Stages {
  const char* prefill;
  const char* decode;
};
const Stages kStages[] = {{"cpu", "cpu"}, {"cpu:0", "cpu:1"}};

// Prompts that share a 37-token system prompt (9 pages of 4 and one token), with suffixes that
// end inside, at and past page boundaries, one exact repeat, the bare system prompt, a prompt
// that is a page-aligned extension (its last page is cached but must be computed again for
// logits) and one unrelated prompt.
std::vector<std::vector<int32_t>> shared_prompts() {
  const std::vector<int32_t> sys = tokens_of(37, 99);
  std::vector<std::vector<int32_t>> out;
  for (int len : {5, 1, 3, 11, 20, 5}) out.push_back(concat(sys, tokens_of(len, len)));
  out.push_back(sys);
  out.push_back(concat(sys, tokens_of(3, 7)));  // 40 tokens: page aligned
  out.push_back(tokens_of(23, 5));
  return out;
}

}  // namespace

TEST_CASE("prefix caching on or off: the same greedy tokens for prompts sharing a system prompt") {
  const auto prompts = shared_prompts();
  for (const Stages& st : kStages) {
    CAPTURE(st.prefill);
    std::map<bool, std::map<uint64_t, std::vector<int32_t>>> got;
    for (bool caching : {false, true}) {
      CAPTURE(caching);
      EngineOptions o;
      o.prefill_device = st.prefill;
      o.decode_device = st.decode;
      o.page_size = 4;
      o.prefill_chunk = 8;  // hits start chunks mid-prompt
      o.prefix_caching = caching;
      auto rig = make_rig(o);
      Engine& e = *rig->engine;
      Collector col;
      // The first request alone (it fills the cache), then all at once, then three again (their
      // prompts, and some of their outputs, cached by then).
      REQUIRE(e.submit(0, greedy(prompts[0], 4), &col).ok());
      e.run_until_idle();
      for (size_t i = 1; i < prompts.size(); ++i) {
        REQUIRE(e.submit(i, greedy(prompts[i], 4), &col).ok());
      }
      e.run_until_idle();
      for (size_t i : std::initializer_list<size_t>{0, 6, 7}) {
        REQUIRE(e.submit(100 + i, greedy(prompts[i], 4), &col).ok());
      }
      e.run_until_idle();
      for (auto& [id, r] : col.results) {
        CAPTURE(id);
        REQUIRE(r.finish);
        CHECK(r.finish->reason == FinishReason::kLength);
        CHECK(r.ids.size() == 4);
        got[caching][id] = r.ids;
      }
      check_no_page_referenced(e);
      const uint64_t hits = metric(e, "tandem:prefix_cache_hits_total");
      const uint64_t queries = metric(e, "tandem:prefix_cache_queries_total");
      if (caching) {
        CHECK(hits > 0);
        CHECK(hits < queries);
        CHECK(cached_pages(e) > 0);
      } else {
        CHECK(hits == 0);
        CHECK(queries == 0);
        CHECK(cached_pages(e) == 0);
      }
    }
    CHECK(got[true] == got[false]);
    CHECK(got[true][0] == got[true][5]);    // the exact repeat
    CHECK(got[true][0] == got[true][100]);  // served from the cache the second time
  }
}

TEST_CASE("a cached prefix is neither computed nor shipped again") {
  const std::vector<int32_t> sys = tokens_of(48, 42);           // 6 pages of 8
  const std::vector<int32_t> a = concat(sys, tokens_of(5, 1));  // 53 tokens, 7 pages
  const std::vector<int32_t> b = concat(sys, tokens_of(7, 2));  // 55 tokens, 7 pages
  for (const Stages& st : kStages) {
    CAPTURE(st.prefill);
    const bool two = std::string(st.prefill) != st.decode;
    std::map<bool, std::vector<int32_t>> b_ids;
    for (bool caching : {false, true}) {
      CAPTURE(caching);
      EngineOptions o;
      o.prefill_device = st.prefill;
      o.decode_device = st.decode;
      o.page_size = 8;
      o.prefill_chunk = 512;
      o.prefix_caching = caching;
      auto rig = make_rig(o);
      Collector col;
      // A runs one decode step (two stages: that registers its pages on the decode side too).
      REQUIRE(rig->engine->submit(1, greedy(a, 2), &col).ok());
      rig->engine->run_until_idle();
      CHECK(rig->computed == (two ? 53 : 54));
      if (two) CHECK(rig->shipped == 7);
      rig->computed = 0;
      rig->shipped = 0;
      REQUIRE(rig->engine->submit(2, greedy(b, 1), &col).ok());
      rig->engine->run_until_idle();
      // B: 48 tokens from the cache, 7 computed; pages 0..5 are on the decode stage already.
      CHECK(rig->computed == (caching ? 7 : 55));
      if (two) CHECK(rig->shipped == (caching ? 1 : 7));
      b_ids[caching] = col.results[2].ids;
      check_no_page_referenced(*rig->engine);
    }
    CHECK(b_ids[true] == b_ids[false]);
  }
}

TEST_CASE("prefix pages only the prefill stage caches are shipped from its cache") {
  // C finishes on the prefill stage (one token): its pages never reach the decode stage's cache.
  // D shares C's first 6 pages on the prefill stage and must ship all 7 of its pages.
  const std::vector<int32_t> sys = tokens_of(48, 17);
  const std::vector<int32_t> c = concat(sys, tokens_of(5, 3));
  const std::vector<int32_t> d = concat(sys, tokens_of(7, 4));
  std::map<bool, std::vector<int32_t>> d_ids;
  for (bool caching : {false, true}) {
    CAPTURE(caching);
    EngineOptions o;
    o.prefill_device = "cpu:0";
    o.decode_device = "cpu:1";
    o.page_size = 8;
    o.prefix_caching = caching;
    auto rig = make_rig(o);
    Collector col;
    REQUIRE(rig->engine->submit(1, greedy(c, 1), &col).ok());
    rig->engine->run_until_idle();
    rig->computed = 0;
    rig->shipped = 0;
    REQUIRE(rig->engine->submit(2, greedy(d, 5), &col).ok());
    rig->engine->run_until_idle();
    CHECK(rig->computed == (caching ? 7 : 55));
    CHECK(rig->shipped == 7);
    d_ids[caching] = col.results[2].ids;
    check_no_page_referenced(*rig->engine);
  }
  CHECK(d_ids[true].size() == 5);
  CHECK(d_ids[true] == d_ids[false]);
}

TEST_CASE("a tiny pool preempts and evicts; outputs stay the same and no page stays referenced") {
  // 6 prompts of a shared 30-token prompt plus 5..10 tokens, 8 outputs each: about 12 pages of 4
  // apiece against 24 pages, so sequences are preempted; the distinct full pages they register
  // (7 shared + 3..5 each) outnumber the pool, so cached pages are evicted.
  const std::vector<int32_t> sys = tokens_of(30, 7);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(concat(sys, tokens_of(5 + i, 50 + i)));
  std::map<uint64_t, std::vector<int32_t>> want;
  {
    EngineOptions o;
    o.prefix_caching = false;
    auto rig = make_rig(o);
    for (size_t i = 0; i < prompts.size(); ++i) {
      Collector col;
      REQUIRE(rig->engine->submit(i, greedy(prompts[i], 8), &col).ok());
      rig->engine->run_until_idle();
      want[i] = col.results[i].ids;
    }
  }
  for (const Stages& st : kStages) {
    CAPTURE(st.prefill);
    EngineOptions o;
    o.prefill_device = st.prefill;
    o.decode_device = st.decode;
    o.page_size = 4;
    o.kv_pages = 24;
    o.prefill_chunk = 8;
    auto rig = make_rig(o);
    Collector col;
    for (size_t i = 0; i < prompts.size(); ++i) {
      REQUIRE(rig->engine->submit(i, greedy(prompts[i], 8), &col).ok());
    }
    rig->engine->run_until_idle();
    for (size_t i = 0; i < prompts.size(); ++i) {
      CAPTURE(i);
      REQUIRE(col.results[i].finish);
      CHECK(col.results[i].ids == want.at(i));
    }
    CHECK(metric(*rig->engine, "tandem:num_preemptions_total") > 0);
    CHECK(metric(*rig->engine, "tandem:prefix_cache_hits_total") > 0);
    check_no_page_referenced(*rig->engine);
  }
}

TEST_CASE("cancelling requests that share pages leaves no page referenced") {
  const std::vector<int32_t> sys = tokens_of(40, 3);
  for (const Stages& st : kStages) {
    CAPTURE(st.prefill);
    EngineOptions o;
    o.prefill_device = st.prefill;
    o.decode_device = st.decode;
    o.page_size = 4;
    o.prefill_chunk = 8;
    auto rig = make_rig(o);
    rig->engine->start();
    Collector col;
    for (uint64_t i = 0; i < 10; ++i) {
      REQUIRE(rig->engine->submit(i, greedy(concat(sys, tokens_of(3 + int(i), int(i))), 40), &col)
                  .ok());
      if (i % 3 == 0) rig->engine->cancel(i);  // at once: queued, or prefilling already
    }
    for (uint64_t i = 1; i < 10; i += 3) rig->engine->cancel(i);  // later: anywhere
    rig->engine->stop(/*drain_ms=*/60000);
    for (uint64_t i = 0; i < 10; ++i) {
      CAPTURE(i);
      REQUIRE(col.results[i].finish);
      CHECK(col.results[i].finish->reason ==
            (i % 3 == 2 ? FinishReason::kLength : FinishReason::kAbort));
    }
    check_no_page_referenced(*rig->engine);
  }
}

TEST_CASE("speculative decoding over cached prefixes: the draft's own pool, same tokens") {
  // The draft's pool does not use the cache (it catches up on every token); the target's does.
  const std::vector<int32_t> sys = tokens_of(33, 8);
  std::map<bool, std::map<uint64_t, std::vector<int32_t>>> got;
  for (bool caching : {false, true}) {
    EngineOptions o;
    o.model_dir = tiny_model();
    o.draft_dir = tiny_model();
    o.threads = 1;
    o.page_size = 4;
    o.draft_max = 3;
    o.kv_pages = 512;  // see make_rig
    o.prefix_caching = caching;
    auto e = Engine::create(o);
    REQUIRE(e.ok());
    Collector col;
    for (uint64_t i = 0; i < 3; ++i) {
      REQUIRE(
          (*e)->submit(i, greedy(concat(sys, tokens_of(2 + 3 * int(i), int(i))), 6), &col).ok());
      (*e)->run_until_idle();  // one at a time: each after the previous one cached the prefix
    }
    for (auto& [id, r] : col.results) got[caching][id] = r.ids;
    CHECK((metric(**e, "tandem:prefix_cache_hits_total") > 0) == caching);
    check_no_page_referenced(**e);
  }
  CHECK(got[true] == got[false]);
}
