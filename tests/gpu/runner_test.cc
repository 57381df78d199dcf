// The CUDA runner on a tiny random Qwen2-shaped model (q/k/v bias, GQA, padded vocabulary)
// against a plain fp64 forward written here: chunked prefill across pages, then batched decode
// steps replayed from CUDA graphs, with and without graphs giving identical bits.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "gpu_test_util.h"
#include "model/model_dir.h"
#include "overlap_check.h"
#include "runner/cuda/cuda_runner.h"

using namespace tandem;
using namespace tandem::gpu_test;

namespace {

struct TinyModel {
  ModelConfig config;
  std::vector<std::vector<uint16_t>> blobs;  // owned bytes
  std::vector<std::unique_ptr<TensorView>> views;
  ModelWeights weights;

  const TensorView* add(const std::string& name, std::vector<int64_t> shape, float scale,
                        float offset = 0.0f) {
    size_t n = 1;
    for (auto d : shape) n *= size_t(d);
    auto data = random_bf16(n, uint32_t(views.size() * 7919 + 1), scale);
    if (offset != 0.0f)
      for (auto& v : data) v = f32_to_bf16(bf16_to_f32(v) + offset);
    blobs.push_back(std::move(data));
    auto v = std::make_unique<TensorView>();
    v->name = name;
    v->dtype = DType::kBF16;
    v->shape = shape;
    v->data = reinterpret_cast<const std::byte*>(blobs.back().data());
    v->nbytes = n * 2;
    v->file = "memory";
    views.push_back(std::move(v));
    return views.back().get();
  }
  float at(const TensorView* t, size_t i) const {
    return bf16_to_f32(reinterpret_cast<const uint16_t*>(t->data)[i]);
  }
};

TinyModel make_tiny(int64_t head_dim = 16) {
  TinyModel m;
  ModelConfig& c = m.config;
  c.arch = Arch::kQwen2;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 1;
  c.head_dim = head_dim;
  c.vocab_size = 300;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-6;
  c.attention_bias = true;
  const int64_t H = c.hidden_size, I = c.intermediate_size, D = c.head_dim;
  m.weights.embed_tokens = m.add("embed", {c.vocab_size, H}, 1.0f);
  for (int l = 0; l < c.num_layers; ++l) {
    LayerWeights w{};
    w.input_norm = m.add("in_norm", {H}, 0.2f, 1.0f);
    w.q_proj = m.add("q", {c.num_heads * D, H}, 0.2f);
    w.k_proj = m.add("k", {c.num_kv_heads * D, H}, 0.2f);
    w.v_proj = m.add("v", {c.num_kv_heads * D, H}, 0.2f);
    w.q_bias = m.add("qb", {c.num_heads * D}, 0.3f);
    w.k_bias = m.add("kb", {c.num_kv_heads * D}, 0.3f);
    w.v_bias = m.add("vb", {c.num_kv_heads * D}, 0.3f);
    w.o_proj = m.add("o", {H, c.num_heads * D}, 0.2f);
    w.post_attn_norm = m.add("post_norm", {H}, 0.2f, 1.0f);
    w.gate_proj = m.add("gate", {I, H}, 0.2f);
    w.up_proj = m.add("up", {I, H}, 0.2f);
    w.down_proj = m.add("down", {H, I}, 0.2f);
    m.weights.layers.push_back(w);
  }
  m.weights.final_norm = m.add("final_norm", {H}, 0.2f, 1.0f);
  m.weights.lm_head = m.weights.embed_tokens;  // tied
  return m;
}

// Plain fp64 forward over the whole sequence; logits of the last position.
std::vector<double> reference_logits(const TinyModel& m, const std::vector<int32_t>& tokens) {
  const ModelConfig& c = m.config;
  const int64_t H = c.hidden_size, I = c.intermediate_size, D = c.head_dim;
  const int64_t NH = c.num_heads, KVH = c.num_kv_heads, N = int64_t(tokens.size());
  using Mat = std::vector<std::vector<double>>;
  Mat x(static_cast<size_t>(N), std::vector<double>(static_cast<size_t>(H)));
  for (int64_t t = 0; t < N; ++t)
    for (int64_t i = 0; i < H; ++i)
      x[size_t(t)][size_t(i)] = m.at(m.weights.embed_tokens, size_t(tokens[size_t(t)] * H + i));
  auto norm = [&](const std::vector<double>& v, const TensorView* w) {
    double ss = 0;
    for (double e : v) ss += e * e;
    const double inv = 1.0 / std::sqrt(ss / double(v.size()) + c.rms_norm_eps);
    std::vector<double> o(v.size());
    for (size_t i = 0; i < v.size(); ++i) o[i] = v[i] * inv * m.at(w, i);
    return o;
  };
  auto lin = [&](const std::vector<double>& v, const TensorView* w, const TensorView* b) {
    const int64_t rows = w->shape[0], cols = w->shape[1];
    std::vector<double> o(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      double acc = b != nullptr ? m.at(b, size_t(r)) : 0.0;
      for (int64_t k = 0; k < cols; ++k) acc += v[size_t(k)] * m.at(w, size_t(r * cols + k));
      o[size_t(r)] = acc;
    }
    return o;
  };
  auto rope = [&](std::vector<double>& v, int64_t heads, int64_t pos) {
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < D / 2; ++i) {
        const float inv = 1.0f / std::pow(float(c.rope_theta), float(2 * i) / float(D));
        const double a = double(float(pos) * inv);
        const double x1 = v[size_t(h * D + i)], x2 = v[size_t(h * D + i + D / 2)];
        v[size_t(h * D + i)] = x1 * std::cos(a) - x2 * std::sin(a);
        v[size_t(h * D + i + D / 2)] = x2 * std::cos(a) + x1 * std::sin(a);
      }
  };
  for (const LayerWeights& w : m.weights.layers) {
    Mat q(static_cast<size_t>(N)), k(static_cast<size_t>(N)), v(static_cast<size_t>(N));
    for (int64_t t = 0; t < N; ++t) {
      const auto h = norm(x[size_t(t)], w.input_norm);
      q[size_t(t)] = lin(h, w.q_proj, w.q_bias);
      k[size_t(t)] = lin(h, w.k_proj, w.k_bias);
      v[size_t(t)] = lin(h, w.v_proj, w.v_bias);
      rope(q[size_t(t)], NH, t);
      rope(k[size_t(t)], KVH, t);
    }
    for (int64_t t = 0; t < N; ++t) {
      std::vector<double> attn(static_cast<size_t>(NH * D));
      for (int64_t h = 0; h < NH; ++h) {
        const int64_t kh = h / (NH / KVH);
        std::vector<double> s(static_cast<size_t>(t + 1));
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= t; ++j) {
          double d = 0;
          for (int64_t e = 0; e < D; ++e)
            d += q[size_t(t)][size_t(h * D + e)] * k[size_t(j)][size_t(kh * D + e)];
          s[size_t(j)] = d / std::sqrt(double(D));
          mx = std::max(mx, s[size_t(j)]);
        }
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (int64_t j = 0; j <= t; ++j)
          for (int64_t e = 0; e < D; ++e)
            attn[size_t(h * D + e)] += s[size_t(j)] / sum * v[size_t(j)][size_t(kh * D + e)];
      }
      const auto o = lin(attn, w.o_proj, nullptr);
      for (int64_t i = 0; i < H; ++i) x[size_t(t)][size_t(i)] += o[size_t(i)];
      const auto h2 = norm(x[size_t(t)], w.post_attn_norm);
      const auto g = lin(h2, w.gate_proj, nullptr), u = lin(h2, w.up_proj, nullptr);
      std::vector<double> act(static_cast<size_t>(I));
      for (int64_t i = 0; i < I; ++i)
        act[size_t(i)] = g[size_t(i)] / (1.0 + std::exp(-g[size_t(i)])) * u[size_t(i)];
      const auto d = lin(act, w.down_proj, nullptr);
      for (int64_t i = 0; i < H; ++i) x[size_t(t)][size_t(i)] += d[size_t(i)];
    }
  }
  return lin(norm(x[size_t(N - 1)], m.weights.final_norm), m.weights.lm_head, nullptr);
}

template <typename T>
size_t argmax(const std::vector<T>& v, size_t valid) {
  size_t best = 0;
  for (size_t i = 1; i < valid; ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

// cuda:0, pages of 16, room for the tests' two sequences of up to 64 tokens.
RunnerOptions tiny_options() {
  RunnerOptions opts;
  opts.device = "cuda:0";
  opts.page_size = 16;
  opts.num_pages = 64;
  opts.max_batch_tokens = 64;
  opts.max_seqs = 8;
  return opts;
}

}  // namespace

TEST_CASE("CUDA runner: chunked prefill and graph decode match the fp64 reference") {
  // Head size 16 takes the scalar decode kernels and the prefill kernel for every multi-token
  // chunk; 64 the tensor-core decode kernel, which also takes the verify-shaped passes below.
  for (auto [head_dim, graphs] : {std::pair{int64_t(16), true}, std::pair{int64_t(16), false},
                                  std::pair{int64_t(64), true}, std::pair{int64_t(64), false}}) {
    CAPTURE(head_dim);
    CAPTURE(graphs);
    TinyModel m = make_tiny(head_dim);
    const RunnerOptions opts = tiny_options();
    auto created = CudaRunner::create(m.config, m.weights, opts);
    REQUIRE(created.ok());
    CudaRunner& r = **created;
    r.set_use_graphs(graphs);
    const int32_t valid = 290;  // rows 290..299 are padding: never sampled
    r.set_valid_vocab(valid);
    const int64_t V = m.config.vocab_size;

    // Two sequences: A is prefilled in chunks of 20 and 17 (crossing page 16 and 32), B in one.
    std::vector<int32_t> a, b;
    for (int i = 0; i < 37; ++i) a.push_back((i * 37 + 11) % 290);
    for (int i = 0; i < 5; ++i) b.push_back((i * 53 + 3) % 290);
    std::vector<int32_t> pages_a = {9, 3, 40, 7}, pages_b = {21, 5};
    std::vector<float> logits(size_t(2 * V));
    ResolvedSampling greedy;
    greedy.temperature = 0.0f;

    // The scored logits against the reference; the padding rows are not scored and read -inf.
    auto scored_error = [&](const std::vector<float>& got, const std::vector<double>& ref) {
      int64_t tail_not_inf = 0;
      for (int64_t i = valid; i < V; ++i)
        tail_not_inf += !(std::isinf(got[size_t(i)]) && got[size_t(i)] < 0);
      CHECK(tail_not_inf == 0);
      return rel_error(std::vector<float>(got.begin(), got.begin() + valid),
                       std::vector<double>(ref.begin(), ref.begin() + valid));
    };
    auto check_logits = [&](const std::vector<float>& got, const std::vector<int32_t>& seq) {
      const auto ref = reference_logits(m, seq);
      CHECK(scored_error(got, ref) < 1e-2);
      return argmax(ref, size_t(valid));
    };
    {
      SeqSlice s{0, 20, 20, pages_a};
      const std::vector<int32_t> rows = {19};
      r.forward(ForwardBatch{std::span(a.data(), 20), std::span(&s, 1), rows});
    }
    {
      std::vector<int32_t> chunk(a.begin() + 20, a.end());
      chunk.insert(chunk.end(), b.begin(), b.end());
      SeqSlice s[2] = {{0, 17, 37, pages_a}, {17, 5, 5, pages_b}};
      std::vector<int32_t> rows = {16, 21};
      r.forward(ForwardBatch{chunk, s, rows});
      r.copy_logits(logits);
      std::vector<float> la(logits.begin(), logits.begin() + V),
          lb(logits.begin() + V, logits.end());
      const size_t ta = check_logits(la, a), tb = check_logits(lb, b);
      a.push_back(int32_t(ta));
      b.push_back(int32_t(tb));
    }
    // Decode steps of both sequences in one batch; the reference's greedy token is fed back.
    for (int step = 0; step < 6; ++step) {
      const int32_t ca = int32_t(a.size()), cb = int32_t(b.size());
      std::vector<int32_t> toks = {a.back(), b.back()};
      SeqSlice s[2] = {{0, 1, ca, pages_a}, {1, 1, cb, pages_b}};
      std::vector<int32_t> rows = {0, 1};
      r.forward(ForwardBatch{toks, s, rows});
      r.copy_logits(logits);
      std::vector<float> la(logits.begin(), logits.begin() + V),
          lb(logits.begin() + V, logits.end());
      const size_t ta = check_logits(la, a), tb = check_logits(lb, b);
      SampleRequest req[2];
      req[0].logit_index = 0;
      req[0].params = &greedy;
      req[1].logit_index = 1;
      req[1].params = &greedy;
      int32_t out[2] = {-1, -1};
      r.sample(req, out);
      // The device argmax agrees with the reference unless the top two are within rounding.
      const auto ref_a = reference_logits(m, a);
      if (std::abs(ref_a[ta] - ref_a[size_t(out[0])]) > 1e-2) CHECK(out[0] == int32_t(ta));
      CHECK(out[0] < valid);
      CHECK(out[1] < valid);
      a.push_back(int32_t(ta));
      b.push_back(int32_t(tb));
    }
    // Verify-shaped steps (a speculative pass: 5 and 3 query tokens, every row's logits); at head
    // size 64 they take the decode attention kernel, each token its own causal length, and
    // replay as a graph: twice with other tokens at the same positions, whose K/V the second
    // pass overwrites.
    for (int pass = 0; pass < 2; ++pass) {
      CAPTURE(pass);
      const int32_t ca = int32_t(a.size()), cb = int32_t(b.size());
      std::vector<int32_t> pa = {a.back()}, pb = {b.back()};
      for (int j = 0; j < 4; ++j) pa.push_back((j * 61 + 17 * pass + 5) % 290);
      for (int j = 0; j < 2; ++j) pb.push_back((j * 43 + 29 * pass + 7) % 290);
      std::vector<int32_t> toks(pa);
      toks.insert(toks.end(), pb.begin(), pb.end());
      SeqSlice s[2] = {{0, 5, ca + 4, pages_a}, {5, 3, cb + 2, pages_b}};
      std::vector<int32_t> rows = {0, 1, 2, 3, 4, 5, 6, 7};
      std::vector<float> all(size_t(8 * V));
      r.forward(ForwardBatch{toks, s, rows});
      r.copy_logits(all);
      for (int row = 0; row < 8; ++row) {
        CAPTURE(row);
        // Row j of a sequence sees its tokens and the first j proposals after the last one.
        const bool in_a = row < 5;
        const int j = in_a ? row : row - 5;
        std::vector<int32_t> seq = in_a ? a : b;
        const std::vector<int32_t>& prop = in_a ? pa : pb;
        seq.insert(seq.end(), prop.begin() + 1, prop.begin() + 1 + j);
        const std::vector<float> got(all.begin() + int64_t(row) * V,
                                     all.begin() + int64_t(row + 1) * V);
        CHECK(scored_error(got, reference_logits(m, seq)) < 1e-2);
      }
    }
  }
}

TEST_CASE("CUDA runner: overlapped single-token launches give the plain launches' bits") {
  // One-token steps of a model this narrow fold the norms into the GEMVs (or, with the fold off,
  // take the unfolded layers of the 7B and 8B), and on sm_90 each of their launches may overlap
  // the one before (kernels/pdl.cuh): weights are read before the wait, everything else after
  // it. A read or write on the wrong side of the wait shows up as logits that differ from the
  // plain launches'. Head size 64 takes the tensor-core decode attention, the kernel that
  // honours the overlap.
  TinyModel m = make_tiny(64);
  const RunnerOptions opts = tiny_options();
  std::vector<int32_t> prompt;
  for (int i = 0; i < 37; ++i) prompt.push_back((i * 37 + 11) % 290);
  const std::vector<int32_t> pages = {9, 3, 40, 7};
  for (bool fold : {true, false}) {
    CAPTURE(fold);
    auto run = [&](bool overlap, bool graphs) {
      auto created = CudaRunner::create(m.config, m.weights, opts);
      REQUIRE(created.ok());
      CudaRunner& r = **created;
      r.set_use_graphs(graphs);
      r.set_overlap_launches(overlap);
      r.set_fold_norms(fold);
      // Where the device has it, the steps below do take the overlapped launches (one token,
      // one logit row), and a forward without logits does not: equal bits then say something.
      int major = 0;
      TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
      CHECK(r.folds_norms(1) == fold);
      CHECK(r.overlaps_launches(1, 1) == (fold && overlap && major >= 9));
      CHECK(r.overlaps_bf16_launches(1, 1) == (overlap && major >= 9));
      CHECK_FALSE(r.overlaps_launches(1, 0));
      CHECK_FALSE(r.overlaps_bf16_launches(1, 0));
      std::vector<int32_t> seq = prompt;
      std::vector<float> all, logits(size_t(m.config.vocab_size));
      SeqSlice s{0, 37, 37, pages};
      std::vector<int32_t> rows = {36};
      r.forward(ForwardBatch{seq, std::span(&s, 1), rows});
      for (int step = 0; step < 12; ++step) {
        r.copy_logits(logits);
        all.insert(all.end(), logits.begin(), logits.end());
        seq.push_back(int32_t(argmax(logits, 290)));
        const std::vector<int32_t> token = {seq.back()};
        s = SeqSlice{0, 1, int32_t(seq.size()), pages};
        rows = {0};
        r.forward(ForwardBatch{token, std::span(&s, 1), rows});
      }
      r.copy_logits(logits);
      CHECK(rel_error(logits, reference_logits(m, seq)) < 1e-2);
      all.insert(all.end(), logits.begin(), logits.end());
      return all;
    };
    check_overlap_bits(run);
  }
}

TEST_CASE("CUDA runner: decode steps fed on the device give the synchronous tokens and bits") {
  // --async-decode's runner half: sample_async() leaves the ids on the device, the next forward
  // takes its tokens from them (ForwardBatch::fed) before the host has read them, and
  // sample_wait() reads them afterwards. Three sequences of different lengths (one crossing a
  // page during the steps), graphs and eager, overlapped launches on, each sampled its own way:
  // row 0 greedy with strong penalties, row 1 plain greedy (the argmax: its id lands first, so
  // the rows' places among the ids are permuted), row 2 drawn (top-p, seeded) with penalties.
  // A penalised row's last output token is still on the device when its next draw is set up,
  // so the request names it (SampleRequest::fed) and the device counts it in. The tokens and the
  // last logits must equal the synchronous loop's, where the host reads each step's ids, feeds
  // them back and lists every output token.
  TinyModel m = make_tiny(64);
  const RunnerOptions opts = tiny_options();
  const std::vector<std::vector<int32_t>> pages = {{9, 3, 40}, {21, 5, 30}, {11, 12, 13}};
  const std::vector<int32_t> lens = {13, 30, 5};
  constexpr int kSteps = 10;
  std::vector<ResolvedSampling> settings(3);
  for (ResolvedSampling& s : settings) s.temperature = 0.0f;
  for (int i : {0, 2}) {
    settings[size_t(i)].repetition_penalty = 1.8f;
    settings[size_t(i)].frequency_penalty = 0.9f;
    settings[size_t(i)].presence_penalty = 0.5f;
  }
  settings[2].temperature = 0.9f;
  settings[2].top_p = 0.9f;
  // How the fed run treats the pending token: named (the engine's way), or left out of the
  // penalties (what the device would do without the merge; must differ, or the test is vacuous).
  enum class Fed { kNone, kNamed, kIgnored };
  for (bool graphs : {true, false}) {
    CAPTURE(graphs);
    auto run = [&](Fed mode) {
      auto created = CudaRunner::create(m.config, m.weights, opts);
      REQUIRE(created.ok());
      CudaRunner& r = **created;
      r.set_use_graphs(graphs);
      std::vector<std::vector<int32_t>> seqs(3), outputs(3);
      std::vector<SamplingRng> rngs(3);
      for (SamplingRng& g : rngs) g.seed = 11;
      std::vector<int32_t> prompt, rows;
      std::vector<SeqSlice> slices;
      for (int i = 0; i < 3; ++i) {
        for (int t = 0; t < lens[size_t(i)]; ++t) seqs[size_t(i)].push_back((t * 31 + 7 * i) % 290);
        slices.push_back(
            {int32_t(prompt.size()), lens[size_t(i)], lens[size_t(i)], pages[size_t(i)]});
        prompt.insert(prompt.end(), seqs[size_t(i)].begin(), seqs[size_t(i)].end());
        rows.push_back(int32_t(prompt.size()) - 1);
      }
      const std::vector<std::vector<int32_t>> prompts = seqs;
      // Each row's request over the outputs the host has read so far.
      auto requests = [&](bool pending) {
        std::vector<SampleRequest> req(3);
        for (int i = 0; i < 3; ++i) {
          req[size_t(i)] = SampleRequest{i,
                                         &settings[size_t(i)],
                                         TokenHistory{prompts[size_t(i)], outputs[size_t(i)]},
                                         {},
                                         &rngs[size_t(i)]};
          if (pending && mode == Fed::kNamed) req[size_t(i)].fed = i;
        }
        return req;
      };
      auto take = [&](const std::vector<int32_t>& ids) {
        for (int i = 0; i < 3; ++i) {
          seqs[size_t(i)].push_back(ids[size_t(i)]);
          outputs[size_t(i)].push_back(ids[size_t(i)]);
        }
      };
      r.forward(ForwardBatch{prompt, slices, rows});
      std::vector<int32_t> out(3);
      r.sample(requests(false), out);
      take(out);
      const std::vector<int32_t> decode_rows = {0, 1, 2}, fed = {0, 1, 2};
      auto decode_slices = [&](int step) {
        std::vector<SeqSlice> sl;
        for (int i = 0; i < 3; ++i) {
          sl.push_back({i, 1, lens[size_t(i)] + step + 1, pages[size_t(i)]});
        }
        return sl;
      };
      if (mode != Fed::kNone) {
        // Step 0 from the host's tokens, each later step fed from the one before; its ids are
        // read one step late, as the engine reads them.
        std::vector<int32_t> toks = {out[0], out[1], out[2]};
        for (int step = 0; step < kSteps; ++step) {
          const std::vector<SeqSlice> sl = decode_slices(step);
          ForwardBatch b{toks, sl, decode_rows};
          if (step > 0) b.fed = fed;
          r.forward(b);
          r.sample_async(requests(step > 0));
          if (step > 0) {
            r.sample_wait(out);
            take(out);
          }
          toks = {0, 0, 0};  // ignored from here on: fed
        }
        r.sample_wait(out);
        take(out);
      } else {
        for (int step = 0; step < kSteps; ++step) {
          const std::vector<int32_t> toks = {seqs[0].back(), seqs[1].back(), seqs[2].back()};
          const std::vector<SeqSlice> sl = decode_slices(step);
          r.forward(ForwardBatch{toks, sl, decode_rows});
          r.sample(requests(false), out);
          take(out);
        }
      }
      std::vector<float> logits(size_t(3 * m.config.vocab_size));
      r.copy_logits(logits);
      return std::make_pair(seqs, logits);
    };
    const auto sync = run(Fed::kNone), fed = run(Fed::kNamed);
    CHECK(sync.first == fed.first);
    CHECK(sync.second == fed.second);
    // Not vacuous: without the pending token the penalties pick other tokens, and the tokens are
    // the model's (the reference's argmax where it is clear).
    CHECK(run(Fed::kIgnored).first != sync.first);
    const auto ref =
        reference_logits(m, std::vector<int32_t>(fed.first[1].begin(), fed.first[1].end() - 1));
    std::vector<float> middle(fed.second.begin() + m.config.vocab_size,
                              fed.second.begin() + 2 * m.config.vocab_size);
    CHECK(rel_error(middle, ref) < 1e-2);
  }
}

TEST_CASE(
    "CUDA runner: past max_graphs the least recently used graph is released, bits unchanged") {
  // Batches of 1, 2 and 3 sequences in turn, each shape its own graph: with room for two, every
  // step's shape was released since its last use and is captured again. The logits must equal
  // an eager runner's bit for bit (graphs and eager launch the same kernels), and the runner
  // must hold no more than two graphs.
  TinyModel m = make_tiny(64);
  RunnerOptions opts = tiny_options();
  opts.max_graphs = 2;
  auto bounded = CudaRunner::create(m.config, m.weights, opts);
  REQUIRE(bounded.ok());
  auto eager = CudaRunner::create(m.config, m.weights, tiny_options());
  REQUIRE(eager.ok());
  (*eager)->set_use_graphs(false);
  opts.max_graphs = 0;
  auto refused = CudaRunner::create(m.config, m.weights, opts);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().to_string().find("max_graphs") != std::string::npos);

  const int64_t V = m.config.vocab_size;
  const std::vector<std::vector<int32_t>> pages = {{1, 2}, {3, 4}, {5, 6}};
  std::vector<int32_t> len = {0, 0, 0};
  auto run = [&](CudaRunner& r, const std::vector<int32_t>& toks, std::vector<SeqSlice>& seqs,
                 const std::vector<int32_t>& rows) {
    r.forward(ForwardBatch{toks, seqs, rows});
    std::vector<float> logits(size_t(rows.size()) * size_t(V));
    r.copy_logits(logits);
    return logits;
  };
  // Prompts of 5 tokens for the three sequences, one chunk each.
  for (int s = 0; s < 3; ++s) {
    std::vector<int32_t> prompt;
    for (int i = 0; i < 5; ++i) prompt.push_back((s * 31 + i * 7 + 3) % 290);
    std::vector<SeqSlice> seqs = {{0, 5, 5, pages[size_t(s)]}};
    const std::vector<int32_t> rows = {4};
    const auto a = run(**bounded, prompt, seqs, rows), b = run(**eager, prompt, seqs, rows);
    CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
    len[size_t(s)] = 5;
  }
  // The 5-token chunks replay graphs too (small query lengths); what matters is the steps below.
  const int32_t before = (*bounded)->memory_plan().graph_count;
  for (int step = 0; step < 9; ++step) {
    CAPTURE(step);
    const int n = 1 + step % 3;  // 1, 2, 3, 1, 2, 3, ...
    std::vector<int32_t> toks, rows;
    std::vector<SeqSlice> seqs;
    for (int s = 0; s < n; ++s) {
      toks.push_back((step * 13 + s * 5 + 1) % 290);
      ++len[size_t(s)];
      seqs.push_back(SeqSlice{s, 1, len[size_t(s)], pages[size_t(s)]});
      rows.push_back(s);
    }
    const auto a = run(**bounded, toks, seqs, rows), b = run(**eager, toks, seqs, rows);
    CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
    const MemoryPlan p = (*bounded)->memory_plan();
    CHECK(p.graphs_held == 2);
  }
  // Six keys in turn (three batch sizes, each forward's metadata copy alternating between two
  // buffers) with room for two: every step met a shape released since its last use.
  CHECK((*bounded)->memory_plan().graph_count == before + 9);
  CHECK((*eager)->memory_plan().graph_count == 0);
}

TEST_CASE("CUDA runner: the lm_head's own argmax (greedy_next) gives the argmax launch's ids") {
  // Plain greedy decode steps of one and of two sequences (the lm_head GEMV's one and two rows),
  // fed on the device as --async-decode runs them, with graphs and eager: promising the argmax
  // to the forward (the GEMV then writes the ids, and sample_async() launches nothing) must give
  // the tokens and the logits' bits of the same steps without the promise. A valid vocabulary
  // below the model's rows keeps the last rows out of both argmaxes.
  TinyModel m = make_tiny(64);
  const RunnerOptions opts = tiny_options();
  const std::vector<std::vector<int32_t>> pages = {{9, 3, 40}, {21, 5, 30}};
  const std::vector<int32_t> lens = {13, 30};
  constexpr int kSteps = 12;
  ResolvedSampling greedy;
  greedy.temperature = 0.0f;
  for (int n : {1, 2}) {
    for (bool graphs : {true, false}) {
      CAPTURE(n);
      CAPTURE(graphs);
      struct Outcome {
        std::vector<std::vector<int32_t>> tokens;
        std::vector<float> logits;
        int64_t fused = 0, kept = 0;
      };
      auto run = [&](bool promise) {
        auto created = CudaRunner::create(m.config, m.weights, opts);
        REQUIRE(created.ok());
        CudaRunner& r = **created;
        r.set_use_graphs(graphs);
        r.set_valid_vocab(int32_t(m.config.vocab_size) - 7);
        Outcome o;
        o.tokens.resize(size_t(n));
        std::vector<int32_t> prompt, rows;
        std::vector<SeqSlice> slices;
        for (int i = 0; i < n; ++i) {
          std::vector<int32_t>& seq = o.tokens[size_t(i)];
          for (int t = 0; t < lens[size_t(i)]; ++t) seq.push_back((t * 37 + 11 * i) % 290);
          slices.push_back(
              {int32_t(prompt.size()), lens[size_t(i)], lens[size_t(i)], pages[size_t(i)]});
          prompt.insert(prompt.end(), seq.begin(), seq.end());
          rows.push_back(int32_t(prompt.size()) - 1);
        }
        std::vector<SampleRequest> req(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) req[size_t(i)] = SampleRequest{i, &greedy, {}, {}, nullptr};
        std::vector<int32_t> out(static_cast<size_t>(n));
        auto take = [&] {
          for (int i = 0; i < n; ++i) o.tokens[size_t(i)].push_back(out[size_t(i)]);
        };
        r.forward(ForwardBatch{prompt, slices, rows});
        r.sample(req, out);
        take();
        std::vector<int32_t> toks(out), decode_rows, fed;
        for (int i = 0; i < n; ++i) decode_rows.push_back(i), fed.push_back(i);
        for (int step = 0; step < kSteps; ++step) {
          std::vector<SeqSlice> sl;
          for (int i = 0; i < n; ++i) {
            sl.push_back({i, 1, lens[size_t(i)] + step + 1, pages[size_t(i)]});
          }
          ForwardBatch b{toks, sl, decode_rows};
          if (step > 0) b.fed = fed;
          b.greedy_next = promise;
          r.forward(b);
          r.sample_async(req);
          if (step > 0) {
            r.sample_wait(out);
            take();
          }
        }
        r.sample_wait(out);
        take();
        o.logits.resize(size_t(n * m.config.vocab_size));
        r.copy_logits(o.logits);
        o.fused = r.lm_argmax_forwards();
        o.kept = r.greedy_next_kept();
        return o;
      };
      const Outcome plain = run(false), fused = run(true);
      CHECK(fused.tokens == plain.tokens);
      CHECK(same_bits(fused.logits.data(), plain.logits.data(), plain.logits.size() * 4));
      CHECK(plain.fused == 0);
      CHECK(fused.fused == kSteps);
      CHECK(fused.kept == kSteps);
      // The steps' tokens are the model's: the last one is the argmax of the last logits.
      for (int i = 0; i < n; ++i) {
        const std::vector<float> row(plain.logits.begin() + i * m.config.vocab_size,
                                     plain.logits.begin() + (i + 1) * m.config.vocab_size);
        CHECK(plain.tokens[size_t(i)].back() ==
              int32_t(argmax(row, size_t(m.config.vocab_size - 7))));
      }
    }
  }
}

TEST_CASE("CUDA runner: a capped valid vocabulary scores only its ids, on every lm_head path") {
  // A draft's --draft-vocab: the lm_head reads only the first `cap` rows, at the logits' full
  // row stride. One and two logit rows take the GEMV, five the skinny GEMM, twelve cuBLASLt, and
  // a promised greedy decode step the GEMV's own argmax, replayed from a graph captured before
  // the cap (the cap is part of the graph's key). Against the same runner uncapped: the first
  // `cap` logits within rounding (the GEMV's row split depends on the row count), -inf past
  // them, greedy and drawn tokens below the cap, and probability rows of the full width 0 past it.
  TinyModel m = make_tiny(64);
  const int32_t V = int32_t(m.config.vocab_size);
  constexpr int32_t kCap = 137;
  auto full_made = CudaRunner::create(m.config, m.weights, tiny_options());
  auto cap_made = CudaRunner::create(m.config, m.weights, tiny_options());
  REQUIRE(full_made.ok());
  REQUIRE(cap_made.ok());
  CudaRunner& full = **full_made;
  CudaRunner& capped = **cap_made;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 30; ++i) prompt.push_back((i * 37 + 11) % 290);
  const std::vector<int32_t> pages = {1, 2};
  ResolvedSampling greedy, hot;
  greedy.temperature = 0.0f;
  hot.temperature = 1.5f;

  // A promised greedy decode step, its graph captured before the cap is set.
  auto decode_token = [&](CudaRunner& r) {
    const std::vector<int32_t> tok = {prompt.back()};
    const SeqSlice d{0, 1, 31, pages};
    const std::vector<int32_t> row = {0};
    ForwardBatch b{tok, std::span(&d, 1), row};
    b.greedy_next = true;
    r.forward(b);
    const std::vector<SampleRequest> req = {SampleRequest{0, &greedy, {}, {}, nullptr}};
    r.sample_async(req);
    std::vector<int32_t> out(1, -1);
    r.sample_wait(out);
    std::vector<float> logits(static_cast<size_t>(V));
    r.copy_logits(logits);
    return std::make_pair(out[0], logits);
  };
  const SeqSlice whole{0, 30, 30, pages};
  full.forward(ForwardBatch{prompt, std::span(&whole, 1), std::vector<int32_t>{29}});
  capped.forward(ForwardBatch{prompt, std::span(&whole, 1), std::vector<int32_t>{29}});
  const auto [full_id, full_logits] = decode_token(full);
  decode_token(capped);  // uncapped: captures the step's graph
  capped.set_valid_vocab(kCap);
  const auto [cap_id, cap_logits] = decode_token(capped);
  const std::vector<float> head(full_logits.begin(), full_logits.begin() + kCap);
  CHECK(cap_id == int32_t(argmax(head, size_t(kCap))));
  CHECK(full_id == int32_t(argmax(full_logits, size_t(V))));

  for (int32_t L : {1, 2, 5, 12}) {
    CAPTURE(L);
    std::vector<int32_t> rows;
    for (int32_t i = 0; i < L; ++i) rows.push_back(29 - i);
    std::vector<float> want(size_t(L * V)), got(size_t(L * V));
    full.forward(ForwardBatch{prompt, std::span(&whole, 1), rows});
    full.copy_logits(want);
    capped.forward(ForwardBatch{prompt, std::span(&whole, 1), rows});
    capped.copy_logits(got);
    double worst = 0, scale = 0;
    int64_t tail_not_inf = 0;
    for (int32_t r = 0; r < L; ++r) {
      for (int32_t i = 0; i < V; ++i) {
        const float g = got[size_t(r * V + i)], w = want[size_t(r * V + i)];
        if (i < kCap) {
          worst = std::max(worst, double(std::fabs(g - w)));
          scale = std::max(scale, double(std::fabs(w)));
        } else {
          tail_not_inf += !(std::isinf(g) && g < 0);
        }
      }
    }
    CHECK(worst <= 1e-5 * scale);
    CHECK(tail_not_inf == 0);

    std::vector<SampleRequest> reqs;
    std::vector<SamplingRng> rngs;
    for (int32_t r = 0; r < L; ++r) rngs.push_back({uint64_t(r) + 3, 0});
    for (int32_t r = 0; r < L; ++r) reqs.push_back({r, &greedy, {}, {}, nullptr});
    std::vector<int32_t> ids(size_t(L), -1);
    capped.sample(reqs, ids);
    for (int32_t r = 0; r < L; ++r) {
      const std::vector<float> row(got.begin() + r * V, got.begin() + r * V + kCap);
      CHECK(ids[size_t(r)] == int32_t(argmax(row, size_t(kCap))));
    }
    for (int32_t r = 0; r < L; ++r) reqs[size_t(r)] = {r, &hot, {}, {}, &rngs[size_t(r)]};
    std::vector<float> probs(size_t(L * V), NAN);
    std::vector<int32_t> draws(size_t(L), -1);
    capped.probs(reqs, V, probs, draws);
    int64_t tail_nonzero = 0;
    for (int32_t r = 0; r < L; ++r) {
      CHECK(draws[size_t(r)] >= 0);
      CHECK(draws[size_t(r)] < kCap);
      for (int32_t i = kCap; i < V; ++i) tail_nonzero += probs[size_t(r * V + i)] != 0.0f;
    }
    CHECK(tail_nonzero == 0);
  }
}

TEST_CASE("CUDA runner: an absent device is an error, not a crash") {
  TinyModel m = make_tiny();
  RunnerOptions opts;
  opts.device = "cuda:99";
  auto r = CudaRunner::create(m.config, m.weights, opts);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ErrorCode::kUnsupported);
  opts.device = "gpu0";
  CHECK(CudaRunner::create(m.config, m.weights, opts).error().code == ErrorCode::kInvalidArgument);
}

TEST_CASE("CUDA runner: device timing gives each forward its own interval on the device") {
  TinyModel m = make_tiny();
  RunnerOptions opts = tiny_options();
  opts.device_timing = true;
  auto created = CudaRunner::create(m.config, m.weights, opts);
  REQUIRE(created.ok());
  CudaRunner& r = **created;
  std::vector<int32_t> a;
  for (int i = 0; i < 60; ++i) a.push_back((i * 37 + 11) % 290);
  std::vector<int32_t> pages = {1, 2, 3, 4, 5};
  const int64_t before = trace_now_ns();
  // Two chunks without sampling: the host returns before the device is done with them.
  SeqSlice s1{0, 30, 30, pages};
  r.forward(ForwardBatch{std::span(a.data(), 30), std::span(&s1, 1), {}});
  const auto first = r.last_forward_interval();
  SeqSlice s2{0, 30, 60, pages};
  const std::vector<int32_t> rows = {29};
  r.forward(ForwardBatch{std::span(a.data() + 30, 30), std::span(&s2, 1), rows});
  const auto second = r.last_forward_interval();
  REQUIRE(first != nullptr);
  REQUIRE(second != nullptr);
  CHECK(first != second);
  ResolvedSampling greedy;
  greedy.temperature = 0.0f;
  SampleRequest req;
  req.params = &greedy;
  int32_t out = -1;
  r.sample(std::span(&req, 1), std::span(&out, 1));  // waits for both forwards
  const int64_t after = trace_now_ns();
  int64_t s_a = 0, e_a = 0, s_b = 0, e_b = 0;
  REQUIRE(first->resolve(s_a, e_a));
  REQUIRE(second->resolve(s_b, e_b));
  // Inside the host's window (the anchor's wake-up latency allowed), in order, not empty.
  const int64_t slack = 200'000;  // 0.2 ms
  CHECK(s_a >= before - slack);
  CHECK(e_b <= after + slack);
  CHECK(e_a > s_a);
  CHECK(e_b > s_b);
  CHECK(s_b >= e_a - slack);
  // With timing off there is nothing to resolve.
  opts.device_timing = false;
  auto plain = CudaRunner::create(m.config, m.weights, opts);
  REQUIRE(plain.ok());
  (*plain)->forward(ForwardBatch{std::span(a.data(), 30), std::span(&s1, 1), {}});
  CHECK((*plain)->last_forward_interval() == nullptr);
}

TEST_CASE("CUDA runner: probs_into keeps probs()' rows on the device; accept_sampled reads them") {
  TinyModel m = make_tiny();
  auto created = CudaRunner::create(m.config, m.weights, tiny_options());
  REQUIRE(created.ok());
  CudaRunner& r = **created;
  constexpr int32_t kWidth = 290;  // the padded rows past it are never sampled
  r.set_valid_vocab(kWidth);
  std::vector<int32_t> a;
  for (int i = 0; i < 30; ++i) a.push_back((i * 37 + 11) % kWidth);
  std::vector<int32_t> pages = {1, 2};
  SeqSlice s{0, 30, 30, pages};
  const std::vector<int32_t> logit_rows = {27, 28, 29};
  r.forward(ForwardBatch{a, std::span(&s, 1), logit_rows});
  ResolvedSampling hot;
  hot.temperature = 0.8f;
  std::vector<SampleRequest> reqs(3);
  std::vector<SamplingRng> rngs = {{1, 0}, {2, 5}, {3, 9}};
  for (int32_t i = 0; i < 3; ++i)
    reqs[size_t(i)] = SampleRequest{i, &hot, {}, {}, &rngs[size_t(i)]};
  const std::vector<SamplingRng> start = rngs;
  std::vector<float> host(3 * size_t(kWidth));
  std::vector<int32_t> host_draws(3);
  r.probs(reqs, kWidth, host, host_draws);

  // Slots 1..3 of a store of 5: the same bits as probs() and the same draws.
  rngs = start;
  ProbRows rows = r.make_prob_rows(5, kWidth);
  REQUIRE(rows.device() >= 0);
  std::vector<int32_t> draws(3, -1);
  r.probs_into(reqs, rows, 1, draws);
  std::vector<float> back(host.size());
  TANDEM_CUDA_CHECK(cudaMemcpy(back.data(), rows.row(1), back.size() * 4, cudaMemcpyDeviceToHost));
  CHECK(same_bits(back.data(), host.data(), host.size() * 4));
  CHECK(draws == host_draws);

  // Row 0 of the call as every sequence's draft row, rows 1..2 as its target rows (slots 2, 3),
  // with one proposal each and a generator of its own: accepted and rejected alike.
  std::vector<std::vector<int32_t>> proposals;
  for (int32_t i = 0; i < 64; ++i)
    proposals.push_back({i % 5 == 0 ? host_draws[0] : i * 7 % kWidth});
  const std::vector<int32_t> draft_slot = {1};
  std::vector<SamplingRng> device_rngs, host_rngs;
  for (uint64_t i = 0; i < 64; ++i) device_rngs.push_back({i + 100, i});
  host_rngs = device_rngs;
  std::vector<SampledDrafts> seqs;
  for (size_t i = 0; i < 64; ++i) seqs.push_back({proposals[i], draft_slot, 2, &device_rngs[i]});
  std::vector<SpeculativeResult> got(seqs.size());
  r.accept_sampled(seqs, rows, rows, got);
  int accepted = 0;
  for (size_t i = 0; i < 64; ++i) {
    CAPTURE(i);
    const SpeculativeResult want =
        accept_sampled(proposals[i], std::span(host).first(size_t(kWidth)),
                       std::span(host).subspan(size_t(kWidth)), kWidth, host_rngs[i]);
    CHECK(got[i].num_accepted == want.num_accepted);
    CHECK(got[i].tokens == want.tokens);
    CHECK(device_rngs[i].counter == host_rngs[i].counter);
    accepted += want.num_accepted;
  }
  CHECK(accepted > 0);
  CHECK(accepted < 64);
}
