#include "prefill_attention.cuh"

#include <mma.h>

#include <cstdio>
#include <cstdlib>

#include "cuda_check.cuh"

namespace tandem::kernels {
namespace {

using namespace nvcuda;

constexpr int kWarps = 4;              // 16 query rows each
constexpr int kQ = kPrefillQueryTile;  // 64
constexpr int kK = 32;                 // keys per tile
constexpr int kMaxD = 128;
constexpr int kLdH = kMaxD + 8;  // bf16 rows of Q/K/V tiles (padding against bank conflicts)
constexpr int kLdS = kK + 4;     // fp32 scores
constexpr int kLdP = kK + 8;     // bf16 probabilities
constexpr int kLdO = kMaxD + 4;  // fp32 output accumulator

struct Smem {
  __nv_bfloat16 q[kQ * kLdH];
  __nv_bfloat16 k[kK * kLdH];
  __nv_bfloat16 v[kK * kLdH];
  float s[kWarps * 16 * kLdS];
  __nv_bfloat16 p[kWarps * 16 * kLdP];
  float o[kWarps * 16 * kLdO];
  float m[kQ], l[kQ], corr[kQ];
  int pos[kQ];
};

__global__ void __launch_bounds__(kWarps * 32) prefill_attention_kernel(
    const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,
    const __nv_bfloat16* __restrict__ v_cache, const int32_t* __restrict__ tile_start,
    const int32_t* __restrict__ tile_len, const int32_t* __restrict__ token_seq,
    const int32_t* __restrict__ positions, const int32_t* __restrict__ seq_page_start,
    const int32_t* __restrict__ page_ids, PagedAttentionShape s, __nv_bfloat16* __restrict__ out) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
  const int h = blockIdx.y, D = s.head_dim, D8 = D / 8;
  const int kvh = h / (s.num_heads / s.num_kv_heads);
  const int t0 = tile_start[blockIdx.x], n = tile_len[blockIdx.x];
  const int32_t* pages = page_ids + seq_page_start[token_seq[t0]];
  const int num_keys = positions[t0 + n - 1] + 1;
  const int64_t q_stride = int64_t(s.num_heads) * D;

  for (int i = tid; i < kQ * D8; i += blockDim.x) {
    const int r = i / D8, c = (i % D8) * 8;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (r < n) val = *reinterpret_cast<const uint4*>(q + (t0 + r) * q_stride + h * D + c);
    *reinterpret_cast<uint4*>(&sm.q[r * kLdH + c]) = val;
  }
  for (int i = tid; i < kWarps * 16 * kLdO; i += blockDim.x) sm.o[i] = 0.0f;
  for (int r = tid; r < kQ; r += blockDim.x) {
    sm.m[r] = -INFINITY;
    sm.l[r] = 0.0f;
    sm.pos[r] = positions[t0 + (r < n ? r : 0)];  // padding rows: any valid position
  }

  float* s_w = sm.s + w * 16 * kLdS;
  __nv_bfloat16* p_w = sm.p + w * 16 * kLdP;
  float* o_w = sm.o + w * 16 * kLdO;
  const int r_lane = lane >> 1, half = lane & 1;  // softmax: two lanes per row
  const int row = w * 16 + r_lane;

  for (int kt = 0; kt < num_keys; kt += kK) {
    __syncthreads();  // previous tile's K/V reads are done (and Q/O/stats are initialised)
    for (int i = tid; i < kK * D8; i += blockDim.x) {
      const int j = i / D8, c = (i % D8) * 8, key = kt + j;
      uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);  // zeros: 0 * V, not NaN
      if (key < num_keys) {
        const int64_t page = pages[key / s.page_size];
        const int64_t base =
            ((page * s.num_kv_heads + kvh) * s.page_size + key % s.page_size) * D + c;
        kv = *reinterpret_cast<const uint4*>(k_cache + base);
        vv = *reinterpret_cast<const uint4*>(v_cache + base);
      }
      *reinterpret_cast<uint4*>(&sm.k[j * kLdH + c]) = kv;
      *reinterpret_cast<uint4*>(&sm.v[j * kLdH + c]) = vv;
    }
    __syncthreads();

    // S = Q K^T for this warp's 16 rows and the tile's 32 keys.
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> s0, s1;
    wmma::fill_fragment(s0, 0.0f);
    wmma::fill_fragment(s1, 0.0f);
    for (int k0 = 0; k0 < D; k0 += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b0, b1;
      wmma::load_matrix_sync(a, sm.q + (w * 16) * kLdH + k0, kLdH);
      wmma::load_matrix_sync(b0, sm.k + k0, kLdH);
      wmma::load_matrix_sync(b1, sm.k + 16 * kLdH + k0, kLdH);
      wmma::mma_sync(s0, a, b0, s0);
      wmma::mma_sync(s1, a, b1, s1);
    }
    wmma::store_matrix_sync(s_w, s0, kLdS, wmma::mem_row_major);
    wmma::store_matrix_sync(s_w + 16, s1, kLdS, wmma::mem_row_major);
    __syncwarp();

    // Online softmax: causal mask by position (keys past the tile's range are past every pos).
    const int pos = sm.pos[row];
    float vals[16];
    float mx = -INFINITY;
#pragma unroll
    for (int c = 0; c < 16; ++c) {
      const int col = half * 16 + c;
      const float x = kt + col <= pos ? s_w[r_lane * kLdS + col] * s.scale : -INFINITY;
      vals[c] = x;
      mx = fmaxf(mx, x);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_old = sm.m[row];
    const float m_new = fmaxf(m_old, mx);  // finite: key 0 is in the first tile for every row
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < 16; ++c) {
      const float p = __expf(vals[c] - m_new);
      sum += p;
      p_w[r_lane * kLdP + half * 16 + c] = __float2bfloat16(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    const float corr = __expf(m_old - m_new);
    __syncwarp();
    if (half == 0) {
      sm.m[row] = m_new;
      sm.l[row] = sm.l[row] * corr + sum;
      sm.corr[row] = corr;
    }
    __syncwarp();
    for (int i = lane; i < 16 * D; i += 32) {
      const int r = i / D, c = i % D;
      o_w[r * kLdO + c] *= sm.corr[w * 16 + r];
    }
    __syncwarp();

    // O += P V
    for (int n0 = 0; n0 < D; n0 += 16) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, o_w + n0, kLdO, wmma::mem_row_major);
#pragma unroll
      for (int k0 = 0; k0 < kK; k0 += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
        wmma::load_matrix_sync(a, p_w + k0, kLdP);
        wmma::load_matrix_sync(b, sm.v + k0 * kLdH + n0, kLdH);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(o_w + n0, acc, kLdO, wmma::mem_row_major);
    }
  }
  __syncwarp();
  for (int i = lane; i < 16 * D; i += 32) {
    const int r = i / D, c = i % D, qr = w * 16 + r;
    if (qr < n)
      out[(t0 + qr) * q_stride + h * D + c] = __float2bfloat16(o_w[r * kLdO + c] / sm.l[qr]);
  }
}

}  // namespace

void launch_prefill_attention(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                              const __nv_bfloat16* v_cache, const int32_t* tile_start,
                              const int32_t* tile_len, int32_t num_tiles, const int32_t* token_seq,
                              const int32_t* positions, const int32_t* seq_page_start,
                              const int32_t* page_ids, PagedAttentionShape shape,
                              __nv_bfloat16* out, cudaStream_t stream) {
  if (num_tiles == 0) return;
  if (shape.head_dim % 16 != 0 || shape.head_dim > kMaxD ||
      shape.num_heads % shape.num_kv_heads != 0) {
    std::fprintf(stderr, "prefill_attention: unsupported head_dim %d / heads %d/%d\n",
                 shape.head_dim, shape.num_heads, shape.num_kv_heads);
    std::abort();
  }
  const int smem = int(sizeof(Smem));
  // Above 48 KB a kernel must opt in; sm_86/89 allow 99 KB per block, this needs ~84 KB.
  TANDEM_CUDA_CHECK(cudaFuncSetAttribute(prefill_attention_kernel,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  prefill_attention_kernel<<<dim3(num_tiles, shape.num_heads), kWarps * 32, smem, stream>>>(
      q, k_cache, v_cache, tile_start, tile_len, token_seq, positions, seq_page_start, page_ids,
      shape, out);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
