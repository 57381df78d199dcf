// Host cost of the rejection rule for sampled speculation: accept_sampled over rows of a
// 151,936-id vocabulary (Qwen2.5-0.5B's), k = 8 drafts each rejected at their first position,
// so every call draws from the residual max(0, p_t - p_d). Prints milliseconds per call.
//
//   bench_spec_accept [--calls 200]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "sampling/speculative.h"

using namespace tandem;

namespace {

constexpr int32_t kVocab = 151936;
constexpr int32_t kDrafts = 8;

// A sparse random distribution: ~1 id in 1,000 carries mass.
void fill_row(std::mt19937& g, float* row) {
  double sum = 0.0;
  for (int32_t i = 0; i < kVocab; ++i) {
    row[i] = g() % 1000 == 0 ? float(1 + g() % 100) : 0.0f;
    sum += row[i];
  }
  for (int32_t i = 0; i < kVocab; ++i) row[i] = float(row[i] / sum);
}

}  // namespace

int main(int argc, char** argv) {
  int calls = 200;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--calls") == 0 && i + 1 < argc) {
      calls = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: bench_spec_accept [--calls N]\n");
      return 2;
    }
  }
  std::mt19937 g(1);
  std::vector<float> draft(size_t(kDrafts) * kVocab), target(size_t(kDrafts + 1) * kVocab);
  for (int32_t r = 0; r < kDrafts; ++r) fill_row(g, draft.data() + size_t(r) * kVocab);
  for (int32_t r = 0; r <= kDrafts; ++r) fill_row(g, target.data() + size_t(r) * kVocab);
  // Each draft is its row's most likely id; the independent target rows reject it.
  std::vector<int32_t> drafts(kDrafts);
  for (int32_t r = 0; r < kDrafts; ++r) {
    const float* row = draft.data() + size_t(r) * kVocab;
    drafts[size_t(r)] = int32_t(std::max_element(row, row + kVocab) - row);
  }
  SamplingRng rng{5, 0};
  int64_t rejections = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int c = 0; c < calls; ++c) {
    rejections += accept_sampled(drafts, draft, target, kVocab, rng).num_accepted < kDrafts;
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "{\"vocab\": %d, \"drafts\": %d, \"calls\": %d, \"rejections\": %lld, "
      "\"ms_per_call\": %.4f}\n",
      kVocab, kDrafts, calls, static_cast<long long>(rejections), ms / calls);
  return 0;
}
