// The int4 kernels (kernels/int4_linear.cuh) on layouts repacked from random GPTQ tensors, with
// and without an act-order permutation: the GEMV against fp64 sums of int4_layout_row's weights
// for 1..4 tokens, bf16 and fp32 outputs, and the dequantized matrix bit for bit.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>

#include "gpu_test_util.h"
#include "kernels/int4_linear.cuh"
#include "model/device_quant_layout.h"
#include "unit/quant/quant_test_util.h"

using namespace tandem;
using namespace tandem::gpu_test;

namespace {

struct Shape {
  int n, k, group;  // group -1: one group of k
  bool act_order;
};

// A GPTQ v1 Linear of random nibbles (zero points 1..16) repacked; act_order shuffles g_idx.
Int4Layout random_layout(const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t groups = s.group == -1 ? 1 : s.k / s.group;
  auto qweight = testing::owned_tensor("qweight", DType::kI32, {s.k / 8, s.n},
                                       testing::random_words(rng, size_t(s.k) / 8 * s.n));
  auto qzeros = testing::owned_tensor("qzeros", DType::kI32, {groups, s.n / 8},
                                      testing::random_words(rng, size_t(groups) * s.n / 8));
  auto scales =
      testing::owned_tensor("scales", DType::kF16, {groups, s.n},
                            testing::to_f16(testing::random_f16_scales(rng, size_t(groups) * s.n)));
  std::vector<int32_t> g_idx(static_cast<size_t>(s.k));
  for (int i = 0; i < s.k; ++i) g_idx[size_t(i)] = s.group == -1 ? 0 : i / s.group;
  std::shuffle(g_idx.begin(), g_idx.end(), rng);
  auto gidx = testing::owned_tensor("g_idx", DType::kI32, {s.k}, g_idx);
  LinearQuant q =
      testing::int4_linear(QuantFormat::kGptq, s.n, s.k, s.group, &scales->view, &qzeros->view);
  q.zero_offset = 1;
  if (s.act_order) q.g_idx = &gidx->view;
  auto w = repack_int4(qweight->view, q, "test");
  REQUIRE_MESSAGE(w.ok(), w.error().to_string());
  return std::move(w).value();
}

// The layout on the device; matrix() views it.
struct DeviceInt4 {
  Dev<uint32_t> qweight;
  Dev<uint16_t> scales;
  Dev<uint8_t> zeros;
  Dev<int32_t> perm;
  const Int4Layout& host;
  explicit DeviceInt4(const Int4Layout& w)
      : qweight(w.qweight), scales(w.scales), zeros(w.zeros), perm(w.perm), host(w) {}
  kernels::Int4Matrix matrix() const {
    kernels::Int4Matrix m;
    m.qweight = qweight.p;
    m.scales = reinterpret_cast<const __half*>(scales.p);
    m.zeros = zeros.p;
    m.perm = host.perm.empty() ? nullptr : perm.p;
    m.n = int32_t(host.n);
    m.k = int32_t(host.k);
    m.group_size = int32_t(host.group_size);
    return m;
  }
};

// [n, k] weights in the original feature order.
std::vector<float> host_weights(const Int4Layout& w) {
  std::vector<float> out(size_t(w.n * w.k));
  for (int64_t r = 0; r < w.n; ++r) int4_layout_row(w, r, out.data() + r * w.k);
  return out;
}

const Shape kShapes[] = {
    {40, 96, 32, false},      {40, 96, 32, true},       // k / 32 odd: the lone last block
    {1000, 3584, 128, false}, {1000, 3584, 128, true},  // Qwen2.5-7B's k
    {1000, 3584, -1, false},  {200, 18944, 128, true},  // down_proj's k: x staged in chunks
    {24, 5920, 32, true},                               // chunks ending in the lone block
    {17000, 128, 64, false},  {35000, 96, 32, true},    // several row tiles per thread block
};

}  // namespace

TEST_CASE("int4 gemv matches fp64 for 1..32 tokens, bf16 and fp32 out, permuted or not") {
  uint32_t seed = 1;
  for (const Shape& s : kShapes) {
    CAPTURE(s.n);
    CAPTURE(s.k);
    CAPTURE(s.group);
    CAPTURE(s.act_order);
    const Int4Layout layout = random_layout(s, seed++);
    CHECK(layout.perm.empty() == (!s.act_order || s.group == -1));
    const DeviceInt4 dev(layout);
    const std::vector<float> w = host_weights(layout);
    const auto xb = random_bf16(size_t(kernels::kInt4GemvMaxTokens) * s.k, seed++, 1.0f);
    const auto xf = to_f32(xb);
    const Dev<__nv_bfloat16> x(xb);
    const int ldy = s.n + 5;
    // Every count of one token tile, then padded tiles (9, 17, 31) and whole ones.
    for (int m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 24, 31, kernels::kInt4GemvMaxTokens}) {
      CAPTURE(m);
      for (bool out_f32 : {true, false}) {
        CAPTURE(out_f32);
        const size_t elem = out_f32 ? 4 : 2;
        Dev<uint8_t> y(size_t(m) * ldy * elem), again(size_t(m) * ldy * elem);
        y.poison();
        again.poison();
        kernels::launch_int4_gemv(x.p, dev.matrix(), m, y.p, ldy, out_f32, nullptr);
        kernels::launch_int4_gemv(x.p, dev.matrix(), m, again.p, ldy, out_f32, nullptr);
        const auto bytes = y.get<uint8_t>();
        CHECK(same_bits(bytes.data(), again.get<uint8_t>().data(), bytes.size()));
        for (int t = 0; t < m; ++t) {
          CAPTURE(t);
          std::vector<double> ref(size_t(s.n));
          for (int r = 0; r < s.n; ++r) {
            double acc = 0;
            const float* wr = w.data() + size_t(r) * s.k;
            const float* xt = xf.data() + size_t(t) * s.k;
            for (int i = 0; i < s.k; ++i) acc += double(wr[i]) * xt[i];
            ref[size_t(r)] = acc;
          }
          std::vector<float> got(size_t(s.n));
          const uint8_t* row = bytes.data() + size_t(t) * ldy * elem;
          for (int r = 0; r < s.n; ++r) {
            if (out_f32) {
              std::memcpy(&got[size_t(r)], row + size_t(r) * 4, 4);
            } else {
              uint16_t b;
              std::memcpy(&b, row + size_t(r) * 2, 2);
              got[size_t(r)] = bf16_to_f32(b);
            }
          }
          CHECK(rel_error(got, ref) < (out_f32 ? 1e-5 : 8e-3));
          // Nothing written past n: the poison (all ones) stays.
          const bool untouched = std::all_of(row + size_t(s.n) * elem, row + size_t(ldy) * elem,
                                             [](uint8_t v) { return v == 0xff; });
          CHECK(untouched);
        }
      }
    }
  }
}

TEST_CASE("int4 dequant writes bf16((q - zero) * scale) at the original feature positions") {
  uint32_t seed = 100;
  for (const Shape& s : kShapes) {
    CAPTURE(s.n);
    CAPTURE(s.k);
    CAPTURE(s.act_order);
    const Int4Layout layout = random_layout(s, seed++);
    const DeviceInt4 dev(layout);
    Dev<__nv_bfloat16> out(size_t(s.n) * s.k);
    out.poison();
    kernels::launch_int4_dequant(dev.matrix(), out.p, nullptr);
    const auto got = out.get<uint16_t>();
    const std::vector<float> w = host_weights(layout);
    size_t wrong = 0;
    for (size_t i = 0; i < w.size(); ++i) wrong += got[i] != f32_to_bf16(w[i]);
    CHECK(wrong == 0);
  }
}
