// The device sampler against the reference sampler (src/sampling/sampler.h): for the same logits,
// settings, history and Philox draw, the same token, row for row. Settings cover every
// processor alone and together, ties, NaN/-inf, banned ids, padded vocabularies and more rows
// than one launch takes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda_check.cuh"
#include "runner/cuda/device_sampler.h"
#include "sampling/sampler.h"

using namespace tandem;

namespace {

struct Case {
  const char* name;
  ResolvedSampling params;
  bool ties = false;     // logits on a grid of 0.25: many equal values
  bool history = false;  // prompt/output ids for the penalties
  bool ban = false;      // a few suppressed ids per row
  float spread = 3.0f;   // standard deviation of the logits; small = a flat distribution
};

ResolvedSampling settings(float t, int32_t k, float p, float min_p = 0.0f, float rep = 1.0f,
                          float freq = 0.0f, float pres = 0.0f) {
  ResolvedSampling s;
  s.temperature = t;
  s.top_k = k;
  s.top_p = p;
  s.min_p = min_p;
  s.repetition_penalty = rep;
  s.frequency_penalty = freq;
  s.presence_penalty = pres;
  return s;
}

struct Row {
  std::vector<int32_t> prompt, output, ban;
  SamplingRng rng;
};

// Rows x vocab logits (normal) with NaN/-inf sprinkled in; ties on a coarse grid.
std::vector<float> make_logits(int rows, int vocab, bool ties, float spread, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.0f, spread);
  std::vector<float> x(size_t(rows) * size_t(vocab));
  for (float& v : x) v = ties ? std::round(n(g) * 4.0f) / 4.0f : n(g);
  for (int r = 0; r < rows; ++r) {
    x[size_t(r) * size_t(vocab) + g() % uint32_t(vocab)] = NAN;
    x[size_t(r) * size_t(vocab) + g() % uint32_t(vocab)] = -INFINITY;
  }
  return x;
}

// The host logits on the device, and a stream; both freed with it.
struct DeviceLogits {
  explicit DeviceLogits(const std::vector<float>& host) {
    TANDEM_CUDA_CHECK(cudaMalloc(&dev, host.size() * 4));
    TANDEM_CUDA_CHECK(cudaMemcpy(dev, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
    TANDEM_CUDA_CHECK(cudaStreamCreate(&stream));
  }
  ~DeviceLogits() {
    TANDEM_CUDA_CHECK(cudaStreamDestroy(stream));
    TANDEM_CUDA_CHECK(cudaFree(dev));
  }
  DeviceLogits(const DeviceLogits&) = delete;
  DeviceLogits& operator=(const DeviceLogits&) = delete;
  float* dev = nullptr;
  cudaStream_t stream = nullptr;
};

// Each row's generator, and the case's history (prompt ids below `ids`, repeating outputs) and
// banned ids below `ids`.
std::vector<Row> make_rows(const Case& c, int rows, int ids, uint32_t seed) {
  std::mt19937 g(seed + 1);
  std::vector<Row> state(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    Row& row = state[size_t(r)];
    row.rng = SamplingRng{seed * 1000u + uint64_t(r), 0};
    if (c.history) {
      for (int i = 0; i < 40; ++i) row.prompt.push_back(int32_t(g() % uint32_t(ids)));
      for (int i = 0; i < 25; ++i) row.output.push_back(int32_t(g() % 50));  // repeats
    }
    if (c.ban) {
      for (int i = 0; i < 3; ++i) row.ban.push_back(int32_t(g() % uint32_t(ids)));
    }
  }
  return state;
}

// Mismatching rows between the device sampler and the reference, over `draws` steps.
int mismatches(const Case& c, int vocab, int valid, int rows, int draws, uint32_t seed,
               bool one_block) {
  const std::vector<float> host = make_logits(rows, vocab, c.ties, c.spread, seed);
  const DeviceLogits device(host);
  DeviceSampler sampler(vocab, rows);
  sampler.set_one_block_only(one_block);
  std::vector<Row> state = make_rows(c, rows, valid, seed);
  int bad = 0;
  for (int d = 0; d < draws; ++d) {
    std::vector<SampleRequest> reqs(static_cast<size_t>(rows));
    std::vector<Row> ref = state;  // the reference draws from copies of the same generators
    std::vector<size_t> which;
    for (int r = 0; r < rows; ++r) {
      Row& row = state[size_t(r)];
      reqs[size_t(r)] =
          SampleRequest{r, &c.params, TokenHistory{row.prompt, row.output}, row.ban, &row.rng};
      which.push_back(size_t(r));
    }
    std::vector<int32_t> got(static_cast<size_t>(rows), -7);
    sampler.sample(device.dev, valid, reqs, which, got, device.stream);
    for (int r = 0; r < rows; ++r) {
      Row& row = ref[size_t(r)];
      std::vector<float> logits(host.begin() + ptrdiff_t(r) * vocab,
                                host.begin() + ptrdiff_t(r + 1) * vocab);
      apply_logits_processors(logits, c.params, TokenHistory{row.prompt, row.output}, row.ban,
                              valid);
      const int32_t want = sample_token(logits, c.params, row.rng);
      if (got[size_t(r)] != want) {
        ++bad;
        MESSAGE(c.name << ": row " << r << " draw " << d << " got " << got[size_t(r)] << " want "
                       << want);
      }
      // Both generators advanced by the same number of draws.
      CHECK(state[size_t(r)].rng.counter == row.rng.counter);
      state[size_t(r)].output.push_back(want);
    }
  }
  // The logits themselves are left as they were (penalties work on a copy).
  std::vector<float> after(host.size());
  TANDEM_CUDA_CHECK(cudaMemcpy(after.data(), device.dev, after.size() * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < after.size(); ++i) {
    if (!(std::isnan(after[i]) && std::isnan(host[i])) && after[i] != host[i]) {
      ++bad;
      break;
    }
  }
  return bad;
}

// Rows whose device probabilities (DeviceSampler::probs over ids [0, width)) differ from the
// reference's (apply_logits_processors then logits_to_probs on the row's first `width` logits):
// a different kept set, or a kept probability off by more than a few float roundings (the
// normalising sums run in another order).
int prob_mismatches(const Case& c, int vocab, int width, int rows, uint32_t seed, bool one_block) {
  const std::vector<float> host = make_logits(rows, vocab, c.ties, c.spread, seed);
  const DeviceLogits device(host);
  DeviceSampler sampler(vocab, rows);
  sampler.set_one_block_only(one_block);
  std::vector<Row> state = make_rows(c, rows, width, seed);
  std::vector<SampleRequest> reqs;
  for (int r = 0; r < rows; ++r) {
    const Row& row = state[size_t(r)];
    // Rows in reverse order: a request's logit row is its own, not its position.
    reqs.push_back(SampleRequest{rows - 1 - r, &c.params, TokenHistory{row.prompt, row.output},
                                 row.ban, nullptr});
  }
  std::vector<float> got(size_t(rows) * size_t(width), NAN);
  sampler.probs(device.dev, width, width, reqs, got, {}, device.stream);
  // Again with the draws: the same rows, bit for bit, and each row's token.
  for (int r = 0; r < rows; ++r) reqs[size_t(r)].rng = &state[size_t(r)].rng;
  const std::vector<Row> ref = state;  // the reference draws from copies of the generators
  std::vector<float> got_drawn(got.size(), NAN);
  std::vector<int32_t> drawn(static_cast<size_t>(rows), -7);
  sampler.probs(device.dev, width, width, reqs, got_drawn, drawn, device.stream);
  int bad = 0;
  if (std::memcmp(got.data(), got_drawn.data(), got.size() * 4) != 0) {
    ++bad;
    MESSAGE(c.name << ": rows differ when the tokens are drawn too");
  }
  for (int i = 0; i < rows; ++i) {
    const SampleRequest& q = reqs[size_t(i)];
    std::vector<float> row(host.begin() + ptrdiff_t(q.logit_index) * vocab,
                           host.begin() + ptrdiff_t(q.logit_index) * vocab + width);
    apply_logits_processors(row, c.params, q.history, q.suppress, width);
    SamplingRng rng = ref[size_t(i)].rng;
    const int32_t want_token = sample_token(row, c.params, rng);
    if (drawn[size_t(i)] != want_token) {
      ++bad;
      MESSAGE(c.name << ": row " << i << " drew " << drawn[size_t(i)] << " want " << want_token);
    }
    CHECK(state[size_t(i)].rng.counter == rng.counter);  // one draw a sampled row, none greedy
    std::vector<float> want(static_cast<size_t>(width));
    logits_to_probs(row, c.params, want);
    for (int v = 0; v < width; ++v) {
      const float a = got[size_t(i) * size_t(width) + size_t(v)], b = want[size_t(v)];
      if ((a > 0.0f) != (b > 0.0f) || !(std::fabs(a - b) <= 4e-7f * b)) {
        ++bad;
        MESSAGE(c.name << ": row " << i << " id " << v << " got " << a << " want " << b);
        break;
      }
    }
  }
  return bad;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"temperature only", settings(1.0f, 0, 1.0f)},
      // Temperature-only rows take the wide form (kernels/sample_wide.cuh) unless forced off.
      {"temperature only, ties", settings(0.8f, 0, 1.0f), true},
      {"temperature with penalties and bans", settings(0.7f, 0, 1.0f, 0.0f, 1.2f, 0.5f, 0.3f),
       false, true, true},
      {"qwen defaults", settings(0.7f, 20, 0.8f, 0.0f, 1.05f), false, true},
      {"llama defaults (top-p over the whole vocabulary)", settings(0.6f, 0, 0.9f)},
      {"top-k 1", settings(1.0f, 1, 1.0f)},
      {"top-k with ties at the threshold", settings(0.9f, 40, 1.0f), true},
      {"top-p with ties at the cut", settings(1.0f, 0, 0.5f), true},
      {"min-p", settings(0.8f, 0, 1.0f, 0.05f)},
      {"everything", settings(1.3f, 50, 0.95f, 0.02f, 1.2f, 0.5f, 0.3f), false, true, true},
      {"greedy with penalties and bans", settings(0.0f, 0, 1.0f, 0.0f, 1.3f, 0.4f, 0.2f), false,
       true, true},
      {"tiny top-p keeps one token", settings(1.0f, 0, 1e-6f)},
      // More tokens than the kernel's shared-memory prefilter holds: the whole-row path.
      {"flat distribution, top-p over most of the vocabulary", settings(1.0f, 0, 0.9f), false,
       false, false, 0.05f},
      {"top-k of 3000", settings(1.0f, 3000, 0.95f, 0.0f, 1.1f), false, true},
  };
  return all;
}

}  // namespace

// Each test runs both kernel forms: the wide one takes the temperature-only rows (the default),
// and the one-block kernel takes every row when forced.
TEST_CASE("device sampler equals the reference sampler, small vocabulary, 40 rows") {
  for (const bool one_block : {false, true}) {
    for (const Case& c : cases()) {
      CAPTURE(c.name);
      CAPTURE(one_block);
      CHECK(mismatches(c, 1000, 1000 - 24, 40, 12, 7, one_block) == 0);
    }
  }
}

TEST_CASE("device sampler equals the reference sampler, Qwen2.5 vocabulary (152,064 rows)") {
  for (const bool one_block : {false, true}) {
    for (const Case& c : cases()) {
      CAPTURE(c.name);
      CAPTURE(one_block);
      CHECK(mismatches(c, 152064, 151665, 8, 3, 11, one_block) == 0);
    }
  }
}

TEST_CASE(
    "device probabilities (and their draws) equal the reference's, both vocabularies, more rows "
    "than a wave") {
  for (const bool one_block : {false, true}) {
    for (const Case& c : cases()) {
      CAPTURE(c.name);
      CAPTURE(one_block);
      CHECK(prob_mismatches(c, 1000, 1000 - 24, 40, 5, one_block) == 0);
      CHECK(prob_mismatches(c, 152064, 151665, 6, 13, one_block) == 0);
    }
  }
}

TEST_CASE(
    "sample_on_device counts a token still on the device in the penalties (SampleRequest::fed)") {
  // --async-decode's penalised rows: the host's history lacks the last output token, which sits
  // in a device buffer; the request names its slot and the device merges it into the row's
  // penalty list (kernels/fed_penalty.cuh). Against the reference with the token appended to
  // the output: rows 4i take a token of their output (an entry to update), rows 4i + 1 one that
  // occurs nowhere in their history (the placeholder filled), the others the token the row draws
  // without it (so that counting it moves the draw); slots are reversed against rows.
  constexpr int kVocab = 1000, kValid = kVocab - 24, kRows = 40;
  for (const bool one_block : {false, true}) {
    for (const Case& c : cases()) {
      if (!c.history) continue;
      CAPTURE(c.name);
      CAPTURE(one_block);
      const std::vector<float> host = make_logits(kRows, kVocab, c.ties, c.spread, 5);
      const DeviceLogits device(host);
      DeviceSampler sampler(kVocab, kRows);
      sampler.set_one_block_only(one_block);
      std::vector<Row> state = make_rows(c, kRows, kValid, 5);
      std::vector<int32_t> fed_host(kRows), without(kRows);
      for (int r = 0; r < kRows; ++r) {
        const Row& row = state[size_t(r)];
        std::vector<float> logits(host.begin() + ptrdiff_t(r) * kVocab,
                                  host.begin() + ptrdiff_t(r + 1) * kVocab);
        apply_logits_processors(logits, c.params, TokenHistory{row.prompt, row.output}, row.ban,
                                kValid);
        SamplingRng rng = row.rng;
        without[size_t(r)] = sample_token(logits, c.params, rng);
        int32_t id = without[size_t(r)];
        if (r % 4 == 0) id = row.output[size_t(r % 7)];
        if (r % 4 == 1) {  // the smallest id above the outputs' range that is not in the prompt
          id = 50;
          while (std::find(row.prompt.begin(), row.prompt.end(), id) != row.prompt.end()) ++id;
        }
        fed_host[size_t(kRows - 1 - r)] = id;
      }
      int32_t* dev = nullptr;  // [2 * kRows]: the fed ids, then the drawn ones
      TANDEM_CUDA_CHECK(cudaMalloc(&dev, 2 * kRows * 4));
      TANDEM_CUDA_CHECK(cudaMemcpy(dev, fed_host.data(), kRows * 4, cudaMemcpyHostToDevice));
      std::vector<Row> ref = state;
      std::vector<SampleRequest> reqs;
      std::vector<size_t> which;
      for (int r = 0; r < kRows; ++r) {
        Row& row = state[size_t(r)];
        reqs.push_back(
            SampleRequest{r, &c.params, TokenHistory{row.prompt, row.output}, row.ban, &row.rng});
        reqs.back().fed = kRows - 1 - r;
        which.push_back(size_t(r));
      }
      sampler.sample_on_device(device.dev, kValid, reqs, which, dev + kRows, dev, device.stream);
      std::vector<int32_t> got(kRows, -7);
      TANDEM_CUDA_CHECK(cudaStreamSynchronize(device.stream));
      TANDEM_CUDA_CHECK(cudaMemcpy(got.data(), dev + kRows, kRows * 4, cudaMemcpyDeviceToHost));
      TANDEM_CUDA_CHECK(cudaFree(dev));
      int bad = 0, moved = 0;
      for (int r = 0; r < kRows; ++r) {
        Row& row = ref[size_t(r)];
        row.output.push_back(fed_host[size_t(kRows - 1 - r)]);
        std::vector<float> logits(host.begin() + ptrdiff_t(r) * kVocab,
                                  host.begin() + ptrdiff_t(r + 1) * kVocab);
        apply_logits_processors(logits, c.params, TokenHistory{row.prompt, row.output}, row.ban,
                                kValid);
        const int32_t want = sample_token(logits, c.params, row.rng);
        if (got[size_t(r)] != want) ++bad;
        moved += without[size_t(r)] != want;
        CHECK(state[size_t(r)].rng.counter == row.rng.counter);
      }
      CHECK(bad == 0);
      // Not vacuous: the appended token changes some rows' draws.
      CHECK(moved > 0);
    }
  }
}
