#include "qkv_rope.cuh"

#include <cstdio>
#include <cstdlib>

#include "cuda_check.cuh"
#include "device_info.cuh"
#include "gemv.cuh"
#include "gemv_warp.cuh"
#include "pdl.cuh"

namespace tandem::kernels {
namespace {

// Warps per block (two rows each). 4 and 2 measured no faster on the H200 (7B batch 1 within
// 0.4%; 0.5B 0.5% and 2.5% slower; NOTES.md v9).
constexpr int kPairWarps = 8;

__device__ __forceinline__ float bf16_round(float v) {
  return __bfloat162float(__float2bfloat16(v));
}

// Loads of each weight row a lane makes before the grid dependency wait of an overlapped
// launch (pdl.cuh): all of a 0.5B's 896-feature rows.
constexpr int kFirstLoads = 4;

// Warp p computes rows c = h·D + i and c + D/2 (p = h·D/2 + i), or kParts warps do
// (gemv_warp::combine_parts). kNorm: x is RMSNorm(in.residual), staged by the block first
// (NormedRows). kPdl: may overlap the kernel before it; kLead: its successor (the decode
// attention) may launch at its start (gemv_warp::lead_trigger).
template <int M, bool kNorm, bool kPdl = false, int kParts = 1, bool kLead = false>
__global__ void __launch_bounds__(kPairWarps * 32)
    qkv_rope_kernel(const __nv_bfloat16* __restrict__ x, NormedRows in,
                    const __nv_bfloat16* __restrict__ w, int32_t k, RopeKvTarget a) {
  extern __shared__ uint4 staged[];  // [M, k] bf16 when kNorm
  gemv_warp::lead_trigger<kPdl, kLead>();
  const int half = a.s.head_dim / 2;
  const int pairs = (a.s.num_heads + 2 * a.s.num_kv_heads) * half;
  const int warp = threadIdx.x >> 5, part = warp % kParts;
  const int p = blockIdx.x * (kPairWarps / kParts) + warp / kParts;
  const int h = p / half, i = p % half;
  // Warps past the last pair load pair 0's rows and store nothing.
  const int64_t c = p < pairs ? int64_t(h) * a.s.head_dim + i : 0;
  const __nv_bfloat16* rows[2] = {w + c * k, w + (c + half) * k};
  constexpr int N = kPdl ? kFirstLoads : 0;
  gemv_warp::FirstLoads<2, N> first;
  // The epilogue's inputs (bias, the angle's position and frequency, slot) are loaded with the
  // first weights: the epilogue ends each warp's chain, and its loads came after the reduction.
  const bool stores = (threadIdx.x & 31) == 0 && part == 0 && p < pairs;
  RopePair pre[M];
  if (stores) {
#pragma unroll
    for (int t = 0; t < M; ++t) pre[t] = rope_pair_loads(a, t, h, i);
  }
  x = gemv_warp::start_block<M, kPdl, kNorm, 2, N, kParts>(
      rows, k, x, in, reinterpret_cast<__nv_bfloat16*>(staged), first, part);
  if (kParts == 1 && p >= pairs) return;
  float acc[2][M];
  // Two rows with the loads in flight per row of the one-row GEMV: the q|k|v projection is
  // latency-bound, and half as many warps as rows.
  gemv_warp::dot_rows<M, 2, kNorm, gemv_warp::kBytesInFlight, N, kParts>(rows, x, k, acc, &first,
                                                                         part);
  gemv_warp::allow_successor<kPdl, kLead>();
  gemv_warp::combine_parts<kParts>(acc, part);
  if (!stores) return;
#pragma unroll
  for (int t = 0; t < M; ++t) {
    rope_pair_angle(a, h, pre[t]);
    rope_store_pair_with(a, t, h, i, bf16_round(acc[0][t]), bf16_round(acc[1][t]), pre[t]);
  }
}

template <bool kNorm>
void qkv_rope(const __nv_bfloat16* x, const NormedRows& in, const __nv_bfloat16* w, int32_t k,
              const RopeKvTarget& a, cudaStream_t stream, bool pdl = false) {
  const int32_t m = a.s.num_tokens;
  if (m < 1 || m > kGemvMaxTokens || k % 8 != 0 || a.s.head_dim % 16 != 0 ||
      (kNorm && int64_t(m) * k * 2 > kNormedRowsMaxBytes)) {
    std::fprintf(stderr, "qkv_rope_gemv: unsupported m=%d k=%d head_dim=%d\n", m, k, a.s.head_dim);
    std::abort();
  }
  const int32_t rows = (a.s.num_heads + 2 * a.s.num_kv_heads) * a.s.head_dim;
  const size_t smem = kNorm ? size_t(m) * k * 2 : 0;
  static_assert(kGemvMaxTokens == 2, "one instantiation per token count");
  // gemv_row_parts warps a pair of rows (the rows' count decides, as for launch_gemv); two
  // tokens take the form with first loads, as in gemv.cu's launch_tokens.
  gemv_warp::with_parts(gemv_row_parts(rows), [&](auto parts) {
    constexpr int P = decltype(parts)::value;
    auto* kernel = m == 2 ? qkv_rope_kernel<2, kNorm, true, P>
                   : pdl  ? qkv_rope_kernel<1, kNorm, true, P>
                          : qkv_rope_kernel<1, kNorm, false, P>;
    const int blocks = (rows / 2 + kPairWarps / P - 1) / (kPairWarps / P);
    // An overlapped grid of one wave (every model's q|k|v so far) lets the attention launch at
    // its start, so that its page lookups and K/V copies run under this loop.
    if (pdl) {
      kernel = lead_if_one_wave(kernel,
                                m == 2 ? qkv_rope_kernel<2, kNorm, true, P, true>
                                       : qkv_rope_kernel<1, kNorm, true, P, true>,
                                blocks, kPairWarps * 32, smem);
    }
    pdl::launch(pdl, kernel, blocks, kPairWarps * 32, smem, stream, x, in, w, k, a);
  });
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_qkv_rope_gemv(const __nv_bfloat16* x, const __nv_bfloat16* w, int32_t k,
                          const RopeKvTarget& out, cudaStream_t stream, bool pdl) {
  qkv_rope<false>(x, NormedRows{}, w, k, out, stream, pdl);
}

void launch_qkv_rope_gemv(const NormedRows& x, const __nv_bfloat16* w, int32_t k,
                          const RopeKvTarget& out, cudaStream_t stream, bool pdl) {
  qkv_rope<true>(nullptr, x, w, k, out, stream, pdl);
}

}  // namespace tandem::kernels
