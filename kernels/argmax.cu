#include "argmax.cuh"

#include "block_reduce.cuh"
#include "cuda_check.cuh"

namespace tandem::kernels {
namespace {

constexpr int kThreads = 1024;

__global__ void argmax_kernel(const float* __restrict__ logits, const int32_t* __restrict__ rows,
                              int32_t stride, int32_t valid, int32_t* __restrict__ out) {
  __shared__ float sv[32];
  __shared__ int si[32];
  const float* row = logits + int64_t(rows[blockIdx.x]) * stride;
  float bv = -INFINITY;
  int bi = 0x7fffffff;
  for (int i = threadIdx.x; i < valid; i += kThreads) {
    const float v = row[i];
    if (argmax_better(v, i, bv, bi)) bv = v, bi = i;
  }
  bi = block_argmax(bv, bi, sv, si);
  // All -inf/NaN rows: fall back to id 0 rather than an out-of-range id.
  if (threadIdx.x == 0) out[blockIdx.x] = bi == 0x7fffffff ? 0 : bi;
}

}  // namespace

void launch_argmax_rows(const float* logits, const int32_t* row_index, int32_t num_rows,
                        int32_t row_stride, int32_t valid_vocab, int32_t* out,
                        cudaStream_t stream) {
  if (num_rows == 0) return;
  argmax_kernel<<<num_rows, kThreads, 0, stream>>>(logits, row_index, row_stride, valid_vocab, out);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
