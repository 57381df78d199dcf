#include "gemv.cuh"

#include <cstdio>
#include <cstdlib>

#include "cuda_check.cuh"
#include "device_info.cuh"
#include "env_knob.h"
#include "gemv_warp.cuh"
#include "pdl.cuh"
#include "silu_mul.cuh"

namespace tandem::kernels {
namespace {

using gemv_warp::kThreads;
using gemv_warp::kWarps;
// Warps per block of the one-row kernels (plain and residual-adding). 4 measured no faster on
// the H200 (7B batch 1 within 0.4%, 0.5B 0.5% slower; NOTES.md v9).
constexpr int kRowWarps = 8;

// Loads of each weight row a lane makes before the grid dependency wait of an overlapped
// launch (pdl.cuh): all of a 0.5B's 896-feature rows, the first 512 features of longer ones.
// The SwiGLU kernel's two rows take two each: four took it from 56 to 86 registers and from
// four blocks an SM to two.
constexpr int kFirstLoads = 4;
constexpr int kFirstLoadsPair = 2;
// Blocks an SM of the folded SwiGLU (a small model's gate|up): the 0.5B's 608 blocks in one
// wave of 132 SMs need 5 (at most 48 registers; a 4-byte spill at one token, 12 at two). At 53
// registers 4 fit and 76 blocks ran as a second wave: ncu 11.2 -> 9.1-9.8 us, the 0.5B's
// one-token step 0.587-0.590 -> 0.559-0.564 ms, 2 tokens 0.718 -> 0.713 (H200, NOTES.md v28).
// The unfolded form (the 7B's) keeps the compiler's choice: 48 registers, 5 blocks already.
constexpr int kFoldedSwigluBlocks = 5;

// GemvArgmax's scratch: the per-token maxima.
static_assert(kGemvMaxTokens * 8 <= int(kGemvArgmaxScratchBytes));
constexpr int kNoRow = 0x7fffffff;

// (v, row) as a 64-bit key whose unsigned order is argmax_better's: the larger value first, then
// the lower row. Every key of a number is above 0, which stands for "no row".
__device__ __forceinline__ unsigned long long argmax_key(float v, int row) {
  if (v == 0.0f) v = 0.0f;  // -0 ties with +0, as they compare equal
  const uint32_t b = __float_as_uint(v);
  const uint32_t ordered = (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
  return (static_cast<unsigned long long>(ordered) << 32) | (0xffffffffu - uint32_t(row));
}

// The block's best row of each token goes into the token's atomic maximum, which
// gemv_argmax_finish_kernel turns into ids. Every thread of the block calls it (a barrier).
// offers: this warp's row may be chosen (its part 0, a row below n and below am.valid).
//
// The grid's last block by ticket writing the ids instead (a fence and a returning atomic at the
// end of every block) made the 0.5B's step slower, 0.5292-0.5307 -> 0.5406 ms, where this form
// took it to 0.5248-0.5251 (H100, NOTES.md v52).
template <int M, int kWarpsHere>
__device__ __forceinline__ void gemv_argmax_epilogue(const float (&acc)[1][M], bool offers, int row,
                                                     const GemvArgmax& am) {
  __shared__ float sv[M][kWarpsHere];
  __shared__ int si[M][kWarpsHere];
  const int warp = threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int t = 0; t < M; ++t) {
      sv[t][warp] = offers ? acc[0][t] : __int_as_float(0x7fc00000);  // NaN never wins
      si[t][warp] = row;
    }
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  auto* keys = static_cast<unsigned long long*>(am.scratch);
#pragma unroll
  for (int t = 0; t < M; ++t) {
    float bv = -INFINITY;
    int bi = kNoRow;
    for (int w = 0; w < kWarpsHere; ++w) {
      if (argmax_better(sv[t][w], si[t][w], bv, bi)) bv = sv[t][w], bi = si[t][w];
    }
    if (bi != kNoRow) atomicMax(&keys[t], argmax_key(bv, bi));
  }
}

// The ids from the maxima the GEMV left, zeroing them for the next launch. Overlapped (pdl), it
// launches during the GEMV and waits for all of it.
__global__ void gemv_argmax_finish_kernel(GemvArgmax am, int32_t m) {
  pdl::grid_dependency_wait();
  const int t = int(threadIdx.x);
  if (t >= m) return;
  const unsigned long long key = atomicExch(&static_cast<unsigned long long*>(am.scratch)[t], 0ull);
  const int id = key == 0 ? 0 : int(0xffffffffu - uint32_t(key));
  am.out[t] = id;
  if (am.out_copy != nullptr) am.out_copy[t] = id;
}

// One warp per output row, or kParts warps a row (gemv_warp::combine_parts). kAdd: y is the
// fp32 residual and gains the bf16-rounded result (launch_gemv_add); else y is stored (bf16 or
// fp32). kPdl: may overlap the kernel before it; kLead: its successor may launch at its start
// (gemv_warp::lead_trigger). kArgmax: also each token's best row into GemvArgmax's maxima (`am`).
template <int M, typename Out, bool kAdd = false, bool kPdl = false, int kParts = 1,
          bool kLead = false, bool kArgmax = false>
__global__ void __launch_bounds__(kRowWarps * 32)
    gemv_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w, int32_t n,
                int32_t k, int32_t ldy, Out* __restrict__ y, GemvArgmax am) {
  gemv_warp::lead_trigger<kPdl, kLead>();
  const int warp = threadIdx.x >> 5, part = warp % kParts;
  const int row = blockIdx.x * (kRowWarps / kParts) + warp / kParts;
  // An exited block counts as having let its successor launch. The argmax's epilogue is a
  // barrier, so there the warps past the end load row 0 and offer nothing.
  if (kParts == 1 && !kArgmax && row >= n) return;
  // A split row's warps past the end load row 0 and store nothing (combine_parts is a barrier).
  const __nv_bfloat16* rows[1] = {w + int64_t(row < n ? row : 0) * k};
  float acc[1][M];
  constexpr int N = kPdl ? kFirstLoads : 0;
  gemv_warp::FirstLoads<1, N> first;
  x = gemv_warp::start_block<M, kPdl, false, 1, N, kParts>(rows, k, x, NormedRows{}, nullptr, first,
                                                           part);
  // kAdd: the residual's entries are read once the kernels before have finished (after the
  // wait) but before the loop, not after the reduction, where their load ended the warp's chain.
  const bool stores = (threadIdx.x & 31) == 0 && part == 0 && row < n;
  float prior[M];
  if constexpr (kAdd) {
#pragma unroll
    for (int t = 0; t < M; ++t) prior[t] = stores ? y[int64_t(t) * ldy + row] : 0.0f;
  }
  gemv_warp::dot_rows<M, 1, false, gemv_warp::kBytesInFlight, N, kParts>(rows, x, k, acc, &first,
                                                                         part);
  gemv_warp::allow_successor<kPdl, kLead>();
  gemv_warp::combine_parts<kParts>(acc, part);
  if constexpr (kArgmax) {
    gemv_argmax_epilogue<M, kRowWarps>(acc, part == 0 && row < n && row < am.valid, row, am);
  }
  if (!stores) return;
#pragma unroll
  for (int t = 0; t < M; ++t) {
    if constexpr (kAdd) {
      y[int64_t(t) * ldy + row] = prior[t] + __bfloat162float(__float2bfloat16(acc[0][t]));
    } else if constexpr (sizeof(Out) == 4) {
      y[int64_t(t) * ldy + row] = acc[0][t];
    } else {
      y[int64_t(t) * ldy + row] = __float2bfloat16(acc[0][t]);
    }
  }
}

// Gate row r and up row r + width per warp; the epilogue rounds both to bf16 first, as the
// unfused path stores them, so the output equals launch_gemv + launch_silu_mul bit for bit.
// kNorm: x is RMSNorm(in.residual), staged by the block first (NormedRows). kPdl: may overlap
// the kernel before it; kLead: its successor may launch at its start (gemv_warp::lead_trigger).
template <int M, bool kNorm, bool kPdl = false, bool kLead = false>
__global__ void __launch_bounds__(kThreads, kNorm ? kFoldedSwigluBlocks : 0)
    gemv_swiglu_kernel(const __nv_bfloat16* __restrict__ x, NormedRows in,
                       const __nv_bfloat16* __restrict__ w, int32_t width, int32_t k,
                       __nv_bfloat16* __restrict__ out) {
  extern __shared__ uint4 staged[];  // [M, k] bf16 when kNorm
  gemv_warp::lead_trigger<kPdl, kLead>();
  const int row = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int64_t r = row < width ? row : 0;  // warps past the end load row 0 and store nothing
  const __nv_bfloat16* rows[2] = {w + r * k, w + (r + width) * k};
  gemv_warp::FirstLoads<2, kPdl ? kFirstLoadsPair : 0> first;
  x = gemv_warp::start_block<M, kPdl, kNorm>(rows, k, x, in,
                                             reinterpret_cast<__nv_bfloat16*>(staged), first);
  if (row >= width) return;
  float acc[2][M];
  gemv_warp::dot_rows<M, 2, kNorm, gemv_warp::kBytesInFlight / 2, kPdl ? kFirstLoadsPair : 0>(
      rows, x, k, acc, &first);
  gemv_warp::allow_successor<kPdl, kLead>();
  if ((threadIdx.x & 31) != 0) return;
#pragma unroll
  for (int t = 0; t < M; ++t) {
    const float gb = __bfloat162float(__float2bfloat16(acc[0][t]));
    const float ub = __bfloat162float(__float2bfloat16(acc[1][t]));
    out[int64_t(t) * width + row] = __float2bfloat16(silu_times(gb, ub));
  }
}

template <bool kNorm>
void swiglu(const __nv_bfloat16* x, const NormedRows& in, const __nv_bfloat16* w, int32_t m,
            int32_t width, int32_t k, __nv_bfloat16* out, cudaStream_t stream, bool pdl = false) {
  if (m < 1 || m > kGemvMaxTokens || k % 8 != 0 ||
      (kNorm && int64_t(m) * k * 2 > kNormedRowsMaxBytes)) {
    std::fprintf(stderr, "gemv_swiglu: unsupported m=%d k=%d\n", m, k);
    std::abort();
  }
  const int blocks = (width + kWarps - 1) / kWarps;
  const size_t smem = kNorm ? size_t(m) * k * 2 : 0;
  // Two tokens: the form with first loads, as launch_tokens. An overlapped grid of one wave
  // lets its successor launch at its start (the folded 0.5B's 608 blocks at 5 an SM; a 7B's
  // 2,368 never are).
  auto* kernel = m == 2 ? gemv_swiglu_kernel<2, kNorm, true>
                 : pdl  ? gemv_swiglu_kernel<1, kNorm, true>
                        : gemv_swiglu_kernel<1, kNorm, false>;
  if (pdl) {
    kernel = lead_if_one_wave(kernel,
                              m == 2 ? gemv_swiglu_kernel<2, kNorm, true, true>
                                     : gemv_swiglu_kernel<1, kNorm, true, true>,
                              blocks, kThreads, smem);
  }
  pdl::launch(pdl, kernel, blocks, kThreads, smem, stream, x, in, w, width, k, out);
  TANDEM_CUDA_CHECK_LAUNCH();
}

// A launch of m tokens (kAdd or not; overlapped with pdl) with gemv_row_parts warps a row. Two
// tokens always take the form with first loads (kPdl; its wait is a no-op on a plain launch):
// without them a 896-feature row's last chunks are loaded one at a time, and the 0.5B's
// 2-token lm_head took 116 us against 66 for one token (ncu, H200; NOTES.md v27).
template <typename Out, bool kAdd, bool kArgmax = false>
void launch_tokens(int32_t m, const __nv_bfloat16* x, const __nv_bfloat16* w, int32_t n, int32_t k,
                   int32_t ldy, Out* y, bool pdl, cudaStream_t stream, const GemvArgmax& am = {}) {
  static_assert(kGemvMaxTokens == 2, "one instantiation per token count");
  gemv_warp::with_parts(gemv_row_parts(n), [&](auto parts) {
    constexpr int P = decltype(parts)::value;
    auto* kernel = m == 2 ? gemv_kernel<2, Out, kAdd, true, P, false, kArgmax>
                   : pdl  ? gemv_kernel<1, Out, kAdd, true, P, false, kArgmax>
                          : gemv_kernel<1, Out, kAdd, false, P, false, kArgmax>;
    const int blocks = (n + kRowWarps / P - 1) / (kRowWarps / P);
    // An overlapped grid of one wave lets its successor launch at its start (o and down, a few
    // hundred blocks; not lm_head's thousands).
    if (pdl) {
      kernel = lead_if_one_wave(kernel,
                                m == 2 ? gemv_kernel<2, Out, kAdd, true, P, true, kArgmax>
                                       : gemv_kernel<1, Out, kAdd, true, P, true, kArgmax>,
                                blocks, kRowWarps * 32, 0);
    }
    pdl::launch(pdl, kernel, blocks, kRowWarps * 32, 0, stream, x, w, n, k, ldy, y, am);
  });
}

template <typename Out>
void dispatch(const __nv_bfloat16* x, const __nv_bfloat16* w, int32_t m, int32_t n, int32_t k,
              int32_t ldy, Out* y, cudaStream_t stream, bool pdl) {
  launch_tokens<Out, false>(m, x, w, n, k, ldy, y, pdl, stream);
}

}  // namespace

int gemv_row_parts(int32_t n) {
  // TANDEM_GEMV_SPLIT=1|2|4 forces the parts of every matrix of up to 8,192 rows, for sweeps.
  static const int forced = env_choice("TANDEM_GEMV_SPLIT", {1, 2, 4}, 0);
  if (forced != 0) return n <= 8192 ? forced : 1;
  // Split while the warps of a row's parts fill fewer than 24 an SM. On 132 SMs:
  //   - four parts for the 0.5B's o, down and q|k|v (896-1,152 rows; q|k|v in 4 parts, not 2:
  //     0.5159 -> 0.5136 ms a step, its 2-token step 0.689 -> 0.677; H100, NOTES.md v56);
  //   - two for a 1B's o, down and q|k|v (2,048-3,072 rows; q|k|v in 2, not 1: 0.9718 -> 0.9534
  //     ms a step in this rule's own build, H100, v57; 4 parts for all three, forced: 0.9875, v56);
  //   - never a 7B's or an 8B's Linears (3,584 rows and up), where two parts measured slower (7B
  //     batch 1 3.76 -> 3.91 ms; H200, v22).
  const int sms = multiprocessors();
  int parts = 1;
  while (parts < 4 && int64_t(n) * parts < 24 * int64_t(sms)) parts *= 2;
  return parts;
}

void launch_gemv(const __nv_bfloat16* x, const __nv_bfloat16* w, int32_t m, int32_t n, int32_t k,
                 void* y, bool out_f32, cudaStream_t stream, int32_t ldy, bool pdl) {
  if (m < 1 || m > kGemvMaxTokens || k % 8 != 0) {
    std::fprintf(stderr, "gemv: unsupported m=%d k=%d\n", m, k);
    std::abort();
  }
  if (ldy <= 0) ldy = n;
  if (out_f32) {
    dispatch(x, w, m, n, k, ldy, static_cast<float*>(y), stream, pdl);
  } else {
    dispatch(x, w, m, n, k, ldy, static_cast<__nv_bfloat16*>(y), stream, pdl);
  }
  TANDEM_CUDA_CHECK_LAUNCH();
}

void launch_gemv_argmax(const __nv_bfloat16* x, const __nv_bfloat16* w, int32_t m, int32_t n,
                        int32_t k, float* y, const GemvArgmax& argmax, cudaStream_t stream,
                        bool pdl, int32_t ldy) {
  if (m < 1 || m > kGemvMaxTokens || k % 8 != 0 || argmax.scratch == nullptr ||
      argmax.out == nullptr || argmax.valid < 1) {
    std::fprintf(stderr, "gemv_argmax: unsupported m=%d k=%d valid=%d\n", m, k, argmax.valid);
    std::abort();
  }
  launch_tokens<float, false, true>(m, x, w, n, k, ldy > 0 ? ldy : n, y, pdl, stream, argmax);
  pdl::launch(pdl, gemv_argmax_finish_kernel, 1, 32, 0, stream, argmax, m);
  TANDEM_CUDA_CHECK_LAUNCH();
}

void launch_gemv_swiglu(const __nv_bfloat16* x, const __nv_bfloat16* w, int32_t m, int32_t width,
                        int32_t k, __nv_bfloat16* out, cudaStream_t stream, bool pdl) {
  swiglu<false>(x, NormedRows{}, w, m, width, k, out, stream, pdl);
}

void launch_gemv_swiglu(const NormedRows& x, const __nv_bfloat16* w, int32_t m, int32_t width,
                        int32_t k, __nv_bfloat16* out, cudaStream_t stream, bool pdl) {
  swiglu<true>(nullptr, x, w, m, width, k, out, stream, pdl);
}

void launch_gemv_add(const __nv_bfloat16* x, const __nv_bfloat16* w, int32_t m, int32_t n,
                     int32_t k, float* residual, cudaStream_t stream, bool pdl) {
  if (m < 1 || m > kGemvMaxTokens || k % 8 != 0) {
    std::fprintf(stderr, "gemv_add: unsupported m=%d k=%d\n", m, k);
    std::abort();
  }
  launch_tokens<float, true>(m, x, w, n, k, n, residual, pdl, stream);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
