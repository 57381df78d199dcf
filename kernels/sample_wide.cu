#include "sample_wide.cuh"

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "block_reduce.cuh"
#include "cuda_check.cuh"
#include "sample_rows.cuh"

namespace tandem::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int G = kSampleWideSlices;

using ReduceD = cub::BlockReduce<double, kThreads>;
using ReduceI = cub::BlockReduce<int, kThreads>;
using ScanD = cub::BlockScan<double, kThreads>;
using ScanI = cub::BlockScan<int, kThreads>;

constexpr int kBuckets = kSamplePrefilterBuckets;

// The per-slice partials, [kSampleMaxRows, G] each (the buckets [kSampleMaxRows, G, kBuckets]),
// behind the fp64 rows in the wide scratch.
struct Partials {
  double* sum;    // exp terms
  double* total;  // probabilities
  double* mass;   // float(p / total) as the draw sums them
  float* max_value;
  int* max_id;
  float* z;  // the prefilter's: Σ __expf((l - m) / T)
  int* bucket_count;
  float* bucket_mass;
  float* cand_value;  // [kSampleMaxRows, kSampleMaxCandidates]
  int* cand_id;
};

__host__ __device__ inline Partials partials_of(void* wide, int64_t stride) {
  char* p = static_cast<char*>(wide) + size_t(kSampleMaxRows) * size_t(stride) * 8;
  const size_t n = size_t(kSampleMaxRows) * G;
  Partials q;
  q.sum = reinterpret_cast<double*>(p);
  q.total = q.sum + n;
  q.mass = q.total + n;
  q.max_value = reinterpret_cast<float*>(q.mass + n);
  q.max_id = reinterpret_cast<int*>(q.max_value + n);
  q.z = reinterpret_cast<float*>(q.max_id + n);
  q.bucket_count = reinterpret_cast<int*>(q.z + n);
  q.bucket_mass = reinterpret_cast<float*>(q.bucket_count + n * kBuckets);
  q.cand_value = q.bucket_mass + n * kBuckets;
  q.cand_id = reinterpret_cast<int*>(q.cand_value + size_t(kSampleMaxRows) * kSampleMaxCandidates);
  return q;
}

__device__ __forceinline__ void slice_of(int valid, int g, int& begin, int& end) {
  const int per = (valid + G - 1) / G;
  begin = min(valid, g * per);
  end = min(valid, begin + per);
}

// The row's largest logit from its slices' partials (ties to the lower id, as one block's
// argmax): false when no finite logit is left, which the pick reports as -1.
__device__ __forceinline__ bool row_max(const Partials& q, int r, float& m) {
  float bv = -INFINITY;
  int bi = 0x7fffffff;
  for (int g = 0; g < G; ++g) {
    const float v = q.max_value[r * G + g];
    const int i = q.max_id[r * G + g];
    if (argmax_better(v, i, bv, bi)) bv = v, bi = i;
  }
  m = bv;
  return bi != 0x7fffffff && isfinite(bv);
}

__device__ __forceinline__ double sum_of(const double* partial, int r) {
  double s = 0.0;
  for (int g = 0; g < G; ++g) s += partial[r * G + g];  // slice order: the same bits every launch
  return s;
}

__device__ __forceinline__ void store_block_sum(double v, double* at) {
  __shared__ typename ReduceD::TempStorage tmp;
  const double s = ReduceD(tmp).Sum(v);
  if (threadIdx.x == 0) *at = s;
}

// 1. Each slice: the logits into the row's scratch, the penalties of its ids, its argmax.
__global__ void __launch_bounds__(kThreads)
    wide_max_kernel(const float* __restrict__ logits, int32_t stride, int32_t valid,
                    const SampleRowParams* __restrict__ params,
                    const LogitAdjust* __restrict__ adjust, float* __restrict__ scratch,
                    Partials q) {
  __shared__ float sv[32];
  __shared__ int si[32];
  const int r = blockIdx.y, g = blockIdx.x;
  const SampleRowParams P = params[r];
  const float* src = logits + int64_t(P.logit_row) * stride;
  float* row = scratch + int64_t(r) * stride;
  int begin, end;
  slice_of(valid, g, begin, end);
  for (int i = begin + threadIdx.x; i < end; i += kThreads) row[i] = src[i];
  __syncthreads();
  for (int j = P.adjust_begin + int(threadIdx.x); j < P.adjust_end; j += kThreads) {
    const LogitAdjust a = adjust[j];  // ids are unique within a row: no two threads meet
    if (a.id >= begin && a.id < end) row[a.id] = adjusted_logit(row[a.id], a, P);
  }
  __syncthreads();
  float bv = -INFINITY;
  int bi = 0x7fffffff;
  for (int i = begin + threadIdx.x; i < end; i += kThreads) {
    if (argmax_better(row[i], i, bv, bi)) bv = row[i], bi = i;
  }
  bi = block_argmax(bv, bi, sv, si);
  if (threadIdx.x == 0) {
    q.max_value[r * G + g] = bi == 0x7fffffff ? -INFINITY : row[bi];
    q.max_id[r * G + g] = bi;
  }
}

// 2. exp(l / T - m / T) of each finite logit (0 otherwise) into the fp64 row; the slice's sum.
__global__ void __launch_bounds__(kThreads)
    wide_exp_kernel(int32_t stride, int32_t valid, const SampleRowParams* __restrict__ params,
                    const float* __restrict__ scratch, double* __restrict__ e_rows, Partials q) {
  const int r = blockIdx.y, g = blockIdx.x;
  float m;
  if (!row_max(q, r, m)) return;
  const double T = double(params[r].temperature);
  const double mT = double(m) / T;
  const float* row = scratch + int64_t(r) * stride;
  double* e = e_rows + int64_t(r) * stride;
  int begin, end;
  slice_of(valid, g, begin, end);
  double local = 0.0;
  for (int i = begin + threadIdx.x; i < end; i += kThreads) {
    const float l = row[i];
    const double ev = order_key(l) > kNegInfKey ? exp(double(l) / T - mT) : 0.0;
    e[i] = ev;
    local += ev;
  }
  store_block_sum(local, &q.sum[r * G + g]);
}

// 3. The probabilities exp / sum in place; the slice's total.
__global__ void __launch_bounds__(kThreads)
    wide_norm_kernel(int32_t stride, int32_t valid, double* __restrict__ e_rows, Partials q) {
  const int r = blockIdx.y, g = blockIdx.x;
  float m;
  if (!row_max(q, r, m)) return;
  const double sum = sum_of(q.sum, r);
  double* e = e_rows + int64_t(r) * stride;
  int begin, end;
  slice_of(valid, g, begin, end);
  double local = 0.0;
  for (int i = begin + threadIdx.x; i < end; i += kThreads) {
    const double p = e[i] / sum;
    e[i] = p;
    local += p;
  }
  store_block_sum(local, &q.total[r * G + g]);
}

// 4. float(p / total) into the destination row (the caller's probabilities, or the logits'
// scratch when only a draw is wanted); the slice's mass as the draw sums it.
__global__ void __launch_bounds__(kThreads)
    wide_write_kernel(int32_t stride, int32_t valid, const double* __restrict__ e_rows,
                      float* __restrict__ dst_rows, int32_t dst_stride, Partials q) {
  const int r = blockIdx.y, g = blockIdx.x;
  float m;
  if (!row_max(q, r, m)) return;
  const double total = sum_of(q.total, r);
  const double* e = e_rows + int64_t(r) * stride;
  float* dst = dst_rows + int64_t(r) * dst_stride;
  int begin, end;
  slice_of(valid, g, begin, end);
  double local = 0.0;
  for (int i = begin + threadIdx.x; i < end; i += kThreads) {
    const float pf = float(e[i] / total);
    dst[i] = pf;
    if (pf > 0.0f) local += double(pf);
  }
  store_block_sum(local, &q.mass[r * G + g]);
}

// The prefilter's pass over a slice of a row wide_max_kernel wrote (launch_wide_prefilter): the
// exp terms and their sum where the one-block kernel's softmax runs over the whole row (no
// top-k), and the candidate buckets where it cuts, as its own passes compute them.
__global__ void __launch_bounds__(kThreads)
    wide_bucket_kernel(int32_t stride, int32_t valid, const SampleRowParams* __restrict__ params,
                       const float* __restrict__ scratch, double* __restrict__ e_rows, Partials q) {
  __shared__ int count[kBuckets];
  __shared__ float mass[kBuckets];
  __shared__ float sv[32];
  const int r = blockIdx.y, g = blockIdx.x;
  const SampleRowParams P = params[r];
  float m;
  // Nothing to sample from, or greedy: the one-block kernel needs only the largest logit.
  if (!row_max(q, r, m) || P.temperature == 0.0f) return;
  const bool cut_k = P.top_k > 0 && P.top_k < valid;
  const bool cut_p = P.top_p < 1.0f;
  const float* row = scratch + int64_t(r) * stride;
  int begin, end;
  slice_of(valid, g, begin, end);
  if (!cut_k) {
    const double T = double(P.temperature);
    const double mT = double(m) / T;
    double* e = e_rows + int64_t(r) * stride;
    double local = 0.0;
    for (int i = begin + threadIdx.x; i < end; i += kThreads) {
      const float l = row[i];
      if (order_key(l) > kNegInfKey) {
        e[i] = exp(double(l) / T - mT);
        local += e[i];
      }
    }
    store_block_sum(local, &q.sum[r * G + g]);
  }
  if (!cut_k && !cut_p) return;
  for (int b = threadIdx.x; b < kBuckets; b += kThreads) count[b] = 0, mass[b] = 0.0f;
  __syncthreads();
  const float Tf = P.temperature;
  float z = 0.0f;
  for (int i = begin + threadIdx.x; i < end; i += kThreads) {
    const float l = row[i];
    if (order_key(l) <= kNegInfKey) continue;
    const float e = __expf((l - m) / Tf);
    z += e;
    const float d = prefilter_bucket(m, l);
    if (d < float(kBuckets)) {
      atomicAdd(&count[int(d)], 1);
      atomicAdd(&mass[int(d)], e);
    }
  }
  z = block_sum(z, sv);  // its syncs order the histograms' atomics before the reads below
  const int64_t at = (int64_t(r) * G + g) * kBuckets;
  for (int b = threadIdx.x; b < kBuckets; b += kThreads) {
    q.bucket_count[at + b] = count[b];
    q.bucket_mass[at + b] = mass[b];
  }
  if (threadIdx.x == 0) q.z[r * G + g] = z;
}

// The prefilter's tokens of a slice, after wide_bucket_kernel: every block finds the row's cut
// from all slices' buckets as the one-block kernel does (prefilter_walk), takes its place after
// the tokens of the slices before it (their bucket counts up to the cut) and writes its tokens
// there in id order, so the row's candidates are the one-block gather's, position for position.
__global__ void __launch_bounds__(kThreads)
    wide_gather_kernel(int32_t stride, int32_t valid, const SampleRowParams* __restrict__ params,
                       const float* __restrict__ scratch, RowPrefilter pre, Partials q) {
  __shared__ int count[kBuckets];
  __shared__ float mass[kBuckets];
  __shared__ int cut_at, kept;
  __shared__ union {
    typename ReduceI::TempStorage reduce;
    typename ScanI::TempStorage scan;
  } tmp;
  const int r = blockIdx.y, g = blockIdx.x;
  const SampleRowParams P = params[r];
  float m;
  if (!row_max(q, r, m) || P.temperature == 0.0f) return;
  const bool cut_k = P.top_k > 0 && P.top_k < valid;
  if (!cut_k && !(P.top_p < 1.0f)) return;
  const float z = prefilter_totals(pre, r, count, mass);
  if (threadIdx.x == 0) cut_at = prefilter_walk(count, mass, z, P, cut_k, &kept);
  __syncthreads();
  const int cut = cut_at;
  if (cut < 0) return;  // too many: the one-block kernel cuts over the whole row
  int before = 0;
  for (int b = threadIdx.x; b <= cut; b += kThreads) {
    for (int h = 0; h < g; ++h) before += pre.count[int64_t(r * G + h) * kBuckets + b];
  }
  before = ReduceI(tmp.reduce).Sum(before);
  if (threadIdx.x == 0) cut_at = before;  // every thread read `cut` above
  __syncthreads();
  int at = cut_at;
  const float* row = scratch + int64_t(r) * stride;
  float* cand_value = q.cand_value + int64_t(r) * kSampleMaxCandidates;
  int* cand_id = q.cand_id + int64_t(r) * kSampleMaxCandidates;
  int begin, end;
  slice_of(valid, g, begin, end);
  for (int base = begin; base < end; base += kThreads) {  // coalesced rounds, id order kept
    const int i = base + int(threadIdx.x);
    const float l = i < end ? row[i] : -INFINITY;
    const int take = order_key(l) > kNegInfKey && prefilter_bucket(m, l) < float(cut + 1);
    int pos = 0, taken = 0;
    ScanI(tmp.scan).ExclusiveSum(take, pos, taken);
    if (take) cand_value[at + pos] = l, cand_id[at + pos] = i;
    at += taken;
    __syncthreads();  // tmp is reused by the next round's scan
  }
}

// 5. One block a row: the status, or the inverse-CDF draw in id order over the written row
// (the slice where the goal falls, then the thread range within it, as the one-block kernel).
__global__ void __launch_bounds__(kThreads)
    wide_pick_kernel(int32_t valid, const SampleRowParams* __restrict__ params,
                     const float* __restrict__ dst_rows, int32_t dst_stride, Partials q, bool draw,
                     int32_t* __restrict__ out) {
  __shared__ typename ScanD::TempStorage scan;
  __shared__ int found, last_all;
  const int r = blockIdx.x;
  float m;
  if (!row_max(q, r, m)) {
    if (threadIdx.x == 0) out[r] = -1;
    return;
  }
  if (!draw) {
    if (threadIdx.x == 0) out[r] = 0;
    return;
  }
  const double goal = params[r].u * sum_of(q.mass, r);
  // Every thread walks the slices alike: the one whose mass crosses the goal, else (rounding
  // past the end) the last slice with mass, whose last token with mass is then the answer.
  double before_slice = 0.0;
  int g_goal = -1, g_last = -1;
  for (int g = 0; g < G; ++g) {
    const double mg = q.mass[r * G + g];
    if (mg > 0.0) {
      g_last = g;
      if (goal < before_slice + mg) {
        g_goal = g;
        break;
      }
    }
    before_slice += mg;
  }
  const bool past_end = g_goal < 0;
  const int g = past_end ? g_last : g_goal;
  const float* dst = dst_rows + int64_t(r) * dst_stride;
  int begin, end;
  slice_of(valid, g, begin, end);
  const int per = (end - begin + kThreads - 1) / kThreads;
  const int t0 = min(end, begin + int(threadIdx.x) * per), t1 = min(end, t0 + per);
  double mine = 0.0;
  int last = -1;
  for (int i = t0; i < t1; ++i) {
    if (dst[i] > 0.0f) mine += double(dst[i]), last = i;
  }
  double before = 0.0, slice_mass = 0.0;
  ScanD(scan).ExclusiveSum(mine, before, slice_mass);
  if (threadIdx.x == 0) found = 0x7fffffff, last_all = -1;
  __syncthreads();
  const double from = before_slice + before;
  if (!past_end && last >= 0 && from <= goal && goal < from + mine) {
    double cumulative = from;
    int pick = last;  // rounding between the scan and this walk: the range's last token
    for (int i = t0; i < t1; ++i) {
      if (!(dst[i] > 0.0f)) continue;
      cumulative += double(dst[i]);
      if (goal < cumulative) {
        pick = i;
        break;
      }
    }
    atomicMin(&found, pick);
  }
  if (last >= 0) atomicMax(&last_all, last);
  __syncthreads();
  if (threadIdx.x == 0) out[r] = found != 0x7fffffff ? found : last_all;
}

}  // namespace

void launch_sample_rows_wide(const float* logits, int32_t row_stride, int32_t valid_vocab,
                             const SampleRowParams* params, const LogitAdjust* adjust,
                             int32_t num_rows, float* scratch, void* wide_scratch, int32_t* out,
                             float* probs, int32_t probs_stride, bool draw, cudaStream_t stream) {
  if (num_rows == 0) return;
  const Partials q = partials_of(wide_scratch, row_stride);
  double* e_rows = static_cast<double*>(wide_scratch);
  const dim3 grid(G, num_rows);
  // Without probability rows the written row goes over the logits' scratch, no longer needed.
  float* dst = probs != nullptr ? probs : scratch;
  const int32_t dst_stride = probs != nullptr ? probs_stride : row_stride;
  wide_max_kernel<<<grid, kThreads, 0, stream>>>(logits, row_stride, valid_vocab, params, adjust,
                                                 scratch, q);
  TANDEM_CUDA_CHECK_LAUNCH();
  wide_exp_kernel<<<grid, kThreads, 0, stream>>>(row_stride, valid_vocab, params, scratch, e_rows,
                                                 q);
  TANDEM_CUDA_CHECK_LAUNCH();
  wide_norm_kernel<<<grid, kThreads, 0, stream>>>(row_stride, valid_vocab, e_rows, q);
  TANDEM_CUDA_CHECK_LAUNCH();
  wide_write_kernel<<<grid, kThreads, 0, stream>>>(row_stride, valid_vocab, e_rows, dst, dst_stride,
                                                   q);
  TANDEM_CUDA_CHECK_LAUNCH();
  wide_pick_kernel<<<num_rows, kThreads, 0, stream>>>(valid_vocab, params, dst, dst_stride, q,
                                                      probs == nullptr || draw, out);
  TANDEM_CUDA_CHECK_LAUNCH();
}

RowPrefilter launch_wide_prefilter(const float* logits, int32_t row_stride, int32_t valid_vocab,
                                   const SampleRowParams* params, const LogitAdjust* adjust,
                                   int32_t num_rows, float* scratch, void* wide_scratch,
                                   cudaStream_t stream) {
  const Partials q = partials_of(wide_scratch, row_stride);
  RowPrefilter pre;
  pre.max_value = q.max_value;
  pre.max_id = q.max_id;
  pre.exp_sum = q.sum;
  pre.count = q.bucket_count;
  pre.mass = q.bucket_mass;
  pre.z = q.z;
  pre.cand_value = q.cand_value;
  pre.cand_id = q.cand_id;
  if (num_rows == 0) return pre;
  const dim3 grid(G, num_rows);
  wide_max_kernel<<<grid, kThreads, 0, stream>>>(logits, row_stride, valid_vocab, params, adjust,
                                                 scratch, q);
  TANDEM_CUDA_CHECK_LAUNCH();
  // The one-block kernel's exp terms: the fp64 rows behind its fp32 ones (sample.cuh).
  double* e_rows = reinterpret_cast<double*>(scratch + int64_t(kSampleMaxRows) * row_stride);
  wide_bucket_kernel<<<grid, kThreads, 0, stream>>>(row_stride, valid_vocab, params, scratch,
                                                    e_rows, q);
  TANDEM_CUDA_CHECK_LAUNCH();
  wide_gather_kernel<<<grid, kThreads, 0, stream>>>(row_stride, valid_vocab, params, scratch, pre,
                                                    q);
  TANDEM_CUDA_CHECK_LAUNCH();
  return pre;
}

}  // namespace tandem::kernels
