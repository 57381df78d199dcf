#include "silu_mul.cuh"

#include "cuda_check.cuh"

namespace tandem::kernels {
namespace {

__global__ void silu_mul_kernel(const __nv_bfloat16* __restrict__ gate_up, int32_t width,
                                __nv_bfloat16* __restrict__ out) {
  const int64_t r = blockIdx.y;
  const __nv_bfloat16* g = gate_up + r * 2 * width;
  const __nv_bfloat16* u = g + width;
  for (int32_t c = blockIdx.x * blockDim.x + threadIdx.x; c < width; c += gridDim.x * blockDim.x) {
    const float x = __bfloat162float(g[c]);
    const float silu = x / (1.0f + expf(-x));
    out[r * width + c] = __float2bfloat16(silu * __bfloat162float(u[c]));
  }
}

}  // namespace

void launch_silu_mul(const __nv_bfloat16* gate_up, int32_t rows, int32_t width, __nv_bfloat16* out,
                     cudaStream_t stream) {
  if (rows == 0) return;
  const int blocks_x = (width + 255) / 256;
  silu_mul_kernel<<<dim3(blocks_x, rows), 256, 0, stream>>>(gate_up, width, out);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
