// Row-wise kernels and the GEMMs against plain CPU loops in fp64.
#include <doctest/doctest.h>

#include <cmath>

#include "gpu_test_util.h"
#include "kernels/argmax.cuh"
#include "kernels/embedding.cuh"
#include "kernels/gemm.cuh"
#include "kernels/gemm_skinny.cuh"
#include "kernels/gemv.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/silu_mul.cuh"

using namespace tandem;
using namespace tandem::gpu_test;

namespace {

std::vector<double> ref_matmul(const std::vector<float>& x, const std::vector<float>& w, int m,
                               int n, int k) {
  std::vector<double> y(size_t(m) * n);
  for (int t = 0; t < m; ++t)
    for (int r = 0; r < n; ++r) {
      double acc = 0;
      for (int c = 0; c < k; ++c) acc += double(x[size_t(t) * k + c]) * w[size_t(r) * k + c];
      y[size_t(t) * n + r] = acc;
    }
  return y;
}

}  // namespace

TEST_CASE(
    "gemv, skinny GEMM (every variant) and cuBLASLt GEMM match fp64 on awkward shapes, bf16 and "
    "fp32 outputs") {
  // kSkinny + v: skinny variant v. k = 72 and 264 end inside a chunk; n = 100 and 1027 inside a
  // block's rows.
  enum Path { kGemv, kGemm, kSkinny };
  kernels::GemmContext ctx;
  std::vector<int> paths = {kGemv, kGemm};
  for (int v = 0; v < kernels::skinny_variants(); ++v) paths.push_back(kSkinny + v);
  for (int m : {1, 2, 3, 5, 8, 9, 16, 17, 32, 64}) {
    for (auto [n, k] :
         {std::pair{100, 264}, std::pair{1027, 72}, std::pair{64, 4096}, std::pair{3000, 3584}}) {
      CAPTURE(m);
      CAPTURE(n);
      CAPTURE(k);
      auto xb = random_bf16(size_t(m) * k, 11u + m + n, 1.0f);
      auto wb = random_bf16(size_t(n) * k, 29u + n + k, 0.1f);
      const auto ref = ref_matmul(to_f32(xb), to_f32(wb), m, n, k);
      Dev<__nv_bfloat16> x(xb), w(wb);
      for (bool out_f32 : {true, false}) {
        for (int path : paths) {
          if (path == kGemv && m > kernels::kGemvMaxTokens) continue;
          if (path >= kSkinny && m > kernels::skinny_variant_tokens(path - kSkinny)) continue;
          // The GEMVs write with a row stride wider than n: the columns past n must stay
          // untouched. (cuBLASLt is given the stride the runner gives it, n.)
          const int ldy = path == kGemm ? n : n + 5;
          Dev<float> y32(size_t(m) * ldy);
          Dev<__nv_bfloat16> y16(size_t(m) * ldy);
          auto run = [&] {
            y32.poison();
            y16.poison();
            void* y = out_f32 ? static_cast<void*>(y32.p) : static_cast<void*>(y16.p);
            if (path == kGemv) {
              kernels::launch_gemv(x.p, w.p, m, n, k, y, out_f32, nullptr, ldy);
            } else if (path >= kSkinny) {
              kernels::launch_skinny_gemm(x.p, w.p, m, n, k, y, out_f32, nullptr, ldy,
                                          path - kSkinny);
            } else {
              ctx.run(x.p, w.p, m, n, k, y, out_f32, nullptr, ldy);
            }
            return out_f32 ? y32.get<float>() : to_f32(y16.get<uint16_t>());
          };
          const auto full = run();
          std::vector<float> out;
          bool pad_kept = true;
          for (int t = 0; t < m; ++t) {
            for (int r = 0; r < ldy; ++r) {
              const float v = full[size_t(t) * ldy + r];
              if (r < n) {
                out.push_back(v);
              } else {
                pad_kept = pad_kept && !(v == v);  // poison is NaN
              }
            }
          }
          const double err = rel_error(out, ref);
          CAPTURE(out_f32);
          CAPTURE(path);
          CHECK(err < (out_f32 ? 1e-5 : 8e-3));
          CHECK(pad_kept);
          const auto again = run();
          CHECK(same_bits(full.data(), again.data(), full.size() * 4));
        }
      }
    }
  }
}

namespace {

using Bf16 = __nv_bfloat16;

// A fused SwiGLU projection against its unfused pair on random x [m, k], w [2 * width, k]:
// gemm(x, w, m, n, k, y) writes gate|up [m, n = 2 * width], then launch_silu_mul;
// fused(x, w, m, width, k, out) writes [m, width] at once. The outputs must be the same bits,
// and not vacuously so (finite, mostly nonzero).
template <typename Gemm, typename Fused>
void check_fused_swiglu(int m, int width, int k, Gemm gemm, Fused fused) {
  CAPTURE(m);
  CAPTURE(width);
  CAPTURE(k);
  auto xb = random_bf16(size_t(m) * k, 7u + m, 1.0f);
  auto wb = random_bf16(size_t(2 * width) * k, 13u + width, 0.1f);
  Dev<Bf16> x(xb), w(wb), gate_up(size_t(m) * 2 * width);
  Dev<Bf16> unfused_out(size_t(m) * width), fused_out(size_t(m) * width);
  unfused_out.poison();
  fused_out.poison();
  gemm(x.p, w.p, m, 2 * width, k, gate_up.p);
  kernels::launch_silu_mul(gate_up.p, m, width, unfused_out.p, nullptr);
  fused(x.p, w.p, m, width, k, fused_out.p);
  const auto a = unfused_out.get<uint16_t>(), b = fused_out.get<uint16_t>();
  CHECK(same_bits(a.data(), b.data(), a.size() * 2));
  int nonzero = 0;
  for (uint16_t v : b) nonzero += std::isfinite(bf16_to_f32(v)) && bf16_to_f32(v) != 0.0f;
  CHECK(nonzero > int(b.size()) / 2);
}

}  // namespace

TEST_CASE("gemv_swiglu equals gemv then silu_mul bit for bit") {
  for (int m : {1, 2}) {
    for (auto [width, k] : {std::pair{40, 264}, std::pair{1000, 72}, std::pair{4736, 3584}}) {
      check_fused_swiglu(
          m, width, k,
          [](const Bf16* x, const Bf16* w, int m_, int n, int k_, Bf16* y) {
            kernels::launch_gemv(x, w, m_, n, k_, y, false, nullptr);
          },
          [](const Bf16* x, const Bf16* w, int m_, int width_, int k_, Bf16* out) {
            kernels::launch_gemv_swiglu(x, w, m_, width_, k_, out, nullptr);
          });
    }
  }
}

TEST_CASE("skinny_swiglu equals skinny_gemm then silu_mul bit for bit, every variant") {
  for (int v = 0; v < kernels::skinny_variants(); ++v) {
    for (int m : {1, 3, 5, 8, 9, 16, 20, 32}) {
      if (m > kernels::skinny_variant_tokens(v)) continue;
      for (auto [width, k] : {std::pair{40, 264}, std::pair{1001, 72}, std::pair{4736, 3584}}) {
        CAPTURE(v);
        check_fused_swiglu(
            m, width, k,
            [v](const Bf16* x, const Bf16* w, int m_, int n, int k_, Bf16* y) {
              kernels::launch_skinny_gemm(x, w, m_, n, k_, y, false, nullptr, 0, v);
            },
            [v](const Bf16* x, const Bf16* w, int m_, int width_, int k_, Bf16* out) {
              kernels::launch_skinny_swiglu(x, w, m_, width_, k_, out, nullptr, v);
            });
      }
    }
  }
}

TEST_CASE("gemv_add: the residual gains the bf16-rounded projection, as add_rmsnorm adds it") {
  for (int m : {1, 2}) {
    for (auto [n, k] : {std::pair{100, 264}, std::pair{896, 4864}, std::pair{3584, 3584}}) {
      CAPTURE(m);
      CAPTURE(n);
      CAPTURE(k);
      auto xb = random_bf16(size_t(m) * k, 3u + m, 1.0f);
      auto wb = random_bf16(size_t(n) * k, 9u + n, 0.1f);
      auto res = random_f32(size_t(m) * n, 21u, -2.0f, 2.0f);
      Dev<__nv_bfloat16> x(xb), w(wb), y(size_t(m) * n);
      kernels::launch_gemv(x.p, w.p, m, n, k, y.p, false, nullptr);
      const auto yb = y.get<uint16_t>();
      std::vector<float> want(res.size());
      for (size_t i = 0; i < res.size(); ++i) want[i] = res[i] + bf16_to_f32(yb[i]);
      Dev<float> dres(res);
      kernels::launch_gemv_add(x.p, w.p, m, n, k, dres.p, nullptr);
      const auto got = dres.get<float>();
      CHECK(same_bits(want.data(), got.data(), want.size() * 4));
      CHECK(!same_bits(res.data(), got.data(), res.size() * 4));  // it did add
    }
  }
}

TEST_CASE("gemv_swiglu over NormedRows matches add_rmsnorm then gemv_swiglu") {
  for (int m : {1, 2}) {
    for (auto [width, k] : {std::pair{40, 264}, std::pair{4864, 896}, std::pair{4736, 3584}}) {
      CAPTURE(m);
      CAPTURE(width);
      CAPTURE(k);
      const float eps = 1e-6f;
      auto res = random_f32(size_t(m) * k, 5u + k, -2.0f, 2.0f);
      auto gamma = random_f32(size_t(k), 8u, 0.5f, 1.5f);
      auto wb = random_bf16(size_t(2 * width) * k, 13u + width, 0.1f);
      Dev<float> dres(res), dgamma(gamma);
      Dev<__nv_bfloat16> w(wb), normed(size_t(m) * k), two(size_t(m) * width),
          one(size_t(m) * width);
      two.poison();
      one.poison();
      kernels::launch_add_rmsnorm(dres.p, nullptr, dgamma.p, m, k, eps, normed.p, nullptr);
      kernels::launch_gemv_swiglu(normed.p, w.p, m, width, k, two.p, nullptr);
      const kernels::NormedRows in{dres.p, dgamma.p, eps};
      kernels::launch_gemv_swiglu(in, w.p, m, width, k, one.p, nullptr);
      const auto a = to_f32(two.get<uint16_t>()), b = to_f32(one.get<uint16_t>());
      // The sums of squares run in another order: an inverse norm one ulp apart may move an
      // input a bf16 ulp, so the outputs agree to bf16 precision, nearly all bit for bit.
      CHECK(rel_error(b, std::vector<double>(a.begin(), a.end())) < 2e-3);
      int equal = 0;
      for (size_t i = 0; i < a.size(); ++i) equal += a[i] == b[i];
      CHECK(equal > int(a.size()) * 9 / 10);
      const auto again = [&] {
        kernels::launch_gemv_swiglu(in, w.p, m, width, k, one.p, nullptr);
        return to_f32(one.get<uint16_t>());
      }();
      CHECK(same_bits(b.data(), again.data(), b.size() * 4));
    }
  }
}

TEST_CASE("add_rmsnorm: residual add in fp32, normalised bf16 output") {
  // 300 and 257 rows: prefill-sized batches of rows. Widths that are multiples of 4 take runs of
  // four features a thread (16-byte accesses), 1002 and 90 one feature at a time.
  for (auto [rows, width] :
       {std::pair{1, 64}, std::pair{3, 1000}, std::pair{17, 3584}, std::pair{2, 8192},
        std::pair{300, 3584}, std::pair{257, 1000}, std::pair{5, 1002}, std::pair{260, 90}}) {
    CAPTURE(rows);
    CAPTURE(width);
    const float eps = 1e-6f;
    auto res = random_f32(size_t(rows) * width, 3u + width, -2.0f, 2.0f);
    auto delta = random_bf16(size_t(rows) * width, 5u + rows, 1.0f);
    auto w = random_f32(size_t(width), 7u, 0.5f, 1.5f);
    for (bool with_delta : {true, false}) {
      std::vector<double> ref_out(res.size()), ref_res(res.size());
      for (int r = 0; r < rows; ++r) {
        double ss = 0;
        for (int c = 0; c < width; ++c) {
          const size_t i = size_t(r) * width + c;
          ref_res[i] = double(res[i]) + (with_delta ? double(bf16_to_f32(delta[i])) : 0.0);
          ss += ref_res[i] * ref_res[i];
        }
        const double inv = 1.0 / std::sqrt(ss / width + eps);
        for (int c = 0; c < width; ++c) {
          const size_t i = size_t(r) * width + c;
          ref_out[i] = ref_res[i] * inv * w[size_t(c)];
        }
      }
      Dev<float> dres(res), dw(w);
      Dev<__nv_bfloat16> ddelta(delta), dout(res.size());
      dout.poison();
      kernels::launch_add_rmsnorm(dres.p, with_delta ? ddelta.p : nullptr, dw.p, rows, width, eps,
                                  dout.p, nullptr);
      const auto out = to_f32(dout.get<uint16_t>());
      CHECK(rel_error(out, ref_out) < 5e-3);
      CHECK(rel_error(dres.get<float>(), ref_res) < 1e-6);
      Dev<float> dres2(res);
      Dev<__nv_bfloat16> dout2(res.size());
      kernels::launch_add_rmsnorm(dres2.p, with_delta ? ddelta.p : nullptr, dw.p, rows, width, eps,
                                  dout2.p, nullptr);
      const auto out2 = to_f32(dout2.get<uint16_t>());
      CHECK(same_bits(out.data(), out2.data(), out.size() * 4));
    }
  }
}

TEST_CASE("silu_mul") {
  // 300 takes the scalar kernel, the others the 16-byte one.
  for (auto [rows, width] :
       {std::pair{1, 8}, std::pair{3, 300}, std::pair{17, 18944}, std::pair{2, 4864}}) {
    auto gu = random_bf16(size_t(rows) * 2 * width, 13u + width, 4.0f);
    std::vector<double> ref(size_t(rows) * width);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < width; ++c) {
        const double g = bf16_to_f32(gu[size_t(r) * 2 * width + c]);
        const double u = bf16_to_f32(gu[size_t(r) * 2 * width + width + c]);
        ref[size_t(r) * width + c] = g / (1.0 + std::exp(-g)) * u;
      }
    Dev<__nv_bfloat16> dgu(gu), dout(ref.size());
    dout.poison();
    kernels::launch_silu_mul(dgu.p, rows, width, dout.p, nullptr);
    CHECK(rel_error(to_f32(dout.get<uint16_t>()), ref) < 5e-3);
  }
}

TEST_CASE("row gathers: embeddings to fp32, picked rows in bf16") {
  const int vocab = 151, width = 72;
  auto table = random_bf16(size_t(vocab) * width, 17u);
  std::vector<int32_t> rows = {150, 0, 7, 7, 99};
  Dev<__nv_bfloat16> dt(table);
  Dev<int32_t> dr(rows);
  Dev<float> out(rows.size() * width);
  Dev<__nv_bfloat16> out16(rows.size() * width);
  out.poison();
  out16.poison();
  kernels::launch_gather_rows_to_f32(dt.p, dr.p, int32_t(rows.size()), width, out.p, nullptr);
  kernels::launch_gather_rows_bf16(dt.p, dr.p, int32_t(rows.size()), width, out16.p, nullptr);
  const auto o = out.get<float>();
  const auto o16 = out16.get<uint16_t>();
  for (size_t i = 0; i < rows.size(); ++i)
    for (int c = 0; c < width; ++c) {
      const uint16_t want = table[size_t(rows[i]) * width + c];
      CHECK(o[i * width + c] == bf16_to_f32(want));
      CHECK(o16[i * width + c] == want);
    }
}

namespace {

// The argmax the kernel must give: NaN never wins, lowest id on ties, 0 for a row of NaN.
int32_t host_argmax(const float* row, int32_t valid) {
  int32_t best = -1;
  for (int32_t i = 0; i < valid; ++i)
    if (!std::isnan(row[i]) && (best < 0 || row[i] > row[best])) best = i;
  return best < 0 ? 0 : best;
}

// Runs launch_argmax_rows over rows of `logits` ([*, stride]) into poisoned device memory.
std::vector<int32_t> device_argmax(const Dev<float>& logits, const std::vector<int32_t>& rows,
                                   int32_t stride, int32_t valid, Dev<char>& scratch) {
  Dev<int32_t> out(rows.size()), copy(rows.size());
  out.poison();
  copy.poison();
  // Every call writes the second copy too (sample_async's mapped host ids): it must equal out.
  kernels::launch_argmax_rows(logits.p, rows.data(), int32_t(rows.size()), stride, valid, scratch.p,
                              scratch.n, out.p, nullptr, copy.p);
  std::vector<int32_t> ids = out.get<int32_t>();
  CHECK(copy.get<int32_t>() == ids);
  return ids;
}

// Scratch for rows of `width` columns, zeroed as the kernel's contract asks.
struct ArgmaxScratch : Dev<char> {
  explicit ArgmaxScratch(int32_t width) : Dev<char>(kernels::argmax_scratch_bytes(width)) {
    TANDEM_CUDA_CHECK(cudaMemset(p, 0, n));
  }
};

}  // namespace

TEST_CASE("argmax: valid_vocab excludes padded rows; ties go to the lowest id") {
  const int stride = 1000, valid = 990;
  auto logits = random_f32(size_t(3) * stride, 23u, -5.0f, 5.0f);
  logits[0 * stride + 995] = 100.0f;  // padded column: never chosen
  logits[0 * stride + 17] = 50.0f;
  logits[1 * stride + 400] = 60.0f;
  logits[1 * stride + 300] = 60.0f;  // tie: 300 wins
  logits[2 * stride + 989] = 70.0f;  // last valid column
  Dev<float> dl(logits);
  ArgmaxScratch scratch(valid);
  const auto ids = device_argmax(dl, {2, 0, 1}, stride, valid, scratch);
  CHECK(ids[0] == 989);
  CHECK(ids[1] == 17);
  CHECK(ids[2] == 300);
}

TEST_CASE("argmax: rows of many slices, ties across slices, NaN and -inf rows, > 64 rows") {
  // Qwen2.5-7B's padded row width and valid vocabulary: 38 slices of kArgmaxSlice, the last
  // one partial; 70 rows take two launches on the same scratch.
  const int32_t stride = 152064, valid = 151665, nrows = 70;
  auto logits = random_f32(size_t(nrows) * stride, 29u, -8.0f, 8.0f);
  auto at = [&](int32_t r, int32_t c) -> float& { return logits[size_t(r) * stride + size_t(c)]; };
  at(0, valid - 1) = 40.0f;                                   // last valid column
  at(0, valid) = 90.0f;                                       // padding: never chosen
  at(1, 3 * kernels::kArgmaxSlice + 5) = 41.0f;               // tie across slices:
  at(1, 20 * kernels::kArgmaxSlice + 7) = 41.0f;              //   the lower id wins
  at(2, kernels::kArgmaxSlice - 1) = 42.0f;                   // a slice's last column
  at(2, kernels::kArgmaxSlice) = 42.0f;                       // and the next one's first
  for (int32_t c = 0; c < stride; ++c) at(3, c) = NAN;        // nothing orderable: id 0
  for (int32_t c = 0; c < stride; ++c) at(4, c) = -INFINITY;  // all -inf: the lowest id
  at(5, 100) = NAN;                                           // NaN beside the maximum
  at(5, 101) = 43.0f;
  at(6, 0) = 44.0f;  // the first column
  Dev<float> dl(logits);
  std::vector<int32_t> rows(static_cast<size_t>(nrows));
  for (int32_t i = 0; i < nrows; ++i) rows[size_t(i)] = (i * 37) % nrows;  // a permutation
  ArgmaxScratch scratch(valid);
  const auto ids = device_argmax(dl, rows, stride, valid, scratch);
  for (int32_t i = 0; i < nrows; ++i) {
    const int32_t r = rows[size_t(i)];
    CHECK_MESSAGE(ids[size_t(i)] == host_argmax(&at(r, 0), valid), "row ", r);
  }
  CHECK(host_argmax(&at(1, 0), valid) == 3 * kernels::kArgmaxSlice + 5);
  CHECK(host_argmax(&at(2, 0), valid) == kernels::kArgmaxSlice - 1);
  // The tickets are back at zero: a rerun on the same scratch gives the same ids.
  CHECK(device_argmax(dl, rows, stride, valid, scratch) == ids);
  // One row, as a batch-1 step asks, into mapped host memory (the runner's output).
  int32_t* host_out = nullptr;
  TANDEM_CUDA_CHECK(cudaHostAlloc(&host_out, 4, cudaHostAllocMapped));
  int32_t* dev_out = nullptr;
  TANDEM_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev_out), host_out, 0));
  *host_out = -1;
  const int32_t one = 1;
  kernels::launch_argmax_rows(dl.p, &one, 1, stride, valid, scratch.p, scratch.n, dev_out, nullptr);
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  CHECK(*host_out == 3 * kernels::kArgmaxSlice + 5);
  TANDEM_CUDA_CHECK(cudaFreeHost(host_out));
}

namespace {

// launch_gemv_argmax against launch_gemv's outputs and host_argmax over them, on poisoned outputs;
// a second launch on the same scratch (left zeroed by the first) gives the same ids.
void check_gemv_argmax(const std::vector<uint16_t>& xb, const std::vector<uint16_t>& wb, int m,
                       int n, int k, int valid, bool pdl) {
  CAPTURE(m);
  CAPTURE(n);
  CAPTURE(valid);
  CAPTURE(pdl);
  Dev<__nv_bfloat16> x(xb), w(wb);
  Dev<float> plain(size_t(m) * n), fused(size_t(m) * n);
  plain.poison();
  kernels::launch_gemv(x.p, w.p, m, n, k, plain.p, /*out_f32=*/true, nullptr);
  Dev<char> scratch(kernels::kGemvArgmaxScratchBytes);
  TANDEM_CUDA_CHECK(cudaMemset(scratch.p, 0, scratch.n));
  for (int run = 0; run < 2; ++run) {
    Dev<int32_t> ids{size_t(m)}, copy{size_t(m)};
    fused.poison();
    ids.poison();
    copy.poison();
    const kernels::GemvArgmax argmax{scratch.p, valid, ids.p, copy.p};
    kernels::launch_gemv_argmax(x.p, w.p, m, n, k, fused.p, argmax, nullptr, pdl);
    const auto y = fused.get<float>();
    const auto want_y = plain.get<float>();
    CHECK(same_bits(y.data(), want_y.data(), y.size() * 4));  // the logits are launch_gemv's
    const auto got = ids.get<int32_t>();
    CHECK(copy.get<int32_t>() == got);
    for (int t = 0; t < m; ++t) {
      CHECK_MESSAGE(got[size_t(t)] == host_argmax(&y[size_t(t) * n], valid), "token ", t, " run ",
                    run);
    }
  }
}

// Weights whose row r gives column[r] exactly for x = e_0 (one bf16 1.0 at feature 0): the
// other features are random and meet zeros.
std::vector<uint16_t> weights_with_column(const std::vector<float>& column, int k, uint32_t seed) {
  auto w = random_bf16(column.size() * size_t(k), seed, 0.1f);
  for (size_t r = 0; r < column.size(); ++r) w[r * size_t(k)] = f32_to_bf16(column[r]);
  return w;
}

std::vector<uint16_t> unit_input(int k) {
  std::vector<uint16_t> x(size_t(k), f32_to_bf16(0.0f));
  x[0] = f32_to_bf16(1.0f);
  return x;
}

}  // namespace

TEST_CASE("gemv_argmax: the lm_head GEMV's own greedy ids equal an argmax of its logits") {
  // The 0.5B's lm_head (151,936 x 896, 151,665 valid ids) at one and two tokens, overlapped or
  // not; a small vocabulary whose rows are split over several warps (gemv_row_parts).
  for (auto [n, k, valid] : {std::tuple{151936, 896, 151665}, std::tuple{1000, 264, 990}}) {
    const auto wb = random_bf16(size_t(n) * k, 31u + n, 0.1f);
    for (int m : {1, 2}) {
      const auto xb = random_bf16(size_t(m) * k, 7u + m, 1.0f);
      for (bool pdl : {false, true}) check_gemv_argmax(xb, wb, m, n, k, valid, pdl);
    }
  }
}

TEST_CASE("gemv_argmax: padded rows, ties, zeros, NaN and -inf, as launch_argmax_rows") {
  const int n = 20000, k = 72, valid = 19990;
  auto column = [&](float fill) { return std::vector<float>(size_t(n), fill); };
  const auto x = unit_input(k);
  auto expect = [&](const std::vector<float>& col, int32_t want) {
    const auto w = weights_with_column(col, k, 17u);
    CHECK(host_argmax(col.data(), valid) == want);  // the test's own premise
    check_gemv_argmax(x, w, 1, n, k, valid, true);
    Dev<__nv_bfloat16> xd(x), wd(w);
    Dev<float> y{size_t(n)};
    Dev<char> scratch(kernels::kGemvArgmaxScratchBytes);
    TANDEM_CUDA_CHECK(cudaMemset(scratch.p, 0, scratch.n));
    Dev<int32_t> id(1);
    id.poison();
    kernels::launch_gemv_argmax(xd.p, wd.p, 1, n, k, y.p,
                                kernels::GemvArgmax{scratch.p, valid, id.p, nullptr}, nullptr);
    CHECK(id.get<int32_t>()[0] == want);
  };
  auto c = column(-3.0f);
  c[valid + 3] = 9.0f;  // padding: never chosen
  c[valid - 1] = 2.0f;  // the last valid row
  expect(c, valid - 1);
  c = column(-3.0f);
  c[17000] = 5.0f;  // a tie across blocks: the lower row wins
  c[40] = 5.0f;
  c[41] = 5.0f;
  expect(c, 40);
  c = column(0.0f);
  c[0] = -0.0f;  // every row ties (the sums start at +0, so this one is +0 too): row 0 wins
  expect(c, 0);
  c = column(-INFINITY);  // nothing above -inf: the lowest row
  c[3] = NAN;
  expect(c, 0);
  c = column(NAN);  // nothing orderable: id 0
  expect(c, 0);
  c = column(NAN);
  c[12345] = -INFINITY;  // one orderable value among NaN
  expect(c, 12345);
}
