// Every quantized format on the CUDA runner against the CPU oracle on the same checkpoint
// (small-qwen written by mkmodel in that format): a prefill chunk of 37 tokens (the GEMM paths:
// dequantize + cuBLASLt, or cuBLASLt FP8), decode steps of 1 token and chunks of 3 and 6 (the
// GEMV paths; 6 rows are a k = 5 verify, GEMV for int4 and FP8 GEMM otherwise), each forward's
// logits within a per-format tolerance of the CPU's. Greedy: where the CPU's top two logits are
// clearly apart the GPU must pick the same token; elsewhere the CPU's token goes on (teacher
// forcing) and must be within the tolerance of the GPU's best.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "kernels/cuda_check.cuh"
#include "model/mkmodel.h"
#include "model/model_dir.h"
#include "overlap_check.h"
#include "runner/cuda/cuda_runner.h"
#include "runner/runner.h"
#include "runner_seq.h"
#include "unit/model/model_test_util.h"
#include "unit/runner/runner_driver.h"

using namespace tandem;

namespace {

std::unique_ptr<ModelRunner> make(const ModelDir& m, const std::string& device,
                                  const std::string& quantization) {
  RunnerOptions o;
  o.device = device;
  o.quantization = quantization;
  o.page_size = 16;
  o.num_pages = 16;
  o.max_batch_tokens = 64;
  o.max_seqs = 2;
  o.threads = 0;
  auto r = make_runner(m, o);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().to_string()));
  if (device != "cpu") gpu_test::poison_kv(**r);
  return std::move(r).value();
}

// `checkpoint`: mkmodel --quantization ("" = bf16); `at_load`: RunnerOptions::quantization.
void check_format(const std::string& checkpoint, const std::string& at_load, double tol) {
  CAPTURE(checkpoint);
  CAPTURE(at_load);
  testing::ScratchDir dir("gpu-quant-" + checkpoint + at_load);
  MkModelOptions mk;
  mk.preset = "small-qwen";
  mk.out_dir = dir.path.string();
  mk.seed = 21;
  mk.quantization = checkpoint;
  Status st = make_model(mk);
  REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.error().to_string()));
  auto model = load_model_dir(dir.path.string());
  REQUIRE_MESSAGE(model.ok(), (model.ok() ? "" : model.error().to_string()));
  auto cpu = make(*model, "cpu", at_load);
  auto gpu = make(*model, "cuda:0", at_load);
  gpu_test::RunnerSeq c{*cpu, {}, 0}, g{*gpu, {}, 0};

  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 37; ++i) prompt.push_back(1000 + 7919 * i % 150000);
  std::vector<float> lc = c.step(prompt), lg = g.step(prompt);
  double worst = testing::relative_error(lg, lc);
  CHECK(testing::relative_error(lg, lc) < tol);
  int decided = 0, forced = 0;
  for (int32_t i = 0; i < 8; ++i) {
    // Decode steps of 1 token; chunks carry the greedy pick and made-up continuations.
    const int32_t best_c = int32_t(std::max_element(lc.begin(), lc.end()) - lc.begin());
    const int32_t best_g = int32_t(std::max_element(lg.begin(), lg.end()) - lg.begin());
    std::vector<float> sorted = lc;
    std::nth_element(sorted.begin(), sorted.begin() + 1, sorted.end(), std::greater<float>());
    float top = 0;
    for (float v : lc) top = std::max(top, std::fabs(v));
    if (sorted[0] - sorted[1] > 2 * tol * top) {
      CHECK(best_g == best_c);
      ++decided;
    } else {
      CHECK(lg[size_t(best_g)] - lg[size_t(best_c)] <= 2 * tol * top);
      ++forced;
    }
    std::vector<int32_t> next = {best_c};
    // A chunk of 3 (decode GEMVs at m = 3) and one of 6 (int4 GEMV at m = 6, a k = 5 verify).
    if (i == 5) next = {best_c, int32_t((best_c + 11) % 150000), int32_t((best_c + 97) % 150000)};
    if (i == 6) {
      for (int32_t e = 1; e < 6; ++e) next.push_back(int32_t((best_c + 31 * e) % 150000));
    }
    lc = c.step(next);
    lg = g.step(next);
    worst = std::max(worst, testing::relative_error(lg, lc));
    CHECK(testing::relative_error(lg, lc) < tol);
  }
  MESSAGE(checkpoint << (at_load.empty() ? "" : " at load " + at_load) << ": max rel " << worst
                     << " (tolerance " << tol << "), greedy decided " << decided
                     << ", teacher-forced " << forced);
}

}  // namespace

// bf16 activations against the CPU's fp32 ones give the float model its 1e-2 (golden tests);
// int4 stays within it (measured on the H200: float 0.47%, int4 0.52-0.56%, the bf16 rounding
// of dequantized prefill weights adding little). W8A8 rounds bf16 rather than fp32 activations
// to e4m3, so a small share of them lands one e4m3 step (2^-3 relative) away from the CPU's:
// measured 3.3-3.7%, hence 5e-2 (a mis-scaled row, token or block is off by a factor, far
// outside either).
TEST_CASE("float small-qwen: the CUDA runner within 1e-2 of the CPU") {
  check_format("", "", 1e-2);
}
TEST_CASE("awq") {
  check_format("awq", "", 1e-2);
}
TEST_CASE("gptq") {
  check_format("gptq", "", 1e-2);
}
TEST_CASE("gptq act-order") {
  check_format("gptq-desc-act", "", 1e-2);
}
TEST_CASE("fp8 static activations") {
  check_format("fp8", "", 5e-2);
}
TEST_CASE("fp8 channel, dynamic per-token activations") {
  check_format("fp8-channel", "", 5e-2);
}
TEST_CASE("fp8 128 x 128 blocks") {
  check_format("fp8-block", "", 5e-2);
}
TEST_CASE("--quantization fp8 at load") {
  check_format("", "fp8", 5e-2);
}

// Int4 decode steps on sm_90 overlap their launches (CudaRunner::overlaps_int4_launches): each
// GEMV loads weights before its wait, everything else after it. A read or write on the wrong
// side shows up as logits that differ from the plain launches' (graphs and eager, reruns).
namespace {

// A quantized small-qwen in a scratch directory (mkmodel --quantization), and the device's
// compute capability major.
struct QuantModel {
  testing::ScratchDir dir;
  std::unique_ptr<ModelDir> model;
  int major = 0;
  QuantModel(const std::string& name, uint32_t seed, const std::string& quantization = "awq")
      : dir(name) {
    MkModelOptions mk;
    mk.preset = "small-qwen";
    mk.out_dir = dir.path.string();
    mk.seed = seed;
    mk.quantization = quantization;
    Status st = make_model(mk);
    REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.error().to_string()));
    auto loaded = load_model_dir(dir.path.string());
    REQUIRE_MESSAGE(loaded.ok(), (loaded.ok() ? "" : loaded.error().to_string()));
    model = std::make_unique<ModelDir>(std::move(loaded).value());
    TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  }
  // A CUDA runner of the model with graphs and overlapped launches on or off.
  struct Runner {
    std::unique_ptr<ModelRunner> owner;
    CudaRunner* cuda = nullptr;
  };
  Runner cuda_runner(bool overlap, bool graphs) const {
    Runner r{make(*model, "cuda:0", "")};
    r.cuda = dynamic_cast<CudaRunner*>(r.owner.get());
    REQUIRE(r.cuda != nullptr);
    r.cuda->set_use_graphs(graphs);
    r.cuda->set_overlap_launches(overlap);
    return r;
  }
};

// Greedy steps after a 37-token prompt, a 3-token chunk at step 4: every step's logits, and the
// tokens picked.
std::vector<float> greedy_logits(ModelRunner& runner, std::vector<int32_t>* picked = nullptr) {
  gpu_test::RunnerSeq seq{runner, {}, 0};
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 37; ++i) prompt.push_back(1000 + 7919 * i % 150000);
  std::vector<float> logits = seq.step(prompt), all;
  for (int32_t i = 0; i < 10; ++i) {
    const int32_t best = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (picked != nullptr) picked->push_back(best);
    std::vector<int32_t> next = {best};
    if (i == 4) next = {best, int32_t((best + 11) % 150000), int32_t((best + 97) % 150000)};
    logits = seq.step(next);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

}  // namespace

TEST_CASE("awq: overlapped int4 decode launches give the plain launches' bits") {
  const QuantModel awq("gpu-quant-awq-overlap", 23);
  auto run = [&](bool overlap, bool graphs) {
    const auto [runner, cuda] = awq.cuda_runner(overlap, graphs);
    // The steps below do take the overlapped launches where the device has them.
    CHECK(cuda->overlaps_int4_launches(1, 1) == (overlap && awq.major >= 9));
    CHECK(cuda->overlaps_int4_launches(3, 1) == (overlap && awq.major >= 9));
    CHECK_FALSE(cuda->overlaps_int4_launches(1, 0));
    return greedy_logits(*runner);
  };
  gpu_test::check_overlap_bits(run);
}

// W8A8 decode steps overlap their launches too (CudaRunner::overlaps_fp8_launches): the norm
// that quantizes, the quantize kernels, the FP8 GEMVs (plain, SwiGLU and RoPE epilogues) and
// attention. Per-token scales (the norm quantizes), static ones, and block fp8's 128-feature
// groups (a quantize launch before each GEMV).
TEST_CASE("fp8: overlapped W8A8 decode launches give the plain launches' bits") {
  for (const char* format : {"fp8-channel", "fp8", "fp8-block"}) {
    CAPTURE(format);
    const QuantModel fp8(std::string("gpu-quant-overlap-") + format, 31, format);
    auto run = [&](bool overlap, bool graphs) {
      const auto [runner, cuda] = fp8.cuda_runner(overlap, graphs);
      CHECK(cuda->overlaps_fp8_launches(1, 1) == (overlap && fp8.major >= 9));
      CHECK_FALSE(cuda->overlaps_fp8_launches(3, 1));  // one token only
      CHECK_FALSE(cuda->overlaps_fp8_launches(1, 0));
      CHECK_FALSE(cuda->overlaps_int4_launches(1, 1));
      return greedy_logits(*runner);
    };
    gpu_test::check_overlap_bits(run);
  }
}

// W8A8 decode steps whose o and down inputs are quantized per token take their amax from the
// decode attention's stores and the gate|up GEMV's SwiGLU epilogue (CudaRunner::
// takes_fp8_act_amax): the plain quantizes' bits, overlapped and not, graphs and eager, over
// steps that reuse every layer's slots (a slot left unzeroed would carry an earlier step's amax
// into a later scale). Static and block-group activations keep the quantize's own pass.
TEST_CASE("fp8: o's and down's quantizes from their producers' amax give the plain bits") {
  for (const char* format : {"fp8-channel", "fp8", "fp8-block"}) {
    CAPTURE(format);
    const QuantModel fp8(std::string("gpu-quant-amax-") + format, 37, format);
    const bool per_token = std::strcmp(format, "fp8-channel") == 0;
    for (bool overlap : {false, true}) {
      for (bool graphs : {true, false}) {
        CAPTURE(overlap);
        CAPTURE(graphs);
        auto run = [&](int amax) {
          const auto [runner, cuda] = fp8.cuda_runner(overlap, graphs);
          cuda->set_fp8_act_amax(amax);
          CHECK(cuda->takes_fp8_act_amax(1) == (amax >= 1 && per_token));
          CHECK(cuda->takes_fp8_act_amax(3) == (amax >= 1 && per_token));
          // One token runs the CUDA-core GEMV, which gives down's amax; three the tensor-core one.
          CHECK(cuda->takes_fp8_down_amax(1) == (amax == 2 && per_token));
          CHECK_FALSE(cuda->takes_fp8_down_amax(3));
          return greedy_logits(*runner);
        };
        const std::vector<float> plain = run(0);
        for (int amax : {1, 2, 2}) {
          CAPTURE(amax);
          const std::vector<float> fused = run(amax);
          REQUIRE(fused.size() == plain.size());
          CHECK(std::memcmp(fused.data(), plain.data(), plain.size() * sizeof(float)) == 0);
        }
      }
    }
  }
}

// One-token int4 steps fold the RMSNorms into the GEMVs (CudaRunner::folds_int4_norms): the
// norm's sum of squares runs in another order, so the logits are near the unfolded steps', not
// equal; the greedy tokens are the same. Checked overlapped and not, graphs and eager.
TEST_CASE("awq: one-token steps with the norms folded into the int4 gemvs") {
  const QuantModel awq("gpu-quant-awq-fold", 29);
  for (bool overlap : {false, true}) {
    for (bool graphs : {true, false}) {
      CAPTURE(overlap);
      CAPTURE(graphs);
      auto run = [&](bool fold, std::vector<int32_t>* picked) {
        const auto [runner, cuda] = awq.cuda_runner(overlap, graphs);
        cuda->set_fold_int4_norms(fold);
        // Folded where the fused RoPE runs (thread-block clusters), and one token only.
        CHECK(cuda->folds_int4_norms(1) == (fold && awq.major >= 9));
        CHECK_FALSE(cuda->folds_int4_norms(3));
        return greedy_logits(*runner, picked);
      };
      std::vector<int32_t> plain_tokens, folded_tokens, again_tokens;
      const std::vector<float> plain = run(false, &plain_tokens);
      const std::vector<float> folded = run(true, &folded_tokens);
      const std::vector<float> again = run(true, &again_tokens);
      CHECK(std::memcmp(folded.data(), again.data(), folded.size() * sizeof(float)) == 0);
      const double rel = testing::relative_error(folded, plain);
      MESSAGE("folded against unfolded: rel " << rel);
      CHECK(rel < 2e-3);
      CHECK(folded_tokens == plain_tokens);
    }
  }
}
