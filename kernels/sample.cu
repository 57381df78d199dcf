#include "sample.cuh"

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "block_reduce.cuh"
#include "cuda_check.cuh"
#include "sample_rows.cuh"
#include "sample_wide.cuh"
#include "select_bin.h"

namespace tandem::kernels {
namespace {

constexpr int kThreads = 1024;
constexpr int kBins = 256;      // 8-bit digits: a key is found in 4 passes
constexpr int kHistGroups = 8;  // 4 warps share a histogram: fewer same-address atomics
constexpr int kMaxCandidates = kSampleMaxCandidates;
constexpr int kBuckets = kSamplePrefilterBuckets;  // the prefilter's (sample_rows.cuh)
constexpr int G = kSampleWideSlices;               // slices of a RowPrefilter's row
// Top-p masses as integers of 2^-60: sums in any order give the same bits, so the cut does not
// depend on the launch. A probability below 2^-60 weighs 0; it can only matter when the kept
// mass is within 1e-18 of top_p.
constexpr double kFixedOne = 1152921504606846976.0;  // 2^60

using ReduceD = cub::BlockReduce<double, kThreads>;
using ScanD = cub::BlockScan<double, kThreads>;
using ScanI = cub::BlockScan<int, kThreads>;
using ScanU = cub::BlockScan<unsigned long long, kThreads>;

struct Shared {
  union {
    ReduceD::TempStorage reduce;
    ScanD::TempStorage scan_d;
    ScanI::TempStorage scan_i;
    ScanU::TempStorage scan_u;
  } cub;
  union {
    unsigned long long hist[kHistGroups][kBins];  // select_key
    struct {
      int count[kBuckets];
      float mass[kBuckets];
    } pre;  // the prefilter
  };
  float cand_val[kMaxCandidates];  // the prefilter's tokens, in id order
  int cand_id[kMaxCandidates];
  float sv[32];
  int si[32];
  unsigned long long above;
  double value;
  int chosen;
  int candidates;
  int found;
  int last;
};

__device__ __forceinline__ float key_value(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

struct KeyCut {
  uint32_t key = 0;
  unsigned long long above = 0;  // weight of the keys strictly above `key`
  bool all = true;               // the weights never reach the target: keep everything
};

// Among the candidates (key >= lo, never -inf/NaN), the key K where the weight walking down from
// the largest first reaches `target`: W(key > K) < target <= W(key >= K). Radix select over
// 8-bit digits, most significant first, with weight histograms. Every thread gets the result.
// Each pass's walk down the bins is a block scan: thread t holds bin kBins - 1 - t, so its
// inclusive sum is the weight from the top bin down to its own, and the one thread whose bin
// the serial walk would stop at finds itself (select_bin.h). Integer sums: the same bins in any
// order. One thread walking 256 bins a pass, 8 passes for a top-k and a top-p row, was a chain
// of dependent shared loads (drawn 0.5B steps 0.693-0.707 -> 0.665-0.684 ms on an H100,
// benchmarks/NOTES.md v46).
template <class Weight>
__device__ KeyCut select_key(const float* row, int n, uint32_t lo, unsigned long long target,
                             Weight weight, Shared& sh) {
  unsigned long long* hist = sh.hist[(threadIdx.x >> 5) % kHistGroups];
  uint32_t prefix = 0, mask = 0;
  unsigned long long above = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < kHistGroups * kBins; i += kThreads) (&sh.hist[0][0])[i] = 0;
    if (threadIdx.x == 0) sh.chosen = -1;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const float l = row[i];
      const uint32_t k = order_key(l);
      if (k <= kNegInfKey || k < lo || (k & mask) != prefix) continue;
      atomicAdd(&hist[(k >> shift) & 0xffu], weight(l));
    }
    __syncthreads();
    const int bin = kBins - 1 - int(threadIdx.x);
    unsigned long long w = 0;
    if (bin >= 0) {
      for (int g = 0; g < kHistGroups; ++g) w += sh.hist[g][bin];
    }
    unsigned long long through = 0;  // the weight of bins kBins - 1 down to `bin`
    ScanU(sh.cub.scan_u).InclusiveSum(w, through);
    if (select_stops_at(w, through, above, target)) {
      sh.chosen = bin;
      sh.above = above + (through - w);
    }
    __syncthreads();
    const int chosen = sh.chosen;
    above = chosen >= 0 ? sh.above : above;
    __syncthreads();  // sh.chosen/above are rewritten by the next pass
    if (chosen < 0) return KeyCut{};
    prefix |= uint32_t(chosen) << shift;
    mask |= 0xffu << shift;
  }
  return KeyCut{prefix, above, false};
}

__device__ double block_sum_d(double v, Shared& sh) {
  const double r = ReduceD(sh.cub.reduce).Sum(v);
  if (threadIdx.x == 0) sh.value = r;
  __syncthreads();
  const double out = sh.value;
  __syncthreads();
  return out;
}

// What a launch leaves: the drawn token in out (kDraw); the row's probabilities (what the draw
// samples from, zeros outside the kept set) in probs [gridDim.x, probs_stride] over ids
// [0, valid) and 0 in out (kProbs); or both (kProbsDraw). out is -1 when nothing is left to
// sample from.
enum class SampleMode { kDraw, kProbs, kProbsDraw };

template <SampleMode kMode>
__global__ void __launch_bounds__(kThreads)
    sample_kernel(const float* __restrict__ logits, int32_t stride, int32_t valid,
                  const SampleRowParams* __restrict__ params,
                  const LogitAdjust* __restrict__ adjust, float* __restrict__ scratch,
                  int32_t* __restrict__ out, float* __restrict__ probs, int32_t probs_stride,
                  RowPrefilter pre) {
  __shared__ Shared sh;
  const SampleRowParams P = params[blockIdx.x];
  const float* src = logits + int64_t(P.logit_row) * stride;
  float* row = scratch + int64_t(blockIdx.x) * stride;
  // exp(l / T - m / T) of every token the softmax sums, by id, written by the sum's pass so that
  // the later passes over the kept tokens (their total, the written row, the draw's scan) divide
  // instead of computing a double-precision exp again each: the same bits.
  double* e = reinterpret_cast<double*>(scratch + int64_t(kSampleMaxRows) * stride) +
              int64_t(blockIdx.x) * stride;
  // With a prefilter the row is in the scratch already, adjusted, and the passes over the whole
  // row below take their results from its slices instead (launch_wide_prefilter).
  const bool prefiltered = pre.max_value != nullptr;
  const int slices = int(blockIdx.x) * G;  // this row's first slice
  if (!prefiltered) {
    for (int i = threadIdx.x; i < valid; i += kThreads) row[i] = src[i];
    __syncthreads();
    for (int j = P.adjust_begin + int(threadIdx.x); j < P.adjust_end; j += kThreads) {
      const LogitAdjust a = adjust[j];
      if (a.id >= 0 && a.id < valid) row[a.id] = adjusted_logit(row[a.id], a, P);
    }
    __syncthreads();
  }
  // The largest logit (ties to the lower id): the greedy token, softmax's shift and the
  // prefilter's anchor.
  auto row_argmax = [&]() {
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    if (prefiltered) {
      for (int g = 0; g < G; ++g) {
        const float v = pre.max_value[slices + g];
        const int i = pre.max_id[slices + g];
        if (argmax_better(v, i, bv, bi)) bv = v, bi = i;
      }
      return bi;
    }
    for (int i = threadIdx.x; i < valid; i += kThreads) {
      if (argmax_better(row[i], i, bv, bi)) bv = row[i], bi = i;
    }
    return block_argmax(bv, bi, sh.sv, sh.si);
  };

  constexpr bool kProbs = kMode != SampleMode::kDraw;
  if (P.temperature == 0.0f) {
    const int bi = row_argmax();
    if constexpr (kProbs) {
      // Temperature 0 is the limit of a one-hot distribution at the argmax.
      float* dst = probs + int64_t(blockIdx.x) * probs_stride;
      for (int i = threadIdx.x; i < valid; i += kThreads) dst[i] = i == bi ? 1.0f : 0.0f;
      const int drawn = kMode == SampleMode::kProbsDraw ? bi : 0;
      if (threadIdx.x == 0) out[blockIdx.x] = bi == 0x7fffffff ? -1 : drawn;
    } else {
      if (threadIdx.x == 0) out[blockIdx.x] = bi == 0x7fffffff ? -1 : bi;
    }
    return;
  }

  // Softmax's shift: the largest logit survives every cut.
  const int mi = row_argmax();
  if (mi == 0x7fffffff || !isfinite(row[mi])) {  // nothing to sample from: the host reports it
    if (threadIdx.x == 0) out[blockIdx.x] = -1;
    return;
  }
  const float m = row[mi];
  const double T = double(P.temperature);
  const double mT = double(m) / T;
  const bool cut_k = P.top_k > 0 && P.top_k < valid;
  const bool cut_p = P.top_p < 1.0f;
  // Without top-k the softmax runs over every finite logit; with it, over the top-k set (below).
  double sum = 0.0;
  if (!cut_k && prefiltered) {  // the exp terms are written; their sum in slice order
    for (int g = 0; g < G; ++g) sum += pre.exp_sum[slices + g];
  } else if (!cut_k) {
    double local = 0.0;
    for (int i = threadIdx.x; i < valid; i += kThreads) {
      if (order_key(row[i]) > kNegInfKey) {
        e[i] = exp(double(row[i]) / T - mT);
        local += e[i];
      }
    }
    sum = block_sum_d(local, sh);
  }

  // Prefilter: the tokens within some distance of the largest logit, enough of them to hold
  // every token the cuts can keep (top-k's k, or top-p's mass with a 1% margin over float
  // rounding), copied in id order to shared memory; the exact cuts below then run there. When
  // no such set fits (a flat distribution, a huge k), they run over the whole row instead.
  const float* vals = row;   // the tokens the cuts see, in id order
  const int* ids = nullptr;  // their ids (nullptr: position = id)
  int n = valid;
  if (cut_k || cut_p) {
    const float Tf = P.temperature;
    auto bucket = [m](float l) { return prefilter_bucket(m, l); };
    float z = 0.0f;
    if (prefiltered) {  // the slices' buckets and sums
      z = prefilter_totals(pre, int(blockIdx.x), sh.pre.count, sh.pre.mass);
    } else {
      for (int b = threadIdx.x; b < kBuckets; b += kThreads) {
        sh.pre.count[b] = 0, sh.pre.mass[b] = 0;
      }
      __syncthreads();
      for (int i = threadIdx.x; i < valid; i += kThreads) {
        const float l = row[i];
        if (order_key(l) <= kNegInfKey) continue;
        const float e = __expf((l - m) / Tf);
        z += e;
        const float d = bucket(l);
        if (d < float(kBuckets)) {
          atomicAdd(&sh.pre.count[int(d)], 1);
          atomicAdd(&sh.pre.mass[int(d)], e);
        }
      }
      z = block_sum(z, sh.sv);
    }
    if (threadIdx.x == 0) {
      sh.chosen = prefilter_walk(sh.pre.count, sh.pre.mass, z, P, cut_k, &sh.candidates);
    }
    __syncthreads();
    const int cut = sh.chosen;
    __syncthreads();
    if (cut >= 0 && prefiltered) {  // gathered by the slices (launch_wide_prefilter)
      n = sh.candidates;
      const int64_t at = int64_t(blockIdx.x) * kMaxCandidates;
      for (int i = threadIdx.x; i < n; i += kThreads) {
        sh.cand_val[i] = pre.cand_value[at + i];
        sh.cand_id[i] = pre.cand_id[at + i];
      }
      __syncthreads();
      vals = sh.cand_val;
      ids = sh.cand_id;
    } else if (cut >= 0) {
      const int per = (valid + kThreads - 1) / kThreads;
      const int begin = min(valid, int(threadIdx.x) * per), end = min(valid, begin + per);
      auto take = [&](float l) { return order_key(l) > kNegInfKey && bucket(l) < float(cut + 1); };
      int mine = 0;
      for (int i = begin; i < end; ++i) mine += take(row[i]);
      int at = 0, total = 0;
      ScanI(sh.cub.scan_i).ExclusiveSum(mine, at, total);
      for (int i = begin; i < end; ++i) {
        if (take(row[i])) sh.cand_val[at] = row[i], sh.cand_id[at++] = i;
      }
      __syncthreads();
      vals = sh.cand_val;
      ids = sh.cand_id;
      n = total;
    }
  }

  // Top-k: every logit >= the k-th largest stays (ties included).
  uint32_t lo = kNegInfKey + 1;
  if (cut_k) {
    const KeyCut k = select_key(
        vals, n, lo, static_cast<unsigned long long>(P.top_k), [](float) { return 1ull; }, sh);
    if (!k.all) lo = k.key;
    double local = 0.0;
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const uint32_t key = order_key(vals[i]);
      if (key > kNegInfKey && key >= lo) {
        const double ev = exp(double(vals[i]) / T - mT);
        e[ids != nullptr ? ids[i] : i] = ev;
        local += ev;
      }
    }
    sum = block_sum_d(local, sh);
  }
  auto prob = [=](float l) { return exp(double(l) / T - mT) / sum; };

  // Top-p: the most likely tokens (lower id first on equal logits) until their mass reaches
  // top_p. Keys above the cut all stay; of the tokens at the cut, the first n by id.
  KeyCut cut;
  int pos_cut = 0x7fffffff;  // last kept position among the ties at the cut
  if (cut_p) {
    const auto target = static_cast<unsigned long long>(double(P.top_p) * kFixedOne);
    auto fixed = [=](float l) {
      return static_cast<unsigned long long>(llrint(prob(l) * kFixedOne));
    };
    cut = select_key(vals, n, lo, target, fixed, sh);
    if (!cut.all) {
      const unsigned long long q = fixed(key_value(cut.key));
      // The cut bin reached the target, so above < target and need >= 1.
      const long long need = q == 0 ? 0x7fffffffll : (long long)((target - cut.above + q - 1) / q);
      // The need-th tie in id order: contiguous ranges per thread, counted, scanned, walked.
      const int per = (n + kThreads - 1) / kThreads;
      const int begin = min(n, int(threadIdx.x) * per), end = min(n, begin + per);
      int ties = 0;
      for (int i = begin; i < end; ++i) ties += order_key(vals[i]) == cut.key;
      int before = 0, total_ties = 0;
      ScanI(sh.cub.scan_i).ExclusiveSum(ties, before, total_ties);
      __syncthreads();
      if (need < total_ties && before < need && need <= before + ties) {
        int seen = before;
        for (int i = begin; i < end; ++i) {
          if (order_key(vals[i]) == cut.key && ++seen == need) {
            sh.found = i;
            break;
          }
        }
      }
      __syncthreads();
      if (need < total_ties) pos_cut = sh.found;
      __syncthreads();
    }
  }
  const double min_p = P.min_p > 0.0f ? double(P.min_p) * (1.0 / sum) : 0.0;
  auto kept = [&](int i, float l) -> double {
    const uint32_t k = order_key(l);
    if (k <= kNegInfKey || k < lo) return 0.0;
    if (!cut.all && (k < cut.key || (k == cut.key && i > pos_cut))) return 0.0;
    const double p = e[ids != nullptr ? ids[i] : i] / sum;  // prob(l), its exp from the sum's pass
    return p < min_p ? 0.0 : p;
  };
  double local = 0.0;
  for (int i = threadIdx.x; i < n; i += kThreads) local += kept(i, vals[i]);
  const double total = block_sum_d(local, sh);

  if constexpr (kProbs) {
    // float(p / total), as the host's logits_to_probs writes it; the prefiltered candidates are
    // scattered into a zeroed row.
    float* dst = probs + int64_t(blockIdx.x) * probs_stride;
    if (ids != nullptr) {
      for (int i = threadIdx.x; i < valid; i += kThreads) dst[i] = 0.0f;
      __syncthreads();
    }
    for (int i = threadIdx.x; i < n; i += kThreads) {
      dst[ids != nullptr ? ids[i] : i] = float(kept(i, vals[i]) / total);
    }
    if constexpr (kMode == SampleMode::kProbs) {
      if (threadIdx.x == 0) out[blockIdx.x] = 0;
      return;
    }
  }

  // Inverse CDF in id order over float(p / total), as the host sums it.
  const int per = (n + kThreads - 1) / kThreads;
  const int begin = min(n, int(threadIdx.x) * per), end = min(n, begin + per);
  double mine = 0.0;
  int last = -1;
  for (int i = begin; i < end; ++i) {
    const float pf = float(kept(i, vals[i]) / total);
    if (pf > 0.0f) mine += double(pf), last = i;
  }
  double before = 0.0, all_mass = 0.0;
  ScanD(sh.cub.scan_d).ExclusiveSum(mine, before, all_mass);
  if (threadIdx.x == 0) sh.found = 0x7fffffff, sh.last = -1;
  __syncthreads();
  const double goal = P.u * all_mass;
  if (last >= 0 && before <= goal && goal < before + mine) {
    double cumulative = before;
    int pick = last;  // rounding between the scan and this walk: the range's last token
    for (int i = begin; i < end; ++i) {
      const float pf = float(kept(i, vals[i]) / total);
      if (!(pf > 0.0f)) continue;
      cumulative += double(pf);
      if (goal < cumulative) {
        pick = i;
        break;
      }
    }
    atomicMin(&sh.found, pick);
  }
  // Past the end through rounding: the last token with mass, as the host does.
  if (last >= 0) atomicMax(&sh.last, last);
  __syncthreads();
  if (threadIdx.x == 0) {
    const int pos = sh.found != 0x7fffffff ? sh.found : sh.last;
    out[blockIdx.x] = ids != nullptr ? ids[pos] : pos;
  }
}

}  // namespace

void launch_sample_rows(const float* logits, int32_t row_stride, int32_t valid_vocab,
                        const SampleRowParams* params, const LogitAdjust* adjust, int32_t num_rows,
                        float* scratch, int32_t* out, cudaStream_t stream,
                        const RowPrefilter* pre) {
  if (num_rows == 0) return;
  sample_kernel<SampleMode::kDraw>
      <<<num_rows, kThreads, 0, stream>>>(logits, row_stride, valid_vocab, params, adjust, scratch,
                                          out, nullptr, 0, pre != nullptr ? *pre : RowPrefilter{});
  TANDEM_CUDA_CHECK_LAUNCH();
}

void launch_probs_rows(const float* logits, int32_t row_stride, int32_t valid_vocab,
                       const SampleRowParams* params, const LogitAdjust* adjust, int32_t num_rows,
                       float* scratch, int32_t* status, float* probs, int32_t probs_stride,
                       bool draw, cudaStream_t stream, const RowPrefilter* pre) {
  if (num_rows == 0) return;
  const RowPrefilter p = pre != nullptr ? *pre : RowPrefilter{};
  if (draw) {
    sample_kernel<SampleMode::kProbsDraw><<<num_rows, kThreads, 0, stream>>>(
        logits, row_stride, valid_vocab, params, adjust, scratch, status, probs, probs_stride, p);
  } else {
    sample_kernel<SampleMode::kProbs><<<num_rows, kThreads, 0, stream>>>(
        logits, row_stride, valid_vocab, params, adjust, scratch, status, probs, probs_stride, p);
  }
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
