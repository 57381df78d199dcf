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
  int32_t head_dim = 0;  // a multiple of 8, <= 256
  int32_t page_size = 0;
};

// Where rotated q and k and the v of one step go, and what they need on the way (the
// arguments of launch_rope_kv_write after qkv; launch_qkv_rope_gemv takes them as one).
struct RopeKvTarget {
  const float* bias;         // [(H + 2*KVH) * D] in, or null
  const int32_t* positions;  // [T] in
  const int32_t* slots;      // [T] in: page_id * page_size + offset
  const float* inv_freq;     // [D / 2] in
  RopeKvShape s;
  __nv_bfloat16* q_out;    // [T, H * D] out, rotated
  __nv_bfloat16* k_cache;  // layer's K pages, written at slots
  __nv_bfloat16* v_cache;  // layer's V pages, written at slots
};

#ifdef __CUDACC__

// Dims i and i + D/2 of head h (q heads, then k heads, then v heads) of token t, as the q|k|v
// projection stored them in bf16 (x1, x2, before the bias), with (sn, cs) the sine and cosine
// of the token's angle i (rope_angle): bias added, q and k rotated, q to q_out, k and v to the
// token's KV slot. The one epilogue of launch_rope_kv_write and of the fused GEMVs
// (rope_store_pair), so that they give the same bits: the products are fused explicitly, not left
// to the compiler's contraction, which may differ between kernels.
__device__ __forceinline__ void rope_store_pair_at(const RopeKvTarget& a, int t, int h, int i,
                                                   float x1, float x2, float sn, float cs) {
  const int D = a.s.head_dim, half = D / 2;
  const int qk_heads = a.s.num_heads + a.s.num_kv_heads;
  const int c = h * D + i;
  if (a.bias != nullptr) {
    x1 += a.bias[c];
    x2 += a.bias[c + half];
  }
  if (h < qk_heads) {
    const float y1 = fmaf(x1, cs, -(x2 * sn)), y2 = fmaf(x2, cs, x1 * sn);
    x1 = y1;
    x2 = y2;
  }
  if (h < a.s.num_heads) {
    a.q_out[int64_t(t) * a.s.num_heads * D + c] = __float2bfloat16(x1);
    a.q_out[int64_t(t) * a.s.num_heads * D + c + half] = __float2bfloat16(x2);
    return;
  }
  const int64_t slot = a.slots[t];
  const int64_t page = slot / a.s.page_size, off = slot % a.s.page_size;
  const int kh = h < qk_heads ? h - a.s.num_heads : h - qk_heads;
  __nv_bfloat16* cache = h < qk_heads ? a.k_cache : a.v_cache;
  const int64_t base = ((page * a.s.num_kv_heads + kh) * a.s.page_size + off) * D;
  cache[base + i] = __float2bfloat16(x1);
  cache[base + i + half] = __float2bfloat16(x2);
}

// The sine and cosine of token t's rotary angle i.
__device__ __forceinline__ void rope_angle(const RopeKvTarget& a, int t, int i, float* sn,
                                           float* cs) {
  sincosf(float(a.positions[t]) * a.inv_freq[i], sn, cs);
}

// rope_store_pair_at with the angle computed here (v heads need none).
__device__ __forceinline__ void rope_store_pair(const RopeKvTarget& a, int t, int h, int i,
                                                float x1, float x2) {
  float sn = 0.0f, cs = 1.0f;
  if (h < a.s.num_heads + a.s.num_kv_heads) rope_angle(a, t, i, &sn, &cs);
  rope_store_pair_at(a, t, h, i, x1, x2, sn, cs);
}
#endif

void launch_rope_kv_write(const __nv_bfloat16* qkv,  // [T, (H + 2*KVH) * D] in: q | k | v
                          const float* bias,         // [(H + 2*KVH) * D] in, or null
                          const int32_t* positions,  // [T] in
                          const int32_t* slots,      // [T] in: page_id * page_size + offset
                          const float* inv_freq,     // [D / 2] in
                          RopeKvShape shape,
                          __nv_bfloat16* q_out,    // [T, H * D] out, rotated
                          __nv_bfloat16* k_cache,  // layer's K pages, written at slots
                          __nv_bfloat16* v_cache,  // layer's V pages, written at slots
                          cudaStream_t stream,
                          bool pdl = false);  // may overlap the kernel before it (pdl.cuh)

}  // namespace tandem::kernels
