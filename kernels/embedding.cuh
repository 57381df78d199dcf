// Row gather: token embeddings into the fp32 residual stream, and picking the rows whose logits
// are wanted out of a bf16 activation.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::kernels {

// out[i, :] = table[rows[i], :] as fp32. rows are checked on the host (ids < vocab).
// With `fed` ([num_rows], device): row i is fed_ids[fed[i]] where fed[i] >= 0 (token ids an
// earlier kernel drew on the device: runner.h ForwardBatch::fed), rows[i] otherwise.
void launch_gather_rows_to_f32(const __nv_bfloat16* table,  // [num_table_rows, width] in
                               const int32_t* rows,         // [num_rows] in
                               int32_t num_rows, int32_t width,
                               float* out,  // [num_rows, width] out
                               cudaStream_t stream, const int32_t* fed = nullptr,
                               const int32_t* fed_ids = nullptr);

// out[i, :] = in[rows[i], :], bf16 to bf16.
void launch_gather_rows_bf16(const __nv_bfloat16* in,  // [*, width] in
                             const int32_t* rows,      // [num_rows] in
                             int32_t num_rows, int32_t width,
                             __nv_bfloat16* out,  // [num_rows, width] out
                             cudaStream_t stream,
                             bool pdl = false);  // may overlap the launch before (pdl.cuh)

}  // namespace tandem::kernels
