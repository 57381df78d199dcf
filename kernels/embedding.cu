#include "embedding.cuh"

#include "cuda_check.cuh"
#include "pdl.cuh"

namespace tandem::kernels {
namespace {

template <typename Out>
__global__ void gather_rows_kernel(const __nv_bfloat16* __restrict__ in,
                                   const int32_t* __restrict__ rows, int32_t width,
                                   Out* __restrict__ out, const int32_t* __restrict__ fed,
                                   const int32_t* __restrict__ fed_ids) {
  pdl::allow_dependents();  // no-ops on a plain launch
  pdl::grid_dependency_wait();
  int32_t row = pdl::load_input(rows + blockIdx.x);
  if (fed != nullptr) {
    const int32_t j = pdl::load_input(fed + blockIdx.x);
    if (j >= 0) row = pdl::load_input(fed_ids + j);
  }
  const int64_t src = int64_t(row) * width;
  const int64_t dst = int64_t(blockIdx.x) * width;
  for (int32_t c = threadIdx.x; c < width; c += blockDim.x) {
    if constexpr (sizeof(Out) == 4) {
      out[dst + c] = __bfloat162float(in[src + c]);
    } else {
      out[dst + c] = in[src + c];
    }
  }
}

}  // namespace

void launch_gather_rows_to_f32(const __nv_bfloat16* table, const int32_t* rows, int32_t num_rows,
                               int32_t width, float* out, cudaStream_t stream, const int32_t* fed,
                               const int32_t* fed_ids) {
  if (num_rows == 0) return;
  gather_rows_kernel<float><<<num_rows, 256, 0, stream>>>(table, rows, width, out, fed, fed_ids);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void launch_gather_rows_bf16(const __nv_bfloat16* in, const int32_t* rows, int32_t num_rows,
                             int32_t width, __nv_bfloat16* out, cudaStream_t stream, bool pdl) {
  if (num_rows == 0) return;
  pdl::launch(pdl, gather_rows_kernel<__nv_bfloat16>, num_rows, 256, 0, stream, in, rows, width,
              out, static_cast<const int32_t*>(nullptr), static_cast<const int32_t*>(nullptr));
}

}  // namespace tandem::kernels
