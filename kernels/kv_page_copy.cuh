// KV page moves for the transports: gather pages of a pool into a contiguous staging buffer,
// scatter a staging buffer into pages, or copy pages to pages directly (also across devices when
// peer access is on: the pointers are then the other GPU's, reached over NVLink/PCIe).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tandem::kernels {

// One side of a move. A pool: planes[2 * l] is layer l's K pages, planes[2 * l + 1] its V
// pages, each [num_pages][page_bytes]; the table itself lives on the device that runs the
// kernel. Staging: planes == nullptr and the bytes are [layers][2][num_pairs][page_bytes],
// layers counted from layer_begin.
struct KvPageSide {
  unsigned char* const* planes = nullptr;  // device array [num_layers * 2], or nullptr
  unsigned char* staging = nullptr;        // used when planes == nullptr
};

// Kernel parameters are limited to 4 KB: a launch moves at most this many page pairs.
constexpr int32_t kMaxPagePairsPerLaunch = 480;

struct KvPagePairs {
  int32_t count = 0;
  int32_t src[kMaxPagePairsPerLaunch];  // page ids in the source pool (ignored for staging)
  int32_t dst[kMaxPagePairsPerLaunch];  // page ids in the destination pool
};

// Moves page_bytes for every (pair, layer in [layer_begin, layer_end), K and V). 16-byte
// accesses when page_bytes and every base are 16-byte aligned, bytes otherwise.
void launch_copy_kv_pages(KvPageSide src, KvPageSide dst, const KvPagePairs& pairs,
                          int32_t layer_begin, int32_t layer_end, size_t page_bytes, bool aligned16,
                          cudaStream_t stream);

}  // namespace tandem::kernels
