// RoPE + KV page write, then paged causal attention, against a CPU loop over the same pages.
// Earlier context is random K/V already in the pages; the chunk's K/V come from rope_kv.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "gpu_test_util.h"
#include "kernels/amax_slots.h"
#include "kernels/decode_attention.cuh"
#include "kernels/paged_attention.cuh"
#include "kernels/prefill_attention.cuh"
#include "kernels/rope_kv.cuh"

using namespace tandem;
using namespace tandem::gpu_test;

namespace {

struct Case {
  int heads, kv_heads, dim, page_size;
  std::vector<std::pair<int, int>> seqs;  // (q_len, context_len)
};

void run_case(const Case& c) {
  const int H = c.heads, KVH = c.kv_heads, D = c.dim, P = c.page_size;
  const int S = int(c.seqs.size());
  int T = 0, total_pages = 0;
  for (auto [q, ctx] : c.seqs) T += q, total_pages += (ctx + P - 1) / P;
  const int num_pages = total_pages + 3;
  // Pages handed out in a scrambled order, as a real pool does.
  std::vector<int32_t> perm(static_cast<size_t>(num_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937 g(uint32_t(T * 31 + P));
  std::shuffle(perm.begin(), perm.end(), g);

  std::vector<int32_t> page_ids, seq_page_start, token_seq, positions, slots;
  int used = 0;
  for (int s = 0; s < S; ++s) {
    auto [q, ctx] = c.seqs[size_t(s)];
    seq_page_start.push_back(int32_t(page_ids.size()));
    for (int p = 0; p < (ctx + P - 1) / P; ++p) page_ids.push_back(perm[size_t(used++)]);
    for (int i = 0; i < q; ++i) {
      const int pos = ctx - q + i;
      token_seq.push_back(s);
      positions.push_back(pos);
      slots.push_back(page_ids[size_t(seq_page_start[size_t(s)] + pos / P)] * P + pos % P);
    }
  }
  const int W = (H + 2 * KVH) * D;
  const size_t cache_n = size_t(num_pages) * KVH * P * D;
  auto qkv = random_bf16(size_t(T) * W, uint32_t(7 + T + D), 1.0f);
  auto bias = random_f32(size_t(W), 3u, -0.5f, 0.5f);
  auto kc = random_bf16(cache_n, 19u + uint32_t(D), 1.0f);
  auto vc = random_bf16(cache_n, 37u + uint32_t(D), 1.0f);
  std::vector<float> inv(static_cast<size_t>(D / 2));
  for (int i = 0; i < D / 2; ++i) inv[size_t(i)] = 1.0f / std::pow(10000.0f, float(2 * i) / D);

  // Reference: rope on the host, K/V written into host pages (bf16-rounded like the device).
  std::vector<float> qref(size_t(T) * H * D);
  std::vector<float> kref = to_f32(kc), vref = to_f32(vc);
  auto idx = [&](int64_t page, int h, int off, int d) {
    return size_t(((page * KVH + h) * P + off) * D + d);
  };
  auto rnd = [](float x) { return bf16_to_f32(f32_to_bf16(x)); };
  for (int t = 0; t < T; ++t) {
    const int pos = positions[size_t(t)];
    const int64_t page = slots[size_t(t)] / P;
    const int off = slots[size_t(t)] % P;
    auto in = [&](int col) { return bf16_to_f32(qkv[size_t(t) * W + col]) + bias[size_t(col)]; };
    for (int h = 0; h < H + KVH; ++h)
      for (int i = 0; i < D / 2; ++i) {
        const double a = double(float(pos) * inv[size_t(i)]);
        const double x1 = in(h * D + i), x2 = in(h * D + i + D / 2);
        const float y1 = float(x1 * std::cos(a) - x2 * std::sin(a));
        const float y2 = float(x2 * std::cos(a) + x1 * std::sin(a));
        if (h < H) {
          qref[(size_t(t) * H + h) * D + i] = rnd(y1);
          qref[(size_t(t) * H + h) * D + i + D / 2] = rnd(y2);
        } else {
          kref[idx(page, h - H, off, i)] = rnd(y1);
          kref[idx(page, h - H, off, i + D / 2)] = rnd(y2);
        }
      }
    for (int h = 0; h < KVH; ++h)
      for (int d = 0; d < D; ++d) vref[idx(page, h, off, d)] = rnd(in((H + KVH) * D + h * D + d));
  }
  std::vector<double> oref(size_t(T) * H * D);
  const double scale = 1.0 / std::sqrt(double(D));
  for (int t = 0; t < T; ++t) {
    const int s = token_seq[size_t(t)], nkeys = positions[size_t(t)] + 1;
    for (int h = 0; h < H; ++h) {
      const int kvh = h / (H / KVH);
      std::vector<double> sc(static_cast<size_t>(nkeys));
      double mx = -INFINITY;
      for (int j = 0; j < nkeys; ++j) {
        const int64_t page = page_ids[size_t(seq_page_start[size_t(s)] + j / P)];
        double dot = 0;
        for (int d = 0; d < D; ++d)
          dot += double(qref[(size_t(t) * H + h) * D + d]) * kref[idx(page, kvh, j % P, d)];
        sc[size_t(j)] = dot * scale;
        mx = std::max(mx, sc[size_t(j)]);
      }
      double sum = 0;
      for (auto& v : sc) sum += (v = std::exp(v - mx));
      for (int j = 0; j < nkeys; ++j) {
        const int64_t page = page_ids[size_t(seq_page_start[size_t(s)] + j / P)];
        for (int d = 0; d < D; ++d)
          oref[(size_t(t) * H + h) * D + d] += sc[size_t(j)] / sum * vref[idx(page, kvh, j % P, d)];
      }
    }
  }

  Dev<__nv_bfloat16> dqkv(qkv), dk(kc), dv(vc), dq(size_t(T) * H * D), dout(size_t(T) * H * D);
  Dev<float> dbias(bias), dinv(inv);
  Dev<int32_t> dpos(positions), dslots(slots), dseq(token_seq), dstart(seq_page_start),
      dpages(page_ids);
  auto run = [&] {
    TANDEM_CUDA_CHECK(cudaMemcpy(dk.p, kc.data(), cache_n * 2, cudaMemcpyHostToDevice));
    TANDEM_CUDA_CHECK(cudaMemcpy(dv.p, vc.data(), cache_n * 2, cudaMemcpyHostToDevice));
    dq.poison();
    dout.poison();
    kernels::launch_rope_kv_write(dqkv.p, dbias.p, dpos.p, dslots.p, dinv.p,
                                  kernels::RopeKvShape{T, H, KVH, D, P}, dq.p, dk.p, dv.p, nullptr);
    kernels::launch_paged_attention(dq.p, dk.p, dv.p, dseq.p, dpos.p, dstart.p, dpages.p,
                                    kernels::PagedAttentionShape{T, H, KVH, D, P, float(scale)},
                                    dout.p, nullptr);
    return to_f32(dout.get<uint16_t>());
  };
  const auto out = run();
  std::vector<double> qref_d(qref.begin(), qref.end()), kref_d(kref.begin(), kref.end());
  CHECK(rel_error(to_f32(dq.get<uint16_t>()), qref_d) < 5e-3);
  CHECK(rel_error(to_f32(dk.get<uint16_t>()), kref_d) < 5e-3);
  CHECK(rel_error(out, oref) < 1e-2);
  const auto again = run();
  CHECK(same_bits(out.data(), again.data(), out.size() * 4));

  // The split-K GQA decode kernel (it is causal by position, so any chunk works). Tensor-core
  // slices: one warp; a block of 3 / 8 merging in shared memory; 2 blocks of 5 merged by the
  // second launch (empty slices among them); the most. Scalar: 1, 3, 4, the most.
  if (H / KVH <= kernels::kDecodeMaxGroup) {
    const bool tc = kernels::decode_attention_tensor_cores(D);
    Dev<float> partials(size_t(T) * H * kernels::kDecodeMaxSplits * (D + 2));
    const std::vector<int> slice_counts =
        tc ? std::vector<int>{1, 3, 8, 9, kernels::kDecodeMaxSlices}
           : std::vector<int>{1, 3, 4, kernels::kDecodeMaxSplits};
    for (int slices : slice_counts) {
      CAPTURE(slices);
      CHECK(kernels::decode_attention_splits(D, slices) <= kernels::kDecodeMaxSplits);
      auto run_decode = [&](bool pdl, bool warp_merge = true, uint32_t* out_amax = nullptr) {
        TANDEM_CUDA_CHECK(cudaMemcpy(dk.p, kc.data(), cache_n * 2, cudaMemcpyHostToDevice));
        TANDEM_CUDA_CHECK(cudaMemcpy(dv.p, vc.data(), cache_n * 2, cudaMemcpyHostToDevice));
        dq.poison();
        dout.poison();
        partials.poison();
        kernels::launch_rope_kv_write(dqkv.p, dbias.p, dpos.p, dslots.p, dinv.p,
                                      kernels::RopeKvShape{T, H, KVH, D, P}, dq.p, dk.p, dv.p,
                                      nullptr);
        kernels::launch_decode_attention(
            dq.p, dk.p, dv.p, dseq.p, dpos.p, dstart.p, dpages.p,
            kernels::PagedAttentionShape{T, H, KVH, D, P, float(scale)}, slices, partials.p, dout.p,
            nullptr, pdl, warp_merge, out_amax);
        return to_f32(dout.get<uint16_t>());
      };
      const auto dout1 = run_decode(false);
      CHECK(rel_error(dout1, oref) < 1e-2);
      const auto dout2 = run_decode(false);
      CHECK(same_bits(dout1.data(), dout2.data(), dout1.size() * 4));
      int major = 0;  // overlapped launches from sm_90 (pdl.cuh)
      TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
      // Each token's max |out| raised into zeroed slots (for the FP8 quantize of o's input), by
      // the kernel's own stores or the combine's: the same outputs, either merge, overlapped too.
      {
        std::vector<uint32_t> most(size_t(T), 0u);
        for (int t = 0; t < T; ++t)
          for (int i = 0; i < H * D; ++i) {
            const float a = std::fabs(dout1[size_t(t) * H * D + size_t(i)]);
            uint32_t bits = 0;
            std::memcpy(&bits, &a, 4);
            most[size_t(t)] = std::max(most[size_t(t)], bits);
          }
        Dev<uint32_t> amax{size_t(T) * kernels::kAmaxTokenWords};
        for (bool pdl : {false, true}) {
          if (pdl && major < 9) continue;
          for (bool warp_merge : {true, false}) {
            CAPTURE(pdl);
            CAPTURE(warp_merge);
            TANDEM_CUDA_CHECK(cudaMemset(amax.p, 0, amax.n * sizeof(uint32_t)));
            const auto with_amax = run_decode(pdl, warp_merge, amax.p);
            CHECK(same_bits(dout1.data(), with_amax.data(), dout1.size() * 4));
            const auto words = amax.get<uint32_t>();
            std::vector<uint32_t> got(size_t(T), 0u);  // each token's max over its slots
            for (size_t i = 0; i < words.size(); ++i) {
              got[i / kernels::kAmaxTokenWords] =
                  std::max(got[i / kernels::kAmaxTokenWords], words[i]);
            }
            CHECK((got == most));
          }
        }
      }
      // The overlapped launch's kernel (the first tile's K/V before its wait, q straight into
      // registers) computes the same sums in the same order, at any query length: before its
      // wait it reads only the keys before each sequence's first query token, and rope_kv,
      // which lets its successor start at once, writes this step's (a chunk of 2-16 tokens is
      // a verify's; longer ones count every key as this step's). Until 2-16 were taken apart,
      // the early kernel read a longer chunk's own keys before the wait and raced rope_kv's
      // writes (once in two H200 runs), so it ran at one query a sequence only.
      if (major >= 9) {
        const auto early = run_decode(true);
        CHECK(same_bits(dout1.data(), early.data(), dout1.size() * 4));
      }
      // A block's slices merged by G threads' scales first (two barriers) sum in the order the
      // warp-a-head merge does: the same bits, plain and overlapped.
      if (tc) {
        const auto two_barriers = run_decode(false, false);
        CHECK(same_bits(dout1.data(), two_barriers.data(), dout1.size() * 4));
        if (major >= 9) {
          const auto early = run_decode(true, false);
          CHECK(same_bits(dout1.data(), early.data(), dout1.size() * 4));
        }
      }
    }
  }

  // The tensor-core prefill kernel, over query tiles planned as the runner plans them.
  if (D % 16 == 0 && D <= 128) {
    std::vector<int32_t> starts, lens, ctxs;
    size_t max_tiles = 0;
    int q_start = 0;
    for (auto [q, ctx] : c.seqs) {
      starts.push_back(q_start), lens.push_back(q), ctxs.push_back(ctx);
      max_tiles += size_t((q + kernels::kPrefillQueryTile - 1) / kernels::kPrefillQueryTile);
      q_start += q;
    }
    std::vector<int32_t> tile_start(max_tiles), tile_len(max_tiles);
    const int32_t num_tiles =
        kernels::plan_prefill_tiles(starts.data(), lens.data(), ctxs.data(), int32_t(c.seqs.size()),
                                    int32_t(max_tiles), tile_start.data(), tile_len.data());
    REQUIRE(size_t(num_tiles) == max_tiles);
    // Longest first: each tile reads no more keys than the one before it.
    std::vector<int32_t> ctx_end(static_cast<size_t>(q_start));  // [T]: keys token t reads
    for (size_t s = 0, t = 0; s < c.seqs.size(); ++s)
      for (int i = 0; i < lens[s]; ++i, ++t) ctx_end[t] = ctxs[s] - lens[s] + i + 1;
    for (int32_t i = 1; i < num_tiles; ++i) {
      const int32_t prev = tile_start[size_t(i - 1)] + tile_len[size_t(i - 1)] - 1;
      const int32_t cur = tile_start[size_t(i)] + tile_len[size_t(i)] - 1;
      CHECK(ctx_end[size_t(prev)] >= ctx_end[size_t(cur)]);
    }
    Dev<int32_t> dts(tile_start), dtl(tile_len);
    auto run_prefill = [&] {
      TANDEM_CUDA_CHECK(cudaMemcpy(dk.p, kc.data(), cache_n * 2, cudaMemcpyHostToDevice));
      TANDEM_CUDA_CHECK(cudaMemcpy(dv.p, vc.data(), cache_n * 2, cudaMemcpyHostToDevice));
      dq.poison();
      dout.poison();
      kernels::launch_rope_kv_write(dqkv.p, dbias.p, dpos.p, dslots.p, dinv.p,
                                    kernels::RopeKvShape{T, H, KVH, D, P}, dq.p, dk.p, dv.p,
                                    nullptr);
      kernels::launch_prefill_attention(
          dq.p, dk.p, dv.p, dts.p, dtl.p, num_tiles, dseq.p, dpos.p, dstart.p, dpages.p,
          kernels::PagedAttentionShape{T, H, KVH, D, P, float(scale)}, dout.p, nullptr);
      return to_f32(dout.get<uint16_t>());
    };
    const auto pout = run_prefill();
    CHECK(rel_error(pout, oref) < 1e-2);
    const auto pagain = run_prefill();
    CHECK(same_bits(pout.data(), pagain.data(), pout.size() * 4));
  }
}

}  // namespace

TEST_CASE("rope_kv + paged attention: GQA 1/4/7, page sizes 1 and 16, chunks straddling pages") {
  // (q_len, context_len): decode tokens, a first chunk, a later chunk after earlier pages.
  const std::vector<std::pair<int, int>> mix = {{1, 1}, {5, 5}, {13, 40}, {1, 200}};
  // A decode batch (one query a sequence).
  const std::vector<std::pair<int, int>> decode = {{1, 1}, {1, 5}, {1, 40}, {1, 200}};
  // Verify-shaped steps (k + 1 = 2-8 tokens a sequence), this step's keys across a 32-key tile
  // boundary (128-132) and a page's: the overlapped kernel's pre-wait copies must leave them out.
  const std::vector<std::pair<int, int>> verify = {{5, 133}, {2, 40}, {8, 70}, {1, 17}};
  for (int page_size : {1, 16}) {
    for (auto [h, kvh] : {std::pair{4, 4}, std::pair{8, 2}, std::pair{7, 1}}) {
      for (int dim : {64, 128}) {
        CAPTURE(page_size);
        CAPTURE(h);
        CAPTURE(kvh);
        CAPTURE(dim);
        run_case(Case{h, kvh, dim, page_size, mix});
        run_case(Case{h, kvh, dim, page_size, decode});
        run_case(Case{h, kvh, dim, page_size, verify});
      }
    }
  }
  SUBCASE("batch of 17 decode tokens, long contexts") {
    std::vector<std::pair<int, int>> seqs;
    for (int i = 0; i < 17; ++i) seqs.push_back({1, 17 + 61 * i});
    run_case(Case{28, 4, 128, 16, seqs});
  }
  SUBCASE("3 sequences, chunk of 130 tokens crossing tiles") {
    run_case(Case{14, 2, 64, 16, {{130, 300}, {3, 3}, {1, 129}}});
  }
  SUBCASE("whole prompts of 200, 64 and 65 tokens, GQA 7, page size 1") {
    run_case(Case{7, 1, 128, 1, {{200, 200}, {64, 64}, {65, 70}}});
  }
}
