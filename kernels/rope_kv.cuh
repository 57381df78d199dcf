// Rotary embedding (HF rotate_half layout; llama3 scaling lives in inv_freq, computed on the
// host) fused with the q/k/v bias add and the write of K and V into their KV pages.
//
// KV page layout (one layer): [num_pages][num_kv_heads][page_size][head_dim] bf16, so one
// page of one layer is contiguous and one head's keys within a page are contiguous rows.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::kernels {

struct RopeKvShape {
  int32_t num_tokens = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;  // even, <= 256
  int32_t page_size = 0;
};

void launch_rope_kv_write(const __nv_bfloat16* qkv,  // [T, (H + 2*KVH) * D] in: q | k | v
                          const float* bias,         // [(H + 2*KVH) * D] in, or null
                          const int32_t* positions,  // [T] in
                          const int32_t* slots,      // [T] in: page_id * page_size + offset
                          const float* inv_freq,     // [D / 2] in
                          RopeKvShape shape,
                          __nv_bfloat16* q_out,    // [T, H * D] out, rotated
                          __nv_bfloat16* k_cache,  // layer's K pages, written at slots
                          __nv_bfloat16* v_cache,  // layer's V pages, written at slots
                          cudaStream_t stream);

}  // namespace tandem::kernels
