// Where one model's KV cache lives on one stage, as raw memory: what a runner exposes and a
// transport copies. Layer l's K pages are the array k[l] = [num_pages][page_bytes] (V likewise);
// one page id addresses the same slot in every layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tandem {

struct KvPoolView {
  std::vector<std::byte*> k;  // [num_layers] base pointers
  std::vector<std::byte*> v;  // [num_layers]
  size_t page_bytes = 0;      // bytes of one page of one layer's K (== V)
  int32_t num_pages = 0;
  int device = -1;  // -1: host memory; N: CUDA device N
  // GPU pools: the cudaStream_t that writes these pages (the runner's), so a transport can order
  // its reads after the forward that wrote them without a host sync. Null: nothing pending.
  void* writer_stream = nullptr;

  int32_t num_layers() const { return int32_t(k.size()); }
};

}  // namespace tandem
