#include "argmax.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "block_reduce.cuh"
#include "cuda_check.cuh"

namespace tandem::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kLoads = kArgmaxSlice / kThreads;  // independent loads in flight a thread
static_assert(kArgmaxSlice % kThreads == 0);
constexpr int kNone = 0x7fffffff;  // no orderable value seen

struct RowList {
  int32_t row[kArgmaxRowsPerLaunch];
};

// A slice's best: (float bits of the value, index), one 8-byte load for the row's last block.
using Partial = int2;

// Scratch layout: tickets [kArgmaxRowsPerLaunch] uint32, then partials [rows][slices].
constexpr size_t kTicketBytes = kArgmaxRowsPerLaunch * sizeof(uint32_t);

int32_t slices_of(int32_t width) {
  return (width + kArgmaxSlice - 1) / kArgmaxSlice;
}

// grid (slices, rows): block (s, r) reduces columns [s * kArgmaxSlice, +kArgmaxSlice) of row r.
__global__ void __launch_bounds__(kThreads)
    argmax_slices_kernel(const float* __restrict__ logits, RowList rows, int32_t stride,
                         int32_t valid, uint32_t* __restrict__ tickets,
                         Partial* __restrict__ partials, int32_t* __restrict__ out,
                         int32_t* __restrict__ out_copy) {
  __shared__ float sv[32];
  __shared__ int si[32];
  __shared__ bool last;
  const int r = int(blockIdx.y), slices = int(gridDim.x);
  const float* row = logits + int64_t(rows.row[r]) * stride;
  const int begin = int(blockIdx.x) * kArgmaxSlice + int(threadIdx.x);
  float v[kLoads];
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int i = begin + k * kThreads;
    v[k] = i < valid ? row[i] : -INFINITY;
  }
  float bv = -INFINITY;
  int bi = kNone;
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int i = begin + k * kThreads;
    if (i < valid && argmax_better(v[k], i, bv, bi)) bv = v[k], bi = i;
  }
  block_argmax_value(bv, bi, sv, si);
  if (threadIdx.x == 0) {
    partials[r * slices + int(blockIdx.x)] = make_int2(__float_as_int(bv), bi);
    __threadfence();  // the partial is visible before the ticket says so
    last = atomicAdd(&tickets[r], 1u) == unsigned(slices - 1);
  }
  __syncthreads();
  if (!last || threadIdx.x >= 32) return;
  // The row's last block: every slice's partial is written. L1 holds none of them (__ldcg).
  bv = -INFINITY;
  bi = kNone;
  for (int j = int(threadIdx.x); j < slices; j += 32) {
    const Partial p = __ldcg(&partials[r * slices + j]);
    const float pv = __int_as_float(p.x);
    if (argmax_better(pv, p.y, bv, bi)) bv = pv, bi = p.y;
  }
  warp_argmax(bv, bi);
  if (threadIdx.x == 0) {
    out[r] = bi == kNone ? 0 : bi;
    if (out_copy != nullptr) out_copy[r] = out[r];
    tickets[r] = 0;  // ready for the next launch on this scratch (stream order)
  }
}

}  // namespace

size_t argmax_scratch_bytes(int32_t row_width) {
  return kTicketBytes +
         size_t(kArgmaxRowsPerLaunch) * size_t(slices_of(row_width)) * sizeof(Partial);
}

void launch_argmax_rows(const float* logits, const int32_t* rows, int32_t num_rows,
                        int32_t row_stride, int32_t valid_vocab, void* scratch,
                        size_t scratch_bytes, int32_t* out, cudaStream_t stream,
                        int32_t* out_copy) {
  if (num_rows <= 0) return;
  if (valid_vocab < 1 || valid_vocab > row_stride ||
      scratch_bytes < argmax_scratch_bytes(valid_vocab)) {
    std::fprintf(stderr, "launch_argmax_rows: valid_vocab %d, row_stride %d, %zu scratch bytes\n",
                 valid_vocab, row_stride, scratch_bytes);
    std::abort();
  }
  auto* tickets = static_cast<uint32_t*>(scratch);
  auto* partials = reinterpret_cast<Partial*>(static_cast<char*>(scratch) + kTicketBytes);
  for (int32_t first = 0; first < num_rows; first += kArgmaxRowsPerLaunch) {
    const int32_t n = std::min(num_rows - first, kArgmaxRowsPerLaunch);
    RowList list{};
    for (int32_t i = 0; i < n; ++i) list.row[i] = rows[first + i];
    const dim3 grid(unsigned(slices_of(valid_vocab)), unsigned(n));
    argmax_slices_kernel<<<grid, kThreads, 0, stream>>>(logits, list, row_stride, valid_vocab,
                                                        tickets, partials, out + first,
                                                        out_copy ? out_copy + first : nullptr);
    TANDEM_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace tandem::kernels
