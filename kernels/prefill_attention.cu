#include "prefill_attention.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.cuh"
#include "mma_sm80.cuh"

namespace tandem::kernels {
namespace {

// Flash-attention-2 style on mma.sync m16n8k16 (bf16 in, fp32 accumulate; sm_80+): each warp
// owns 16 query rows; scores, probabilities and the output accumulator stay in registers (the
// score accumulator's layout is the next mma's A-operand layout, so P never touches shared
// memory). K/V tiles of 64 keys arrive by cp.async into two buffers: tile t + 1 is in flight
// while tile t is computed (the Q tile is staged in the second buffer before the first copy).
// Each tile's key rows are looked up in the page table once a row (row_base), not once a 16-byte
// chunk, and only tiles that reach past a warp's first position are masked: ncu on the H200
// 187 -> 147 us a 2,048-token 7B layer, TTFT 47.3 -> 46.0 ms (benchmarks/NOTES.md v25).
constexpr int kWarps = 4;              // 16 query rows each
constexpr int kQ = kPrefillQueryTile;  // 64
constexpr int kKT = 64;                // keys per tile
constexpr int kMaxD = 128;
constexpr int kPad = 8;  // bf16 per smem row: 16 bytes, so ldmatrix rows hit distinct banks
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
struct Smem {
  __nv_bfloat16 k[2][kKT][D + kPad];  // k[1] holds the Q tile (kQ == kKT rows) at the start
  __nv_bfloat16 v[2][kKT][D + kPad];
  int64_t row_base[2][kKT];  // element offset of each key row of a tile in the K/V pages
  int pos[kQ];
};
static_assert(kQ == kKT, "the Q tile is staged in a K buffer");

template <int D>
__global__ void __launch_bounds__(kWarps * 32) prefill_attention_kernel(
    const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,
    const __nv_bfloat16* __restrict__ v_cache, const int32_t* __restrict__ tile_start,
    const int32_t* __restrict__ tile_len, const int32_t* __restrict__ token_seq,
    const int32_t* __restrict__ positions, const int32_t* __restrict__ seq_page_start,
    const int32_t* __restrict__ page_ids, PagedAttentionShape s, __nv_bfloat16* __restrict__ out) {
  constexpr int D8 = D / 8;    // 16-byte chunks per row
  constexpr int KC = D / 16;   // k16 chunks of the head dimension (QK^T)
  constexpr int NT = D / 8;    // n8 tiles of the output (PV)
  constexpr int ST = kKT / 8;  // n8 tiles of the scores
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Smem<D>& sm = *reinterpret_cast<Smem<D>*>(smem_raw);
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
  const int g = lane >> 2, tig = lane & 3;  // mma fragment coordinates
  // Heads vary fastest, so blocks start in the plan's order of tiles (longest first), and a
  // KV group's heads read the same K/V tiles at about the same time.
  const int h = blockIdx.x;
  const int kvh = h / (s.num_heads / s.num_kv_heads);
  const int t0 = tile_start[blockIdx.y], n = tile_len[blockIdx.y];
  const int32_t* pages = page_ids + seq_page_start[token_seq[t0]];
  const int num_keys = positions[t0 + n - 1] + 1;
  const int64_t q_stride = int64_t(s.num_heads) * D;

  auto& sq = sm.k[1];
  for (int i = tid; i < kQ * D8; i += blockDim.x) {
    const int r = i / D8, c = (i % D8) * 8;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (r < n) val = *reinterpret_cast<const uint4*>(q + (t0 + r) * q_stride + h * D + c);
    *reinterpret_cast<uint4*>(&sq[r][c]) = val;
  }
  for (int r = tid; r < kQ; r += blockDim.x) {
    sm.pos[r] = positions[t0 + (r < n ? r : 0)];  // padding rows: any valid position
  }
  __syncthreads();

  // This warp's Q rows as A fragments, kept for every key tile.
  uint32_t qa[KC][4];
#pragma unroll
  for (int kc = 0; kc < KC; ++kc) {
    ldmatrix_x4(qa[kc], &sq[w * 16 + (lane & 15)][kc * 16 + (lane >> 4) * 8]);
  }
  // Where tile kt's key rows start in the pages, into row_base[b]: one page lookup (a division
  // and a modulo by the page size) a row, not one a 16-byte chunk; -1 past the last key. The
  // page table is a few hundred bytes per sequence, so its lookups hit L1 after the first tile.
  auto plan_rows = [&](int kt, int b) {
    for (int j = tid; j < kKT; j += blockDim.x) {
      const int key = kt + j;
      int64_t base = -1;
      if (key < num_keys) {
        const int64_t page = pages[key / s.page_size];
        base = ((page * s.num_kv_heads + kvh) * s.page_size + key % s.page_size) * D;
      }
      sm.row_base[b][j] = base;
    }
  };
  // Tile kt's K and V rows into buffer b (zeros past the last key: 0 * V, not NaN), from the
  // row bases plan_rows wrote into row_base[b] before a barrier.
  auto fetch = [&](int b) {
    for (int i = tid; i < kKT * D8; i += blockDim.x) {
      const int j = i / D8, c = (i % D8) * 8;
      const int64_t base = sm.row_base[b][j];
      const int64_t at = base < 0 ? 0 : base + c;
      const int bytes = base < 0 ? 0 : 16;
      cp_async16(&sm.k[b][j][c], k_cache + at, bytes);
      cp_async16(&sm.v[b][j][c], v_cache + at, bytes);
    }
    cp_async_commit();
  };
  plan_rows(0, 0);
  __syncthreads();  // every warp holds its Q fragments: buffer 1 is free; row_base[0] is written
  fetch(0);
  plan_rows(kKT, 1);  // read by the first iteration's fetch, after its barrier
  const int pos0 = sm.pos[w * 16 + g], pos1 = sm.pos[w * 16 + g + 8];
  // Every row of this warp sees every key up to here: tiles that end at or before it need no
  // causal mask (padding rows hold the tile's first position, so they count too).
  const int warp_first = __reduce_min_sync(0xffffffffu, min(pos0, pos1));
  const float scale = s.scale * kLog2e;  // scores in log2 units: exp2 instead of exp
  float m0 = -INFINITY, m1 = -INFINITY;  // running max of rows g and g + 8
  float l0 = 0.0f, l1 = 0.0f;            // this thread's share of the running sums
  float o[NT][4];
#pragma unroll
  for (int t = 0; t < NT; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.0f;

  for (int kt = 0, buf = 0; kt < num_keys; kt += kKT, buf ^= 1) {
    cp_async_wait<0>();
    __syncthreads();  // tile kt has landed for every thread; every warp is done with tile kt - 1
    if (kt + kKT < num_keys) fetch(buf ^ 1);
    // The rows after next into row_base[buf]: this tile's fetch read it before the barrier
    // above, and the next iteration's fetch reads it after the barrier there.
    if (kt + 2 * kKT < num_keys) plan_rows(kt + 2 * kKT, buf);
    const auto& sk = sm.k[buf];
    const auto& sv = sm.v[buf];

    // S = Q K^T: 16 rows x 64 keys per warp, as 8 n8 tiles.
    float sc[ST][4];
#pragma unroll
    for (int j = 0; j < ST; ++j) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < KC; ++kc) {
#pragma unroll
      for (int j = 0; j < ST; j += 2) {
        uint32_t b[4];  // keys j*8.. and (j+1)*8.., head dims kc*16 .. +15
        ldmatrix_x4(b, &sk[j * 8 + (lane & 7) + (lane >> 4) * 8][kc * 16 + ((lane >> 3) & 1) * 8]);
        mma_bf16(sc[j], qa[kc], b[0], b[1]);
        mma_bf16(sc[j + 1], qa[kc], b[2], b[3]);
      }
    }

    // Causal mask by position, then the online softmax of rows g and g + 8 (a row's 64 scores
    // are spread over the 4 threads of a quad).
    float mx0 = -INFINITY, mx1 = -INFINITY;
    if (kt + kKT - 1 > warp_first) {
#pragma unroll
      for (int j = 0; j < ST; ++j) {
        const int key = kt + j * 8 + tig * 2;
        sc[j][0] = key <= pos0 ? sc[j][0] * scale : -INFINITY;
        sc[j][1] = key + 1 <= pos0 ? sc[j][1] * scale : -INFINITY;
        sc[j][2] = key <= pos1 ? sc[j][2] * scale : -INFINITY;
        sc[j][3] = key + 1 <= pos1 ? sc[j][3] * scale : -INFINITY;
      }
    } else {
#pragma unroll
      for (int j = 0; j < ST; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) sc[j][e] *= scale;
      }
    }
#pragma unroll
    for (int j = 0; j < ST; ++j) {
      mx0 = fmaxf(mx0, fmaxf(sc[j][0], sc[j][1]));
      mx1 = fmaxf(mx1, fmaxf(sc[j][2], sc[j][3]));
    }
#pragma unroll
    for (int o2 = 1; o2 <= 2; o2 <<= 1) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o2));
    }
    // Key 0 is in the first tile and visible to every row, so the running max is finite.
    const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
    const float c0 = exp2f(m0 - n0), c1 = exp2f(m1 - n1);
    m0 = n0;
    m1 = n1;
    l0 *= c0;
    l1 *= c1;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      o[t][0] *= c0;
      o[t][1] *= c0;
      o[t][2] *= c1;
      o[t][3] *= c1;
    }
    // P in bf16 as A fragments: score tiles 2c and 2c + 1 make keys 16c .. 16c + 15.
    uint32_t pa[ST / 2][4];
#pragma unroll
    for (int j = 0; j < ST; ++j) {
      const float p0 = exp2f(sc[j][0] - n0), p1 = exp2f(sc[j][1] - n0);
      const float p2 = exp2f(sc[j][2] - n1), p3 = exp2f(sc[j][3] - n1);
      l0 += p0 + p1;
      l1 += p2 + p3;
      pa[j / 2][(j & 1) * 2 + 0] = pack_bf16(p0, p1);
      pa[j / 2][(j & 1) * 2 + 1] = pack_bf16(p2, p3);
    }

    // O += P V: V tiles through ldmatrix.trans give the B fragments (keys x head dims).
#pragma unroll
    for (int c = 0; c < ST / 2; ++c) {
#pragma unroll
      for (int t = 0; t < NT; t += 2) {
        uint32_t b[4];  // keys 16c.. +15, head dims t*8.. and (t+1)*8..
        ldmatrix_x4_trans(
            b, &sv[c * 16 + (lane & 7) + ((lane >> 3) & 1) * 8][t * 8 + (lane >> 4) * 8]);
        mma_bf16(o[t], pa[c], b[0], b[1]);
        mma_bf16(o[t + 1], pa[c], b[2], b[3]);
      }
    }
  }

  // The row sums over the quad, then O / l for the rows this tile owns.
#pragma unroll
  for (int o2 = 1; o2 <= 2; o2 <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, o2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, o2);
  }
  const int r0 = w * 16 + g, r1 = r0 + 8;
  const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const int col = h * D + t * 8 + tig * 2;
    if (r0 < n) {
      *reinterpret_cast<__nv_bfloat162*>(out + (t0 + r0) * q_stride + col) =
          __floats2bfloat162_rn(o[t][0] * inv0, o[t][1] * inv0);
    }
    if (r1 < n) {
      *reinterpret_cast<__nv_bfloat162*>(out + (t0 + r1) * q_stride + col) =
          __floats2bfloat162_rn(o[t][2] * inv1, o[t][3] * inv1);
    }
  }
}

template <int D>
void launch(const __nv_bfloat16* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
            const int32_t* tile_start, const int32_t* tile_len, int32_t num_tiles,
            const int32_t* token_seq, const int32_t* positions, const int32_t* seq_page_start,
            const int32_t* page_ids, PagedAttentionShape shape, __nv_bfloat16* out,
            cudaStream_t stream) {
  const int smem = int(sizeof(Smem<D>));
  // Above 48 KB a kernel must opt in (D = 128 needs ~70 KB; sm_80+ allow 99 KB or more).
  TANDEM_CUDA_CHECK(cudaFuncSetAttribute(prefill_attention_kernel<D>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  prefill_attention_kernel<D><<<dim3(shape.num_heads, num_tiles), kWarps * 32, smem, stream>>>(
      q, k_cache, v_cache, tile_start, tile_len, token_seq, positions, seq_page_start, page_ids,
      shape, out);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace

int32_t plan_prefill_tiles(const int32_t* q_start, const int32_t* q_len, const int32_t* context_len,
                           int32_t num_seqs, int32_t capacity, int32_t* tile_start,
                           int32_t* tile_len) {
  struct Tile {
    int32_t start, len, keys;
  };
  std::vector<Tile> tiles;
  for (int32_t s = 0; s < num_seqs; ++s) {
    for (int32_t i = 0; i < q_len[s]; i += kPrefillQueryTile) {
      const int32_t len = std::min(kPrefillQueryTile, q_len[s] - i);
      // The tile's last query sits at position context_len - q_len + i + len - 1.
      tiles.push_back({q_start[s] + i, len, context_len[s] - q_len[s] + i + len});
    }
  }
  if (tiles.size() > size_t(capacity)) {
    std::fprintf(stderr, "plan_prefill_tiles: %zu tiles over the capacity of %d\n", tiles.size(),
                 capacity);
    std::abort();
  }
  std::stable_sort(tiles.begin(), tiles.end(),
                   [](const Tile& a, const Tile& b) { return a.keys > b.keys; });
  for (size_t i = 0; i < tiles.size(); ++i) {
    tile_start[i] = tiles[i].start;
    tile_len[i] = tiles[i].len;
  }
  return int32_t(tiles.size());
}

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
#define TANDEM_PREFILL_CASE(d)                                                            \
  case d:                                                                                 \
    launch<d>(q, k_cache, v_cache, tile_start, tile_len, num_tiles, token_seq, positions, \
              seq_page_start, page_ids, shape, out, stream);                              \
    break;
  switch (shape.head_dim) {
    TANDEM_PREFILL_CASE(16)
    TANDEM_PREFILL_CASE(32)
    TANDEM_PREFILL_CASE(48)
    TANDEM_PREFILL_CASE(64)
    TANDEM_PREFILL_CASE(80)
    TANDEM_PREFILL_CASE(96)
    TANDEM_PREFILL_CASE(112)
    TANDEM_PREFILL_CASE(128)
  }
#undef TANDEM_PREFILL_CASE
}

}  // namespace tandem::kernels
