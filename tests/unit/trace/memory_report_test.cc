// `tandem status` memory breakdown on the CPU backend, where the device is this process: every
// part + "other" sums exactly to the process's size, nothing is negative, the KV pools are what
// the settings asked for, and each setting's contribution is listed.
#include <doctest/doctest.h>

#include "engine_fixture.h"

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
  CHECK(find(d, "kv pool (draft)"));
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
