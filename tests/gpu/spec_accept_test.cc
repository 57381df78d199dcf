// Speculative acceptance of sampled sequences on the device (kernels/spec_accept.cuh, and
// DeviceAcceptance around it) against the host rule accept_sampled on the same rows: the same
// accepted counts always (the tests are scalars computed alike), the same final token except
// where float sums in another order move a draw's boundary (ties), the generators advanced
// alike, and a rerun bit-identical. Rows come from tests/unit/runner/accept_case.h: forced
// acceptances, forced rejections, empty residuals and natural ones, at Qwen2.5's vocabulary and
// small ones.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "../unit/runner/accept_case.h"
#include "gpu_test_util.h"
#include "kernels/cuda_check.cuh"
#include "kernels/spec_accept.cuh"
#include "runner/cuda/device_acceptance.h"

using namespace tandem;
using namespace tandem::testing;
using gpu_test::Dev;

namespace {

// The kernel's inputs for a case: [n] AcceptSeq, [sum k] proposals, [sum k] draft slots.
struct Inputs {
  std::vector<kernels::AcceptSeq> seqs;
  std::vector<int32_t> tokens, slots;
};

Inputs pack(const AcceptCase& c) {
  Inputs in;
  for (const AcceptSeqCase& q : c.seqs) {
    in.seqs.push_back(kernels::AcceptSeq{q.rng.seed, q.rng.counter, int32_t(q.tokens.size()),
                                         int32_t(in.tokens.size()), q.target_slot, 0});
    in.tokens.insert(in.tokens.end(), q.tokens.begin(), q.tokens.end());
    in.slots.insert(in.slots.end(), q.draft_slots.begin(), q.draft_slots.end());
  }
  in.tokens.push_back(0);  // never read: keeps the buffers non-empty when every k is 0
  in.slots.push_back(0);
  return in;
}

struct Tally {
  int seqs = 0, token_mismatches = 0, rejected = 0, all_accepted = 0;
};

// One case through the kernel, twice, against the reference.
void check_kernel(const AcceptCase& c, Tally& tally) {
  std::vector<SamplingRng> rngs;
  const std::vector<SpeculativeResult> want = reference_accept(c, rngs);
  const Inputs in = pack(c);
  const size_t n = in.seqs.size();
  Dev<kernels::AcceptSeq> seqs(in.seqs);
  Dev<int32_t> tokens(in.tokens), slots(in.slots);
  Dev<float> draft(c.draft_rows), target(c.target_rows);
  Dev<int32_t> out(2 * n);
  out.poison();
  kernels::launch_accept_sampled(seqs.p, int32_t(n), tokens.p, slots.p, draft.p, target.p, c.width,
                                 out.p, nullptr);
  const std::vector<int32_t> got = out.get<int32_t>();
  out.poison();
  kernels::launch_accept_sampled(seqs.p, int32_t(n), tokens.p, slots.p, draft.p, target.p, c.width,
                                 out.p, nullptr);
  const std::vector<int32_t> again = out.get<int32_t>();
  CHECK(gpu_test::same_bits(got.data(), again.data(), got.size() * sizeof(int32_t)));
  for (size_t i = 0; i < n; ++i) {
    CAPTURE(i);
    const int32_t k = int32_t(c.seqs[i].tokens.size());
    REQUIRE(got[2 * i] == want[i].num_accepted);  // exact: the tests are scalars
    const int32_t token = got[2 * i + 1];
    REQUIRE(token >= 0);
    REQUIRE(token < c.width);
    tally.seqs++;
    tally.token_mismatches += token != want[i].tokens.back();
    if (k > 0) (want[i].num_accepted == k ? tally.all_accepted : tally.rejected)++;
  }
}

// Device copies of host rows as a ProbRows store of the current device.
ProbRows device_rows(const std::vector<float>& host, int32_t width) {
  int device = 0;
  TANDEM_CUDA_CHECK(cudaGetDevice(&device));
  void* p = nullptr;
  TANDEM_CUDA_CHECK(cudaMalloc(&p, host.size() * sizeof(float)));
  TANDEM_CUDA_CHECK(
      cudaMemcpy(p, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  return ProbRows(static_cast<float*>(p), int32_t(host.size() / size_t(width)), width, device,
                  [](float* q, int32_t) { cudaFree(q); });
}

}  // namespace

TEST_CASE("accept kernel equals the host rule (Qwen2.5 vocabulary and small ones)") {
  Tally tally;
  struct Shape {
    int32_t width, seqs, cases;
  };
  for (const Shape s :
       {Shape{151936, 8, 6}, Shape{1000, 32, 20}, Shape{37, 32, 40}, Shape{5, 16, 20}}) {
    for (int32_t seed = 0; seed < s.cases; ++seed) {
      CAPTURE(s.width);
      CAPTURE(seed);
      check_kernel(make_accept_case(s.seqs, s.width, 8, uint32_t(seed) + 100), tally);
    }
  }
  MESSAGE(tally.seqs << " sequences, " << tally.token_mismatches << " final tokens differ, "
                     << tally.rejected << " rejected, " << tally.all_accepted << " all accepted");
  CHECK(tally.rejected > 100);
  CHECK(tally.all_accepted > 50);
  // Ties only: a boundary moved by float sums in another order.
  CHECK(tally.token_mismatches * 500 <= tally.seqs);
}

TEST_CASE("DeviceAcceptance: tokens, counts and generators as the host rule") {
  cudaStream_t stream = nullptr;
  TANDEM_CUDA_CHECK(cudaStreamCreate(&stream));
  DeviceAcceptance acceptance;
  int seqs = 0, mismatches = 0;
  for (const int32_t width : {151936, 300}) {
    for (uint32_t seed = 0; seed < 4; ++seed) {
      CAPTURE(width);
      CAPTURE(seed);
      const AcceptCase c = make_accept_case(width > 1000 ? 6 : 24, width, 8, seed + 7);
      std::vector<SamplingRng> want_rngs;
      const std::vector<SpeculativeResult> want = reference_accept(c, want_rngs);
      const ProbRows draft = device_rows(c.draft_rows, width);
      const ProbRows target = device_rows(c.target_rows, width);
      std::vector<SamplingRng> rngs;
      for (const AcceptSeqCase& q : c.seqs) rngs.push_back(q.rng);
      std::vector<SampledDrafts> in;
      for (size_t i = 0; i < c.seqs.size(); ++i) {
        in.push_back(SampledDrafts{c.seqs[i].tokens, c.seqs[i].draft_slots, c.seqs[i].target_slot,
                                   &rngs[i]});
      }
      std::vector<SpeculativeResult> got(in.size());
      acceptance.accept(in, draft, target, got, stream);
      for (size_t i = 0; i < in.size(); ++i) {
        CAPTURE(i);
        const SpeculativeResult& w = want[i];
        REQUIRE(got[i].num_accepted == w.num_accepted);
        REQUIRE(got[i].tokens.size() == w.tokens.size());
        CHECK(std::equal(w.tokens.begin(), w.tokens.end() - 1, got[i].tokens.begin()));
        CHECK(rngs[i].counter == want_rngs[i].counter);
        ++seqs;
        mismatches += got[i].tokens.back() != w.tokens.back();
      }
    }
  }
  MESSAGE(seqs << " sequences, " << mismatches << " final tokens differ");
  CHECK(mismatches * 100 <= seqs);
  TANDEM_CUDA_CHECK(cudaStreamDestroy(stream));
}
