// Golden files from tests/fixtures/quant/make_golden.py (numpy + torch, written from the
// formats' definitions): each case's packed tensors, dequantized here, must equal its
// "expected" matrix exactly. The AWQ/GPTQ goldens (numpy only) are committed and required; the
// FP8 ones need torch and are checked whenever they are present.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "model/dequant.h"
#include "model/quant_linear.h"
#include "model/quant_tensors.h"
#include "test_paths.h"

using namespace tandem;

TEST_CASE("dequantization equals the numpy/torch goldens in tests/fixtures/quant") {
  const std::filesystem::path dir =
      std::filesystem::path(testing::source_root()) / "tests/fixtures/quant";
  REQUIRE(std::filesystem::exists(dir / "make_golden.py"));
  int cases = 0;
  std::set<std::string> seen;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    const std::string name = entry.path().stem().string();
    CAPTURE(name);
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    const nlohmann::json spec = nlohmann::json::parse(text.str());
    auto q = parse_quant_config(spec["quantization_config"], entry.path().string());
    REQUIRE_MESSAGE(q.ok(), (q.ok() ? "" : q.error().to_string()));
    auto store = WeightStore::open_file((dir / (name + ".safetensors")).string());
    REQUIRE_MESSAGE(store.ok(), (store.ok() ? "" : store.error().to_string()));
    const std::string module = spec["module"];
    const int64_t out = spec["out"], in_features = spec["in"];
    auto linear = resolve_linear_quant(*q, *store, module, out, in_features);
    REQUIRE_MESSAGE(linear.ok(), (linear.ok() ? "" : linear.error().to_string()));
    const TensorView* weight = store->find(stored_weight_name(*q, module));
    const TensorView* expected = store->find("expected");
    REQUIRE(weight != nullptr);
    REQUIRE(expected != nullptr);
    REQUIRE(expected->shape == std::vector<int64_t>{out, in_features});
    std::vector<float> got(size_t(out * in_features));
    dequant_rows(*weight, *linear, 0, out, got.data());
    int wrong = 0;
    for (int64_t i = 0; i < out * in_features; ++i)
      wrong += got[size_t(i)] != float_element(*expected, i);
    CHECK(wrong == 0);
    ++cases;
    seen.insert(name);
  }
  // FP8 files come from torch's float8_e4m3fn (made on the GPU machine, where torch is).
  for (const char* required : {"awq_g32", "awq_g128", "gptq_v1_g32", "gptq_v1_g32_desc_act",
                               "gptq_v2_sym_one_group", "fp8_tensor", "fp8_channel", "fp8_block"}) {
    CAPTURE(required);
    CHECK(seen.count(required) == 1);
  }
  CHECK(cases >= 8);
}
