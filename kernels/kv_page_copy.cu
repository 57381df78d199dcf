#include "cuda_check.cuh"
#include "kv_page_copy.cuh"

namespace tandem::kernels {
namespace {

// grid: x = pair, y = (layer - layer_begin) * 2 + (0 for K, 1 for V); one block per page.
template <typename Word>
__global__ void __launch_bounds__(256)
    copy_kv_pages_kernel(KvPageSide src, KvPageSide dst, const __grid_constant__ KvPagePairs pairs,
                         int32_t layer_begin, size_t page_bytes) {
  const int32_t pair = int32_t(blockIdx.x);
  const int32_t plane = int32_t(blockIdx.y);  // relative layer * 2 + k/v
  const size_t staged = (size_t(plane) * size_t(pairs.count) + size_t(pair)) * page_bytes;
  const int32_t abs_plane = layer_begin * 2 + plane;
  const unsigned char* from = src.planes
                                  ? src.planes[abs_plane] + size_t(pairs.src[pair]) * page_bytes
                                  : src.staging + staged;
  unsigned char* to = dst.planes ? dst.planes[abs_plane] + size_t(pairs.dst[pair]) * page_bytes
                                 : dst.staging + staged;
  const Word* __restrict__ in = reinterpret_cast<const Word*>(from);
  Word* __restrict__ out = reinterpret_cast<Word*>(to);
  const size_t n = page_bytes / sizeof(Word);
  // Four independent loads in flight per thread before the first store.
  constexpr int kUnroll = 4;
  size_t i = threadIdx.x;
  for (; i + (kUnroll - 1) * blockDim.x < n; i += kUnroll * blockDim.x) {
    Word w[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) w[u] = in[i + size_t(u) * blockDim.x];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) out[i + size_t(u) * blockDim.x] = w[u];
  }
  for (; i < n; i += blockDim.x) out[i] = in[i];
}

}  // namespace

void launch_copy_kv_pages(KvPageSide src, KvPageSide dst, const KvPagePairs& pairs,
                          int32_t layer_begin, int32_t layer_end, size_t page_bytes, bool aligned16,
                          cudaStream_t stream) {
  if (pairs.count == 0 || layer_end <= layer_begin || page_bytes == 0) return;
  const dim3 grid(unsigned(pairs.count), unsigned(layer_end - layer_begin) * 2);
  if (aligned16) {
    copy_kv_pages_kernel<uint4><<<grid, 256, 0, stream>>>(src, dst, pairs, layer_begin, page_bytes);
  } else {
    copy_kv_pages_kernel<unsigned char>
        <<<grid, 256, 0, stream>>>(src, dst, pairs, layer_begin, page_bytes);
  }
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
