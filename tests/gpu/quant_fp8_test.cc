// FP8 kernels (kernels/fp8_linear.cuh) against the host definitions: activation quantization bit
// for bit against src/runner/cpu/fp8_activations.cc, the decode GEMVs and cuBLASLt's FP8 GEMM
// against fp64 sums of the same e4m3 values, dequantization bit for bit against dequant_rows.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <tuple>

#include "gpu_test_util.h"
#include "kernels/fp8_linear.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/rope_kv.cuh"
#include "kernels/silu_mul.cuh"
#include "model/dequant.h"
#include "model/device_quant_layout.h"
#include "model/quant_pack.h"
#include "runner/cpu/fp8_activations.h"
#include "unit/quant/quant_test_util.h"

using namespace tandem;
using namespace tandem::gpu_test;

namespace {

constexpr int kBlock = kernels::kFp8Block;

int ceil_div(int a, int b) {
  return (a + b - 1) / b;
}

// Activations whose rows differ in magnitude by orders (1e-3 .. 1e2), with a few outliers, so
// per-token scales differ; row `zero_row` is all zeros (the scale floor).
std::vector<uint16_t> activations(int m, int k, uint32_t seed, int zero_row) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<uint16_t> x(size_t(m) * k);
  for (int t = 0; t < m; ++t) {
    const float mag = std::pow(10.0f, float(t % 6) - 3.0f);
    for (int i = 0; i < k; ++i) {
      float v = t == zero_row ? 0.0f : d(g) * mag;
      if (t != zero_row && (i * 37 + t) % 251 == 0) v *= 40.0f;
      x[size_t(t) * k + i] = f32_to_bf16(v);
    }
  }
  return x;
}

// Host e4m3 quantization of activations with CPU-definition scales, for the GEMV and GEMM
// inputs (the quantize kernel is tested separately below).
void quantize_host(const std::vector<float>& x, int m, int k, int group, std::vector<uint8_t>& q,
                   std::vector<float>& s) {
  const int groups = ceil_div(k, group);
  q.resize(size_t(m) * k);
  s.resize(size_t(m) * groups);
  for (int t = 0; t < m; ++t)
    for (int g = 0; g < groups; ++g) {
      float amax = 0;
      for (int i = g * group; i < std::min(k, (g + 1) * group); ++i)
        amax = std::max(amax, std::fabs(x[size_t(t) * k + i]));
      const float scale = std::max(amax / 448.0f, 1.0f / (448.0f * 512.0f));
      s[size_t(t) * groups + g] = scale;
      for (int i = g * group; i < std::min(k, (g + 1) * group); ++i)
        q[size_t(t) * k + i] = f32_to_fp8_e4m3(x[size_t(t) * k + i] / scale);
    }
}

// A realistic [n, k] fp8 weight (normal values quantized per channel or per 128 × 128 block).
struct Weight {
  std::vector<uint8_t> q;
  std::vector<float> scale;
  int n = 0, k = 0;
  bool block = false;
};

Weight make_weight(int n, int k, bool block, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> f(size_t(n) * k);
  for (auto& v : f) v = d(g);
  Weight w;
  w.n = n;
  w.k = k;
  w.block = block;
  w.q.resize(f.size());
  w.scale.resize(block ? size_t(ceil_div(n, kBlock)) * ceil_div(k, kBlock) : size_t(n));
  quantize_fp8(f.data(), n, k, block ? Fp8ScaleGranularity::kBlock : Fp8ScaleGranularity::kChannel,
               kBlock, kBlock, w.q.data(), w.scale.data());
  return w;
}

float w_scale(const Weight& w, int r, int i) {
  return w.block ? w.scale[size_t(r / kBlock) * ceil_div(w.k, kBlock) + i / kBlock]
                 : w.scale[size_t(r)];
}

// fp64 y[t, r] over the e4m3 values: Σ over 128-feature segments of the segment's exact sum
// times its scales (x_scale per `group`, or 1 for bf16 activations given in xf).
std::vector<double> reference(const std::vector<double>& xv, const std::vector<float>* xs,
                              int group, const Weight& w, int m) {
  const int groups = ceil_div(w.k, group);
  std::vector<double> y(size_t(m) * w.n);
  for (int t = 0; t < m; ++t)
    for (int r = 0; r < w.n; ++r) {
      double acc = 0;
      for (int i = 0; i < w.k; ++i) {
        const double xsv = xs ? double((*xs)[size_t(t) * groups + i / group]) : 1.0;
        acc += xv[size_t(t) * w.k + i] * xsv * double(fp8_e4m3_to_f32(w.q[size_t(r) * w.k + i])) *
               double(w_scale(w, r, i));
      }
      y[size_t(t) * w.n + r] = acc;
    }
  return y;
}

std::vector<double> e4m3_values(const std::vector<uint8_t>& q) {
  std::vector<double> v(q.size());
  for (size_t i = 0; i < q.size(); ++i) v[i] = fp8_e4m3_to_f32(q[i]);
  return v;
}

// y [m, ldy] read back: the [m, n] part as floats, and whether columns n..ldy kept the poison.
struct Output {
  std::vector<float> y;
  bool gaps_untouched = true;
};

Output read_output(const Dev<float>& y32, const Dev<__nv_bfloat16>& y16, bool out_f32, int m, int n,
                   int ldy) {
  Output o;
  o.y.resize(size_t(m) * n);
  if (out_f32) {
    const auto h = y32.get<uint32_t>();
    for (int t = 0; t < m; ++t)
      for (int j = 0; j < ldy; ++j) {
        const uint32_t bits = h[size_t(t) * ldy + j];
        if (j < n) {
          std::memcpy(&o.y[size_t(t) * n + j], &bits, 4);
        } else {
          o.gaps_untouched &= bits == 0xffffffffu;
        }
      }
  } else {
    const auto h = y16.get<uint16_t>();
    for (int t = 0; t < m; ++t)
      for (int j = 0; j < ldy; ++j) {
        const uint16_t bits = h[size_t(t) * ldy + j];
        if (j < n) {
          o.y[size_t(t) * n + j] = bf16_to_f32(bits);
        } else {
          o.gaps_untouched &= bits == 0xffffu;
        }
      }
  }
  return o;
}

// One output type of a GEMV/GEMM: `launch(y)` into poisoned [m, ldy] buffers, the columns past
// n untouched, the relative error against `ref` within `tol` (returned), a bit-identical rerun.
template <typename Launch>
double check_output(int m, int n, int ldy, bool out_f32, const std::vector<double>& ref, double tol,
                    Launch&& launch) {
  Dev<float> y32(size_t(m) * ldy);
  Dev<__nv_bfloat16> y16(size_t(m) * ldy);
  auto run = [&] {
    y32.poison();
    y16.poison();
    launch(out_f32 ? static_cast<void*>(y32.p) : static_cast<void*>(y16.p));
    return read_output(y32, y16, out_f32, m, n, ldy);
  };
  const Output out = run();
  CHECK(out.gaps_untouched);
  const double err = rel_error(out.y, ref);
  CHECK(err < tol);
  const Output again = run();
  CHECK(same_bits(out.y.data(), again.y.data(), out.y.size() * 4));
  return err;
}

kernels::Fp8Matrix matrix(const Weight& w, const Dev<uint8_t>& q, const Dev<float>& s) {
  kernels::Fp8Matrix m;
  m.weight = q.p;
  m.scale = s.p;
  m.block = w.block;
  m.n = w.n;
  m.k = w.k;
  return m;
}

}  // namespace

TEST_CASE("fp8 quantize: bit-identical to fp8_fake_quantize_activations on awkward shapes") {
  struct Case {
    Fp8Activations kind;
    double ub;
  };
  for (auto [m, k] :
       {std::pair{1, 16}, std::pair{3, 272}, std::pair{7, 1040}, std::pair{2, 3584}}) {
    for (Case c :
         {Case{Fp8Activations::kDynamicPerToken, 0}, Case{Fp8Activations::kDynamicPerToken, 0.5},
          Case{Fp8Activations::kStaticTensor, 0}, Case{Fp8Activations::kDynamicPerTokenGroup, 0}}) {
      CAPTURE(m);
      CAPTURE(k);
      CAPTURE(int(c.kind));
      CAPTURE(c.ub);
      const auto xb = activations(m, k, 100u + m + k, m > 1 ? 1 : -1);
      const auto xf = to_f32(xb);
      const float static_scale = 0.0137f;
      auto in_scale =
          testing::owned_tensor("input_scale", DType::kF32, {}, std::vector<float>{static_scale});
      LinearQuant q;
      q.format = QuantFormat::kFp8;
      q.fp8_activations = c.kind;
      q.activation_scale_ub = c.ub;
      q.block_in = kBlock;
      q.input_scale = &in_scale->view;
      std::vector<float> want(xf.size());
      fp8_fake_quantize_activations(q, xf.data(), m, k, want.data());

      const int group = c.kind == Fp8Activations::kDynamicPerTokenGroup ? kBlock : k;
      const int groups = ceil_div(k, group);
      Dev<__nv_bfloat16> x(xb);
      Dev<float> s_static(std::vector<float>{static_scale});
      Dev<uint8_t> xq(size_t(m) * k);
      Dev<float> xs(size_t(m) * groups);
      auto run = [&] {
        xq.poison();
        xs.poison();
        kernels::launch_fp8_quantize(x.p, m, k, group,
                                     c.kind == Fp8Activations::kStaticTensor ? s_static.p : nullptr,
                                     float(c.ub), xq.p, xs.p, nullptr);
        return std::pair{xq.get<uint8_t>(), xs.get<float>()};
      };
      const auto [codes, scales] = run();
      int bad = 0;
      for (int t = 0; t < m; ++t)
        for (int i = 0; i < k; ++i) {
          const size_t at = size_t(t) * k + i;
          const float s = scales[size_t(t) * groups + i / group];
          const float got = fp8_e4m3_to_f32(codes[at]) * s;
          bad += std::memcmp(&got, &want[at], 4) != 0;
          // The byte itself, as core/dtype.h rounds x / s.
          bad += codes[at] != f32_to_fp8_e4m3(xf[at] / s);
        }
      CHECK(bad == 0);
      if (m > 1 && c.kind != Fp8Activations::kStaticTensor) {
        CHECK(scales[size_t(groups)] == 1.0f / (448.0f * 512.0f));  // the all-zero row's floor
      }
      if (c.kind == Fp8Activations::kStaticTensor) {
        for (float s : scales) CHECK(s == static_scale);
      }
      const auto [codes2, scales2] = run();
      CHECK((codes2 == codes));
      CHECK(same_bits(scales2.data(), scales.data(), scales.size() * 4));
    }
  }
}

TEST_CASE("add_rmsnorm_fp8: add_rmsnorm's bits, then launch_fp8_quantize's on its output") {
  struct Case {
    bool static_scale;
    float ub;
  };
  // Widths of one thread's 4 and 8 values, one not a multiple of the block; rows of very
  // different magnitudes and one zero row (the dynamic scale's floor).
  // 260 rows: a prefill-sized batch.
  for (auto [m, k] : {std::pair{1, 896}, std::pair{3, 1040}, std::pair{2, 3584}, std::pair{2, 4112},
                      std::pair{1, 8192}, std::pair{260, 4112}}) {
    for (Case c : {Case{false, 0.0f}, Case{false, 0.5f}, Case{true, 0.0f}}) {
      CAPTURE(m);
      CAPTURE(k);
      CAPTURE(c.static_scale);
      CAPTURE(c.ub);
      const auto res = to_f32(activations(m, k, 7u + k, m > 2 ? 2 : -1));
      const auto delta = activations(m, k, 9u + k, -1);
      std::vector<float> gamma(static_cast<size_t>(k));
      for (int i = 0; i < k; ++i) gamma[size_t(i)] = 0.5f + float(i % 7) * 0.25f;
      const float eps = 1e-6f;
      Dev<float> r_ref(res), r(res), g(gamma), s_static(std::vector<float>{0.0137f});
      Dev<__nv_bfloat16> d(delta), out_ref(size_t(m) * k), out(size_t(m) * k);
      Dev<uint8_t> xq_ref(size_t(m) * k), xq(size_t(m) * k);
      Dev<float> xs_ref(static_cast<size_t>(m)), xs(static_cast<size_t>(m));
      const float* st = c.static_scale ? s_static.p : nullptr;
      kernels::launch_add_rmsnorm(r_ref.p, d.p, g.p, m, k, eps, out_ref.p, nullptr);
      kernels::launch_fp8_quantize(out_ref.p, m, k, k, st, c.ub, xq_ref.p, xs_ref.p, nullptr);
      auto run = [&] {
        out.poison();
        xq.poison();
        xs.poison();
        TANDEM_CUDA_CHECK(cudaMemcpy(r.p, res.data(), res.size() * 4, cudaMemcpyHostToDevice));
        kernels::launch_add_rmsnorm_fp8(r.p, d.p, g.p, m, k, eps, out.p,
                                        kernels::Fp8RowQuant{xq.p, xs.p, st, c.ub}, nullptr);
        return std::tuple{out.get<uint16_t>(), xq.get<uint8_t>(), xs.get<float>()};
      };
      const auto [o, q, sc] = run();
      CHECK((o == out_ref.get<uint16_t>()));
      CHECK((q == xq_ref.get<uint8_t>()));
      const auto sc_ref = xs_ref.get<float>();
      CHECK(same_bits(sc.data(), sc_ref.data(), sc.size() * 4));
      const auto rr = r.get<float>(), rr_ref = r_ref.get<float>();
      CHECK(same_bits(rr.data(), rr_ref.data(), rr.size() * 4));
      const auto [o2, q2, sc2] = run();
      CHECK((q2 == q));
      CHECK(same_bits(sc2.data(), sc.data(), sc.size() * 4));
    }
  }
}

TEST_CASE("fp8 quantize: every finite bf16 converts as core/dtype's f32_to_fp8_e4m3") {
  // All 65,536 bf16 patterns at a static scale of 1, so q = e4m3(x): rounding to nearest even,
  // subnormals, saturation of large values and ±inf. NaN is left out (no definition needs it).
  std::vector<uint16_t> xb(65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    const bool nan = (i & 0x7f80u) == 0x7f80u && (i & 0x7fu) != 0;
    xb[i] = nan ? 0 : uint16_t(i);
  }
  Dev<__nv_bfloat16> x(xb);
  Dev<float> one(std::vector<float>{1.0f});
  Dev<uint8_t> xq(xb.size());
  Dev<float> xs(256);
  kernels::launch_fp8_quantize(x.p, 256, 256, 256, one.p, 0.0f, xq.p, xs.p, nullptr);
  const auto codes = xq.get<uint8_t>();
  int bad = 0;
  for (size_t i = 0; i < xb.size(); ++i) bad += codes[i] != f32_to_fp8_e4m3(bf16_to_f32(xb[i]));
  CHECK(bad == 0);
}

// W8A8 shapes whose k is whole 128-feature segments take the tensor-core GEMV on sm_89+ from two
// tokens, and at one for block scales (fp8_gemv_mma.cuh); the others the CUDA-core one. Both hold
// 1e-5 in fp32 (the tensor-core form measured 3-8e-8 at two tokens, H200).
TEST_CASE("fp8 gemv (W8A8, m = 1..8): channel and block weights against fp64") {
  for (auto [n, k] :
       {std::pair{37, 16}, std::pair{300, 272}, std::pair{129, 4096}, std::pair{1000, 1040},
        std::pair{37, 256}, std::pair{300, 896}, std::pair{64, 128}}) {
    for (bool block : {false, true}) {
      const Weight w = make_weight(n, k, block, 7u + n + k);
      Dev<uint8_t> wq(w.q);
      Dev<float> ws(w.scale);
      const kernels::Fp8Matrix wm = matrix(w, wq, ws);
      for (int m = 1; m <= kernels::kFp8GemvMaxTokens; ++m) {
        CAPTURE(n);
        CAPTURE(k);
        CAPTURE(block);
        CAPTURE(m);
        const int group = block ? kBlock : k;
        std::vector<uint8_t> xq_h;
        std::vector<float> xs_h;
        quantize_host(to_f32(activations(m, k, 3u * m + k, -1)), m, k, group, xq_h, xs_h);
        const auto ref = reference(e4m3_values(xq_h), &xs_h, group, w, m);
        Dev<uint8_t> xq(xq_h);
        Dev<float> xs(xs_h);
        const int ldy = n + 3;
        for (bool out_f32 : {true, false}) {
          CAPTURE(out_f32);
          const double err =
              check_output(m, n, ldy, out_f32, ref, out_f32 ? 1e-5 : 8e-3, [&](void* y) {
                kernels::launch_fp8_gemv(xq.p, xs.p, group, wm, m, y, ldy, out_f32, nullptr);
              });
          if (out_f32 && k % 128 == 0 && m == 2) MESSAGE("fp32 rel error " << err);
        }
      }
    }
  }
}

TEST_CASE("fp8 gemv_a16 (W8A16, m = 1..8): bf16 activations against fp64") {
  for (auto [n, k] : {std::pair{37, 16}, std::pair{300, 272}, std::pair{129, 4096}}) {
    for (bool block : {false, true}) {
      const Weight w = make_weight(n, k, block, 11u + n + k);
      Dev<uint8_t> wq(w.q);
      Dev<float> ws(w.scale);
      const kernels::Fp8Matrix wm = matrix(w, wq, ws);
      for (int m = 1; m <= kernels::kFp8GemvMaxTokens; ++m) {
        CAPTURE(n);
        CAPTURE(k);
        CAPTURE(block);
        CAPTURE(m);
        const auto xb = activations(m, k, 5u * m + k, -1);
        const auto xf = to_f32(xb);
        const auto ref = reference(std::vector<double>(xf.begin(), xf.end()), nullptr, k, w, m);
        Dev<__nv_bfloat16> x(xb);
        const int ldy = n + 2;
        for (bool out_f32 : {true, false}) {
          CAPTURE(out_f32);
          check_output(m, n, ldy, out_f32, ref, out_f32 ? 1e-5 : 8e-3, [&](void* y) {
            kernels::launch_fp8_gemv_a16(x.p, wm, m, y, ldy, out_f32, nullptr);
          });
        }
      }
    }
  }
}

TEST_CASE("fp8 dequant: the repacked layout to bf16 equals dequant_rows rounded, bit for bit") {
  std::mt19937 g(9);
  for (auto gran :
       {Fp8ScaleGranularity::kTensor, Fp8ScaleGranularity::kChannel, Fp8ScaleGranularity::kBlock}) {
    const int n = 300, k = 272;
    CAPTURE(int(gran));
    // Every finite code, bf16 scales (the checkpoint dtype of many block fp8 models).
    std::vector<uint8_t> codes(size_t(n) * k);
    for (auto& c : codes) {
      do c = uint8_t(g() & 0xff);
      while ((c & 0x7f) == 0x7f);
    }
    const int count = gran == Fp8ScaleGranularity::kTensor ? 1
                      : gran == Fp8ScaleGranularity::kChannel
                          ? n
                          : ceil_div(n, kBlock) * ceil_div(k, kBlock);
    std::vector<uint16_t> sb(static_cast<size_t>(count));
    std::uniform_real_distribution<float> d(1e-4f, 3e-2f);
    for (auto& s : sb) s = f32_to_bf16(d(g));
    auto wt = testing::owned_tensor("m.weight", DType::kF8E4M3, {n, k}, codes);
    auto st = testing::owned_tensor("m.weight_scale", DType::kBF16, {count}, sb);
    LinearQuant q;
    q.format = QuantFormat::kFp8;
    q.out_features = n;
    q.in_features = k;
    q.fp8_scale = gran;
    q.block_out = q.block_in = kBlock;
    q.scale = &st->view;
    auto layout = repack_fp8(wt->view, q, "m");
    REQUIRE(layout.ok());
    Dev<uint8_t> wq(layout->weight);
    Dev<float> ws(layout->scale);
    kernels::Fp8Matrix wm;
    wm.weight = wq.p;
    wm.scale = ws.p;
    wm.block = layout->block;
    wm.n = n;
    wm.k = k;
    Dev<__nv_bfloat16> out(size_t(n) * k);
    out.poison();
    kernels::launch_fp8_dequant(wm, out.p, nullptr);
    const auto got = out.get<uint16_t>();
    std::vector<float> want(size_t(n) * k);
    dequant_rows(wt->view, q, 0, n, want.data());
    int bad = 0;
    for (size_t i = 0; i < want.size(); ++i) bad += got[i] != f32_to_bf16(want[i]);
    CHECK(bad == 0);
  }
}

// cuBLASLt's FP8 kernels on Hopper accumulate e4m3 products in the tensor cores with fewer than
// fp32's bits and promote partial sums to fp32 every few k-steps; the order also differs from
// the fp64 sum. Observed errors are ~1e-5..1e-4 of ‖y‖; 1e-3 (fp32 out) still fails any
// mis-scaled row, token or block (each is off by a factor, an error of order 1).
TEST_CASE("Fp8GemmContext: channel and block scales, m in {5, 17, 64, 300}, against fp64") {
  kernels::Fp8GemmContext ctx;
  struct Shape {
    int n, k;
    bool block;
    bool unit_scales;  // force the fallback (channel only)
  };
  for (Shape sh : {Shape{300, 1024, false, false}, Shape{300, 1024, false, true},
                   Shape{512, 3584, false, false}, Shape{384, 1024, true, false},
                   Shape{640, 1152, true, false}}) {
    const auto [n, k, block, unit] = sh;
    CAPTURE(n);
    CAPTURE(k);
    CAPTURE(block);
    CAPTURE(unit);
    REQUIRE(ctx.supports(n, k, block));
    const Weight w = make_weight(n, k, block, 13u + n + k);
    Dev<uint8_t> wq(w.q);
    Dev<float> ws(w.scale);
    const kernels::Fp8Matrix wm = matrix(w, wq, ws);
    ctx.prefer_unit_scales(unit);
    for (bool out_f32 : {true, false}) {
      ctx.prepare(300, n, k, block, out_f32);
      std::printf("Fp8GemmContext n=%d k=%d block=%d out_f32=%d: %s\n", n, k, int(block),
                  int(out_f32), ctx.mode(n, k, block, out_f32));
      for (int m : {5, 17, 64, 300}) {
        CAPTURE(out_f32);
        CAPTURE(m);
        const int group = block ? kBlock : k;
        const int groups = ceil_div(k, group);
        // The device quantizer feeds the GEMM, as in the runner; the reference uses its output.
        Dev<__nv_bfloat16> x(activations(m, k, 17u * m + k, 2));
        Dev<uint8_t> xq(size_t(ceil_div(m, 16) * 16) * k);  // block fp8 reads whole 16 rows
        Dev<float> xs(size_t(m) * groups);
        kernels::launch_fp8_quantize(x.p, m, k, group, nullptr, 0.0f, xq.p, xs.p, nullptr);
        const auto xs_h = xs.get<float>();
        const auto ref = reference(e4m3_values(xq.get<uint8_t>()), &xs_h, group, w, m);
        const int ldy = n + 8;
        const double err =
            check_output(m, n, ldy, out_f32, ref, out_f32 ? 1e-3 : 8e-3,
                         [&](void* y) { ctx.run(xq.p, xs.p, wm, m, y, ldy, out_f32, nullptr); });
        if (m == 300) std::printf("  m=%d rel_error=%.2e\n", m, err);
      }
    }
  }
  ctx.prefer_unit_scales(false);
  CHECK(!ctx.supports(300, 1040, true));  // block fp8 wants whole 128-feature blocks here
  CHECK(!ctx.supports(300, 1024, true));  // and whole 128-row weight blocks (H200, cuBLASLt 13)
}

// The fused epilogues of the W8A8 GEMV (SwiGLU; RoPE with the K/V page write) against the GEMV
// (bf16 out) then launch_silu_mul / launch_rope_kv_write: the same bits, since each row's sum
// runs over the same chunks in the same order however many rows a warp holds. Each form also
// runs overlapped (pdl.cuh) on a stream after the quantize kernel that writes its input, itself
// overlapped: a read on the wrong side of a wait sees the poisoned xq and differs.
namespace {

// The kernel-side input: xq / x_scale from launch_fp8_quantize on `x`, optionally overlapped
// on `stream` after poisoning them (so a premature read differs).
void quantize_on(const Dev<__nv_bfloat16>& x, int m, int k, int group, Dev<uint8_t>& xq,
                 Dev<float>& xs, bool pdl, cudaStream_t stream) {
  xq.poison();
  xs.poison();
  kernels::launch_fp8_quantize(x.p, m, k, group, nullptr, 0.0f, xq.p, xs.p, stream, pdl);
}

// launch_fp8_gemv_swiglu's act_amax (each token's max |act| as fp32 bits, raised into zeroed
// slots) and launch_fp8_quantize_amax over it: the act bits of the plain form (`want`), and the
// codes and scales launch_fp8_quantize gives `act` (with and without an upper bound), overlapped
// launches too; its `clear` slots zeroed.
void check_act_amax(const kernels::Fp8Matrix& wm, int group, const Dev<uint8_t>& xq,
                    const Dev<float>& xs, int m, const std::vector<uint16_t>& want) {
  const int width = wm.n / 2;
  std::vector<uint32_t> most(size_t(m), 0u);
  for (int t = 0; t < m; ++t)
    for (int j = 0; j < width; ++j) {
      const float a = std::fabs(bf16_to_f32(want[size_t(t) * width + j]));
      uint32_t bits = 0;
      std::memcpy(&bits, &a, 4);
      most[size_t(t)] = std::max(most[size_t(t)], bits);
    }
  Dev<__nv_bfloat16> act(size_t(m) * width);
  const size_t words = size_t(kernels::kFp8GemvMaxTokens) * kernels::kAmaxTokenWords;
  Dev<uint32_t> amax(words), clear(words);
  Dev<uint8_t> q_want(size_t(m) * width), q_got(size_t(m) * width);
  Dev<float> s_want{size_t(m)}, s_got{size_t(m)};
  for (bool pdl : {false, true}) {
    CAPTURE(pdl);
    TANDEM_CUDA_CHECK(cudaMemset(amax.p, 0, amax.n * sizeof(uint32_t)));
    act.poison();
    kernels::launch_fp8_gemv_swiglu(xq.p, xs.p, group, wm, m, act.p, nullptr, pdl, amax.p);
    CHECK((act.get<uint16_t>() == want));
    // Each token's max over its slots; nothing written past its m tokens or between slots.
    const auto got = amax.get<uint32_t>();
    for (int t = 0; t < kernels::kFp8GemvMaxTokens; ++t) {
      CAPTURE(t);
      uint32_t high = 0;
      int used = 0;
      for (int i = 0; i < kernels::kAmaxTokenWords; ++i) {
        const uint32_t v = got[size_t(t) * kernels::kAmaxTokenWords + size_t(i)];
        if (i % kernels::kAmaxStride != 0) CHECK(v == 0u);
        high = std::max(high, v);
        used += v != 0u;
      }
      CHECK(high == (t < m ? most[size_t(t)] : 0u));
      if (t < m && width >= 64) CHECK(used > 1);  // spread, not one slot
    }
    for (float ub : {0.0f, 0.5f}) {
      CAPTURE(ub);
      q_want.poison();
      s_want.poison();
      kernels::launch_fp8_quantize(act.p, m, width, width, nullptr, ub, q_want.p, s_want.p,
                                   nullptr);
      q_got.poison();
      s_got.poison();
      clear.poison();
      kernels::launch_fp8_quantize_amax(act.p, m, width, amax.p, ub, q_got.p, s_got.p, clear.p,
                                        nullptr, pdl);
      CHECK((q_got.get<uint8_t>() == q_want.get<uint8_t>()));
      const auto a = s_got.get<float>(), b = s_want.get<float>();
      CHECK(same_bits(a.data(), b.data(), a.size() * 4));
      const auto zeroed = clear.get<uint32_t>();
      int nonzero_slots = 0;
      for (size_t i = 0; i < zeroed.size(); i += kernels::kAmaxStride)
        nonzero_slots += zeroed[i] != 0u;
      CHECK(nonzero_slots == 0);
    }
  }
}

}  // namespace

TEST_CASE("fp8 gemv fused epilogues (SwiGLU, RoPE) equal the gemv then silu_mul / rope_kv_write") {
  cudaStream_t stream = nullptr;
  TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  uint32_t seed = 900;
  SUBCASE("SwiGLU") {
    // Qwen2.5-0.5B's gate|up rows over a short k, an odd width, and the 7B's 18,944 over 3,584.
    for (auto [width, k] : {std::pair{4864, 272}, std::pair{37, 1040}, std::pair{18944, 3584}}) {
      for (bool block : {false, true}) {
        const Weight w = make_weight(2 * width, k, block, seed++);
        Dev<uint8_t> wq(w.q);
        Dev<float> ws(w.scale);
        const kernels::Fp8Matrix wm = matrix(w, wq, ws);
        const int group = block ? kBlock : k;
        for (int m : {1, 2, 3, 4, 8}) {
          CAPTURE(width);
          CAPTURE(block);
          CAPTURE(m);
          const Dev<__nv_bfloat16> x(activations(m, k, seed++, -1));
          Dev<uint8_t> xq(size_t(m) * k);
          Dev<float> xs(size_t(m) * ceil_div(k, kBlock));
          Dev<__nv_bfloat16> gu(size_t(m) * 2 * width), ref(size_t(m) * width);
          quantize_on(x, m, k, group, xq, xs, false, nullptr);
          kernels::launch_fp8_gemv(xq.p, xs.p, group, wm, m, gu.p, 2 * width, false, nullptr);
          kernels::launch_silu_mul(gu.p, m, width, ref.p, nullptr);
          const auto want = ref.get<uint16_t>();
          for (bool pdl : {false, true}) {
            CAPTURE(pdl);
            Dev<__nv_bfloat16> act(size_t(m) * width);
            act.poison();
            quantize_on(x, m, k, group, xq, xs, pdl, stream);
            kernels::launch_fp8_gemv_swiglu(xq.p, xs.p, group, wm, m, act.p, stream, pdl);
            TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
            CHECK((act.get<uint16_t>() == want));
          }
          int nonzero = 0;  // not vacuous
          for (uint16_t v : want) nonzero += (v & 0x7fffu) != 0;
          CHECK(nonzero > int(want.size()) / 2);
          // act as a quantize input (down's: widths of 16-feature chunks; 37 is not one).
          if (width % 16 == 0 && kernels::fp8_swiglu_gives_amax(wm, m, group)) {
            check_act_amax(wm, group, xq, xs, m, want);
          }
        }
      }
    }
  }
  SUBCASE("RoPE") {
    struct Case {
      int heads, kv_heads, dim, page_size, k;
    };
    for (const Case& c :
         {Case{14, 2, 64, 1, 896}, Case{28, 4, 128, 16, 3584}, Case{4, 2, 32, 16, 272}}) {
      const int H = c.heads, KVH = c.kv_heads, D = c.dim, P = c.page_size;
      const int W = (H + 2 * KVH) * D;
      std::vector<float> inv(size_t(D / 2));
      for (int i = 0; i < D / 2; ++i) inv[size_t(i)] = 1.0f / std::pow(1e6f, float(2 * i) / D);
      std::vector<float> bias(static_cast<size_t>(W));
      for (int i = 0; i < W; ++i) bias[size_t(i)] = float((i * 7919) % 101) / 100.0f - 0.5f;
      const Dev<float> dinv(inv), dbias(bias);
      for (bool block : {false, true}) {
        const Weight w = make_weight(W, c.k, block, seed++);
        Dev<uint8_t> wq(w.q);
        Dev<float> ws(w.scale);
        const kernels::Fp8Matrix wm = matrix(w, wq, ws);
        const int group = block ? kBlock : c.k;
        for (int m : {1, 3, 8}) {
          CAPTURE(D);
          CAPTURE(block);
          CAPTURE(m);
          const int num_pages = 2 * m + 3;
          std::vector<int32_t> positions, slots;
          for (int t = 0; t < m; ++t) {
            positions.push_back(37 * t + 5);
            slots.push_back((t * 5 + 3) % (num_pages * P));
          }
          const Dev<int32_t> dpos(positions), dslots(slots);
          const kernels::RopeKvShape shape{m, H, KVH, D, P};
          REQUIRE(kernels::fp8_qkv_rope_fuses(wm, m, shape));
          const Dev<__nv_bfloat16> x(activations(m, c.k, seed++, -1));
          Dev<uint8_t> xq(size_t(m) * c.k);
          Dev<float> xs(size_t(m) * ceil_div(c.k, kBlock));
          struct Out {
            std::vector<uint16_t> q, k, v;
          };
          auto run = [&](bool fused, bool pdl) {
            const size_t cache = size_t(num_pages) * KVH * P * D;
            Dev<__nv_bfloat16> q(size_t(m) * H * D), kc(cache), vc(cache), qkv(size_t(m) * W);
            q.poison();
            kc.poison();
            vc.poison();
            const kernels::RopeKvTarget out{dbias.p, dpos.p, dslots.p, dinv.p,
                                            shape,   q.p,    kc.p,     vc.p};
            cudaStream_t s = pdl ? stream : nullptr;
            quantize_on(x, m, c.k, group, xq, xs, pdl, s);
            if (fused) {
              kernels::launch_fp8_qkv_rope_gemv(xq.p, xs.p, group, wm, m, out, s, pdl);
            } else {
              kernels::launch_fp8_gemv(xq.p, xs.p, group, wm, m, qkv.p, W, false, s);
              kernels::launch_rope_kv_write(qkv.p, dbias.p, dpos.p, dslots.p, dinv.p, shape, q.p,
                                            kc.p, vc.p, s);
            }
            TANDEM_CUDA_CHECK(cudaStreamSynchronize(s));
            return Out{q.get<uint16_t>(), kc.get<uint16_t>(), vc.get<uint16_t>()};
          };
          const Out ref = run(false, false);
          for (bool pdl : {false, true}) {
            CAPTURE(pdl);
            const Out got = run(true, pdl);
            CHECK((got.q == ref.q));
            CHECK((got.k == ref.k));
            CHECK((got.v == ref.v));
          }
          // Not vacuous: every q and each token's K and V rows were written (poison is 0xffff).
          int unwritten = 0;
          for (uint16_t v : ref.q) unwritten += v == 0xffffu;
          for (int t = 0; t < m; ++t) {
            const size_t at = size_t(slots[size_t(t)] / P * KVH * P + slots[size_t(t)] % P) * D;
            unwritten += ref.k[at] == 0xffffu || ref.v[at + D - 1] == 0xffffu;
          }
          CHECK(unwritten == 0);
        }
      }
    }
  }
  TANDEM_CUDA_CHECK(cudaStreamDestroy(stream));
}
