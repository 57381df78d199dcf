// The CUDA runner on the golden models (tests/golden/models, transformers outputs that the CPU
// runner matches within 1e-4): first-step logits within 1e-2 relative (bf16 activations against
// fp32), and greedy continuations token for token wherever the reference's greedy margin is wide
// enough for bf16 rounding not to decide it; where it is not, the expected token is fed back and
// must be within rounding of the device's best. Every KV page is poisoned (NaN) beforehand;
// prompts are fed in chunks of 1, 7 and 64 tokens with page sizes 1 and 16.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/cuda_check.cuh"
#include "model/model_dir.h"
#include "runner/runner.h"
#include "runner_seq.h"
#include "test_paths.h"
#include "unit/runner/runner_driver.h"

using namespace tandem;

namespace {

nlohmann::json load_expected() {
  std::ifstream in(testing::golden_dir() + "/models/expected.json");
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

int32_t argmax(const std::vector<float>& v) {
  return int32_t(std::max_element(v.begin(), v.end()) - v.begin());
}

int32_t sample_greedy(ModelRunner& r) {
  ResolvedSampling greedy;
  greedy.temperature = 0.0f;
  SampleRequest req;
  req.params = &greedy;
  int32_t out = -1;
  r.sample(std::span(&req, 1), std::span(&out, 1));
  return out;
}

void check_model(const std::string& name, const nlohmann::json& expected) {
  auto model = load_model_dir(testing::golden_dir() + "/models/" + name);
  REQUIRE_MESSAGE(model.ok(), (model.ok() ? "" : model.error().to_string()));
  const int32_t new_tokens = expected["new_tokens"].get<int32_t>();
  // The CUDA runner computes in 16 bits; an fp32 checkpoint is uploaded as bf16 (as vLLM's
  // dtype=auto halves fp32 models), so its weights themselves carry bf16's 2^-9 relative
  // rounding against transformers' fp32 logits: measured 1.03e-2 on the H200 for
  // llama_tied_fp32, while the 16-bit fixtures stay under 1e-2.
  const double logits_tol = model->config.dtype == DType::kF32 ? 2e-2 : 1e-2;
  for (int32_t page_size : {1, 16}) {
    RunnerOptions opts;
    opts.device = "cuda:0";
    opts.page_size = page_size;
    opts.num_pages = 2 * (256 / page_size + 2);
    opts.max_batch_tokens = 128;
    opts.max_seqs = 4;
    auto made = make_runner(*model, opts);
    REQUIRE_MESSAGE(made.ok(), (made.ok() ? "" : made.error().to_string()));
    ModelRunner& r = **made;
    gpu_test::poison_kv(r);
    for (int32_t chunk : {1, 7, 64}) {
      for (const auto& c : expected["models"][name]["cases"]) {
        const auto prompt = c["prompt"].get<std::vector<int32_t>>();
        const auto want = c["greedy"].get<std::vector<int32_t>>();
        const auto want_logits = c["first_logits"].get<std::vector<float>>();
        const bool wide_margin = c["min_greedy_margin"].get<double>() > 0.5;
        CAPTURE(name);
        CAPTURE(page_size);
        CAPTURE(chunk);
        CAPTURE(prompt.size());
        gpu_test::RunnerSeq seq{r, {}, 0};
        std::vector<float> logits;
        while (seq.cached < int32_t(prompt.size())) {
          const int32_t n = std::min<int32_t>(chunk, int32_t(prompt.size()) - seq.cached);
          logits = seq.step(std::span(prompt).subspan(size_t(seq.cached), size_t(n)));
        }
        CHECK(testing::relative_error(logits, want_logits) < logits_tol);
        std::vector<int32_t> got;
        for (int32_t i = 0; i < new_tokens; ++i) {
          const int32_t next = sample_greedy(r);
          CHECK(next == argmax(logits));  // device argmax == host argmax of copy_logits
          got.push_back(next);
          // Teacher forcing: the reference's token goes on, so one near-tie cannot derail the
          // rest; it must be within bf16 rounding of the device's best.
          const int32_t ref = want[size_t(i)];
          float top = -INFINITY;
          for (float v : logits) top = std::max(top, std::fabs(v));
          CHECK(logits[size_t(next)] - logits[size_t(ref)] <= 2e-2f * top);
          if (i + 1 < new_tokens) logits = seq.step(std::span(&ref, 1));
        }
        if (wide_margin) CHECK(got == want);
      }
    }
  }
}

}  // namespace

TEST_CASE("cuda golden: qwen2 tied bf16, sharded safetensors") {
  check_model("qwen2_tied_bf16_sharded", load_expected());
}
TEST_CASE("cuda golden: qwen2 untied fp16, 4 query heads per kv head, head_dim 8") {
  check_model("qwen2_untied_fp16_gqa4", load_expected());
}
TEST_CASE("cuda golden: llama untied bf16, llama3 rope scaling, head_dim != hidden / heads") {
  check_model("llama_untied_bf16_llama3rope", load_expected());
}
TEST_CASE("cuda golden: llama tied fp32 (uploaded as bf16)") {
  check_model("llama_tied_fp32", load_expected());
}
