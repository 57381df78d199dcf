// `tandem status` memory breakdown on the CPU backend, where the device is this process: every
// part + "other" sums exactly to the process's size, nothing is negative, the KV pools are what
// the settings asked for, and each setting's contribution is listed.
#include <doctest/doctest.h>

#include "engine/memory_report.h"
#include "engine_fixture.h"
#include "model/model_dir.h"
#include "runner/runner.h"
#include "unit/engine/forwarding_runner.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

const MemoryPart* find(const DeviceMemory& d, const std::string& name) {
  for (const MemoryPart& p : d.parts) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

void check_sums(const DeviceMemory& d) {
  int64_t sum = d.free_bytes;
  for (const MemoryPart& p : d.parts) {
    CHECK_MESSAGE(p.bytes >= 0, p.name);
    sum += p.bytes;
  }
  CHECK(sum == d.total_bytes);
  REQUIRE(!d.parts.empty());
  CHECK(d.parts.back().name == "other");
}

}  // namespace

TEST_CASE("CPU: target and draft parts + other == the process size; --kv-pages shows") {
  EngineOptions o;
  o.draft_dir = tiny_qwen();
  o.kv_pages = 40;
  auto engine = make_engine(o);
  const EngineStatus s = engine->status();
  REQUIRE(s.memory.size() == 1);
  const DeviceMemory& d = s.memory[0];
  CHECK(d.device == "cpu");
  CHECK(d.free_bytes == 0);
  CHECK(d.host_available_bytes > 0);
  // Resident: at least the weights the runners copied or touched, at most the address space.
  CHECK(d.resident_bytes > 0);
  CHECK(d.resident_bytes <= d.total_bytes);
  check_sums(d);
  const MemoryPart* kv = find(d, "kv pool (target)");
  REQUIRE(kv);
  REQUIRE(s.pools.size() == 2);  // target and draft
  CHECK(kv->bytes == int64_t(s.pools[0].total_pages) * s.pools[0].page_bytes);
  CHECK(s.pools[0].total_pages == 40);
  CHECK(find(d, "weights (target)"));
  CHECK(find(d, "weights (draft)"));
  const MemoryPart* draft_kv = find(d, "kv pool (draft)");
  REQUIRE(draft_kv);
  CHECK(s.pools[1].name == "draft");
  CHECK(draft_kv->bytes == int64_t(s.pools[1].total_pages) * s.pools[1].page_bytes);
  CHECK(s.pools[1].used_pages == 0);
  int kv_settings = 0, context_settings = 0;
  for (const SettingEffect& e : d.settings) {
    if (e.setting == "--kv-pages") {
      ++kv_settings;
      CHECK(e.value == "40");
    }
    context_settings += e.setting == "max context";
  }
  CHECK(kv_settings == 2);
  CHECK(context_settings == 2);
}

TEST_CASE("CPU: two stages in one process are one device; default KV budget reported") {
  EngineOptions o;
  o.prefill_device = "cpu:0";
  o.decode_device = "cpu:1";
  o.kv_pages = 0;
  o.model_dir = tiny_qwen();
  o.threads = 1;
  auto e = Engine::create(o);
  REQUIRE_MESSAGE(e.ok(), e.error().to_string());
  const EngineStatus s = (*e)->status();
  REQUIRE(s.memory.size() == 1);
  check_sums(s.memory[0]);
  CHECK(find(s.memory[0], "kv pool (target, prefill)"));
  CHECK(find(s.memory[0], "kv pool (target, decode)"));
  bool budget = false;
  for (const SettingEffect& x : s.memory[0].settings) budget |= x.setting == "--kv-pages";
  CHECK(budget);
}

namespace {

// A CPU runner that reports itself as cuda:0 with a fixed plan, for the report's CUDA rows.
class PlannedRunner final : public ForwardingRunner {
 public:
  PlannedRunner(std::unique_ptr<ModelRunner> inner, MemoryPlan plan)
      : ForwardingRunner(std::move(inner)), plan_(plan) {}
  std::string device() const override { return "cuda:0"; }
  MemoryPlan memory_plan() const override { return plan_; }

 private:
  MemoryPlan plan_;
};

DeviceMemory cuda_report(int64_t graph_bytes, int32_t graph_count, int32_t graphs_held = -1) {
  auto model = load_model_dir(tiny_qwen());
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  RunnerOptions ro;
  ro.num_pages = 8;
  ro.threads = 1;
  auto inner = make_cpu_runner(*model, ro);
  REQUIRE_MESSAGE(inner.ok(), inner.error().to_string());
  MemoryPlan p;
  p.weights_bytes = 100 << 20;
  p.kv_bytes = 40 << 20;
  p.kv_page_bytes = 5 << 20;
  p.activation_bytes = 10 << 20;
  p.graph_bytes = graph_bytes;
  p.graph_count = graph_count;
  p.graphs_held = graphs_held < 0 ? graph_count : graphs_held;
  p.device_total_bytes = int64_t(1) << 30;
  p.device_free_bytes = 800 << 20;
  PlannedRunner runner(std::move(*inner), p);
  EngineOptions o;
  const std::vector<DeviceMemory> report = memory_report({{"target", "", &runner}}, o, 64);
  REQUIRE(report.size() == 1);
  return report[0];
}

}  // namespace

TEST_CASE("CUDA rows: captured graphs stay listed when the driver placed them in memory it held") {
  // Bytes measured: the row holds them and the count.
  DeviceMemory d = cuda_report(2 << 20, 3);
  CHECK(d.device == "cuda:0");
  check_sums(d);
  const MemoryPart* g = find(d, "cuda graphs (target)");
  REQUIRE(g);
  CHECK(g->bytes == 2 << 20);
  CHECK(g->detail.rfind("3 captured decode graphs", 0) == 0);
  // Captured, yet the driver's free bytes did not fall: a 0-byte row, not a missing one.
  d = cuda_report(0, 7);
  check_sums(d);
  g = find(d, "cuda graphs (target)");
  REQUIRE(g);
  CHECK(g->bytes == 0);
  CHECK(g->detail.rfind("7 captured decode graphs (", 0) == 0);
  // Some released past max_graphs: the row says how many.
  d = cuda_report(1 << 20, 9, 4);
  g = find(d, "cuda graphs (target)");
  REQUIRE(g);
  CHECK(g->detail.rfind("9 captured decode graphs, 5 since released (", 0) == 0);
  // None captured: no row.
  d = cuda_report(0, 0);
  check_sums(d);
  CHECK(find(d, "cuda graphs (target)") == nullptr);
  CHECK(find(d, "other")->bytes == (1 << 30) - (800 << 20) - (150 << 20));
}
