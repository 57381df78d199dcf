// make_runner's device dispatch, option validation, default KV sizing, the KV view's layout,
// and sample() honouring valid_vocab.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "runner_driver.h"
#include "sampling/sampler.h"
#include "tandem_build_config.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("make_runner: devices") {
  CHECK(is_device_name("cuda:12", "cuda"));
  CHECK_FALSE(is_device_name("cuda:1x", "cuda"));
  CHECK_FALSE(is_device_name("cpu0", "cpu"));
  const ModelDir model = load_golden_model("llama_tied_fp32");
  RunnerOptions opts;
  opts.num_pages = 4;
  auto cpu = make_runner(model, opts);
  REQUIRE(cpu.ok());
  CHECK((*cpu)->device() == "cpu");
  opts.device = "cpu:1";  // one of two CPU stages
  auto cpu1 = make_runner(model, opts);
  REQUIRE(cpu1.ok());
  CHECK((*cpu1)->device() == "cpu:1");
  opts.device = "cuda:0";
  auto not_cpu = make_cpu_runner(model, opts);
  REQUIRE_FALSE(not_cpu.ok());
  CHECK(not_cpu.error().code == ErrorCode::kInvalidArgument);

  for (const char* bad :
       {"gpu", "cuda", "cuda:", "cuda:x", "cuda:-1", "CPU", "cpu:", "cpu:a", ""}) {
    CAPTURE(bad);
    opts.device = bad;
    auto r = make_runner(model, opts);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::kInvalidArgument);
    CHECK(has(r.error().message, "device '"));
    CHECK(has(r.error().message, bad));
  }
#if !TANDEM_HAVE_CUDA
  opts.device = "cuda:1";
  auto r = make_runner(model, opts);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ErrorCode::kUnsupported);
  CHECK(has(r.error().message, "this build of tandem has no CUDA support"));
#endif
}

TEST_CASE("make_cpu_runner: option validation") {
  const ModelDir model = load_golden_model("llama_tied_fp32");
  RunnerOptions opts;
  opts.page_size = 0;
  auto r = make_cpu_runner(model, opts);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ErrorCode::kInvalidArgument);
  CHECK(has(r.error().message, "page_size"));
  opts.page_size = 16;
  opts.num_pages = -1;
  r = make_cpu_runner(model, opts);
  REQUIRE_FALSE(r.ok());
  CHECK(has(r.error().message, "num_pages"));
  opts.num_pages = 0;
  opts.threads = -2;
  r = make_cpu_runner(model, opts);
  REQUIRE_FALSE(r.ok());
  CHECK(has(r.error().message, "threads"));
}

TEST_CASE("default KV pool fills about 2 GiB; view layout") {
  const ModelDir model = load_golden_model("qwen2_untied_fp16_gqa4");
  const ModelConfig& c = model.config;
  RunnerOptions opts;  // num_pages = 0
  auto r = make_cpu_runner(model, opts);
  REQUIRE(r.ok());
  ModelRunner& runner = **r;
  const int64_t page_bytes = 16 * c.num_kv_heads * c.head_dim * 4;
  const int64_t per_page_all_layers = page_bytes * 2 * c.num_layers;
  CHECK(runner.num_pages() == (int64_t(2) << 30) / per_page_all_layers);
  const KvPoolView view = runner.kv_pool_view();
  CHECK(view.num_layers() == c.num_layers);
  CHECK(int64_t(view.page_bytes) == page_bytes);
  CHECK(view.num_pages == runner.num_pages());
  CHECK(view.device == -1);
  const MemoryPlan plan = runner.memory_plan();
  CHECK(plan.kv_bytes == per_page_all_layers * runner.num_pages());
  CHECK(plan.kv_bytes <= (int64_t(2) << 30));
  CHECK(plan.weights_bytes > 0);
}

TEST_CASE("KV of a token lands at [page, slot, kv_head, dim] of its layer's pages") {
  const ModelDir model = load_golden_model("llama_tied_fp32");
  const ModelConfig& c = model.config;
  RunnerDriver d(model, 4, 8);
  d.poison_all_pages();
  TestSeq s;
  s.tokens = {3, 5, 7, 11, 13, 17};  // 6 tokens over pages of 4: the second page half full
  d.step({{&s, 6}});
  const KvPoolView view = d.runner().kv_pool_view();
  const int64_t slot_floats = c.num_kv_heads * c.head_dim;
  for (int l = 0; l < view.num_layers(); ++l) {
    for (int t = 0; t < 8; ++t) {
      const int32_t page = s.table.pages[size_t(t / 4)];
      const float* k = reinterpret_cast<const float*>(view.k[size_t(l)] + page * view.page_bytes) +
                       (t % 4) * slot_floats;
      const float* v = reinterpret_cast<const float*>(view.v[size_t(l)] + page * view.page_bytes) +
                       (t % 4) * slot_floats;
      for (int64_t i = 0; i < slot_floats; ++i) {
        CAPTURE(l);
        CAPTURE(t);
        // Written slots hold numbers; the rest of the last page keeps its poison.
        CHECK(std::isnan(k[i]) == (t >= 6));
        CHECK(std::isnan(v[i]) == (t >= 6));
      }
    }
  }
}

TEST_CASE("sample honours valid_vocab") {
  const ModelDir model = load_golden_model("llama_tied_fp32");
  RunnerDriver d(model, 16, 8);
  TestSeq s;
  s.tokens = {1, 2, 3, 4, 5};
  const auto logits = d.step({{&s, 5}});
  const int32_t best = argmax_lowest(logits);
  CHECK(d.sample_greedy(0) == best);
  REQUIRE(best > 0);
  d.runner().set_valid_vocab(best);  // the argmax is now a padded row, never sampled
  const int32_t restricted = d.sample_greedy(0);
  CHECK(restricted < best);
  CHECK(restricted == argmax_lowest(std::span<const float>(logits.data(), size_t(best))));
}
