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

// What the store of dims i and i + D/2 of head h of token t needs besides the two projected
// values: the angle's sine and cosine, the bias pair and the token's KV slot. A GEMV whose
// epilogue ends its warps' chain loads them before its loop (rope_pair_loads, then
// rope_pair_angle), so that the epilogue itself makes no global load.
struct RopePair {
  float sn = 0.0f, cs = 1.0f;  // the identity rotation (v heads)
  float b1 = 0.0f, b2 = 0.0f;
  int32_t slot = 0;
  int32_t position = 0;
  float inv_freq = 0.0f;
};

// The loads the store itself needs: the bias pair and (k|v heads) the slot.
__device__ __forceinline__ RopePair rope_pair_store_loads(const RopeKvTarget& a, int t, int h,
                                                          int i) {
  RopePair p;
  const int c = h * a.s.head_dim + i;
  if (a.bias != nullptr) {
    p.b1 = a.bias[c];
    p.b2 = a.bias[c + a.s.head_dim / 2];
  }
  if (h >= a.s.num_heads) p.slot = a.slots[t];
  return p;
}

// Every load of a RopePair: the store's, and (q|k heads) the angle's inputs.
__device__ __forceinline__ RopePair rope_pair_loads(const RopeKvTarget& a, int t, int h, int i) {
  RopePair p = rope_pair_store_loads(a, t, h, i);
  if (h < a.s.num_heads + a.s.num_kv_heads) {
    p.position = a.positions[t];
    p.inv_freq = a.inv_freq[i];
  }
  return p;
}

// The sine and cosine of rotary angle i at a position.
__device__ __forceinline__ void rope_angle_at(int position, float inv_freq, float* sn, float* cs) {
  sincosf(float(position) * inv_freq, sn, cs);
}

// The loaded pair's angle (v heads keep the identity).
__device__ __forceinline__ void rope_pair_angle(const RopeKvTarget& a, int h, RopePair& p) {
  if (h < a.s.num_heads + a.s.num_kv_heads) rope_angle_at(p.position, p.inv_freq, &p.sn, &p.cs);
}

// Dims i and i + D/2 of head h (q heads, then k heads, then v heads) of token t, as the q|k|v
// projection stored them in bf16 (x1, x2, before the bias): bias added, q and k rotated, q to
// q_out, k and v to the token's KV slot. The one epilogue of launch_rope_kv_write and of the
// fused GEMVs, so that they give the same bits: the products are fused explicitly, not left to
// the compiler's contraction, which may differ between kernels.
__device__ __forceinline__ void rope_store_pair_with(const RopeKvTarget& a, int t, int h, int i,
                                                     float x1, float x2, const RopePair& p) {
  const int D = a.s.head_dim, half = D / 2;
  const int qk_heads = a.s.num_heads + a.s.num_kv_heads;
  const int c = h * D + i;
  if (a.bias != nullptr) {
    x1 += p.b1;
    x2 += p.b2;
  }
  if (h < qk_heads) {
    const float y1 = fmaf(x1, p.cs, -(x2 * p.sn)), y2 = fmaf(x2, p.cs, x1 * p.sn);
    x1 = y1;
    x2 = y2;
  }
  if (h < a.s.num_heads) {
    a.q_out[int64_t(t) * a.s.num_heads * D + c] = __float2bfloat16(x1);
    a.q_out[int64_t(t) * a.s.num_heads * D + c + half] = __float2bfloat16(x2);
    return;
  }
  const int64_t slot = p.slot;
  const int64_t page = slot / a.s.page_size, off = slot % a.s.page_size;
  const int kh = h < qk_heads ? h - a.s.num_heads : h - qk_heads;
  __nv_bfloat16* cache = h < qk_heads ? a.k_cache : a.v_cache;
  const int64_t base = ((page * a.s.num_kv_heads + kh) * a.s.page_size + off) * D;
  cache[base + i] = __float2bfloat16(x1);
  cache[base + i + half] = __float2bfloat16(x2);
}

// rope_store_pair_with, (sn, cs) the sine and cosine of the token's angle i (rope_angle).
__device__ __forceinline__ void rope_store_pair_at(const RopeKvTarget& a, int t, int h, int i,
                                                   float x1, float x2, float sn, float cs) {
  RopePair p = rope_pair_store_loads(a, t, h, i);  // the angle is given
  p.sn = sn;
  p.cs = cs;
  rope_store_pair_with(a, t, h, i, x1, x2, p);
}

// The sine and cosine of token t's rotary angle i.
__device__ __forceinline__ void rope_angle(const RopeKvTarget& a, int t, int i, float* sn,
                                           float* cs) {
  rope_angle_at(a.positions[t], a.inv_freq[i], sn, cs);
}

// rope_store_pair_with, every input loaded here.
__device__ __forceinline__ void rope_store_pair(const RopeKvTarget& a, int t, int h, int i,
                                                float x1, float x2) {
  RopePair p = rope_pair_loads(a, t, h, i);
  rope_pair_angle(a, h, p);
  rope_store_pair_with(a, t, h, i, x1, x2, p);
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
