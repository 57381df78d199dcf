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
    out[r * width + c] =
        __float2bfloat16(silu_times(__bfloat162float(g[c]), __bfloat162float(u[c])));
  }
}

// width % 8 == 0: 16-byte loads and stores, 8 elements per thread (prefill rows are wide).
__global__ void silu_mul_kernel_x8(const __nv_bfloat16* __restrict__ gate_up, int32_t width,
                                   __nv_bfloat16* __restrict__ out) {
  const int64_t r = blockIdx.y;
  const uint4* g = reinterpret_cast<const uint4*>(gate_up + r * 2 * width);
  const uint4* u = reinterpret_cast<const uint4*>(gate_up + r * 2 * width + width);
  uint4* o = reinterpret_cast<uint4*>(out + r * width);
  for (int32_t c = blockIdx.x * blockDim.x + threadIdx.x; c < width / 8;
       c += gridDim.x * blockDim.x) {
    const uint4 gv = g[c], uv = u[c];
    const __nv_bfloat162* g2 = reinterpret_cast<const __nv_bfloat162*>(&gv);
    const __nv_bfloat162* u2 = reinterpret_cast<const __nv_bfloat162*>(&uv);
    uint4 ov;
    __nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(&ov);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 gf = __bfloat1622float2(g2[j]), uf = __bfloat1622float2(u2[j]);
      o2[j] = __floats2bfloat162_rn(silu_times(gf.x, uf.x), silu_times(gf.y, uf.y));
    }
    o[c] = ov;
  }
}

}  // namespace

void launch_silu_mul(const __nv_bfloat16* gate_up, int32_t rows, int32_t width, __nv_bfloat16* out,
                     cudaStream_t stream) {
  if (rows == 0) return;
  if (width % 8 == 0) {
    const int blocks_x = (width / 8 + 255) / 256;
    silu_mul_kernel_x8<<<dim3(blocks_x, rows), 256, 0, stream>>>(gate_up, width, out);
  } else {
    const int blocks_x = (width + 255) / 256;
    silu_mul_kernel<<<dim3(blocks_x, rows), 256, 0, stream>>>(gate_up, width, out);
  }
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
