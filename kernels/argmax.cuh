// Greedy sampling on the device: the index of the largest logit of each row among the first
// valid_vocab columns (padded embedding rows are never chosen), lowest id on ties.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::kernels {

void launch_argmax_rows(const float* logits,       // [rows, row_stride] in
                        const int32_t* row_index,  // [num_rows] in: which logits rows
                        int32_t num_rows, int32_t row_stride, int32_t valid_vocab,
                        int32_t* out,  // [num_rows] out token ids
                        cudaStream_t stream);

}  // namespace tandem::kernels
