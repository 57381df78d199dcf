// Greedy sampling on the device: the index of the largest logit of each row among the first
// valid_vocab columns (padded embedding rows are never chosen), lowest id on ties; id 0 for a row
// with no orderable value (all NaN).
//
// A row is cut into slices of kArgmaxSlice columns, one block each, so that a one-row step reads
// its ~600 KB of fp32 logits with ~40 SMs instead of one; the last block of a row to finish (a
// ticket per row) reduces the slices' partials. The row indices travel as a launch parameter and
// `out` may be mapped host memory, so a greedy step copies nothing across PCIe besides the ids
// the kernel writes.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tandem::kernels {

inline constexpr int32_t kArgmaxSlice = 4096;        // columns a block reduces
inline constexpr int32_t kArgmaxRowsPerLaunch = 64;  // row indices a launch carries by value

// Bytes of scratch for rows of up to row_width columns: per-row tickets and per-slice partials.
// Zeroed once before the first launch; every launch leaves the tickets at zero again.
size_t argmax_scratch_bytes(int32_t row_width);

void launch_argmax_rows(const float* logits,  // [*, row_stride] in
                        const int32_t* rows,  // [num_rows] host: which logits rows, in order
                        int32_t num_rows, int32_t row_stride, int32_t valid_vocab,
                        void* scratch,  // argmax_scratch_bytes(valid_vocab), device
                        size_t scratch_bytes,
                        int32_t* out,  // [num_rows] out token ids; device or mapped host
                        cudaStream_t stream,
                        // [num_rows] or null: the same ids again, e.g. mapped host memory, so
                        // that a device copy needs no copy of its own to reach the host
                        int32_t* out_copy = nullptr);

}  // namespace tandem::kernels
