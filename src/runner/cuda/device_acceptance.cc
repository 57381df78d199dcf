#include "runner/cuda/device_acceptance.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "kernels/cuda_check.cuh"
#include "kernels/spec_accept.cuh"

namespace tandem {

void DeviceAcceptance::reserve(size_t in_bytes, size_t num_seqs) {
  // Grown by doubling, rarely: a step's inputs are a few KB.
  if (in_bytes > in_.bytes()) {
    const size_t n = std::max(in_bytes, 2 * in_.bytes());
    in_ = DeviceBuffer(n);
    in_host_ = PinnedBuffer(n);
  }
  const size_t out_bytes = num_seqs * 2 * sizeof(int32_t);
  if (out_bytes > out_.bytes()) {
    const size_t n = std::max(out_bytes, 2 * out_.bytes());
    out_ = DeviceBuffer(n);
    out_host_ = PinnedBuffer(n);
  }
}

void DeviceAcceptance::accept(std::span<const SampledDrafts> seqs, const ProbRows& draft_rows,
                              const ProbRows& target_rows, std::span<SpeculativeResult> out,
                              cudaStream_t stream) {
  const size_t n = seqs.size();
  if (n == 0) return;
  // The kernel reads what these name without bounds: every index is checked here.
  check_sampled_drafts(seqs, draft_rows, target_rows, out.size());
  const int32_t width = target_rows.width();
  size_t drafts = 0;
  for (const SampledDrafts& s : seqs) drafts += s.tokens.size();
  const size_t seq_bytes = n * sizeof(kernels::AcceptSeq);
  reserve(seq_bytes + 2 * drafts * sizeof(int32_t), n);
  auto* params = in_host_.as<kernels::AcceptSeq>();
  auto* tokens = reinterpret_cast<int32_t*>(in_host_.as<char>() + seq_bytes);  // [drafts]
  int32_t* slots = tokens + drafts;                                            // [drafts]
  size_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    const SampledDrafts& s = seqs[i];
    const size_t k = s.tokens.size();
    params[i] =
        kernels::AcceptSeq{s.rng->seed, s.rng->counter, int32_t(k), int32_t(at), s.target_slot, 0};
    std::copy(s.tokens.begin(), s.tokens.end(), tokens + at);
    std::copy(s.draft_slots.begin(), s.draft_slots.end(), slots + at);
    at += k;
  }
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(in_.ptr(), in_host_.as<void>(),
                                    seq_bytes + 2 * drafts * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, stream));
  const auto* dev_tokens = reinterpret_cast<const int32_t*>(in_.as<char>() + seq_bytes);
  kernels::launch_accept_sampled(in_.as<kernels::AcceptSeq>(), int32_t(n), dev_tokens,
                                 dev_tokens + drafts, draft_rows.data(), target_rows.data(), width,
                                 out_.as<int32_t>(), stream);
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(out_host_.as<void>(), out_.ptr(), n * 2 * sizeof(int32_t),
                                    cudaMemcpyDeviceToHost, stream));
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
  const int32_t* got = out_host_.as<int32_t>();
  for (size_t i = 0; i < n; ++i) {
    const SampledDrafts& s = seqs[i];
    const int32_t k = int32_t(s.tokens.size());
    const int32_t accepted = got[2 * i], token = got[2 * i + 1];
    TANDEM_CHECK(accepted >= 0 && accepted <= k, "sequence %zu: %d of %d proposals accepted", i,
                 accepted, k);
    TANDEM_CHECK(token >= 0, "sequence %zu: no token has positive probability", i);
    SpeculativeResult& r = out[i];
    r.tokens.assign(s.tokens.begin(), s.tokens.begin() + accepted);
    r.tokens.push_back(token);
    r.num_accepted = accepted;
    // Tests made: one per accepted proposal and one for the rejected one; then the final draw.
    s.rng->counter += uint64_t(accepted < k ? accepted + 1 : k) + 1;
  }
}

}  // namespace tandem
