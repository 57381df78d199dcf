#include "spec_accept.cuh"

#include <cub/block/block_scan.cuh>

#include "cuda_check.cuh"
#include "sampling/philox.h"

namespace tandem::kernels {
namespace {

constexpr int kThreads = 1024;
using ScanD = cub::BlockScan<double, kThreads>;

struct Shared {
  ScanD::TempStorage scan;
  int accepted;
  int found;
  int last;
};

// Inverse CDF over the row's values v(i) >= 0 (zeros are never drawn), as the host's
// sample_from_probs and fused residual draw walk it: the first id whose running sum in double
// exceeds u × total, else the last id with mass; -1 when no value is positive. Each thread sums
// a contiguous range, the ranges are scanned, and the thread whose range holds the goal walks it.
template <class Value>
__device__ int draw(Value v, int n, double u, Shared& sh) {
  const int per = (n + kThreads - 1) / kThreads;
  const int begin = min(n, int(threadIdx.x) * per), end = min(n, begin + per);
  double mine = 0.0;
  int last = -1;
  for (int i = begin; i < end; ++i) {
    const float x = v(i);
    if (x > 0.0f) mine += double(x), last = i;
  }
  double before = 0.0, total = 0.0;
  ScanD(sh.scan).ExclusiveSum(mine, before, total);
  if (threadIdx.x == 0) sh.found = 0x7fffffff, sh.last = -1;
  __syncthreads();
  const double goal = u * total;
  if (last >= 0 && before <= goal && goal < before + mine) {
    double cumulative = before;
    int pick = last;  // rounding between the scan and this walk: the range's last id
    for (int i = begin; i < end; ++i) {
      const float x = v(i);
      if (!(x > 0.0f)) continue;
      cumulative += double(x);
      if (goal < cumulative) {
        pick = i;
        break;
      }
    }
    atomicMin(&sh.found, pick);
  }
  if (last >= 0) atomicMax(&sh.last, last);  // past the end through rounding: the last id
  __syncthreads();
  const int token = sh.found != 0x7fffffff ? sh.found : sh.last;
  __syncthreads();  // sh is reused by a second draw
  return token;
}

__global__ void __launch_bounds__(kThreads)
    accept_kernel(const AcceptSeq* __restrict__ seqs, const int32_t* __restrict__ draft_tokens,
                  const int32_t* __restrict__ draft_slots, const float* __restrict__ draft_rows,
                  const float* __restrict__ target_rows, int32_t width, int32_t* __restrict__ out) {
  __shared__ Shared sh;
  const AcceptSeq s = seqs[blockIdx.x];
  const float* target = target_rows + int64_t(s.target_slot) * width;
  auto draft_row = [&](int j) {
    return draft_rows + int64_t(draft_slots[s.first_draft + j]) * width;
  };
  // The tests: accept proposal x with probability min(1, p_t(x) / p_d(x)) as u · p_d < p_t in
  // double, products rounded as the host rounds them (no FMA).
  if (threadIdx.x == 0) {
    int a = 0;
    for (; a < s.k; ++a) {
      const int32_t x = draft_tokens[s.first_draft + a];
      const double pt = target[int64_t(a) * width + x];
      const double pd = draft_row(a)[x];
      if (!(__dmul_rn(philox_uniform(s.seed, s.counter + uint64_t(a)), pd) < pt)) break;
    }
    sh.accepted = a;
  }
  __syncthreads();
  const int a = sh.accepted;
  const bool rejected = a < s.k;
  const double u = philox_uniform(s.seed, s.counter + uint64_t(a + (rejected ? 1 : 0)));
  const float* p_t = target + int64_t(a) * width;
  int token = -1;
  if (rejected) {
    const float* p_d = draft_row(a);
    token = draw([=](int i) { return fmaxf(0.0f, __fsub_rn(p_t[i], p_d[i])); }, width, u, sh);
  }
  // After k acceptances the bonus from row k; after a rejection whose residual is empty (float
  // rounding where p_t ≈ p_d) the target's row itself, as the host does.
  if (token < 0) token = draw([=](int i) { return p_t[i]; }, width, u, sh);
  if (threadIdx.x == 0) {
    out[2 * blockIdx.x] = a;
    out[2 * blockIdx.x + 1] = token;
  }
}

}  // namespace

void launch_accept_sampled(const AcceptSeq* seqs, int32_t num_seqs, const int32_t* draft_tokens,
                           const int32_t* draft_slots, const float* draft_rows,
                           const float* target_rows, int32_t width, int32_t* out,
                           cudaStream_t stream) {
  if (num_seqs == 0) return;
  accept_kernel<<<num_seqs, kThreads, 0, stream>>>(seqs, draft_tokens, draft_slots, draft_rows,
                                                   target_rows, width, out);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
