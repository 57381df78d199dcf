// The int4 kernels (kernels/int4_linear.cuh) on layouts repacked from random GPTQ tensors, with
// and without an act-order permutation: the GEMV against fp64 sums of int4_layout_row's weights
// for 1..32 tokens, bf16 and fp32 outputs, the dequantized matrix bit for bit, and the GEMVs
// with SwiGLU and RoPE epilogues against the GEMV followed by the separate kernel, and the GEMVs
// of a folded one-token step against add_rmsnorm followed by the plain launch.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <utility>

#include "gpu_test_util.h"
#include "kernels/int4_linear.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/rope_kv.cuh"
#include "kernels/silu_mul.cuh"
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
    {17000, 384, 128, true},  // group 128 with several tiles a block and an odd group count
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

namespace {

// Elements equal bit for bit, as a fraction.
double equal_fraction(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  size_t same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
  return a.empty() ? 1.0 : double(same) / double(a.size());
}

// a against b as the reference, both bf16.
double bf16_rel_error(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  const std::vector<float> bf = to_f32(b);
  return rel_error(to_f32(a), std::vector<double>(bf.begin(), bf.end()));
}

}  // namespace

// The fused forms round each sum to bf16 and run the separate kernel's device function, so they
// differ from the two launches only where the fused plan splits k differently (sums in another
// order): nearly every element equal, the rest within rounding.
TEST_CASE("int4 gemv with the SwiGLU epilogue matches the gemv then silu_mul") {
  struct Case {
    int width, k;
    bool act_order;
  };
  // Partial row blocks (3 gate tiles), Qwen2.5-0.5B's and -7B's gate|up (act order on one).
  uint32_t seed = 200;
  for (const Case& c : {Case{48, 384, false}, Case{4864, 896, true}, Case{18944, 3584, false}}) {
    CAPTURE(c.width);
    CAPTURE(c.k);
    const Int4Layout layout = random_layout(Shape{2 * c.width, c.k, 128, c.act_order}, seed++);
    const DeviceInt4 dev(layout);
    const auto xb = random_bf16(size_t(16) * c.k, seed++, 1.0f);
    const Dev<__nv_bfloat16> x(xb);
    for (int m : {1, 2, 3, 5, 8, 9, 16}) {
      CAPTURE(m);
      REQUIRE(kernels::int4_swiglu_fuses(dev.matrix(), m));
      Dev<__nv_bfloat16> gate_up(size_t(m) * 2 * c.width), ref(size_t(m) * c.width);
      Dev<__nv_bfloat16> got(size_t(m) * c.width), again(size_t(m) * c.width);
      got.poison();
      again.poison();
      kernels::launch_int4_gemv(x.p, dev.matrix(), m, gate_up.p, 2 * c.width, false, nullptr);
      kernels::launch_silu_mul(gate_up.p, m, c.width, ref.p, nullptr);
      kernels::launch_int4_gemv_swiglu(x.p, dev.matrix(), m, got.p, nullptr);
      kernels::launch_int4_gemv_swiglu(x.p, dev.matrix(), m, again.p, nullptr);
      const auto r = ref.get<uint16_t>(), g = got.get<uint16_t>(), a = again.get<uint16_t>();
      CHECK(same_bits(g.data(), a.data(), g.size() * 2));
      CHECK(bf16_rel_error(g, r) < 2e-3);  // every element written: poison is NaN
      CHECK(equal_fraction(g, r) > 0.99);
    }
  }
}

TEST_CASE("int4 q|k|v gemv with the RoPE epilogue matches the gemv then rope_kv_write") {
  struct Case {
    int heads, kv_heads, dim, page_size, k;
  };
  // Qwen2.5-0.5B's and -7B's layers, and a small head size over few tiles.
  uint32_t seed = 300;
  for (const Case& c :
       {Case{14, 2, 64, 1, 896}, Case{28, 4, 128, 16, 3584}, Case{4, 2, 32, 16, 256}}) {
    const int H = c.heads, KVH = c.kv_heads, D = c.dim, P = c.page_size;
    const int W = (H + 2 * KVH) * D;
    const Int4Layout layout = random_layout(Shape{W, c.k, 128, false}, seed++);
    const DeviceInt4 dev(layout);
    const auto xb = random_bf16(size_t(16) * c.k, seed++, 1.0f);
    const Dev<__nv_bfloat16> x(xb);
    std::vector<float> inv(size_t(D / 2));
    for (int i = 0; i < D / 2; ++i) inv[size_t(i)] = 1.0f / std::pow(1000000.0f, float(2 * i) / D);
    const Dev<float> dinv(inv), dbias(random_f32(size_t(W), seed++, -0.5f, 0.5f));
    for (int m : {1, 2, 3, 8, 16}) {
      for (bool with_bias : {true, false}) {
        CAPTURE(D);
        CAPTURE(m);
        CAPTURE(with_bias);
        // Token t at position 37 t + 5 in a scrambled slot of its own.
        const int num_pages = 2 * m + 3;
        std::vector<int32_t> order(size_t(num_pages) * P), positions, slots;
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), std::mt19937(uint32_t(m + D)));
        for (int t = 0; t < m; ++t) {
          positions.push_back(37 * t + 5);
          slots.push_back(order[size_t(t)]);
        }
        const Dev<int32_t> dpos(positions), dslots(slots);
        const auto cache = random_bf16(size_t(num_pages) * KVH * P * D, seed, 1.0f);
        const kernels::RopeKvShape shape{m, H, KVH, D, P};
        REQUIRE(kernels::int4_qkv_rope_fuses(dev.matrix(), m, shape));
        struct Out {
          std::vector<uint16_t> q, k, v;
        };
        auto run = [&](bool fused) {
          Dev<__nv_bfloat16> q(size_t(m) * H * D), kc(cache), vc(cache), qkv(size_t(m) * W);
          q.poison();
          const kernels::RopeKvTarget out{
              with_bias ? dbias.p : nullptr, dpos.p, dslots.p, dinv.p, shape, q.p, kc.p, vc.p};
          if (fused) {
            kernels::launch_int4_qkv_rope_gemv(x.p, dev.matrix(), m, out, nullptr);
          } else {
            kernels::launch_int4_gemv(x.p, dev.matrix(), m, qkv.p, W, false, nullptr);
            kernels::launch_rope_kv_write(qkv.p, out.bias, dpos.p, dslots.p, dinv.p, shape, q.p,
                                          kc.p, vc.p, nullptr);
          }
          return Out{q.get<uint16_t>(), kc.get<uint16_t>(), vc.get<uint16_t>()};
        };
        const Out ref = run(false), got = run(true), again = run(true);
        CHECK(same_bits(got.q.data(), again.q.data(), got.q.size() * 2));
        CHECK(same_bits(got.k.data(), again.k.data(), got.k.size() * 2));
        CHECK(same_bits(got.v.data(), again.v.data(), got.v.size() * 2));
        CHECK(bf16_rel_error(got.q, ref.q) < 2e-3);  // every q written: poison is NaN
        CHECK(bf16_rel_error(got.k, ref.k) < 2e-3);
        CHECK(bf16_rel_error(got.v, ref.v) < 2e-3);
        CHECK(equal_fraction(got.q, ref.q) > 0.99);
        // Not vacuous: each token's K and V slots moved off the random cache they started as.
        int changed = 0;
        for (int t = 0; t < m; ++t) {
          const size_t at = size_t(slots[size_t(t)] / P * KVH * P + slots[size_t(t)] % P) * D;
          changed += got.k[at] != cache[at] && got.v[at + 1] != cache[at + 1];
        }
        CHECK(changed == m);
      }
    }
  }
}

// A folded one-token step (kernels/int4_linear.cuh): the GEMVs that read a norm take
// RMSNorm(residual) and normalise it per block, and the GEMVs that feed the residual add to it.
// Against launch_add_rmsnorm then the plain launch: the norm's sum of squares runs in another
// order, so a few normalised inputs (and through them outputs) may differ in their last bit; the
// residual add is the same bits as the bf16 GEMV output added on the host.
TEST_CASE("int4 gemvs of a folded step match add_rmsnorm then the gemv (one token)") {
  const float eps = 1e-6f;
  uint32_t seed = 400;
  auto norm_inputs = [&](int k) {
    std::vector<float> res = random_f32(size_t(k), seed++, -2.0f, 2.0f);
    return std::make_pair(res, random_f32(size_t(k), seed++, 0.5f, 1.5f));
  };
  // The reference input: launch_add_rmsnorm's bf16 row.
  auto normed_row = [&](const Dev<float>& res, const Dev<float>& gamma, int k,
                        Dev<__nv_bfloat16>& normed) {
    Dev<float> scratch(res.get<float>());
    kernels::launch_add_rmsnorm(scratch.p, nullptr, gamma.p, 1, k, eps, normed.p, nullptr);
  };
  SUBCASE("SwiGLU over NormedRows") {
    struct Case {
      int width, k;
      bool act_order;
    };
    for (const Case& c : {Case{4864, 896, true}, Case{18944, 3584, false}}) {
      CAPTURE(c.k);
      const Int4Layout layout = random_layout(Shape{2 * c.width, c.k, 128, c.act_order}, seed++);
      const DeviceInt4 dev(layout);
      const auto [res_h, gamma_h] = norm_inputs(c.k);
      const Dev<float> res(res_h), gamma(gamma_h);
      Dev<__nv_bfloat16> normed(size_t(c.k));
      normed_row(res, gamma, c.k, normed);
      Dev<__nv_bfloat16> ref(size_t(c.width)), got(size_t(c.width)), again(size_t(c.width));
      got.poison();
      again.poison();
      kernels::launch_int4_gemv_swiglu(normed.p, dev.matrix(), 1, ref.p, nullptr);
      const kernels::NormedRows in{res.p, gamma.p, eps};
      kernels::launch_int4_gemv_swiglu(in, dev.matrix(), 1, got.p, nullptr);
      kernels::launch_int4_gemv_swiglu(in, dev.matrix(), 1, again.p, nullptr);
      const auto r = ref.get<uint16_t>(), g = got.get<uint16_t>(), a = again.get<uint16_t>();
      CHECK(same_bits(g.data(), a.data(), g.size() * 2));
      CHECK(bf16_rel_error(g, r) < 2e-3);  // every element written: poison is NaN
      CHECK(equal_fraction(g, r) > 0.99);
      CHECK(res.get<float>() == res_h);  // the residual is only read
    }
  }
  SUBCASE("q|k|v with RoPE over NormedRows") {
    struct Case {
      int heads, kv_heads, dim, k;
    };
    for (const Case& c : {Case{14, 2, 64, 896}, Case{28, 4, 128, 3584}}) {
      CAPTURE(c.k);
      const int H = c.heads, KVH = c.kv_heads, D = c.dim, P = 16;
      const int W = (H + 2 * KVH) * D;
      const Int4Layout layout = random_layout(Shape{W, c.k, 128, false}, seed++);
      const DeviceInt4 dev(layout);
      const auto [res_h, gamma_h] = norm_inputs(c.k);
      const Dev<float> res(res_h), gamma(gamma_h);
      Dev<__nv_bfloat16> normed(size_t(c.k));
      normed_row(res, gamma, c.k, normed);
      std::vector<float> inv(size_t(D / 2));
      for (int i = 0; i < D / 2; ++i) inv[size_t(i)] = 1.0f / std::pow(10000.0f, float(2 * i) / D);
      const Dev<float> dinv(inv), dbias(random_f32(size_t(W), seed++, -0.5f, 0.5f));
      const Dev<int32_t> dpos(std::vector<int32_t>{41}), dslots(std::vector<int32_t>{19});
      const auto cache = random_bf16(size_t(3) * KVH * P * D, seed++, 1.0f);
      const kernels::RopeKvShape shape{1, H, KVH, D, P};
      auto run = [&](bool folded) {
        Dev<__nv_bfloat16> q(size_t(H) * D), kc(cache), vc(cache);
        q.poison();
        const kernels::RopeKvTarget out{dbias.p, dpos.p, dslots.p, dinv.p, shape, q.p, kc.p, vc.p};
        if (folded) {
          kernels::launch_int4_qkv_rope_gemv(kernels::NormedRows{res.p, gamma.p, eps}, dev.matrix(),
                                             1, out, nullptr);
        } else {
          kernels::launch_int4_qkv_rope_gemv(normed.p, dev.matrix(), 1, out, nullptr);
        }
        return std::array<std::vector<uint16_t>, 3>{q.get<uint16_t>(), kc.get<uint16_t>(),
                                                    vc.get<uint16_t>()};
      };
      const auto ref = run(false), got = run(true), again = run(true);
      for (int i = 0; i < 3; ++i) {
        CAPTURE(i);
        CHECK(same_bits(got[i].data(), again[i].data(), got[i].size() * 2));
        CHECK(bf16_rel_error(got[i], ref[i]) < 2e-3);  // every q written: poison is NaN
      }
      CHECK(equal_fraction(got[0], ref[0]) > 0.99);
      const size_t at = size_t(19 / P * KVH * P + 19 % P) * D;  // slot 19's K row, head 0
      CHECK(got[1][at] != cache[at]);  // not vacuous: the K/V write happened
    }
  }
  SUBCASE("the residual add") {
    // Qwen2.5-7B's o and down (sliced over a cluster), the 0.5B's o with act order.
    for (const Shape& s : {Shape{3584, 3584, 128, false}, Shape{3584, 18944, 128, false},
                           Shape{896, 896, 128, true}, Shape{40, 96, 32, true}}) {
      CAPTURE(s.k);
      const Int4Layout layout = random_layout(s, seed++);
      const DeviceInt4 dev(layout);
      const Dev<__nv_bfloat16> x(random_bf16(size_t(s.k), seed++, 1.0f));
      const auto res_h = random_f32(size_t(s.n), seed++, -4.0f, 4.0f);
      Dev<__nv_bfloat16> y(size_t(s.n));
      kernels::launch_int4_gemv(x.p, dev.matrix(), 1, y.p, s.n, false, nullptr);
      const std::vector<float> yf = to_f32(y.get<uint16_t>());
      std::vector<float> want(res_h);
      for (size_t i = 0; i < want.size(); ++i) want[i] += yf[i];
      Dev<float> res(res_h);
      kernels::launch_int4_gemv_add(x.p, dev.matrix(), 1, res.p, nullptr);
      const std::vector<float> got = res.get<float>();
      CHECK(same_bits(got.data(), want.data(), got.size() * 4));
      CHECK(got != res_h);
    }
  }
}
