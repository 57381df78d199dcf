// AWQ and GPTQ 4-bit dequantization: known answers for the nibble orders and the v1 zero
// offset, and random packed tensors against the reference transcribed from AutoAWQ/AutoGPTQ
// (reference_quant.h). Also mkmodel's quantizers: packing round trips and error bounds.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>

#include "core/dtype.h"
#include "model/dequant.h"
#include "model/quant_pack.h"
#include "quant_test_util.h"
#include "reference_quant.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

std::vector<float> dequant_all(const TensorView& w, const LinearQuant& q) {
  std::vector<float> out(size_t(q.out_features * q.in_features));
  dequant_rows(w, q, 0, q.out_features, out.data());
  return out;
}

}  // namespace

TEST_CASE("awq: one int32 0x76543210 holds output features in the order 0 2 4 6 1 3 5 7") {
  // in = 1, out = 8, one group; zero 0, scale 1: w[o, 0] is the nibble feature o is stored in.
  auto qweight = owned_tensor("qweight", DType::kI32, {1, 1}, std::vector<int32_t>{0x76543210});
  auto qzeros = owned_tensor("qzeros", DType::kI32, {1, 1}, std::vector<int32_t>{0});
  auto scales = owned_tensor("scales", DType::kF16, {1, 8}, to_f16(std::vector<float>(8, 1.0f)));
  const auto w = dequant_all(qweight->view,
                             int4_linear(QuantFormat::kAwq, 8, 1, 1, &scales->view, &qzeros->view));
  CHECK(w == std::vector<float>{0, 4, 1, 5, 2, 6, 3, 7});
  // Zero points use the same order: zero 0x76543210 cancels the weights exactly.
  auto same_zeros = owned_tensor("qzeros", DType::kI32, {1, 1}, std::vector<int32_t>{0x76543210});
  const auto zero = dequant_all(
      qweight->view, int4_linear(QuantFormat::kAwq, 8, 1, 1, &scales->view, &same_zeros->view));
  CHECK(zero == std::vector<float>(8, 0.0f));
}

TEST_CASE("awq: random tensors match AutoAWQ's unpack + reverse order + dequantize") {
  std::mt19937 rng(7);
  for (auto [in, out, group] :
       {std::tuple{64, 16, 32}, std::tuple{256, 24, 128}, std::tuple{8, 8, 8}}) {
    const int64_t groups = in / group;
    const auto qw = random_words(rng, size_t(in * out / 8));
    const auto qz = random_words(rng, size_t(groups * out / 8));
    const auto sc = random_f16_scales(rng, size_t(groups * out));
    auto qweight = owned_tensor("qweight", DType::kI32, {in, out / 8}, qw);
    auto qzeros = owned_tensor("qzeros", DType::kI32, {groups, out / 8}, qz);
    auto scales = owned_tensor("scales", DType::kF16, {groups, out}, to_f16(sc));
    const LinearQuant q =
        int4_linear(QuantFormat::kAwq, out, in, group, &scales->view, &qzeros->view);
    const auto want = ref::awq_dequantize(qw, qz, sc, in, out, group);
    const auto all = dequant_all(qweight->view, q);
    int wrong = 0;
    for (size_t i = 0; i < all.size(); ++i) wrong += double(all[i]) != want[i];
    CHECK(wrong == 0);
    // Any row range gives the same rows (the runner dequantizes blocks of 16).
    std::vector<float> part(size_t(3 * in));
    dequant_rows(qweight->view, q, out - 3, 3, part.data());
    CHECK(std::equal(part.begin(), part.end(), all.end() - 3 * in));
  }
}

TEST_CASE("gptq: plain nibble order along inputs; v1 zeros are stored minus one") {
  // in = 8, out = 8, one group: every output's qweight word is 0x76543210, so w[o, i] = i − z.
  auto qweight = owned_tensor("qweight", DType::kI32, {1, 8}, std::vector<int32_t>(8, 0x76543210));
  auto qzeros = owned_tensor("qzeros", DType::kI32, {1, 1}, std::vector<int32_t>{0x77777777});
  auto scales = owned_tensor("scales", DType::kF16, {1, 8}, to_f16(std::vector<float>(8, 0.5f)));
  LinearQuant q = int4_linear(QuantFormat::kGptq, 8, 8, 8, &scales->view, &qzeros->view);
  q.zero_offset = 1;  // checkpoint_format gptq (v1): stored 7 means zero point 8
  auto w = dequant_all(qweight->view, q);
  for (int i = 0; i < 8; ++i) CHECK(w[size_t(i)] == 0.5f * float(i - 8));
  q.zero_offset = 0;  // gptq_v2: stored as is
  w = dequant_all(qweight->view, q);
  for (int i = 0; i < 8; ++i) CHECK(w[size_t(40 + i)] == 0.5f * float(i - 7));
  // v1's known overflow: a stored nibble 15 reads as zero point 16 (AutoGPTQ does the same).
  auto wrapped = owned_tensor("qzeros", DType::kI32, {1, 1}, std::vector<int32_t>{-1});
  q.zeros = &wrapped->view;
  q.zero_offset = 1;
  w = dequant_all(qweight->view, q);
  CHECK(w[0] == 0.5f * -16.0f);
}

TEST_CASE("gptq: random tensors match AutoGPTQ, groups in order and act-order g_idx, v1 and v2") {
  std::mt19937 rng(11);
  for (auto [in, out, group, desc_act, v1] :
       {std::tuple{64, 16, 32, false, true}, std::tuple{64, 16, 32, true, true},
        std::tuple{128, 8, -1, false, false}, std::tuple{256, 24, 128, true, false}}) {
    const int64_t groups = group == -1 ? 1 : in / group;
    std::vector<int32_t> g_idx(static_cast<size_t>(in));
    for (int64_t i = 0; i < in; ++i) g_idx[size_t(i)] = group == -1 ? 0 : int32_t(i / group);
    if (desc_act) std::shuffle(g_idx.begin(), g_idx.end(), rng);  // act-order permutes groups
    const auto qw = random_words(rng, size_t(in / 8 * out));
    const auto qz = random_words(rng, size_t(groups * out / 8));
    const auto sc = random_f16_scales(rng, size_t(groups * out));
    auto qweight = owned_tensor("qweight", DType::kI32, {in / 8, out}, qw);
    auto qzeros = owned_tensor("qzeros", DType::kI32, {groups, out / 8}, qz);
    auto scales = owned_tensor("scales", DType::kF16, {groups, out}, to_f16(sc));
    auto gidx = owned_tensor("g_idx", DType::kI32, {in}, g_idx);
    LinearQuant q = int4_linear(QuantFormat::kGptq, out, in, group, &scales->view, &qzeros->view);
    q.zero_offset = v1 ? 1 : 0;
    if (desc_act) q.g_idx = &gidx->view;
    const auto want = ref::gptq_dequantize(qw, qz, sc, g_idx, in, out, v1);
    const auto got = dequant_all(qweight->view, q);
    int wrong = 0;
    for (size_t i = 0; i < got.size(); ++i) wrong += double(got[i]) != want[i];
    CHECK_MESSAGE(wrong == 0, "in ", in, " out ", out, " group ", group, " desc_act ", desc_act);
    // Any row range gives the same rows: one that starts inside a packed word of zero points.
    const int64_t first = 5, count = out - 6;
    std::vector<float> part(size_t(count * in));
    dequant_rows(qweight->view, q, first, count, part.data());
    CHECK(std::equal(part.begin(), part.end(), got.begin() + first * in));
  }
}

TEST_CASE("mkmodel's packers are what the references unpack; RTN error within one step") {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const int64_t out = 16, in = 64, group = 32, groups = 2;
  std::vector<float> w(size_t(out * in));
  for (float& v : w) v = normal(rng);
  std::vector<int32_t> in_order(static_cast<size_t>(in));
  for (int64_t i = 0; i < in; ++i) in_order[size_t(i)] = int32_t(i / group);

  const Int4Groups g = quantize_int4(w.data(), out, in, in_order, groups, false, 1);
  std::vector<float> scales;
  for (uint16_t s : g.scales) scales.push_back(f16_to_f32(s));
  // AWQ: qweight packs q transposed to [in, out].
  std::vector<uint8_t> q_t(size_t(in * out));
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) q_t[size_t(i * out + o)] = g.q[size_t(o * in + i)];
  const auto awq = ref::awq_dequantize(
      pack_awq(q_t.data(), in, out), pack_awq(g.zeros.data(), groups, out), scales, in, out, group);
  const auto gptq = ref::gptq_dequantize(pack_gptq_qweight(g.q.data(), out, in),
                                         pack_gptq_zeros(g.zeros.data(), groups, out, 1), scales,
                                         in_order, in, out, true);
  int far = 0;
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) {
      const size_t k = size_t(o * in + i);
      const double step = scales[size_t((i / group) * out + o)];
      // Half a step, except where the fp16-rounded scale pushes the top of a group past 15.
      far += std::fabs(awq[k] - w[k]) > step + 1e-7;
      far += gptq[k] != awq[k];
    }
  CHECK(far == 0);
}

TEST_CASE("quantize_fp8: scale = amax / 448 per part, values the nearest e4m3 of w / scale") {
  const std::vector<float> w = {0.5f, -2.0f, 0.01f, 1.0f, 0.0f, 0.0f};  // [2, 3]
  std::vector<uint8_t> q(6);
  std::vector<float> s(2);
  quantize_fp8(w.data(), 2, 3, Fp8ScaleGranularity::kChannel, 0, 0, q.data(), s.data());
  CHECK(s[0] == 2.0f / 448.0f);
  CHECK(s[1] == 1.0f / 448.0f);
  for (size_t i = 0; i < 6; ++i)
    CHECK(double(fp8_e4m3_to_f32(q[i])) == ref::e4m3_value(ref::e4m3_nearest(w[i] / s[i / 3])));
  CHECK(fp8_e4m3_to_f32(q[1]) == -448.0f);
  quantize_fp8(w.data(), 2, 3, Fp8ScaleGranularity::kTensor, 0, 0, q.data(), s.data());
  CHECK(s[0] == 2.0f / 448.0f);
  CHECK(fp8_e4m3_to_f32(q[3]) == 224.0f);
}
