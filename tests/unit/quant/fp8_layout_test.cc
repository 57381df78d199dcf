// The FP8 device layout (model/device_quant_layout.h) stands for exactly the weights
// model/dequant.h reads from the checkpoint: per tensor, per channel and 128 × 128 blocks, with
// f32, bf16 and f16 scales; stacking; and the refusals naming their field.
#include <doctest/doctest.h>

#include <cstring>
#include <random>

#include "core/dtype.h"
#include "model/dequant.h"
#include "model/device_quant_layout.h"
#include "model/quant_pack.h"
#include "quant_test_util.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

// Every finite e4m3 code, at random: the layout must carry each through unchanged.
std::vector<uint8_t> random_codes(int64_t count, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<uint8_t> c(static_cast<size_t>(count));
  for (auto& b : c) {
    do b = uint8_t(g() & 0xff);
    while ((b & 0x7f) == 0x7f);
  }
  return c;
}

struct Fp8Linear {
  std::unique_ptr<OwnedTensor> weight, scale, input_scale;
  LinearQuant q;
};

// A random [n, k] fp8 Linear with `scales` (one per tensor, row or block) stored as `dtype`.
Fp8Linear make_linear(int64_t n, int64_t k, Fp8ScaleGranularity g, DType dtype, uint32_t seed) {
  Fp8Linear l;
  l.weight = owned_tensor("m.weight", DType::kF8E4M3, {n, k}, random_codes(n * k, seed));
  int64_t count = 1;
  std::vector<int64_t> shape = {};
  if (g == Fp8ScaleGranularity::kChannel) {
    count = n;
    shape = {n, 1};
  } else if (g == Fp8ScaleGranularity::kBlock) {
    shape = {(n + 127) / 128, (k + 127) / 128};
    count = shape[0] * shape[1];
  }
  std::mt19937 gen(seed + 1);
  std::uniform_real_distribution<float> d(1e-4f, 2e-2f);
  std::vector<float> s(static_cast<size_t>(count));
  for (auto& v : s) v = d(gen);
  if (dtype == DType::kF32) {
    l.scale = owned_tensor("m.weight_scale", dtype, shape, s);
  } else {
    std::vector<uint16_t> bits;
    for (float v : s) bits.push_back(dtype == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v));
    l.scale = owned_tensor("m.weight_scale", dtype, shape, bits);
  }
  l.q.format = QuantFormat::kFp8;
  l.q.out_features = n;
  l.q.in_features = k;
  l.q.fp8_scale = g;
  l.q.scale = &l.scale->view;
  if (g == Fp8ScaleGranularity::kBlock) {
    l.q.block_out = 128;
    l.q.block_in = 128;
    l.q.fp8_activations = Fp8Activations::kDynamicPerTokenGroup;
  } else {
    l.q.fp8_activations = Fp8Activations::kDynamicPerToken;
  }
  return l;
}

// Row r of the layout as the kernels compute it: e4m3(weight) × scale in fp32.
std::vector<float> layout_row(const Fp8Layout& w, int64_t r) {
  std::vector<float> out(static_cast<size_t>(w.k));
  const int64_t block_cols = (w.k + 127) / 128;
  for (int64_t i = 0; i < w.k; ++i) {
    const float s =
        w.block ? w.scale[size_t((r / 128) * block_cols + i / 128)] : w.scale[size_t(r)];
    out[size_t(i)] = fp8_e4m3_to_f32(w.weight[size_t(r * w.k + i)]) * s;
  }
  return out;
}

// Bit-for-bit: the layout's rows against dequant_rows on the checkpoint's tensors.
int mismatched_rows(const Fp8Layout& w, const Fp8Linear& l) {
  std::vector<float> want(static_cast<size_t>(w.k));
  int bad = 0;
  for (int64_t r = 0; r < w.n; ++r) {
    dequant_rows(l.weight->view, l.q, r, 1, want.data());
    const auto got = layout_row(w, r);
    bad += std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) != 0;
  }
  return bad;
}

}  // namespace

TEST_CASE("fp8 layout: per-tensor, per-channel and block scales equal dequant_rows bit for bit") {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (auto g : {Fp8ScaleGranularity::kTensor, Fp8ScaleGranularity::kChannel,
                   Fp8ScaleGranularity::kBlock}) {
      for (auto [n, k] : {std::pair<int64_t, int64_t>{3, 16}, {130, 272}, {256, 384}}) {
        CAPTURE(int(dtype));
        CAPTURE(int(g));
        CAPTURE(n);
        CAPTURE(k);
        const Fp8Linear l = make_linear(n, k, g, dtype, uint32_t(n * 7 + k));
        auto w = repack_fp8(l.weight->view, l.q, "m");
        REQUIRE(w.ok());
        CHECK(w->n == n);
        CHECK(w->k == k);
        CHECK(w->block == (g == Fp8ScaleGranularity::kBlock));
        CHECK(w->input_scale == 0.0f);
        CHECK(w->scale.size() ==
              size_t(g == Fp8ScaleGranularity::kBlock ? ((n + 127) / 128) * ((k + 127) / 128) : n));
        CHECK(std::memcmp(w->weight.data(), l.weight->bytes.data(), size_t(n * k)) == 0);
        CHECK(mismatched_rows(*w, l) == 0);
      }
    }
  }
}

TEST_CASE("fp8 layout: a [out] channel scale and --quantization fp8's own quantizer") {
  // quantize_fp8 is what load-time fp8 stores: per-channel f32 scales of shape [out].
  const int64_t n = 40, k = 96;
  std::mt19937 g(5);
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> f(size_t(n * k));
  for (auto& v : f) v = d(g);
  std::vector<uint8_t> q(f.size());
  std::vector<float> s(static_cast<size_t>(n));
  quantize_fp8(f.data(), n, k, Fp8ScaleGranularity::kChannel, 0, 0, q.data(), s.data());
  Fp8Linear l;
  l.weight = owned_tensor("m.weight", DType::kF8E4M3, {n, k}, q);
  l.scale = owned_tensor("m.weight_scale", DType::kF32, {n}, s);
  l.q.format = QuantFormat::kFp8;
  l.q.out_features = n;
  l.q.in_features = k;
  l.q.fp8_scale = Fp8ScaleGranularity::kChannel;
  l.q.scale = &l.scale->view;
  auto w = repack_fp8(l.weight->view, l.q, "m");
  REQUIRE(w.ok());
  CHECK((w->scale == s));
  CHECK(mismatched_rows(*w, l) == 0);
}

TEST_CASE("fp8 layout: a static input_scale is carried; dynamic activations leave it 0") {
  Fp8Linear l = make_linear(8, 32, Fp8ScaleGranularity::kTensor, DType::kF32, 3);
  l.input_scale =
      owned_tensor("m.input_scale", DType::kBF16, {}, std::vector<uint16_t>{f32_to_bf16(0.0375f)});
  l.q.input_scale = &l.input_scale->view;
  auto dynamic = repack_fp8(l.weight->view, l.q, "m");
  REQUIRE(dynamic.ok());
  CHECK(dynamic->input_scale == 0.0f);  // present in the file but unused by dynamic activations
  l.q.fp8_activations = Fp8Activations::kStaticTensor;
  auto fixed = repack_fp8(l.weight->view, l.q, "m");
  REQUIRE(fixed.ok());
  CHECK(fixed->input_scale == bf16_to_f32(f32_to_bf16(0.0375f)));
  CHECK(mismatched_rows(*fixed, l) == 0);
  l.q.input_scale = nullptr;
  auto missing = repack_fp8(l.weight->view, l.q, "m");
  REQUIRE(!missing.ok());
  CHECK(missing.error().code == ErrorCode::kInvalidModel);
  CHECK(missing.error().message.find("input_scale") != std::string::npos);
}

TEST_CASE("fp8 layout: stacking q|k|v rows keeps every row's weights") {
  SUBCASE("channel") {
    const Fp8Linear a = make_linear(24, 64, Fp8ScaleGranularity::kChannel, DType::kBF16, 11);
    const Fp8Linear b = make_linear(8, 64, Fp8ScaleGranularity::kTensor, DType::kF32, 12);
    auto wa = repack_fp8(a.weight->view, a.q, "a");
    auto wb = repack_fp8(b.weight->view, b.q, "b");
    REQUIRE((wa.ok() && wb.ok()));
    REQUIRE(wa->can_stack(*wb));
    Fp8Layout s = *wa;
    s.stack(*wb);
    CHECK(s.n == 32);
    CHECK(s.scale.size() == 32);
    for (int64_t r = 0; r < 32; ++r) {
      CAPTURE(r);
      CHECK((layout_row(s, r) == (r < 24 ? layout_row(*wa, r) : layout_row(*wb, r - 24))));
    }
  }
  SUBCASE("block: the upper matrix ends on a block row") {
    const Fp8Linear a = make_linear(256, 384, Fp8ScaleGranularity::kBlock, DType::kF32, 21);
    const Fp8Linear b = make_linear(130, 384, Fp8ScaleGranularity::kBlock, DType::kBF16, 22);
    auto wa = repack_fp8(a.weight->view, a.q, "a");
    auto wb = repack_fp8(b.weight->view, b.q, "b");
    REQUIRE((wa.ok() && wb.ok()));
    REQUIRE(wa->can_stack(*wb));
    CHECK(!wb->can_stack(*wa));  // 130 rows would share a block row with the next matrix
    Fp8Layout s = *wa;
    s.stack(*wb);
    CHECK(s.n == 386);
    CHECK(s.scale.size() == size_t(4 * 3));
    for (int64_t r = 0; r < 386; ++r) {
      CAPTURE(r);
      CHECK((layout_row(s, r) == (r < 256 ? layout_row(*wa, r) : layout_row(*wb, r - 256))));
    }
  }
  SUBCASE("refusals: k, block-ness, input scale") {
    auto layout = [](int64_t n, int64_t k, bool block, float input_scale) {
      Fp8Layout l;
      l.n = n;
      l.k = k;
      l.block = block;
      l.input_scale = input_scale;
      return l;
    };
    CHECK(layout(128, 64, false, 0).can_stack(layout(8, 64, false, 0)));
    CHECK(!layout(128, 64, false, 0).can_stack(layout(8, 80, false, 0)));
    CHECK(!layout(128, 64, false, 0).can_stack(layout(8, 64, true, 0)));
    CHECK(!layout(128, 64, false, 0.5f).can_stack(layout(8, 64, false, 0.25f)));
    CHECK(layout(128, 64, false, 0.5f).can_stack(layout(8, 64, false, 0.5f)));
    CHECK(!layout(100, 64, true, 0).can_stack(layout(128, 64, true, 0)));
  }
}

TEST_CASE("fp8 layout: blocks other than 128 × 128 and in_features off 16 name their field") {
  Fp8Linear l = make_linear(256, 256, Fp8ScaleGranularity::kBlock, DType::kF32, 31);
  l.q.block_out = 64;
  l.q.block_in = 128;
  auto blocks = repack_fp8(l.weight->view, l.q, "model.layers.0.mlp.up_proj");
  REQUIRE(!blocks.ok());
  CHECK(blocks.error().code == ErrorCode::kUnsupported);
  CHECK(blocks.error().message.find("model.layers.0.mlp.up_proj") != std::string::npos);
  CHECK(blocks.error().message.find("weight_block_size = [64, 128]") != std::string::npos);

  Fp8Linear odd = make_linear(4, 24, Fp8ScaleGranularity::kChannel, DType::kF32, 32);
  auto in = repack_fp8(odd.weight->view, odd.q, "m");
  REQUIRE(!in.ok());
  CHECK(in.error().code == ErrorCode::kUnsupported);
  CHECK(in.error().message.find("in_features = 24") != std::string::npos);
}
