// How fast can a decode attention grid stream a batch's paged K/V at all? The batch-64 7B
// attention moves 134.9 MB a layer at ~3.1-3.2 TB/s, and with its math compiled out it is no
// faster (benchmarks/NOTES.md v27): the copies bound it. This probe streams the same bytes in the
// same grid (a block per (sequence, KV head, split), each warp a contiguous slice of keys, tiles
// of K rows then V rows) with nothing but the copies, three ways:
//   cpasync: 16-byte cp.async copies of whole rows into a per-warp ring (the kernel's way);
//   bulk:    one TMA bulk copy (cp.async.bulk, sm_90) per page chunk of a head, completing on an
//            mbarrier: a 16-token page of one head is 4 KB contiguous in the cache layout;
//   ld:      16-byte register loads, no shared memory.
// over page tables in random order (the pool after churn) or in order (one contiguous stream).
//
//   kv_stream_bench [--seqs 64] [--ctx 1024] [--iters 20]
//
// Layout as the runner's: K and V each [pages, kv_heads, page_size, head_dim] bf16. L2 is flushed
// (a 256 MB memset) before each timed launch, as a layer's K/V are not in L2 when its attention
// starts. One JSON line per case: microseconds a launch and TB/s of K/V bytes read.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda_check.cuh"
#include "kernels/mma_sm80.cuh"

using tandem::kernels::cp_async16;
using tandem::kernels::cp_async_commit;
using tandem::kernels::cp_async_wait;
using tandem::kernels::smem_addr;

namespace {

constexpr int kD = 128;    // head size (Qwen2.5-7B)
constexpr int kPage = 16;  // tokens a page
constexpr int kKvh = 4;    // KV heads (Qwen2.5-7B)
constexpr int kRowBytes = kD * 2;
constexpr int kChunkBytes = kPage * kRowBytes;  // one head's page: 4 KB contiguous

struct Grid {
  const int4* k;  // [pages, kKvh, kPage, kD] bf16, as 16-byte units
  const int4* v;
  const int32_t* page_ids;  // [seqs, ctx / kPage]
  int32_t ctx;              // keys a sequence (a multiple of the tile)
  int32_t* sink;            // written only if the checksum hits a value it never does
};

// Keys [begin, end) of this warp: the grid's (sequence, head, split) slice, split over its warps.
__device__ __forceinline__ void warp_slice(const Grid& g, int tile, int& begin, int& end) {
  const int warps = blockDim.x >> 5, warp = threadIdx.x >> 5;
  const int slices = gridDim.z * warps, slice = blockIdx.z * warps + warp;
  const int per = (g.ctx / tile + slices - 1) / slices * tile;
  begin = min(g.ctx, slice * per);
  end = min(g.ctx, begin + per);
}

// Element offset (in 16-byte units) of key `key`'s row for this block's sequence and head.
__device__ __forceinline__ int64_t row_unit(const Grid& g, int key) {
  const int page = g.page_ids[int64_t(blockIdx.x) * (g.ctx / kPage) + key / kPage];
  return ((int64_t(page) * kKvh + blockIdx.y) * kPage + key % kPage) * (kRowBytes / 16);
}

// A tile's row offsets as the attention kernel finds them: lane j looks up keys kt + j (and
// kt + 32 + j) once, and each copy takes its row's offset from that lane by a shuffle.
template <int kTile>
struct TileRows {
  static constexpr int kPerLane = (kTile + 31) / 32;
  int64_t at[kPerLane];
  __device__ __forceinline__ TileRows(const Grid& g, int kt) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      at[i] = 32 * i + lane < kTile ? row_unit(g, kt + 32 * i + lane) : 0;
  }
  __device__ __forceinline__ int64_t row(int r) const {
    return __shfl_sync(0xffffffffu, at[r / 32], r % 32);
  }
};

// Each warp: a ring of kStages tiles of kTile keys (K rows then V rows), copied 16 bytes a lane.
template <int kTile, int kStages>
__global__ void cpasync_kernel(Grid g) {
  extern __shared__ int4 smem_cp[];
  constexpr int kUnits = kTile * kRowBytes / 16;  // per matrix per tile
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int4* ring = smem_cp + int64_t(warp) * kStages * 2 * kUnits;
  int begin, end;
  warp_slice(g, kTile, begin, end);
  const int tiles = (end - begin) / kTile;
  auto issue = [&](int i) {
    int4* dst = ring + (i % kStages) * 2 * kUnits;
    const TileRows<kTile> rows(g, begin + i * kTile);
#pragma unroll
    for (int u = lane; u < kUnits; u += 32) {
      const int r = u / (kRowBytes / 16), c = u % (kRowBytes / 16);
      const int64_t at = rows.row(r) + c;
      cp_async16(dst + u, g.k + at, 16);
      cp_async16(dst + kUnits + u, g.v + at, 16);
    }
  };
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < tiles) issue(i);
    cp_async_commit();
  }
  uint32_t sum = 0;
  for (int i = 0; i < tiles; ++i) {
    cp_async_wait<kStages - 2>();
    __syncwarp();
    sum ^= reinterpret_cast<const uint32_t*>(ring + (i % kStages) * 2 * kUnits)[lane];
    __syncwarp();
    if (i + kStages - 1 < tiles) issue(i + kStages - 1);
    cp_async_commit();
  }
  cp_async_wait<0>();
  if (sum == 0x9e3779b9u) g.sink[0] = int32_t(sum);
}

// The same ring filled by TMA bulk copies: lane 0 issues one copy per page chunk of each matrix
// and the tile's mbarrier counts the bytes; every lane waits on the stage's phase.
template <int kTile, int kStages>
__global__ void bulk_kernel(Grid g) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) int4 smem_bulk[];
  __shared__ __align__(8) uint64_t bars[32][kStages];
  constexpr int kUnits = kTile * kRowBytes / 16;
  constexpr int kChunks = kTile / kPage;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int4* ring = smem_bulk + int64_t(warp) * kStages * 2 * kUnits;
  int begin, end;
  warp_slice(g, kTile, begin, end);
  const int tiles = (end - begin) / kTile;
  if (lane == 0) {
    for (int s = 0; s < kStages; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_addr(&bars[warp][s])));
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncwarp();
  auto issue = [&](int i) {
    if (lane != 0) return;
    const int s = i % kStages;
    const uint32_t bar = smem_addr(&bars[warp][s]);
    int4* dst = ring + s * 2 * kUnits;
    // The stage's earlier contents were read by ordinary loads: order them before the async
    // proxy's writes.
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
                 "r"(2 * kTile * kRowBytes)
                 : "memory");
    const int kt = begin + i * kTile;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int64_t at = row_unit(g, kt + c * kPage);
      const int off = c * kChunkBytes / 16;
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
          "[%3];\n" ::"r"(smem_addr(dst + off)),
          "l"(g.k + at), "r"(kChunkBytes), "r"(bar)
          : "memory");
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
          "[%3];\n" ::"r"(smem_addr(dst + kUnits + off)),
          "l"(g.v + at), "r"(kChunkBytes), "r"(bar)
          : "memory");
    }
  };
  for (int i = 0; i < kStages - 1 && i < tiles; ++i) issue(i);
  uint32_t sum = 0;
  for (int i = 0; i < tiles; ++i) {
    const int s = i % kStages;
    const uint32_t parity = (i / kStages) & 1;
    const uint32_t bar = smem_addr(&bars[warp][s]);
    uint32_t done = 0;
    while (!done) {
      asm volatile(
          "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
          "selp.u32 %0, 1, 0, p;\n}\n"
          : "=r"(done)
          : "r"(bar), "r"(parity)
          : "memory");
    }
    sum ^= reinterpret_cast<const uint32_t*>(ring + s * 2 * kUnits)[lane];
    __syncwarp();
    if (i + kStages - 1 < tiles) issue(i + kStages - 1);
  }
  if (sum == 0x9e3779b9u) g.sink[0] = int32_t(sum);
#endif
}

// A streaming 16-byte load; asm volatile keeps a tile's loads ahead of their uses, all in flight.
__device__ __forceinline__ int4 load_stream(const int4* p) {
  int4 v;
  asm volatile("ld.global.cs.v4.s32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// sum ^= the four words, as volatile asm too, so the compiler cannot move it between the loads.
__device__ __forceinline__ void fold(uint32_t& sum, const int4& v) {
  asm volatile(
      "{\n.reg .b32 t;\nxor.b32 t, %1, %2;\nxor.b32 t, t, %3;\nxor.b32 t, t, %4;\n"
      "xor.b32 %0, %0, t;\n}\n"
      : "+r"(sum)
      : "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}

// Register loads: a tile's K and V rows, kTile / 2 16-byte loads a lane in flight.
template <int kTile>
__global__ void ld_kernel(Grid g) {
  constexpr int kUnits = kTile * kRowBytes / 16;
  const int lane = threadIdx.x & 31;
  int begin, end;
  warp_slice(g, kTile, begin, end);
  uint32_t sum = 0;
  for (int kt = begin; kt < end; kt += kTile) {
    int4 kv[kUnits / 32], vv[kUnits / 32];
    const TileRows<kTile> rows(g, kt);
#pragma unroll
    for (int j = 0; j < kUnits / 32; ++j) {
      const int u = lane + 32 * j, r = u / (kRowBytes / 16), c = u % (kRowBytes / 16);
      const int64_t at = rows.row(r) + c;
      kv[j] = load_stream(g.k + at);
      vv[j] = load_stream(g.v + at);
    }
#pragma unroll
    for (int j = 0; j < kUnits / 32; ++j) {
      fold(sum, kv[j]);
      fold(sum, vv[j]);
    }
  }
  if (sum == 0x9e3779b9u) g.sink[0] = int32_t(sum);
}

struct Case {
  std::string mode;
  int tile, stages, warps;
  void (*kernel)(Grid);
  size_t smem;
};

// A ring form's case: kStages tiles of K and V rows a warp in shared memory.
template <int kTile, int kStages>
Case ring_case(const char* mode, void (*kernel)(Grid), int warps) {
  return {mode, kTile, kStages, warps, kernel, size_t(warps) * kStages * 2 * kTile * kRowBytes};
}
template <int kTile, int kStages>
Case cpasync_case(int warps) {
  return ring_case<kTile, kStages>("cpasync", cpasync_kernel<kTile, kStages>, warps);
}
template <int kTile, int kStages>
Case bulk_case(int warps) {
  return ring_case<kTile, kStages>("bulk", bulk_kernel<kTile, kStages>, warps);
}
template <int kTile>
Case ld_case(int warps) {
  return {"ld", kTile, 1, warps, ld_kernel<kTile>, 0};
}

}  // namespace

int main(int argc, char** argv) {
  constexpr const char* kUsage = "usage: kv_stream_bench [--seqs 64] [--ctx 1024] [--iters 20]\n";
  int seqs = 64, ctx = 1024, iters = 20;
  if (argc % 2 == 0) {  // an option without its value
    std::fprintf(stderr, "%s", kUsage);
    return 2;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (k == "--seqs") {
      seqs = v;
    } else if (k == "--ctx") {
      ctx = v;
    } else if (k == "--iters") {
      iters = v;
    } else {
      std::fprintf(stderr, "%s", kUsage);
      return 2;
    }
  }
  if (ctx < 64 || ctx % 64 != 0 || seqs < 1 || iters < 1) {
    std::fprintf(stderr,
                 "kv_stream_bench: --ctx must be a positive multiple of 64, --seqs and "
                 "--iters at least 1\n");
    return 2;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "kv_stream_bench: no CUDA device\n");
    return 1;
  }
  int major = 0;
  TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  const int pages_per_seq = ctx / kPage, pages = seqs * pages_per_seq;
  const size_t matrix_bytes = size_t(pages) * kKvh * kChunkBytes;
  int4 *k = nullptr, *v = nullptr;
  int32_t *ids = nullptr, *sink = nullptr;
  void* flush = nullptr;
  const size_t flush_bytes = size_t(256) << 20;
  TANDEM_CUDA_CHECK(cudaMalloc(&k, matrix_bytes));
  TANDEM_CUDA_CHECK(cudaMalloc(&v, matrix_bytes));
  TANDEM_CUDA_CHECK(cudaMalloc(&ids, size_t(pages) * 4));
  TANDEM_CUDA_CHECK(cudaMalloc(&sink, 4));
  TANDEM_CUDA_CHECK(cudaMalloc(&flush, flush_bytes));
  TANDEM_CUDA_CHECK(cudaMemset(k, 1, matrix_bytes));
  TANDEM_CUDA_CHECK(cudaMemset(v, 2, matrix_bytes));
  std::vector<int32_t> in_order(static_cast<size_t>(pages));
  std::vector<int32_t> shuffled;
  std::iota(in_order.begin(), in_order.end(), 0);
  shuffled = in_order;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(7));

  // Rings of up to 192 KB a block (one block an SM, as the attention's 136 KB at 8 warps).
  std::vector<Case> cases = {cpasync_case<32, 2>(4), cpasync_case<32, 3>(4), cpasync_case<16, 2>(8),
                             cpasync_case<16, 3>(8), ld_case<32>(4),         ld_case<32>(8),
                             ld_case<16>(8)};
  if (major >= 9) {
    for (Case c : {bulk_case<32, 2>(4), bulk_case<32, 3>(4), bulk_case<16, 3>(8),
                   bulk_case<64, 2>(2), bulk_case<64, 3>(2)}) {
      cases.push_back(c);
    }
  }
  cudaEvent_t start, stop;
  TANDEM_CUDA_CHECK(cudaEventCreate(&start));
  TANDEM_CUDA_CHECK(cudaEventCreate(&stop));
  for (const char* order : {"random", "in_order"}) {
    const std::vector<int32_t>& table = std::strcmp(order, "random") == 0 ? shuffled : in_order;
    TANDEM_CUDA_CHECK(cudaMemcpy(ids, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
    const Grid g{k, v, ids, ctx, sink};
    for (const Case& c : cases) {
      TANDEM_CUDA_CHECK(
          cudaFuncSetAttribute(c.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(c.smem)));
      for (int splits : {1, 2, 4}) {
        // Each warp needs whole tiles: skip splits that leave a warp less than one.
        if (ctx / c.tile < splits * c.warps) continue;
        const dim3 grid{unsigned(seqs), unsigned(kKvh), unsigned(splits)};
        double total_ms = 0, best_ms = 1e30;
        for (int it = 0; it < iters + 2; ++it) {
          TANDEM_CUDA_CHECK(cudaMemsetAsync(flush, it, flush_bytes));
          TANDEM_CUDA_CHECK(cudaEventRecord(start));
          c.kernel<<<grid, c.warps * 32, c.smem>>>(g);
          TANDEM_CUDA_CHECK(cudaGetLastError());
          TANDEM_CUDA_CHECK(cudaEventRecord(stop));
          TANDEM_CUDA_CHECK(cudaEventSynchronize(stop));
          float ms = 0;
          TANDEM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
          if (it < 2) continue;  // warm up
          total_ms += ms;
          best_ms = std::min(best_ms, double(ms));
        }
        const double mean_us = total_ms / iters * 1e3;
        const double bytes = 2.0 * double(matrix_bytes);
        std::printf(
            "{\"mode\":\"%s\",\"pages\":\"%s\",\"tile\":%d,\"stages\":%d,\"warps\":%d,"
            "\"splits\":%d,\"blocks\":%d,\"mb\":%.1f,\"mean_us\":%.1f,\"best_us\":%.1f,"
            "\"mean_tbps\":%.2f,\"best_tbps\":%.2f}\n",
            c.mode.c_str(), order, c.tile, c.stages, c.warps, splits, seqs * kKvh * splits,
            bytes / 1e6, mean_us, best_ms * 1e3, bytes / (mean_us * 1e-6) / 1e12,
            bytes / (best_ms * 1e-3) / 1e12);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
