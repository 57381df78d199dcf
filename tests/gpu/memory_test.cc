// `tandem status` memory breakdown on a GPU, against the driver: the parts the CUDA runners
// measured + free add up to cudaMemGetInfo's total, free matches what the driver reports now,
// and nothing large is left unexplained ("other" is the context and other processes, i.e. what
// was used before the runners started).
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <optional>

#include "engine/engine.h"
#include "model/mkmodel.h"
#include "test_paths.h"

using namespace tandem;

namespace {

std::string model_dir(const char* preset) {
  std::string d =
      std::filesystem::temp_directory_path() / (std::string("tandem-gpu-mem-") + preset);
  if (!std::filesystem::exists(d + "/config.json")) {
    MkModelOptions o;
    o.preset = preset;
    o.out_dir = d;
    o.seed = 1;
    o.tokenizer_dir = testing::qwen_tokenizer_dir();
    Status st = make_model(o);
    REQUIRE_MESSAGE(st.ok(), st.error().to_string());
  }
  return d;
}

struct Done final : EngineObserver {
  void on_tokens(TokenEvent) override {}
  void on_finished(FinishEvent) override {}
};

// One request of an 8-token prompt, max_tokens long, run to the end.
void generate(Engine& engine, float temperature, std::optional<uint64_t> seed, int32_t max_tokens) {
  Done done;
  GenerateInput in;
  in.prompt_ids = {1, 2, 3, 4, 5, 6, 7, 8};
  in.sampling.temperature = temperature;
  in.sampling.seed = seed;
  in.sampling.max_tokens = max_tokens;
  in.sampling.ignore_eos = true;
  REQUIRE(engine.submit(1, in, &done).ok());
  engine.run_until_idle();
}

int64_t part(const DeviceMemory& d, const std::string& prefix) {
  int64_t sum = 0;
  for (const MemoryPart& p : d.parts) {
    if (p.name.rfind(prefix, 0) == 0) sum += p.bytes;
  }
  return sum;
}

void check_against_driver(const Engine& engine, bool expect_graphs) {
  const EngineStatus s = engine.status();
  REQUIRE(s.memory.size() == 1);
  const DeviceMemory& d = s.memory[0];
  CHECK(d.device == "cuda:0");
  size_t free_b = 0, total_b = 0;
  REQUIRE(cudaMemGetInfo(&free_b, &total_b) == cudaSuccess);
  const double total = double(total_b);
  int64_t sum = d.free_bytes;
  std::string listing;
  for (const MemoryPart& p : d.parts) {
    sum += p.bytes;
    listing += p.name + " " + std::to_string(p.bytes) + "\n";
    CHECK_MESSAGE(p.bytes >= 0, p.name);
  }
  INFO(listing);
  CHECK(d.total_bytes == int64_t(total_b));
  CHECK(sum == d.total_bytes);  // the rule, exactly
  // Free as reported vs the driver now: within 2% of the total.
  CHECK(std::abs(double(d.free_bytes) - double(free_b)) <= 0.02 * total);
  // Everything measured: weights, KV, activations are there and "other" stays small unless
  // another process holds the GPU (then it is reported, not hidden).
  CHECK(part(d, "weights") > 0);
  CHECK(part(d, "kv pool") > 0);
  CHECK(part(d, "activations") > 0);
  // Captured graphs keep their row; its bytes may be 0 where the driver placed them in a chunk it
  // already held (with the runner's two metadata copies, on an H100).
  if (expect_graphs) {
    bool listed = false;
    for (const MemoryPart& p : d.parts) listed |= p.name.rfind("cuda graphs", 0) == 0;
    CHECK(listed);
  }
  const int64_t other = part(d, "other");
  CHECK(other >= 0);
  MESSAGE("other (context, other processes): ", double(other) / (1 << 20), " MiB of ",
          total / (1 << 20), " MiB");
  // The target's KV as measured vs pages x nominal page bytes (bf16 K and V, all layers):
  // within 2% plus the allocation granularity.
  const ModelConfig& c = engine.model_config();
  const PoolStatus& target = s.pools.at(0);
  const double nominal = 2.0 * double(c.num_layers) * double(target.page_size) *
                         double(c.num_kv_heads) * double(c.head_dim) * 2.0 * target.total_pages;
  const double measured = double(part(d, "kv pool (target"));
  CHECK(std::abs(measured - nominal) <= 0.02 * nominal + double(8 << 20));
}

}  // namespace

TEST_CASE("memory breakdown adds up to cudaMemGetInfo: KV sized from utilization") {
  EngineOptions o;
  o.model_dir = model_dir("qwen2.5-0.5b");
  o.prefill_device = o.decode_device = "cuda:0";
  o.gpu_memory_utilization = 0.5;
  o.max_model_len = 4096;
  auto engine = Engine::create(o);
  REQUIRE_MESSAGE(engine.ok(), engine.error().to_string());
  check_against_driver(**engine, false);
  // Decode steps capture graphs; their bytes join the breakdown and the sum still holds.
  generate(**engine, 0.0f, std::nullopt, 6);
  check_against_driver(**engine, true);
}

TEST_CASE("memory breakdown with --kv-pages and a draft on the same GPU") {
  EngineOptions o;
  o.model_dir = model_dir("qwen2.5-0.5b");
  o.draft_dir = model_dir("tiny-qwen");
  o.prefill_device = o.decode_device = "cuda:0";
  o.kv_pages = 512;
  auto engine = Engine::create(o);
  REQUIRE_MESSAGE(engine.ok(), engine.error().to_string());
  check_against_driver(**engine, false);
  const DeviceMemory d = (*engine)->status().memory.at(0);
  CHECK(part(d, "weights (draft") > 0);
  CHECK(part(d, "kv pool (draft") > 0);
  bool kv_setting = false;
  for (const SettingEffect& e : d.settings) kv_setting |= e.setting == "--kv-pages";
  CHECK(kv_setting);
  // Sampled speculation's probability rows are reserved up front, k + 1 a sequence of a full
  // speculative batch (at least one a sequence) on the target and k on the draft.
  const int64_t spec_seqs = std::min(o.max_num_seqs, o.spec_max_batch);
  const int64_t target_rows = std::max<int64_t>(o.max_num_seqs, spec_seqs * (o.draft_max + 1));
  CHECK(part(d, "probability rows (target") ==
        target_rows * (*engine)->model_config().vocab_size * int64_t(sizeof(float)));
  CHECK(part(d, "probability rows (draft") > 0);
  // A sampled request speculates within them: afterwards the breakdown still matches the
  // driver, so nothing was allocated outside the plan. (Its steps are speculative: no decode
  // graph is captured, so none is expected.)
  generate(**engine, 0.8f, 7, 24);
  check_against_driver(**engine, false);
}
