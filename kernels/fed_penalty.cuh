// The penalties of a token still on the device. An asynchronous decode step (docs/async-decode.md)
// samples step N + 1 before the host has read step N's token, so the host's penalty list for a
// row (its LogitAdjust entries: prompt ∪ output) lacks that token. The host ends such a row's
// entries with a placeholder (id -1, which the sample kernels skip) and names the device slot
// that holds the token (SampleRowParams::fed_slot); this kernel, run before the sample kernels,
// counts the token in: it updates the row's entry for that id when there is one (the repetition
// flag where that penalty is on, one more output occurrence where frequency or presence is on),
// else fills the placeholder with a fresh entry. The sample kernels then see exactly the list
// the host would have built with the token in the output.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "sample.cuh"

namespace tandem::kernels {

void launch_merge_fed_penalties(const SampleRowParams* params,  // [num_rows] device
                                int32_t num_rows,
                                LogitAdjust* adjust,     // device, rows' entries updated in place
                                const int32_t* fed_ids,  // device: the slots fed_slot names
                                cudaStream_t stream);

}  // namespace tandem::kernels
