// FP8 E4M3: the scalar conversions against the format's definition, and fp8 weight
// dequantization (tensor, channel, block scales) and W8A8 activation rounding against
// references computed here from the definitions.
#include <doctest/doctest.h>

#include <cmath>

#include "core/dtype.h"
#include "model/dequant.h"
#include "quant_test_util.h"
#include "reference_quant.h"
#include "runner/cpu/fp8_activations.h"

using namespace tandem;
using namespace tandem::testing;

TEST_CASE("e4m3 decode: known codes and every code against the closed formula") {
  CHECK(fp8_e4m3_to_f32(0x00) == 0.0f);
  CHECK(fp8_e4m3_to_f32(0x38) == 1.0f);  // 0.0111.000: 2^(7-7)
  CHECK(fp8_e4m3_to_f32(0xB8) == -1.0f);
  CHECK(fp8_e4m3_to_f32(0x7E) == 448.0f);        // largest finite
  CHECK(fp8_e4m3_to_f32(0x01) == 0.001953125f);  // smallest subnormal 2^-9
  CHECK(fp8_e4m3_to_f32(0x08) == 0.015625f);     // smallest normal 2^-6
  CHECK(fp8_e4m3_to_f32(0x3C) == 1.5f);
  CHECK(std::isnan(fp8_e4m3_to_f32(0x7F)));
  CHECK(std::isnan(fp8_e4m3_to_f32(0xFF)));
  CHECK(fp8_e4m3_to_f32(0x78) == 256.0f);  // 0.1111.000 is finite in e4m3fn
  for (int c = 0; c < 256; ++c) {
    const double want = ref::e4m3_value(uint8_t(c));
    const float got = fp8_e4m3_to_f32(uint8_t(c));
    if (std::isnan(want)) {
      CHECK(std::isnan(got));
    } else {
      CHECK_MESSAGE(double(got) == want, "code ", c);
    }
  }
}

TEST_CASE("e4m3 encode: nearest code, ties to even, saturating, over a dense sweep") {
  CHECK(f32_to_fp8_e4m3(1.0f) == 0x38);
  CHECK(f32_to_fp8_e4m3(1000.0f) == 0x7E);  // saturates, never NaN
  CHECK(f32_to_fp8_e4m3(-1000.0f) == 0xFE);
  CHECK(f32_to_fp8_e4m3(NAN) == 0x7F);
  CHECK(f32_to_fp8_e4m3(1.0625f) == 0x38);        // halfway 1 and 1.125: even mantissa (1.0)
  CHECK(f32_to_fp8_e4m3(1.1875f) == 0x3A);        // halfway 1.125 and 1.25: even (1.25)
  CHECK(f32_to_fp8_e4m3(0.0009765625f) == 0x00);  // 2^-10: halfway 0 and 2^-9 → 0
  CHECK(f32_to_fp8_e4m3(464.0f) == 0x7E);
  int mismatches = 0;
  for (int k = -4000; k <= 4000; ++k) {
    // Every half-step and quarter-step of the grid appears in this geometric sweep, and
    // exact midpoints are added below.
    const float x = float(std::ldexp(1.0, -11) * std::pow(1.0037, std::abs(k)) * (k < 0 ? -1 : 1));
    const double want = ref::e4m3_value(ref::e4m3_nearest(x));
    if (double(fp8_e4m3_to_f32(f32_to_fp8_e4m3(x))) != want) ++mismatches;
  }
  for (int c = 0; c < 0x7E; ++c) {  // midpoints between neighbouring positive codes
    const double mid = (ref::e4m3_value(uint8_t(c)) + ref::e4m3_value(uint8_t(c + 1))) / 2;
    const double want = ref::e4m3_value(ref::e4m3_nearest(mid));
    if (double(fp8_e4m3_to_f32(f32_to_fp8_e4m3(float(mid)))) != want) ++mismatches;
    if (double(fp8_e4m3_to_f32(f32_to_fp8_e4m3(float(-mid)))) != -want) ++mismatches;
  }
  CHECK(mismatches == 0);
}

namespace {

// A [3, 4] fp8 weight with known codes: values 1, -1.5, 2^-9 (subnormal), 448, ...
const std::vector<uint8_t> kCodes = {0x38, 0xBC, 0x01, 0x7E,   // 1, -1.5, 2^-9, 448
                                     0x40, 0x00, 0xC0, 0x30,   // 2, 0, -2, 0.5
                                     0x44, 0x3A, 0x08, 0xB0};  // 3, 1.25, 2^-6, -0.5
const double kValues[12] = {1, -1.5, 0.001953125, 448, 2, 0, -2, 0.5, 3, 1.25, 0.015625, -0.5};

LinearQuant fp8_linear(Fp8ScaleGranularity g, const TensorView* scale) {
  LinearQuant q;
  q.format = QuantFormat::kFp8;
  q.out_features = 3;
  q.in_features = 4;
  q.fp8_scale = g;
  q.scale = scale;
  return q;
}

}  // namespace

TEST_CASE("fp8 dequant: per-tensor scale, f32 and bf16 scales") {
  auto w = owned_tensor("w", DType::kF8E4M3, {3, 4}, kCodes);
  auto s = owned_tensor("s", DType::kF32, {}, std::vector<float>{0.25f});
  std::vector<float> out(12);
  dequant_rows(w->view, fp8_linear(Fp8ScaleGranularity::kTensor, &s->view), 0, 3, out.data());
  for (int i = 0; i < 12; ++i) CHECK(double(out[size_t(i)]) == kValues[i] * 0.25);
  auto s16 = owned_tensor("s", DType::kBF16, {1}, std::vector<uint16_t>{f32_to_bf16(3.0f)});
  dequant_rows(w->view, fp8_linear(Fp8ScaleGranularity::kTensor, &s16->view), 1, 2, out.data());
  for (int i = 0; i < 8; ++i) CHECK(double(out[size_t(i)]) == kValues[i + 4] * 3.0);
}

TEST_CASE("fp8 dequant: per-channel scale picks the output row's") {
  auto w = owned_tensor("w", DType::kF8E4M3, {3, 4}, kCodes);
  auto s = owned_tensor("s", DType::kF32, {3, 1}, std::vector<float>{0.5f, 2.0f, -1.0f});
  std::vector<float> out(12);
  dequant_rows(w->view, fp8_linear(Fp8ScaleGranularity::kChannel, &s->view), 0, 3, out.data());
  const double scale[3] = {0.5, 2.0, -1.0};
  for (int i = 0; i < 12; ++i) CHECK(double(out[size_t(i)]) == kValues[i] * scale[i / 4]);
}

TEST_CASE("fp8 dequant: block scales [ceil(out/2), ceil(in/3)] with ragged edges") {
  auto w = owned_tensor("w", DType::kF8E4M3, {3, 4}, kCodes);
  // Blocks of 2 rows × 3 columns: rows {0,1},{2}; columns {0,1,2},{3}.
  auto s = owned_tensor("s", DType::kF32, {2, 2}, std::vector<float>{1.0f, 10.0f, 100.0f, 1000.0f});
  LinearQuant q = fp8_linear(Fp8ScaleGranularity::kBlock, &s->view);
  q.block_out = 2;
  q.block_in = 3;
  std::vector<float> out(12);
  dequant_rows(w->view, q, 0, 3, out.data());
  for (int o = 0; o < 3; ++o)
    for (int i = 0; i < 4; ++i) {
      const double scale = (o < 2 ? 1.0 : 100.0) * (i < 3 ? 1.0 : 10.0);
      CHECK(double(out[size_t(o * 4 + i)]) == double(float(kValues[o * 4 + i] * scale)));
    }
}

TEST_CASE("W8A8 activations: static, dynamic per token (with upper bound), per token group") {
  const std::vector<float> x = {0.3f, -1.7f, 5.0f, 0.001f, 100.0f, -0.02f, 0.0f, 7.5f};  // [2, 4]
  auto round_ref = [](double v, double s) { return ref::e4m3_value(ref::e4m3_nearest(v / s)) * s; };
  std::vector<float> out(8);
  LinearQuant q;
  q.format = QuantFormat::kFp8;

  auto in_scale = owned_tensor("input_scale", DType::kF32, {}, std::vector<float>{0.01f});
  q.fp8_activations = Fp8Activations::kStaticTensor;
  q.input_scale = &in_scale->view;
  fp8_fake_quantize_activations(q, x.data(), 2, 4, out.data());
  for (size_t i = 0; i < 8; ++i)
    CHECK(out[i] == doctest::Approx(round_ref(x[i], 0.01f)).epsilon(1e-6));
  CHECK(out[4] == doctest::Approx(4.48));  // 100 saturates at 448 × 0.01

  q.fp8_activations = Fp8Activations::kDynamicPerToken;
  fp8_fake_quantize_activations(q, x.data(), 2, 4, out.data());
  const double s0 = 5.0 / 448, s1 = 100.0 / 448;
  for (size_t i = 0; i < 8; ++i)
    CHECK(out[i] == doctest::Approx(round_ref(x[i], i < 4 ? s0 : s1)).epsilon(1e-6));
  CHECK(out[2] == 5.0f);  // the row maximum is exact

  q.activation_scale_ub = 10.0;  // fbgemm: 100 is clamped to the bound's scale
  fp8_fake_quantize_activations(q, x.data(), 2, 4, out.data());
  CHECK(out[4] == doctest::Approx(10.0));
  CHECK(out[7] == doctest::Approx(round_ref(7.5, 10.0 / 448)).epsilon(1e-6));

  q.activation_scale_ub = 0;
  q.fp8_activations = Fp8Activations::kDynamicPerTokenGroup;
  q.block_in = 2;
  fp8_fake_quantize_activations(q, x.data(), 2, 4, out.data());
  const double group_scale[4] = {1.7 / 448, 5.0 / 448, 100.0 / 448, 7.5 / 448};
  for (size_t i = 0; i < 8; ++i)
    CHECK(out[i] == doctest::Approx(round_ref(x[i], group_scale[i / 2])).epsilon(1e-6));
  CHECK(out[3] != x[3]);  // 0.001 at scale 5/448 is rounded, not passed through
}
