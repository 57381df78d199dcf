// The CPU decode paths of quantized Linears (runner/cpu/int4_dot.h, fp8_dot.h) against
// dequant_rows followed by dot_rows_f32, which they replace for one token: equal bits for every
// row, format and block.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <memory>
#include <random>
#include <tuple>

#include "model/dequant.h"
#include "quant_test_util.h"
#include "runner/cpu/dot_rows.h"
#include "runner/cpu/fp8_dot.h"
#include "runner/cpu/int4_dot.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

// Activations over several binades and both signs, so that a changed order shows in the bits.
std::vector<float> activations(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exp(-6, 3);
  std::vector<float> v(n);
  for (auto& f : v) f = std::ldexp(mant(rng), exp(rng));
  return v;
}

// Rows [row0, row0 + count) through int4_dot_rows or fp8_dot_rows (by q's format) against the
// dequantized reference.
int64_t wrong_rows(const TensorView& w, const LinearQuant& q, const std::vector<float>& x,
                   const std::vector<float>& bias, int64_t row0, int64_t count) {
  auto dot = q.format == QuantFormat::kFp8 ? fp8_dot_rows : int4_dot_rows;
  std::vector<float> rows(size_t(count * q.in_features));
  dequant_rows(w, q, row0, count, rows.data());
  std::vector<float> want(static_cast<size_t>(count)), got(static_cast<size_t>(count), 12345.0f);
  dot_rows_f32(x.data(), 1, rows.data(), count, q.in_features, bias.data() + row0, want.data(),
               count);
  for (int64_t r = 0; r < count; r += kInt4DotRows) {
    const int64_t n = std::min(kInt4DotRows, count - r);
    dot(x.data(), w, q, row0 + r, n, bias.data() + row0 + r, got.data() + r);
  }
  int64_t wrong = 0;
  for (int64_t r = 0; r < count; ++r)
    wrong += std::bit_cast<uint32_t>(got[size_t(r)]) != std::bit_cast<uint32_t>(want[size_t(r)]);
  return wrong;
}

// Every row, then rows [first, first + count), for a random token and bias.
void check_rows(const TensorView& w, const LinearQuant& q, std::mt19937& rng, int64_t first,
                int64_t count) {
  const auto x = activations(rng, size_t(q.in_features));
  const auto bias = activations(rng, size_t(q.out_features));
  CHECK(wrong_rows(w, q, x, bias, 0, q.out_features) == 0);
  CHECK(wrong_rows(w, q, x, bias, first, count) == 0);
}

// Random packed zero points [groups, out / 8] and fp16 scales [groups, out].
struct GroupTensors {
  std::unique_ptr<OwnedTensor> zeros, scales;
};

GroupTensors group_tensors(std::mt19937& rng, int64_t groups, int64_t out) {
  return {owned_tensor("qzeros", DType::kI32, {groups, out / 8},
                       random_words(rng, size_t(groups * out / 8))),
          owned_tensor("scales", DType::kF16, {groups, out},
                       to_f16(random_f16_scales(rng, size_t(groups * out))))};
}

}  // namespace

TEST_CASE("int4 decode dot: AWQ rows equal dequant_rows + dot_rows_f32 bit for bit") {
  std::mt19937 rng(21);
  for (auto [in, out, group] : {std::tuple{64, 16, 32}, std::tuple{256, 136, 128},
                                std::tuple{8, 8, 8}, std::tuple{384, 72, 128}}) {
    CAPTURE(in);
    CAPTURE(out);
    auto qweight = owned_tensor("qweight", DType::kI32, {in, out / 8},
                                random_words(rng, size_t(in * out / 8)));
    const GroupTensors t = group_tensors(rng, in / group, out);
    const LinearQuant q =
        int4_linear(QuantFormat::kAwq, out, in, group, &t.scales->view, &t.zeros->view);
    REQUIRE(int4_dot_fits(q));
    check_rows(qweight->view, q, rng, 8, std::min<int64_t>(out - 8, 16));
  }
}

TEST_CASE("int4 decode dot: GPTQ rows (groups, act-order, one group; v1 and v2) bit for bit") {
  std::mt19937 rng(22);
  for (auto [in, out, group, desc_act, v1] :
       {std::tuple{64, 16, 32, false, true}, std::tuple{64, 24, 16, true, true},
        std::tuple{128, 8, -1, false, false}, std::tuple{256, 136, 128, true, false},
        std::tuple{256, 72, 64, false, false}}) {
    CAPTURE(in);
    CAPTURE(out);
    CAPTURE(desc_act);
    const int64_t groups = group == -1 ? 1 : in / group;
    std::vector<int32_t> g_idx(static_cast<size_t>(in));
    for (int64_t i = 0; i < in; ++i) g_idx[size_t(i)] = group == -1 ? 0 : int32_t(i / group);
    if (desc_act) std::shuffle(g_idx.begin(), g_idx.end(), rng);
    auto qweight = owned_tensor("qweight", DType::kI32, {in / 8, out},
                                random_words(rng, size_t(in / 8 * out)));
    const GroupTensors t = group_tensors(rng, groups, out);
    auto gidx = owned_tensor("g_idx", DType::kI32, {in}, g_idx);
    LinearQuant q =
        int4_linear(QuantFormat::kGptq, out, in, group, &t.scales->view, &t.zeros->view);
    q.zero_offset = v1 ? 1 : 0;
    if (desc_act) q.g_idx = &gidx->view;
    REQUIRE(int4_dot_fits(q));
    check_rows(qweight->view, q, rng, 8, std::min<int64_t>(out - 8, 16));
  }
}

TEST_CASE("int4 decode dot: what it does not serve takes dequant_rows") {
  LinearQuant q;
  q.format = QuantFormat::kAwq;
  q.in_features = 64;
  q.out_features = 16;
  q.group_size = 32;
  CHECK(int4_dot_fits(q));
  q.in_features = 60;  // inputs not in runs of 8
  CHECK_FALSE(int4_dot_fits(q));
  q.in_features = 64;
  q.format = QuantFormat::kGptq;
  q.group_size = 12;  // groups that split a run of 8 inputs, no g_idx
  CHECK_FALSE(int4_dot_fits(q));
  q.group_size = -1;
  CHECK(int4_dot_fits(q));
  q.format = QuantFormat::kFp8;
  CHECK_FALSE(int4_dot_fits(q));
}

TEST_CASE("fp8 decode dot: tensor, channel and block scales (ragged blocks, a tail) bit for bit") {
  std::mt19937 rng(23);
  std::uniform_int_distribution<int> code(0, 255);
  for (auto [in, out, scale] : {std::tuple{64, 16, Fp8ScaleGranularity::kTensor},
                                std::tuple{37, 9, Fp8ScaleGranularity::kChannel},
                                std::tuple{300, 70, Fp8ScaleGranularity::kBlock},
                                std::tuple{256, 128, Fp8ScaleGranularity::kBlock}}) {
    CAPTURE(in);
    CAPTURE(out);
    std::vector<uint8_t> codes(size_t(in * out));
    for (auto& c : codes) {
      do c = uint8_t(code(rng));
      while ((c & 0x7f) == 0x7f);  // no NaN codes: NaN != NaN would count as wrong
    }
    auto w = owned_tensor("w", DType::kF8E4M3, {out, in}, codes);
    LinearQuant q;
    q.format = QuantFormat::kFp8;
    q.out_features = out;
    q.in_features = in;
    q.fp8_scale = scale;
    int64_t scales = 1;
    if (scale == Fp8ScaleGranularity::kChannel) scales = out;
    if (scale == Fp8ScaleGranularity::kBlock) {
      q.block_out = 32;
      q.block_in = 64;
      scales = ((out + 31) / 32) * ((in + 63) / 64);
    }
    auto s = owned_tensor("s", DType::kF32, {scales}, random_f16_scales(rng, size_t(scales)));
    q.scale = &s->view;
    REQUIRE(fp8_dot_fits(q));
    check_rows(w->view, q, rng, 3, out - 5);
  }
  LinearQuant odd;
  odd.format = QuantFormat::kFp8;
  odd.fp8_scale = Fp8ScaleGranularity::kBlock;
  odd.block_in = 12;  // blocks that split a run of 8 inputs
  CHECK_FALSE(fp8_dot_fits(odd));
}
