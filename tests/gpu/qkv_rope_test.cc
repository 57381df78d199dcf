// The fused q|k|v projections (launch_qkv_rope_gemv at 1-2 tokens, launch_skinny_qkv_rope at
// 2-32) against their plain GEMM followed by launch_rope_kv_write: the same bits in q and in
// every K/V page.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "gpu_test_util.h"
#include "kernels/gemm_skinny.cuh"
#include "kernels/gemv.cuh"
#include "kernels/qkv_rope.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/rope_kv.cuh"

using namespace tandem;
using namespace tandem::gpu_test;

namespace {

struct Shape {
  int heads, kv_heads, dim, page_size, k;
};
// Qwen2.5-0.5B and -7B layers, no GQA with an awkward k, and one KV head with k = 72 (a
// partial 32-feature segment).
const Shape kShapes[] = {Shape{14, 2, 64, 1, 896}, Shape{28, 4, 128, 16, 3584},
                         Shape{7, 7, 128, 16, 264}, Shape{8, 1, 64, 16, 72}};

// fused(x, w, m, k, target) against plain(x, w, m, n, k, qkv) then launch_rope_kv_write, for m
// tokens of every shape, with and without a bias.
template <typename Fused, typename Plain>
void check_fused_rope(int m, Fused fused_launch, Plain plain_gemm) {
  for (const Shape& c : kShapes) {
    for (bool with_bias : {true, false}) {
      CAPTURE(c.heads);
      CAPTURE(c.dim);
      CAPTURE(c.k);
      CAPTURE(m);
      CAPTURE(with_bias);
      const int H = c.heads, KVH = c.kv_heads, D = c.dim, P = c.page_size;
      const int W = (H + 2 * KVH) * D;
      const int num_pages = 2 * m + 3;
      const size_t cache_n = size_t(num_pages) * KVH * P * D;
      // Token t at position 37 t + 5 in a scrambled slot of its own.
      std::vector<int32_t> positions, slots;
      std::vector<int32_t> order(size_t(num_pages) * P);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), std::mt19937(uint32_t(m + D)));
      for (int t = 0; t < m; ++t) {
        positions.push_back(37 * t + 5);
        slots.push_back(order[size_t(t)]);
      }
      std::vector<float> inv(size_t(D / 2));
      for (int i = 0; i < D / 2; ++i)
        inv[size_t(i)] = 1.0f / std::pow(1000000.0f, float(2 * i) / D);
      auto xb = random_bf16(size_t(m) * c.k, 5u + uint32_t(m), 1.0f);
      auto wb = random_bf16(size_t(W) * c.k, 17u + uint32_t(W), 0.1f);
      auto bias = random_f32(size_t(W), 3u, -0.5f, 0.5f);
      auto cache = random_bf16(cache_n, 23u, 1.0f);
      Dev<__nv_bfloat16> x(xb), w(wb), qkv(size_t(m) * W);
      Dev<float> dbias(bias), dinv(inv);
      Dev<int32_t> dpos(positions), dslots(slots);
      const float* b = with_bias ? dbias.p : nullptr;
      const kernels::RopeKvShape shape{m, H, KVH, D, P};
      struct Out {
        std::vector<uint16_t> q, k, v;
      };
      auto run = [&](bool fused) {
        Dev<__nv_bfloat16> q(size_t(m) * H * D), kc(cache), vc(cache);
        q.poison();
        if (fused) {
          fused_launch(x.p, w.p, m, c.k,
                       kernels::RopeKvTarget{b, dpos.p, dslots.p, dinv.p, shape, q.p, kc.p, vc.p});
        } else {
          plain_gemm(x.p, w.p, m, W, c.k, qkv.p);
          kernels::launch_rope_kv_write(qkv.p, b, dpos.p, dslots.p, dinv.p, shape, q.p, kc.p, vc.p,
                                        nullptr);
        }
        return Out{q.get<uint16_t>(), kc.get<uint16_t>(), vc.get<uint16_t>()};
      };
      const Out ref = run(false), got = run(true);
      CHECK(same_bits(ref.q.data(), got.q.data(), ref.q.size() * 2));
      CHECK(same_bits(ref.k.data(), got.k.data(), ref.k.size() * 2));
      CHECK(same_bits(ref.v.data(), got.v.data(), ref.v.size() * 2));
      // Not vacuous: every q is written (no poison left) and each token's K and V slots
      // changed from the random cache they started as.
      CHECK(std::all_of(got.q.begin(), got.q.end(),
                        [](uint16_t v) { return std::isfinite(bf16_to_f32(v)); }));
      int changed = 0;
      for (int t = 0; t < m; ++t) {
        const int64_t page = slots[size_t(t)] / P, off = slots[size_t(t)] % P;
        const size_t at = size_t(((page * KVH + 0) * P + off) * D);
        changed += got.k[at] != cache[at] && got.v[at + 1] != cache[at + 1];
      }
      CHECK(changed == m);
    }
  }
}

}  // namespace

TEST_CASE("qkv_rope_gemv equals gemv then rope_kv_write bit for bit") {
  using Bf16 = __nv_bfloat16;
  for (int m : {1, 2}) {
    check_fused_rope(
        m,
        [](const Bf16* x, const Bf16* w, int, int k, const kernels::RopeKvTarget& out) {
          kernels::launch_qkv_rope_gemv(x, w, k, out, nullptr);
        },
        [](const Bf16* x, const Bf16* w, int m_, int n, int k, Bf16* y) {
          kernels::launch_gemv(x, w, m_, n, k, y, false, nullptr);
        });
  }
}

TEST_CASE("skinny_qkv_rope equals skinny_gemm then rope_kv_write bit for bit, every variant") {
  using Bf16 = __nv_bfloat16;
  for (int v = 0; v < kernels::skinny_variants(); ++v) {
    for (int m : {2, 5, 8, 9, 16, 20, 32}) {
      if (m > kernels::skinny_variant_tokens(v)) continue;
      CAPTURE(v);
      check_fused_rope(
          m,
          [v](const Bf16* x, const Bf16* w, int m_, int k, const kernels::RopeKvTarget& out) {
            kernels::launch_skinny_qkv_rope(x, w, m_, k, out, nullptr, v);
          },
          [v](const Bf16* x, const Bf16* w, int m_, int n, int k, Bf16* y) {
            kernels::launch_skinny_gemm(x, w, m_, n, k, y, false, nullptr, 0, v);
          });
    }
  }
}

TEST_CASE("qkv_rope_gemv over NormedRows matches add_rmsnorm then qkv_rope_gemv") {
  // Qwen2.5-0.5B's layer, one and two tokens.
  const int H = 14, KVH = 2, D = 64, P = 16, k = 896, W = (H + 2 * KVH) * D;
  for (int m : {1, 2}) {
    CAPTURE(m);
    const float eps = 1e-6f;
    const int num_pages = 4;
    const size_t cache_n = size_t(num_pages) * KVH * P * D;
    std::vector<int32_t> positions = {17, 40}, slots = {35, 6};
    positions.resize(size_t(m));
    slots.resize(size_t(m));
    std::vector<float> inv(size_t(D / 2));
    for (int i = 0; i < D / 2; ++i) inv[size_t(i)] = 1.0f / std::pow(1000000.0f, float(2 * i) / D);
    auto res = random_f32(size_t(m) * k, 41u, -2.0f, 2.0f);
    auto gamma = random_f32(size_t(k), 43u, 0.5f, 1.5f);
    auto wb = random_bf16(size_t(W) * k, 47u, 0.1f);
    auto bias = random_f32(size_t(W), 3u, -0.5f, 0.5f);
    auto cache = random_bf16(cache_n, 23u, 1.0f);
    Dev<float> dres(res), dgamma(gamma), dbias(bias), dinv(inv);
    Dev<int32_t> dpos(positions), dslots(slots);
    Dev<__nv_bfloat16> w(wb), normed(size_t(m) * k);
    const kernels::RopeKvShape shape{m, H, KVH, D, P};
    struct Out {
      std::vector<float> q, k, v;
    };
    auto run = [&](bool folded) {
      Dev<__nv_bfloat16> q(size_t(m) * H * D), kc(cache), vc(cache);
      q.poison();
      const kernels::RopeKvTarget out{dbias.p, dpos.p, dslots.p, dinv.p, shape, q.p, kc.p, vc.p};
      if (folded) {
        kernels::launch_qkv_rope_gemv(kernels::NormedRows{dres.p, dgamma.p, eps}, w.p, k, out,
                                      nullptr);
      } else {
        kernels::launch_add_rmsnorm(dres.p, nullptr, dgamma.p, m, k, eps, normed.p, nullptr);
        kernels::launch_qkv_rope_gemv(normed.p, w.p, k, out, nullptr);
      }
      return Out{to_f32(q.get<uint16_t>()), to_f32(kc.get<uint16_t>()), to_f32(vc.get<uint16_t>())};
    };
    const Out two = run(false), one = run(true), again = run(true);
    auto close = [](const std::vector<float>& a, const std::vector<float>& b) {
      return rel_error(b, std::vector<double>(a.begin(), a.end()));
    };
    CHECK(close(two.q, one.q) < 2e-3);
    CHECK(close(two.k, one.k) < 2e-3);
    CHECK(close(two.v, one.v) < 2e-3);
    CHECK(same_bits(one.q.data(), again.q.data(), one.q.size() * 4));
    CHECK(same_bits(one.k.data(), again.k.data(), one.k.size() * 4));
    // Not vacuous: the token's K slot moved off the random cache.
    CHECK(one.k[size_t(slots[0]) / P * KVH * P * D + size_t(slots[0]) % P * D] !=
          bf16_to_f32(cache[size_t(slots[0]) / P * KVH * P * D + size_t(slots[0]) % P * D]));
  }
}
