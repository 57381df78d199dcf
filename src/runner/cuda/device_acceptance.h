// Speculative acceptance of sampled sequences on the device (kernels/spec_accept.cuh) over
// ProbRows in device memory: each sequence's generator state, proposals and row slots go up in
// one copy, one launch accepts them all, and two ints a sequence come back in one copy.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "runner/cuda/device_buffer.h"
#include "runner/prob_rows.h"
#include "sampling/speculative.h"

namespace tandem {

class DeviceAcceptance {
 public:
  // ModelRunner::accept_sampled on `stream`, with both stores already checked to lie on the
  // stream's device; returns once the results are on the host. out[i].tokens are seqs[i]'s
  // accepted proposals and its final token, and seqs[i].rng has advanced by the tests + 1.
  void accept(std::span<const SampledDrafts> seqs, const ProbRows& draft_rows,
              const ProbRows& target_rows, std::span<SpeculativeResult> out, cudaStream_t stream);

 private:
  void reserve(size_t in_bytes, size_t num_seqs);

  DeviceBuffer in_;        // [n] AcceptSeq, then [sum k] proposals, then [sum k] draft slots
  PinnedBuffer in_host_;   // the same, staged
  DeviceBuffer out_;       // [n, 2] int32: accepted, final token
  PinnedBuffer out_host_;  // the same, landed
};

}  // namespace tandem
