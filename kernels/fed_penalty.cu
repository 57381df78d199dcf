#include "cuda_check.cuh"
#include "fed_penalty.cuh"

namespace tandem::kernels {
namespace {

constexpr int kThreads = 128;

// One block a row. Entries [adjust_begin, adjust_end - 1) are the host's, with unique ids; the
// last is the placeholder. A row without a fed slot is left alone.
__global__ void __launch_bounds__(kThreads)
    merge_fed_kernel(const SampleRowParams* __restrict__ params, LogitAdjust* __restrict__ adjust,
                     const int32_t* __restrict__ fed_ids) {
  const SampleRowParams P = params[blockIdx.x];
  if (P.fed_slot < 0) return;  // the whole block: P is the row's
  const int32_t id = fed_ids[P.fed_slot];
  const int32_t flags = P.repetition_penalty != 1.0f ? kAdjustRepeat : 0;
  const int32_t count = P.frequency_penalty != 0.0f || P.presence_penalty != 0.0f ? 1 : 0;
  const int last = P.adjust_end - 1;  // the placeholder
  bool found = false;
  for (int j = P.adjust_begin + int(threadIdx.x); j < last; j += kThreads) {
    LogitAdjust& a = adjust[j];
    if (a.id != id) continue;
    a.flags |= flags;
    a.output_count += count;
    found = true;  // ids are unique: one thread at most
  }
  if (!__syncthreads_or(found) && threadIdx.x == 0) adjust[last] = LogitAdjust{id, count, flags};
}

}  // namespace

void launch_merge_fed_penalties(const SampleRowParams* params, int32_t num_rows,
                                LogitAdjust* adjust, const int32_t* fed_ids, cudaStream_t stream) {
  if (num_rows == 0) return;
  merge_fed_kernel<<<num_rows, kThreads, 0, stream>>>(params, adjust, fed_ids);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
