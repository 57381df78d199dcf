// The CPU runner against transformers (tests/golden/models, made by
// scripts/golden/models_make.py): greedy continuations token for token and first-step logits
// within 1e-4 relative, for every way of feeding the prompt (chunk sizes 1/7/16/64) and page
// sizes 1 and 16, with every KV page poisoned beforehand.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runner_driver.h"
#include "test_paths.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

nlohmann::json load_expected() {
  std::ifstream in(golden_dir() + "/models/expected.json");
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

void check_model(const std::string& name, const nlohmann::json& expected) {
  auto model = load_model_dir(golden_model_dir(name));
  REQUIRE_MESSAGE(model.ok(), (model.ok() ? "" : model.error().to_string()));
  const int32_t new_tokens = expected["new_tokens"].get<int32_t>();
  double worst = 0;  // largest first-step logits error over all cases, reported
  for (int32_t page_size : {1, 16}) {
    RunnerDriver driver(*model, page_size);
    driver.poison_all_pages();
    for (int32_t chunk : {1, 7, 16, 64}) {
      for (const auto& c : expected["models"][name]["cases"]) {
        const auto prompt = c["prompt"].get<std::vector<int32_t>>();
        const auto want_tokens = c["greedy"].get<std::vector<int32_t>>();
        const auto want_logits = c["first_logits"].get<std::vector<float>>();
        CAPTURE(name);
        CAPTURE(page_size);
        CAPTURE(chunk);
        CAPTURE(prompt.size());
        std::vector<float> logits;
        const auto got = driver.greedy(prompt, chunk, new_tokens, &logits);
        CHECK(got == want_tokens);
        const double err = relative_error(logits, want_logits);
        CHECK(err < 1e-4);
        worst = std::max(worst, err);
      }
    }
  }
  MESSAGE(name << ": worst first-step logits error " << worst << " (max|a-b|/max|b|)");
}

}  // namespace

TEST_CASE("golden: qwen2 tied bf16, sharded safetensors") {
  check_model("qwen2_tied_bf16_sharded", load_expected());
}
TEST_CASE("golden: qwen2 untied fp16, 4 query heads per kv head") {
  check_model("qwen2_untied_fp16_gqa4", load_expected());
}
TEST_CASE("golden: llama untied bf16, llama3 rope scaling, head_dim != hidden / heads") {
  check_model("llama_untied_bf16_llama3rope", load_expected());
}
TEST_CASE("golden: llama tied fp32") {
  check_model("llama_tied_fp32", load_expected());
}
