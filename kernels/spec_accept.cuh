// Speculative acceptance of sampled sequences on the device, one block per sequence, over
// probability rows that never leave it (the host rule: src/sampling/speculative.cc
// accept_sampled). The acceptance tests read two scalars a proposal; only the final token reads
// whole rows: after a rejection at position j the residual max(0, p_t - p_d) of row j, after k
// acceptances the target's row k. Draw number c + i of a sequence is philox_uniform(seed, c + i),
// computed on the device, so the host only advances its counter by what the launch reports.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::kernels {

// One sequence's acceptance. Plain data, filled on the host and copied to the device.
struct AcceptSeq {
  uint64_t seed = 0;
  uint64_t counter = 0;     // its next draw number
  int32_t k = 0;            // proposals (0: a plain draw from target row 0)
  int32_t first_draft = 0;  // index of its first proposal in draft_tokens / draft_slots
  int32_t target_slot = 0;  // first of its k + 1 target rows
  int32_t unused = 0;
};

// out[2 i] = proposals accepted (a; tests made: a + 1 when a < k, else k) and out[2 i + 1] = the
// final token: residual draw after a rejection (target row a when the residual is empty), the
// bonus draw from target row k otherwise; -1 when that row holds no mass. Draws as the host
// makes them: counter + t for test t, then counter + tests for the final token. Tokens match
// the host's except where float sums in another order put a boundary elsewhere (ties).
void launch_accept_sampled(const AcceptSeq* seqs,        // [num_seqs] device
                           int32_t num_seqs,             //
                           const int32_t* draft_tokens,  // [sum k] proposals, sequence order
                           const int32_t* draft_slots,   // [sum k] their rows in draft_rows
                           const float* draft_rows,      // [*, width] fp32, p_d
                           const float* target_rows,     // [*, width] fp32, p_t
                           int32_t width,                //
                           int32_t* out,                 // [num_seqs, 2]
                           cudaStream_t stream);

}  // namespace tandem::kernels
